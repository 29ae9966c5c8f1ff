"""A transient NVML error in one sample is that sample's, not the whole check's; the
older clock-reasons getter answers where the driver lacks the newer one."""

import pytest
from probe_scenarios import HEALTHY
from test_probe_real_backend import FakeNVMLError, backend, fake_nvml

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.throttle_reasons import SPEC as THROTTLE
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe import clocks
from gpuaccept.probe.hardware.base import Unavailable
from gpuaccept.probe.hardware.profile import load_profile
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
