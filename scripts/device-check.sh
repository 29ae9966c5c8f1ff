#!/usr/bin/env bash
# Real-hardware check of the probe agent on a GPU host; finishes in under 5 minutes.
#
#   scripts/device-check.sh [OUTDIR]      (default: $OUT, else ./device-check-out)
#
# Records the machine it ran on, runs `gpuaccept probe` on the real hardware
# (NVML, sysfs, /proc, CUDA pinned copies, NCCL all-reduce through
# torch.distributed) and the real-hardware tests in tests/device
# (GPUACCEPT_DEVICE=1 selects them). Everything lands in OUTDIR:
#   machine.txt  probe.json  probe.stderr  probe-table.txt  termination-log
#   device-tests.txt  summary.txt
# Needs a Python with torch (CUDA build), nvidia-ml-py, pydantic, PyYAML, rich
# and pytest: $PYTHON, else .venv/bin/python, else python3. The package is used
# from the source tree (PYTHONPATH), so no install step and no network.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUTDIR=${1:-${OUT:-device-check-out}}
mkdir -p "$OUTDIR"

PY=${PYTHON:-}
if [[ -z $PY ]]; then
  if [[ -x .venv/bin/python ]] && .venv/bin/python -c 'import torch' 2>/dev/null; then
    PY=.venv/bin/python
  else
    PY=python3
  fi
fi
export PYTHONPATH="$PWD/contracts:$PWD/probes:$PWD/operator:$PWD/testsupport${PYTHONPATH:+:$PYTHONPATH}"
export GPUACCEPT_DEVICE=1
unset GPUACCEPT_PROFILE GPUACCEPT_POLICY

{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname)"
  echo "kernel: $(uname -srm)"
  echo "python: $PY ($("$PY" --version 2>&1))"
  echo "--- /proc/driver/nvidia/version"
  cat /proc/driver/nvidia/version 2>&1 || true
  echo "--- nvidia-smi"
  timeout 30 nvidia-smi 2>&1 || echo "nvidia-smi not available"
  echo "--- nvidia-smi topo -m"
  timeout 30 nvidia-smi topo -m 2>&1 || true
  echo "--- torch"
  timeout 60 "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None, "devices", torch.cuda.device_count())' 2>&1 || true
  echo "--- lscpu (model, cores)"
  lscpu 2>/dev/null | grep -E 'Model name|^CPU\(s\)' || true
} > "$OUTDIR/machine.txt" 2>&1
cat "$OUTDIR/machine.txt"

GPUS=$(timeout 60 "$PY" -c 'import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetCount())' 2>/dev/null || echo 0)
echo "GPUs visible to NVML: $GPUS"

status=0
echo "=== gpuaccept probe (real hardware, default H100/H200 policy)"
timeout 120 "$PY" -m gpuaccept.cli probe --policy policies/default-h100-h200.yaml \
  --expected-gpus "$GPUS" --output json --termination-log "$OUTDIR/termination-log" \
  > "$OUTDIR/probe.json" 2> "$OUTDIR/probe.stderr"
probe_rc=$?
echo "probe exit code: $probe_rc (0 accepted, 1 quarantined, 2 bad input, 124 timeout)"
"$PY" - "$OUTDIR/probe.json" > "$OUTDIR/probe-table.txt" 2>&1 <<'PYEOF'
import sys
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.probe.inputs import load_policy
from gpuaccept.probe.verdict import evaluate
from pathlib import Path
report = ProbeReport.model_validate_json(Path(sys.argv[1]).read_text())
verdict = evaluate(report, load_policy(Path("policies/default-h100-h200.yaml")))
s = report.summary
print(f"{report.node_name}: {s.gpu_count} x {s.gpu_model}, driver {s.driver_version}, "
      f"CUDA {s.cuda_driver_version} (runtime {s.cuda_runtime_version}), NCCL {s.nccl_version}")
for r in report.results:
    print(f"  {r.check:17} {r.status.value:5} {r.duration_s:6.1f}s  {r.message}")
print("verdict:", verdict.decision.value, [f"{x.reason}({x.check})" for x in verdict.reasons])
PYEOF
cat "$OUTDIR/probe-table.txt"
[[ $probe_rc -le 1 ]] || status=1

echo "=== real-hardware tests (tests/device)"
timeout 160 "$PY" -m pytest -p no:cacheprovider -m device tests/device -v -s \
  > "$OUTDIR/device-tests.txt" 2>&1
tests_rc=$?
tail -n 40 "$OUTDIR/device-tests.txt"
[[ $tests_rc -eq 0 ]] || status=1

{
  echo "host: $(hostname)  GPUs: $GPUS"
  echo "probe exit code: $probe_rc"
  echo "device tests exit code: $tests_rc"
  echo "overall: $([[ $status -eq 0 ]] && echo OK || echo FAILED)"
} | tee "$OUTDIR/summary.txt"
exit $status
