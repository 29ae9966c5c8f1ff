"""A fabric registration still in progress right after boot is read again before it is
judged; the fabric state is nvml.h's unsigned char; application clocks set at the
maximum hold nothing low."""

import types
from typing import Any

import pytest
from probe_scenarios import PROFILES, default_policy, probe
from test_probe_nvlink_fabric_config import fabric_nvml
from test_probe_real_backend import backend

from gpuaccept.checks.gpu_config import SPEC as GPU_CONFIG
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.hardware.profile import load_profile

SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


def test_a_registration_that_completes_after_boot_is_accepted() -> None:
    report = probe(PROFILES / "h100-sxm-8gpu-fabric-registering.yaml")
    result = report.result("nvswitch_fabric")
    assert result is not None
    assert result.status is CheckStatus.PASS
    assert evaluate(report, default_policy()).accepted


def test_a_registration_stuck_in_progress_still_fails() -> None:
    profile = load_profile(PROFILES / "h100-sxm-8gpu-fabric-registering.yaml")
    stuck = profile.model_copy(
        update={
            "gpus": profile.gpus.model_copy(
                update={"fabric": profile.gpus.fabric.model_copy(update={"completes_after_s": 60})}  # type: ignore[union-attr]
            )
        }
    )
    result = probe(stuck).result("nvswitch_fabric")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert "fabric registration still in progress" in result.message


def test_the_fabric_state_is_read_as_an_unsigned_char(monkeypatch: pytest.MonkeyPatch) -> None:
    # COMPLETED (3) with garbage in the upper bytes of pynvml's c_uint field
    module: types.ModuleType = fabric_nvml([(0x7F00 | 3, 0, 0, 1)] * 2)
    hw = backend(monkeypatch, module)
    assert hw.gpu_fabric(0).state == "completed"


def _config(**observed: Any) -> CheckStatus:
    section = default_policy().section(GPU_CONFIG)
    return GPU_CONFIG.judge(GPU_CONFIG.parse({"gpus": 8, **observed}), section, SUMMARY).status


def test_application_clocks_at_the_maximum_pass_and_held_low_fail() -> None:
    at_max = {"loadSamples": 60, "appClocksFraction": {"0-7": 1.0}}
    assert _config(**at_max, smClockFraction={"0-7": 1.0}) is CheckStatus.PASS
    assert _config(**at_max, smClockFraction={"0-7": 0.7}) is CheckStatus.FAIL
    assert _config(**at_max, minSmClockFraction=0.99, minSmClockGpu=3) is CheckStatus.PASS
    trap = evaluate(probe(PROFILES / "h100-sxm-8gpu-app-clocks-at-max.yaml"), default_policy())
    assert trap.accepted, trap.message
