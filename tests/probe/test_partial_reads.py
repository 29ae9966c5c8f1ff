"""A transient NVML error in one sample is that sample's, not the whole check's; the
older clock-reasons getter answers where the driver lacks the newer one; one
unreadable InfiniBand port is that port's."""

import pytest
from probe_scenarios import HEALTHY
from test_probe_real_backend import FakeNVMLError, backend, fake_nvml

from gpuaccept.checks.infiniband_ports import SPEC as INFINIBAND
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.throttle_reasons import SPEC as THROTTLE
from gpuaccept.contracts.report import CheckResult, CheckStatus, HardwareSummary
from gpuaccept.probe import clocks
from gpuaccept.probe.hardware.base import Unavailable
from gpuaccept.probe.hardware.profile import HardwareProfile, load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.runner import run_check

SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)
FUNCTION_NOT_FOUND = 13


class _OneSampleLost(SimulatedBackend):
    """NVML answers one sample of GPU 3 with an error other than GPU_IS_LOST."""

    calls = 0

    def clock_event_reasons(self, gpu: int) -> int:
        if gpu == 3:
            self.calls += 1
            if self.calls == 40:
                raise Unavailable("GPU 3: NVML cannot report clock event reasons: Unknown Error")
        return super().clock_event_reasons(gpu)


def test_one_missed_sample_is_recorded_and_the_check_still_judges() -> None:
    hardware = _OneSampleLost(load_profile(HEALTHY))
    try:
        result = run_check(THROTTLE, hardware, ProbePolicy(), ProbeContext(), SUMMARY)
    finally:
        hardware.close()
    assert result.status is CheckStatus.PASS, result.message
    assert isinstance(result.observed, dict)
    assert result.observed["missedSamples"] == {"3": 1}


def test_the_older_clock_reasons_getter_answers_where_the_driver_lacks_the_newer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = fake_nvml()

    def newer(_handle: int) -> int:
        raise FakeNVMLError(FUNCTION_NOT_FOUND)

    module.nvmlDeviceGetCurrentClocksEventReasons = newer  # type: ignore[attr-defined]
    module.nvmlDeviceGetCurrentClocksThrottleReasons = lambda _h: clocks.HW_SLOWDOWN  # type: ignore[attr-defined]
    hw = backend(monkeypatch, module)
    assert hw.clock_event_reasons(0) == clocks.HW_SLOWDOWN


# --- one unreadable InfiniBand port is that port's, not the check's ----------------

IB_UNREADABLE = HEALTHY.parent / "h100-sxm-8gpu-ib-port-unreadable.yaml"


def _ib_result(profile: HardwareProfile) -> CheckResult:
    hardware = SimulatedBackend(profile)
    try:
        return run_check(INFINIBAND, hardware, ProbePolicy(), ProbeContext(), SUMMARY)
    finally:
        hardware.close()


def test_one_unreadable_port_is_named_and_the_others_are_judged() -> None:
    result = _ib_result(load_profile(IB_UNREADABLE))
    assert result.status is CheckStatus.WARN, result.message
    assert result.message.startswith("not read: mlx5_7/1 (cannot read port mlx5_7/1")
    assert isinstance(result.observed, dict)
    assert result.observed["layers"]["InfiniBand"]["ports"] == 7
    assert list(result.observed["notRead"]) == ["mlx5_7/1"]


def test_the_unread_port_still_counts_against_the_expected_up_ports() -> None:
    hardware = SimulatedBackend(load_profile(IB_UNREADABLE))
    try:
        policy = ProbePolicy.model_validate({"infinibandPorts": {"expectedUpPorts": 8}})
        result = run_check(INFINIBAND, hardware, policy, ProbeContext(), SUMMARY)
    finally:
        hardware.close()
    assert result.status is CheckStatus.FAIL, result.message


def test_a_check_none_of_whose_ports_could_be_read_skips() -> None:
    data = load_profile(IB_UNREADABLE).model_dump(by_alias=True)
    for group in data["infiniband"]["hcas"]:
        group["ports"] = [{"unreadable": ["state"]}]
    result = _ib_result(HardwareProfile.model_validate(data))
    assert result.status is CheckStatus.SKIP
    assert "no port could be read (8; mlx5_0/1: cannot read port" in result.message
