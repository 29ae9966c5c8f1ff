#!/usr/bin/env bash
# Proves on one real GPU host what the probe claims about real hardware.
#
#   scripts/device-check.sh [--deps-only] [OUTDIR]   (OUTDIR: $OUT, else ./device-check-out)
#
# For a host with a GPU, torch (CUDA build) and no network or Kubernetes. Steps, each
# with its own time limit inside a total budget of DEVICE_CHECK_BUDGET_S (450 s, under the
# device machine's 8 minutes a run):
#   1 machine  nvidia-smi, driver, Python and torch versions        -> machine.txt
#   2 deps     pydantic, nvidia-ml-py, rich, PyYAML, pytest: the host's, else installed
#              offline from the wheel folder DEVICE_WHEELS (.device-wheels, filled
#              beforehand by `make device-wheels` on a machine with network); what is
#              still missing is named, and nothing else runs. torch gates only the
#              claims that load the GPUs: without it the NVML-only claims
#              (tests/device/test_device_real_paths.py) still run
#   3 gpu      NVML and CUDA see at least one GPU
#   4 claims   tests/device (GPUACCEPT_DEVICE=1): one test per claim, each recording
#              its evidence from NVML                 -> device-tests.txt, evidence/
#   5 summary  every claim, proven or not, its evidence, the steps, and what one GPU
#              cannot test                            -> summary.json (for docs/probe.md)
#   6 pack     everything in OUTDIR into OUTDIR/device-check.tar.gz; with
#              DEVICE_CHECK_PACK=1 only that and summary.json are left (a device run
#              returns at most 8 files)
# The claims include the real paths of tests/device/test_device_real_paths.py: the Xid
# listener, NVLink counters per field, recovery action and fabric state, persistence with
# and without nvidia-persistenced's socket, and a second probe run as a non-root user
# with no capabilities (the probe pod's security context). Without a GPU every claim is
# listed as not run, with what it would prove.
# --deps-only runs steps 1, 2 and 5 (no GPU needed).
# Exit code: 0 every claim proven; 1 a claim not proven or a step failed; 2 bad usage;
# 3 a dependency is missing, so nothing was tested.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

DEPS_ONLY=0
if [[ ${1:-} == --deps-only ]]; then
  DEPS_ONLY=1
  shift
