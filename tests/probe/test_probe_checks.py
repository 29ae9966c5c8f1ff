"""Each check against the example profiles, and each check's pure judge."""

import re
import shutil
from pathlib import Path

import pynvml
import pytest
from probe_scenarios import (
    FAULTS,
    FIXTURES,
    HEALTHY,
    HEALTHY_PROFILES,
    IDLE_DOWNSHIFT,
    fault,
    judge_json,
    probe,
)

from gpuaccept.checks.cpu_governor import SPEC as CPU_GOVERNOR
from gpuaccept.checks.nccl_allreduce import SPEC as NCCL
from gpuaccept.checks.pcie_link import SPEC as PCIE_LINK
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import BY_NAME, CHECKS
from gpuaccept.checks.throttle_reasons import SPEC as THROTTLE
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe import clocks
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.measure.nccl_allreduce import sweep_sizes
from gpuaccept.probe.measure.rounding import round_figure
from gpuaccept.probe.runner import run_check

SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


def policy(**sections: dict[str, object]) -> ProbePolicy:
    return ProbePolicy.model_validate(sections)


# --- the profiles ----------------------------------------------------------


def test_registry_names_and_the_orders_that_matter() -> None:
    names = [c.name for c in CHECKS]
    assert len(set(names)) == len(names)
    # a driver/library mismatch names its cause before the GPU count it also breaks
    assert names.index("driver_libraries") < names.index("gpu_count")
    # gpu_config judges clocks from the samples throttle_reasons took under load
    assert names.index("throttle_reasons") < names.index("gpu_config")
    for check in CHECKS:
        assert re.fullmatch(r"[a-z][a-z0-9_]{1,31}", check.name), check.name
        assert ProbePolicy().switch(check.name) is not None, check.name
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]*Failed", check.reason), check.reason
        assert check.runbook.meaning, check.name
        assert check.runbook.fix, check.name


@pytest.mark.parametrize("profile", HEALTHY_PROFILES, ids=lambda p: p.stem)
def test_healthy_profiles_pass_every_check(profile: Path) -> None:
    report = probe(profile)
    assert [r.check for r in report.results] == [c.name for c in CHECKS]
    assert {r.check: r.status for r in report.results} == dict.fromkeys(BY_NAME, CheckStatus.PASS)
    assert report.hardware.value == "simulated"


@pytest.mark.parametrize(("name", "check"), FAULTS.items())
def test_each_fault_fails_exactly_its_check(name: str, check: str) -> None:
    report = probe(fault(name))
    statuses = {r.check: r.status for r in report.results}
    assert statuses.pop(check) is CheckStatus.FAIL
    if name == "driver-library-mismatch":
        # nvmlInit fails (LIB_RM_VERSION_MISMATCH): NVML sees no GPU, so the count
        # fails too and nothing can be measured on a GPU
        assert statuses.pop("gpu_count") is CheckStatus.FAIL
        gpu_checks = [c for c, s in statuses.items() if s is CheckStatus.SKIP]
        assert {"pcie_link", "throttle_reasons", "nccl_allreduce"} <= set(gpu_checks)
        for skipped in gpu_checks:
            statuses.pop(skipped)
    if name == "xid-79-under-load":
        # the GPU fell off the bus at its first load: every later check fails naming it,
        # and xid_errors names the Xid (the simulator models the consequence)
        assert statuses.pop("xid_errors") is CheckStatus.FAIL
        lost = [c for c, s in statuses.items() if s in (CheckStatus.FAIL, CheckStatus.ERROR)]
        assert {"peer_bandwidth", "nccl_allreduce", "nvlink", "gpu_compute"} <= set(lost)
        for failed in lost:
            statuses.pop(failed)
    # a fault may show elsewhere as a warning (a 500 W cap: SW power cap), never more
    assert set(statuses.values()) <= {CheckStatus.PASS, CheckStatus.WARN}, statuses


def test_every_fault_profile_is_covered() -> None:
    shipped = {p.stem for p in (HEALTHY.parent / "faults").glob("*.yaml")}
    assert shipped == set(FAULTS)


