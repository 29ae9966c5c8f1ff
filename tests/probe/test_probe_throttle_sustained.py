"""throttle_reasons judges a sustained condition, never one sample (issue 11 item 5)."""

import contextlib
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from probe_scenarios import FIXTURES, PROFILES, UntimedLoad, default_policy, fault, probe
from test_probe_real_backend import FakeNVMLError, fake_nvml

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import BY_NAME
from gpuaccept.checks.throttle_reasons import ThrottleReasonsPolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe import clocks
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.real import RealBackend
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.measure.throttle_reasons import measure, sample_counts
from gpuaccept.probe.runner import hardware_summary, run_check

SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=2)


def test_warm_up_samples_are_not_counted() -> None:
    """The first 1.5 s of load report HW slowdown (a P-state change), inside the warm-up."""
    profile = load_profile(PROFILES / "h100-sxm-8gpu-brief-slowdown.yaml")
    hardware = SimulatedBackend(profile)
    try:
        without_warmup = measure(hardware, ThrottleReasonsPolicy(warmup_seconds=0), ProbeContext())
        with_warmup = measure(hardware, ThrottleReasonsPolicy(), ProbeContext())
    finally:
        hardware.close()
    # samples at 0, 0.25, ... 1.25 s: 6 of the 60 in the 15 s window
    assert (without_warmup.active_fraction or {})["hw_slowdown"][0] == pytest.approx(6 / 60)
    assert (with_warmup.active_fraction or {})["hw_slowdown"][0] == 0.0
    assert (with_warmup.active_fraction or {})["hw_slowdown"][2] == pytest.approx(0.075, abs=0.01)
    assert with_warmup.sm_clock_mhz == [1755] * 8
    assert with_warmup.sm_clock_max_mhz == [1980] * 8


def test_default_window_and_warm_up() -> None:
    assert sample_counts(ThrottleReasonsPolicy()) == (12, 60)  # 3 s and 15 s at 0.25 s
    assert sample_counts(default_policy().throttle_reasons) == (12, 60)


@pytest.mark.parametrize(
    ("path", "status"),
    [
        # HW slowdown in 8 % of samples, SW power cap (not judged by default) in 35 %
        (PROFILES / "h100-sxm-8gpu-brief-slowdown.yaml", CheckStatus.PASS),
        (PROFILES / "h100-sxm-8gpu-gemm-at-power-limit.yaml", CheckStatus.PASS),
        (fault("hw-slowdown-intermittent"), CheckStatus.FAIL),
        (fault("hw-slowdown"), CheckStatus.FAIL),
    ],
    ids=lambda v: getattr(v, "stem", str(v)),
)
def test_profiles_on_both_sides_of_the_fraction(path: Path, status: CheckStatus) -> None:
    result = probe(path).result("throttle_reasons")
    assert result is not None
    assert result.status is status, result.message


# --- the real backend never reads NVML's renumbered duration fields -------------

# nvidia-ml-py's NVML_FI_DEV_CLOCKS_EVENT_REASON_* IDs 269-271 (R570 numbering)
# name power-smoothing fields on an R580 driver, which answers them without error.
FIELD_NUMBERINGS = {
    "r570": {269: ("sw_power_cap duration ns", 5_000_000_000)},
    "r580": {269: ("power smoothing: enabled", 1)},
}


def nvml_with_fields(numbering: str, calls: list[str]) -> types.ModuleType:
    nvml = fake_nvml()
    fields = FIELD_NUMBERINGS[numbering]

    def get_field_values(_handle: Any, ids: list[int]) -> list[Any]:
        calls.append("nvmlDeviceGetFieldValues")
        return [types.SimpleNamespace(fieldId=i, value=fields.get(i, ("", 0))[1]) for i in ids]

    def violation_status(_handle: Any, _policy: int) -> Any:
        calls.append("nvmlDeviceGetViolationStatus")
        raise FakeNVMLError(13)  # FUNCTION_NOT_FOUND: deprecated in NVML 13

    nvml.nvmlDeviceGetFieldValues = get_field_values  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetViolationStatus = violation_status  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda h: (  # type: ignore[attr-defined]
        clocks.SW_POWER_CAP if h == 0 else 0
    )
    return nvml


@pytest.mark.parametrize("numbering", sorted(FIELD_NUMBERINGS))
def test_both_field_numberings_give_the_same_verdict(
    numbering: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", nvml_with_fields(numbering, calls))
    hw = RealBackend(sysfs_root=FIXTURES / "sysfs", proc_root=FIXTURES / "proc")
    monkeypatch.setattr(hw, "gpu_load", _no_load)
    monkeypatch.setattr(hw, "sleep", lambda _s: None)
    policy = ProbePolicy.model_validate(
        {"throttleReasons": {"sampleSeconds": 2, "warmupSeconds": 0, "warnOn": ["sw_power_cap"]}}
    )
    result = run_check(
        BY_NAME["throttle_reasons"], hw, policy, ProbeContext(), hardware_summary(hw)
    )
    assert calls == []  # neither the fields nor the deprecated violation counters
    assert result.status is CheckStatus.WARN
    assert result.message == "sw_power_cap 100% of samples on GPU 0"


def _no_load(_precision: str = "bf16") -> Any:
    return contextlib.nullcontext(UntimedLoad())