fi
if [[ ${1:-} == -* || $# -gt 1 ]]; then
  echo "usage: scripts/device-check.sh [--deps-only] [OUTDIR]" >&2
  exit 2
fi
OUTDIR=${1:-${OUT:-device-check-out}}
BUDGET_S=${DEVICE_CHECK_BUDGET_S:-450}
PACK=${DEVICE_CHECK_PACK:-0}
WHEELS=${DEVICE_WHEELS:-.device-wheels}
PY=${PYTHON:-python3}
mkdir -p "$OUTDIR" || exit 2
rm -rf "$OUTDIR/evidence" "$OUTDIR/steps.tsv" "$OUTDIR/missing.txt" "$OUTDIR/summary.json" \
  "$OUTDIR/device-tests.xml" "$OUTDIR/device-check.tar.gz"
SITE=$(mktemp -d "${TMPDIR:-/tmp}/gpuaccept-device-site.XXXXXX") || exit 2
chmod 755 "$SITE" # the non-root probe run imports the offline-installed packages too
trap 'rm -rf "$SITE"' EXIT
export PYTHONPATH="$PWD/contracts:$PWD/checks:$PWD/probes${PYTHONPATH:+:$PYTHONPATH}"
unset GPUACCEPT_PROFILE GPUACCEPT_POLICY GPUACCEPT_EXPECTED_GPUS
START=$SECONDS
status=0

# The seconds a step may take: what it asks for, within what is left of the budget.
limit() {
  local want=$1 left=$((BUDGET_S - (SECONDS - START)))
  ((left < want)) && want=$left
  ((want < 1)) && want=1
  echo "$want"
}

# step NAME STATUS STARTED DETAIL: one line here and one in steps.tsv for the summary.
step() {
  local seconds=$((SECONDS - $3)) detail=${4//$'\t'/ }
  detail=${detail//$'\n'/; }
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$seconds" "$detail" >>"$OUTDIR/steps.tsv"
  printf '==> %-8s %-7s %4ss  %s\n' "$1" "$2" "$seconds" "$detail"
  [[ $2 == ok || $2 == skipped ]] || status=1
}

# --- 1 machine -----------------------------------------------------------------
t=$SECONDS
echo "==> machine (budget ${BUDGET_S}s in all, output in $OUTDIR)"
if ! command -v "$PY" >/dev/null 2>&1; then
  step machine failed "$t" "no Python: $PY (set PYTHON)"
  exit 3
fi
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname)"
  echo "kernel: $(uname -srm)"
  echo "python: $PY ($("$PY" --version 2>&1))"
  echo "--- /proc/driver/nvidia/version"
  cat /proc/driver/nvidia/version 2>&1 || true
  echo "--- nvidia-smi"
  timeout "$(limit 20)" nvidia-smi 2>&1 || echo "nvidia-smi not available"
  echo "--- nvidia-smi topo -m"
  timeout "$(limit 20)" nvidia-smi topo -m 2>&1 || true
  echo "--- lscpu (model, cores)"
  lscpu 2>/dev/null | grep -E 'Model name|^CPU\(s\)' || true
} >"$OUTDIR/machine.txt" 2>&1
step machine ok "$t" "$(grep -c . "$OUTDIR/machine.txt") lines in machine.txt"

# --- 2 deps ----------------------------------------------------------------------
# Prints "import-name distribution-requirement" for each module the host lacks.
missing_modules() {
  timeout "$(limit 60)" "$PY" - <<'PYEOF'
import importlib
needs = [
    ("torch", "torch (a CUDA build; not carried: the host must have it)"),
    ("pydantic", "pydantic>=2.7,<3"),
    ("pynvml", "nvidia-ml-py>=12.535"),
    ("rich", "rich>=13.7"),
    ("yaml", "PyYAML>=6.0"),
    ("pytest", "pytest>=8"),
]
for module, requirement in needs:
    try:
        imported = importlib.import_module(module)
        if module == "pydantic" and not str(imported.VERSION).startswith("2."):
            raise ImportError(f"pydantic {imported.VERSION}")
    except Exception:
        print(module, requirement)
        if module != "torch":  # torch gates only the claims that load the GPUs
            missing = True
if "missing" not in globals():  # with every dependency there, the probe itself must import
    try:
        for module in ("gpuaccept.probe.cli", "gpuaccept.probe.hardware.real"):
            importlib.import_module(module)
    except Exception as exc:
        print("gpuaccept", f"the probe does not import: {type(exc).__name__}: {exc}")
PYEOF
}

t=$SECONDS
missing=$(missing_modules) || missing="python-failed $PY"
installed=""
installable=$(grep -v -e '^torch ' -e '^gpuaccept ' <<<"$missing")
if [[ -n $installable ]]; then
  wanted=$(cut -d' ' -f2 <<<"$installable")
  if compgen -G "$WHEELS/*.whl" >/dev/null; then
    # shellcheck disable=SC2086 # one requirement per word
    if timeout "$(limit 90)" "$PY" -m pip install --quiet --disable-pip-version-check \
      --no-index --find-links "$WHEELS" --target "$SITE" --no-compile $wanted \
      >"$OUTDIR/pip-install.txt" 2>&1; then
      export PYTHONPATH="$SITE:$PYTHONPATH"
      installed=" (installed offline from $WHEELS: $(echo "$wanted" | tr '\n' ' '))"
    else
      echo "pip install from $WHEELS failed: $(tail -n 3 "$OUTDIR/pip-install.txt")"
    fi
    missing=$(missing_modules) || missing="python-failed $PY"
  else
    echo "no wheels in $WHEELS: run \`make device-wheels\` on a machine with network and carry $WHEELS"
  fi
fi
# torch gates only the claims that load the GPUs: without it the NVML-only claims
# (tests/device/test_device_real_paths.py) still run, and the others are "not run"
torch_missing=$(grep '^torch ' <<<"$missing")
missing=$(grep -v '^torch ' <<<"$missing")
if [[ -n $torch_missing ]]; then
  echo "    missing: torch: $(cut -d' ' -f2- <<<"$torch_missing"): only the NVML-only claims run"
fi
if [[ -n $missing ]]; then
  cut -d' ' -f2- <<<"$missing" >"$OUTDIR/missing.txt"
  while read -r module requirement; do
    echo "    missing: $module: $requirement"
  done <<<"$missing"
  step deps missing "$t" "missing: $(cut -d' ' -f1 <<<"$missing" | tr '\n' ' ')(see above)"
else
  if [[ -n $torch_missing ]]; then
    step deps ok "$t" "pydantic, nvidia-ml-py, rich, PyYAML, pytest and the probe import${installed}; no torch: only the NVML-only claims run"
  else
    step deps ok "$t" "torch, pydantic, nvidia-ml-py, rich, PyYAML, pytest and the probe import${installed}"
  fi
fi

facts=(
  --fact "date=$(date -u +%FT%TZ)"
  --fact "commit=${DEVICE_CHECK_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
  --fact "host=$(hostname)"
  --fact "python=$("$PY" --version 2>&1)"
  --fact "budget_s=$BUDGET_S"
  --fact "torch=$([[ -n $torch_missing ]] && echo "missing: the claims that load the GPUs were not run" || echo present)"
  # a VM's or gVisor's artefacts (NVML proxied, PCIe/topology virtualised) are not probe defects
  --fact "sandbox=$("$PY" tests/device/device_claims.py sandbox 2>/dev/null || echo unknown)"
)
summary() {
  echo "==> summary"
  "$PY" tests/device/device_claims.py not-testable
  "$PY" tests/device/device_claims.py summary --outdir "$OUTDIR" --exit-code "$1" "${facts[@]}"
  local rc=$?
  pack
  return $rc
}

# One tarball of everything the run wrote (a device run returns at most 8 files).
pack() {
  local entries=() path
  for path in "$OUTDIR"/* "$OUTDIR"/.[!.]*; do
    [[ -e $path && ${path##*/} != device-check.tar.gz* ]] && entries+=("${path##*/}")
  done
  ((${#entries[@]})) || return 0
  tar -czf "$OUTDIR/device-check.tar.gz.part" -C "$OUTDIR" "${entries[@]}" &&
    mv "$OUTDIR/device-check.tar.gz.part" "$OUTDIR/device-check.tar.gz"
  echo "==> pack     $OUTDIR/device-check.tar.gz (${#entries[@]} entries)"
  if [[ $PACK == 1 ]]; then
    for path in "${entries[@]}"; do
      [[ $path == summary.json ]] || rm -rf "${OUTDIR:?}/$path"
    done
  fi
}

if [[ -n $missing ]]; then
  summary 3
  exit 3
fi
if ((DEPS_ONLY)); then
  facts+=(--fact "mode=deps-only: the GPU steps were not run")
  summary 0 >/dev/null
  echo "deps only: every dependency imports; the GPU steps were not run ($OUTDIR/summary.json)"
  exit 0
fi

# --- 3 gpu -----------------------------------------------------------------------
t=$SECONDS
gpus=$(timeout "$(limit 60)" "$PY" - 2>&1 <<'PYEOF'
import pynvml
pynvml.nvmlInit()
count = pynvml.nvmlDeviceGetCount()
names = {str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)}
try:
    import torch
    cuda = (f"| torch {torch.__version__} CUDA {torch.version.cuda} "
            f"{'available' if torch.cuda.is_available() else 'NOT available'} "
            f"devices {torch.cuda.device_count()}")
except ImportError:
    cuda = "| no torch"
print(count, "x", ", ".join(sorted(names)), "| driver", pynvml.nvmlSystemGetDriverVersion(), cuda)
PYEOF
)
gpu_rc=$?
gpus=$(tail -n 1 <<<"$gpus")
facts+=(--fact "gpus=$gpus")
if ((gpu_rc == 0)) && [[ $gpus =~ ^[1-9] ]] &&
  [[ -n $torch_missing || $gpus == *" available devices "[1-9]* ]]; then
  step gpu ok "$t" "$gpus"
else
  step gpu failed "$t" "no usable GPU: $gpus"
fi

# --- 4 claims --------------------------------------------------------------------
t=$SECONDS
claim_tests=(tests/device)
[[ -n $torch_missing ]] && claim_tests=(tests/device/test_device_real_paths.py)
if [[ $status -eq 0 ]]; then
  GPUACCEPT_DEVICE=1 GPUACCEPT_DEVICE_EVIDENCE="$OUTDIR/evidence" \
    timeout "$(limit 400)" "$PY" -m pytest -p no:cacheprovider --noconftest -o timeout=200 \
    -m device "${claim_tests[@]}" -v -s --junitxml "$OUTDIR/device-tests.xml" \
    >"$OUTDIR/device-tests.txt" 2>&1
  tests_rc=$?
  grep -E '::test_[a-z_]+.* (PASSED|FAILED|ERROR)' "$OUTDIR/device-tests.txt" \
    | sed -E 's/^.*::(test_[a-z_]+).* (PASSED|FAILED|ERROR).*$/    \2 \1/'
  if ((tests_rc == 0)); then
    step claims ok "$t" "tests/device passed"
  elif ((tests_rc == 124)); then
    step claims timeout "$t" "tests/device ran out of the time budget (device-tests.txt)"
  else
    step claims failed "$t" "tests/device exit code $tests_rc (device-tests.txt)"
  fi
else
  step claims skipped "$t" "no usable GPU"
fi

# --- 5 summary -------------------------------------------------------------------
summary "$status"
exit $?