def test_idle_downshift_is_recorded_but_not_judged() -> None:
    result = probe(IDLE_DOWNSHIFT).result("pcie_link")
    assert result is not None
    assert isinstance(result.observed, dict)
    assert result.observed["idleGen"] == [1] * 8
    assert result.observed["gen"] == [5] * 8
    assert result.status is CheckStatus.PASS


def test_pcie_x8_names_the_gpu() -> None:
    result = probe(fault("pcie-x8")).result("pcie_link")
    assert result is not None
    assert "GPU 3 below max width" in result.message
    assert "H2D 26.4 GB/s < 40" in result.message


def test_governor_fault_names_the_cpus() -> None:
    result = probe(fault("governor-powersave")).result("cpu_governor")
    assert result is not None
    assert result.message == "8 of 224 CPUs not on performance: powersave on CPU 0-3,112-115"


def test_hw_slowdown_names_the_gpu() -> None:
    result = probe(fault("hw-slowdown")).result("throttle_reasons")
    assert result is not None
    assert result.message == "hw_slowdown 100% of samples on GPU 5"


def test_nccl_from_profile_is_labelled() -> None:
    result = probe(HEALTHY).result("nccl_allreduce")
    assert result is not None
    assert isinstance(result.observed, dict)
    assert result.observed["source"] == "profile"
    assert result.observed["backend"] == "simulated"
    assert "from the simulated profile" in result.message


def test_disabled_check_is_not_measured() -> None:
    p = policy(ncclAllreduce={"enabled": False})
    result = probe(HEALTHY, p).result("nccl_allreduce")
    assert result is not None
    assert result.status is CheckStatus.SKIP
    assert result.message == "disabled by policy"


# --- the governor check on the fixture sysfs tree ------------------------------


class _FixtureSysfs(SimulatedBackend):
    """The simulated backend, but with its sysfs root pointing at a fixture tree."""

    def __init__(self, sysfs: Path) -> None:
        super().__init__(load_profile(HEALTHY))
        self._sysfs = sysfs

    def sysfs_root(self) -> Path:
        return self._sysfs


def test_governor_check_reads_fixture_tree() -> None:
    hardware = _FixtureSysfs(FIXTURES / "sysfs")
    try:
        result = run_check(CPU_GOVERNOR, hardware, ProbePolicy(), ProbeContext(), SUMMARY)
    finally:
        hardware.close()
    assert result.status is CheckStatus.FAIL
    assert result.observed == {
        "cpus": 6,
        "count": {"performance": 4, "powersave": 2},
        "list": {"performance": "0-1,4-5", "powersave": "2-3"},
    }
    assert result.message == "2 of 6 CPUs not on performance: powersave on CPU 2-3"
    relaxed = policy(cpuGovernor={"requiredGovernor": "powersave"})
    assert judge_json(CPU_GOVERNOR, result.observed, relaxed, SUMMARY).status is CheckStatus.FAIL


def test_governor_check_without_cpufreq_passes_with_its_reason() -> None:
    hardware = _FixtureSysfs(FIXTURES / "sysfs-nocpufreq")
    try:
        result = run_check(CPU_GOVERNOR, hardware, ProbePolicy(), ProbeContext(), SUMMARY)
    finally:
        hardware.close()
    assert result.status is CheckStatus.PASS
    assert result.message.startswith("no cpufreq driver")


def test_simulated_tree_uses_real_sysfs_formats() -> None:
    hardware = SimulatedBackend(load_profile(fault("pcie-x8")))
    try:
        root = hardware.sysfs_root()
        device = root / "bus" / "pci" / "devices" / "0000:1b:00.0"
        assert (device / "current_link_speed").read_text() == "32.0 GT/s PCIe\n"
        assert (device / "current_link_width").read_text() == "8\n"
        assert (device / "max_link_width").read_text() == "16\n"
        governor = root / "devices" / "system" / "cpu" / "cpu0" / "cpufreq" / "scaling_governor"
        assert governor.read_text() == "performance\n"
        tmp = root.parent
    finally:
        hardware.close()
    assert not tmp.exists()


