"""The probe on real NVIDIA hardware: NVML, CUDA copies, NCCL all-reduce.

Run by ``scripts/device-check.sh`` on a GPU host (``GPUACCEPT_DEVICE=1``);
deselected everywhere else. Works with one GPU or more.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS
from gpuaccept.contracts.report import CheckStatus, ProbeReport, decode_termination_message
from gpuaccept.probe import clocks
from gpuaccept.probe.allreduce import AllreduceTiming, run_allreduce
from gpuaccept.probe.hardware.real import RealBackend
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.runner import hardware_summary, run_check

pytestmark = pytest.mark.device
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hw() -> RealBackend:
    backend = RealBackend()
    assert backend.gpus(), backend.gpu_problem()
    return backend


def test_nvml_enumerates_gpus(hw: RealBackend) -> None:
    for gpu in hw.gpus():
        print(f"GPU {gpu.index}: {gpu.name} {gpu.bus_id} {gpu.uuid}")
        assert gpu.name
        assert gpu.bus_id is not None


def test_versions_agree(hw: RealBackend) -> None:
    v = hw.versions()
    print(v)
    assert v.kernel_module is not None
    assert v.nvml_library == v.kernel_module
    assert not v.nvml_mismatch
    assert v.cuda_driver is not None
    assert v.cuda_runtime is not None
    assert v.nccl is not None


def test_pcie_link_and_copy_bandwidth(hw: RealBackend) -> None:
    for gpu in hw.gpus():
        idle = hw.pcie_link(gpu.index)
        copy = hw.copy_bandwidth(gpu.index, 256 << 20)
        print(f"GPU {gpu.index}: idle {idle}, under load {copy.link_under_load}, "
              f"H2D {copy.h2d_gbps:.1f} GB/s, D2H {copy.d2h_gbps:.1f} GB/s")  # fmt: skip
        assert copy.h2d_gbps > 1
        assert copy.d2h_gbps > 1
        assert copy.link_under_load.generation >= idle.generation or idle.generation > 0


def test_clock_event_reasons_under_load(hw: RealBackend) -> None:
    with hw.gpu_load():
        masks = [hw.clock_event_reasons(g.index) for g in hw.gpus()]
    print([clocks.decode(m) for m in masks])
    assert all(isinstance(m, int) for m in masks)


def test_every_check_produces_a_result(hw: RealBackend) -> None:
    policy = ProbePolicy.model_validate({"throttleReasons": {"sampleSeconds": 2}})
    context = ProbeContext(advertised_gpus=len(hw.gpus()))
    summary = hardware_summary(hw)
    # every registered check but the all-reduce, which has its own test below
    for check in (c for c in CHECKS if c.name != "nccl_allreduce"):
        result = run_check(check, hw, policy, context, summary)
        print(check.name, result.status.value, result.message, json.dumps(result.observed))
        assert result.status is not CheckStatus.ERROR, result.message


@pytest.mark.parametrize("max_bytes", [1 << 30])
def test_nccl_allreduce_on_real_gpus(hw: RealBackend, max_bytes: int) -> None:
    from gpuaccept.probe.measure.nccl_allreduce import sweep_sizes  # noqa: PLC0415

    ranks = len(hw.gpus())
    m = run_allreduce(
        ranks, "nccl", sweep_sizes(max_bytes), AllreduceTiming(iterations=10, warmup=3)
    )
    for size, seconds, algbw, busbw in m.sweep:
        print(f"{ranks} ranks {size:>11} B {seconds * 1e6:10.1f} us algbw {algbw:7.1f} "
              f"busbw {busbw:7.1f} GB/s")  # fmt: skip
    assert m.backend == "nccl"
    assert m.sweep[-1][0] == max_bytes
    assert m.algbw_gbps > 0


def test_gpuaccept_probe_on_real_hardware(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    env = {**os.environ, "GPUACCEPT_EXPECTED_GPUS": str(len(RealBackend().gpus()))}
    env.pop("GPUACCEPT_PROFILE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "gpuaccept.cli", "probe", "--policy",
         str(REPO / "policies" / "default-h100-h200.yaml"), "--output", "json",
         "--termination-log", str(log)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=140, check=False,
    )  # fmt: skip
    print(proc.stdout)
    print(proc.stderr, file=sys.stderr)
    assert proc.returncode in (0, 1), proc.stderr
    report = ProbeReport.model_validate_json(proc.stdout)
    assert report.hardware.value == "real"
    assert report.summary.gpu_count >= 1
    assert decode_termination_message(log.read_text()).node_name == report.node_name
    assert all(r.status is not CheckStatus.ERROR for r in report.results), report.results