def test_broken_measurement_is_an_error_not_a_pass() -> None:
    hardware = _FixtureSysfs(FIXTURES / "sysfs")
    shutil.rmtree(hardware._tmp / "sys" / "bus")  # the PCIe files vanish mid-probe
    try:
        result = run_check(PCIE_LINK, hardware, ProbePolicy(), ProbeContext(), SUMMARY)
    finally:
        hardware.close()
    assert result.status is CheckStatus.ERROR
    assert "SysfsError" in result.message


# --- measuring (each check's judge: tests/checks/test_<check>.py) ------------


def test_throttle_ignores_idle_and_clock_settings() -> None:
    hardware = SimulatedBackend(load_profile(HEALTHY))
    try:
        idle = hardware.clock_event_reasons(0)
        assert clocks.decode(idle) == ["gpu_idle"]
        result = run_check(THROTTLE, hardware, ProbePolicy(), ProbeContext(), SUMMARY)
    finally:
        hardware.close()
    assert result.observed == {
        "samples": 60,  # 15 s at 0.25 s, after 12 warm-up samples (3 s)
        "warmupSamples": 12,
        "activeFraction": {},
        "smClockMHz": [1980] * 8,
        "smClockMaxMHz": [1980] * 8,
    }
    assert result.status is CheckStatus.PASS


def test_clock_constants_match_nvml() -> None:
    assert pynvml.nvmlClocksEventReasonGpuIdle == clocks.GPU_IDLE
    assert (
        pynvml.nvmlClocksEventReasonApplicationsClocksSetting == clocks.APPLICATIONS_CLOCKS_SETTING
    )
    assert pynvml.nvmlClocksEventReasonSwPowerCap == clocks.SW_POWER_CAP
    assert pynvml.nvmlClocksEventReasonHwSlowdown == clocks.HW_SLOWDOWN
    assert pynvml.nvmlClocksEventReasonSyncBoost == clocks.SYNC_BOOST
    assert pynvml.nvmlClocksEventReasonSwThermalSlowdown == clocks.SW_THERMAL_SLOWDOWN
    assert pynvml.nvmlClocksEventReasonHwThermalSlowdown == clocks.HW_THERMAL_SLOWDOWN
    assert pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown == clocks.HW_POWER_BRAKE_SLOWDOWN
    assert pynvml.nvmlClocksEventReasonDisplayClockSetting == clocks.DISPLAY_CLOCK_SETTING
    # the deprecated "throttle" names are the same bits
    assert pynvml.nvmlClocksThrottleReasonHwSlowdown == clocks.HW_SLOWDOWN
    assert pynvml.nvmlClocksThrottleReasonSwPowerCap == clocks.SW_POWER_CAP


def test_clock_decode_unknown_bits() -> None:
    assert clocks.decode(0x8 | 0x400) == ["hw_slowdown", "bit_0x400"]
    assert clocks.encode(clocks.decode(0x1FF)) == 0x1FF


def test_nccl_single_gpu_passes_as_not_applicable() -> None:
    hardware = SimulatedBackend(
        load_profile(fault("gpu-missing")).model_copy(
            update={"gpus": load_profile(HEALTHY).gpus.model_copy(update={"count": 1})}
        )
    )
    try:
        result = run_check(NCCL, hardware, ProbePolicy(), ProbeContext(), SUMMARY)
    finally:
        hardware.close()
    assert result.status is CheckStatus.PASS  # one GPU: nothing to all-reduce, not a skip
    assert result.message.startswith("not applicable: ")
    assert "at least 2 GPUs" in result.message


def test_sweep_sizes_reach_one_gib() -> None:
    sizes = sweep_sizes(1 << 30)
    assert sizes[-1] == 1 << 30
    assert sizes == sorted(sizes)
    assert len(sizes) == 5
    assert sweep_sizes(4096) == [4096]


def test_small_bandwidths_never_round_to_zero() -> None:
    assert round_figure(0.0412345) == 0.0412
    assert round_figure(1e-7) == 1e-7
    assert round_figure(12.345) == 12.3
    assert round_figure(468.04) == 468.0
    assert round_figure(0.0) == 0.0
