"""Each NVLink counter is read on its own (a NotSupported one does not hide the
others), and the counters are judged as increases over the probe's own run."""

from typing import Any

import pynvml
import pytest
from probe_scenarios import PROFILES, default_policy, fault, probe
from test_probe_nvlink_fabric_config import nvlink_nvml
from test_probe_real_backend import FakeNVMLError, backend

from gpuaccept.checks.nvlink import SPEC as NVLINK
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.hardware.base import NvlinkLinks
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.measure.nvlink import measure

# a model whose link count is not judged: these tests are about the counters
SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 NVL", gpu_count=1)
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


def _crc_data_not_supported(counts: dict[tuple[int, int], int]) -> Any:
    """NVML whose DL_CRC_DATA counter (3) answers NotSupported on every link."""
    m = nvlink_nvml(counters=counts)
    counter = m.nvmlDeviceGetNvLinkErrorCounter

    def per_field(handle: int, link: int, which: int) -> int:
        if which == pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA:
            raise FakeNVMLError(NOT_SUPPORTED)
        return int(counter(handle, link, which))

    m.nvmlDeviceGetNvLinkErrorCounter = per_field
    return m


def test_a_counter_nvml_does_not_support_leaves_the_others_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recovery = pynvml.NVML_NVLINK_ERROR_DL_RECOVERY
    flit = pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT
    hw = backend(monkeypatch, _crc_data_not_supported({(4, recovery): 2, (4, flit): 9}))
    links = hw.nvlink(0)
    assert links.errors is not None
    assert links.errors["recovery"][4] == 2
    assert links.errors["crc"][4] == 9  # flit alone: the data part is not read
    assert links.not_supported == ("crc_data",)


def _observed(before: dict[str, tuple[int, ...]] | None, now: dict[str, tuple[int, ...]]) -> Any:
    class Hardware:
        def gpus(self) -> list[Any]:
            from gpuaccept.probe.hardware.base import GpuInfo  # noqa: PLC0415

            return [GpuInfo(0, "NVIDIA H100 80GB HBM3")]

        def nvlink(self, _gpu: int) -> NvlinkLinks:
            return NvlinkLinks(count=2, active=(0, 1), errors=now)

    start = None if before is None else {0: NvlinkLinks(count=2, active=(0, 1), errors=before)}
    context = ProbeContext(nvlink_before=start)
    return measure(Hardware(), default_policy().section(NVLINK), context)  # type: ignore[arg-type]


def test_counts_from_before_the_run_warn_and_increases_during_it_fail() -> None:
    section = default_policy().section(NVLINK)
    steady = _observed({"recovery": (2, 0)}, {"recovery": (2, 0)})
    assert steady.errors is None
    assert steady.errors_before == {"recovery": {"0:0": 2}}
    judged = NVLINK.judge(steady, section, SUMMARY)
    assert judged.status is CheckStatus.WARN
    assert "before the probe" in judged.message
    rising = _observed({"recovery": (2, 0)}, {"recovery": (3, 0)})
    assert rising.errors == {"recovery": {"0:0": 1}}
    assert NVLINK.judge(rising, section, SUMMARY).status is CheckStatus.FAIL
    # the condensed form judges the same
    assert NVLINK.judge(NVLINK.condense(steady), section, SUMMARY).status is CheckStatus.WARN


def test_without_a_baseline_the_counts_are_judged_since_driver_load() -> None:
    observed = _observed(None, {"recovery": (1, 0)})
    assert observed.since_driver_load == "0"
    section = default_policy().section(NVLINK)
    assert NVLINK.judge(observed, section, SUMMARY).status is CheckStatus.FAIL


def test_the_fault_and_the_trap_profiles() -> None:
    policy = default_policy()
    failing = evaluate(probe(fault("nvlink-recovery-crc-data-unsupported")), policy)
    assert failing.reason == "NvlinkFailed"
    assert "recovery errors > 0 on GPU 2 link 5: 3" in failing.message
    trap = evaluate(probe(PROFILES / "h100-sxm-8gpu-nvlink-errors-before-probe.yaml"), policy)
    assert trap.accepted
    assert [w.check for w in trap.warnings] == ["nvlink"]


UNKNOWN = pynvml.NVML_ERROR_UNKNOWN


def test_one_odd_counter_on_one_link_keeps_the_other_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An NVML error other than NotSupported on one counter of one link (issue 37, item 2)
    lists that counter as not read; the GPU's other counters are kept and judged."""
    recovery = pynvml.NVML_NVLINK_ERROR_DL_RECOVERY
    m = nvlink_nvml(counters={(4, recovery): 2})
    counter = m.nvmlDeviceGetNvLinkErrorCounter

    def odd(handle: int, link: int, which: int) -> int:
        if (link, which) == (7, pynvml.NVML_NVLINK_ERROR_DL_REPLAY):
            raise FakeNVMLError(UNKNOWN)
        return int(counter(handle, link, which))

    m.nvmlDeviceGetNvLinkErrorCounter = odd
    links = backend(monkeypatch, m).nvlink(0)
    assert links.errors is not None
    assert links.errors["recovery"][4] == 2
    assert "replay" not in links.errors  # not read on link 7: not judged as 0
    assert links.not_read == ("replay",)
    observed = _measure_one(links)
    assert observed.counters_not_read == {"replay": "0"}
    judged = NVLINK.judge(observed, default_policy().section(NVLINK), SUMMARY)
    assert judged.status is CheckStatus.FAIL  # the recovery errors are still judged
    assert "recovery errors > 0 on GPU 0 link 4: 2" in judged.message


def test_hoppers_data_ecc_counter_is_read_and_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML_NVLINK_ERROR_DL_ECC_DATA (4): the data ECC errors NVLink 4 corrects."""
    ecc = pynvml.NVML_NVLINK_ERROR_DL_ECC_DATA
    links = backend(monkeypatch, nvlink_nvml(counters={(2, ecc): 5})).nvlink(0)
    assert links.errors is not None
    assert links.errors["ecc"][2] == 5
    judged = NVLINK.judge(_measure_one(links), default_policy().section(NVLINK), SUMMARY)
    assert judged.status is CheckStatus.WARN
    assert "ecc errors > 0 on GPU 0 link 2: 5" in judged.message


def _blackwell_fields(recoveries: dict[int, int]) -> Any:
    """NVML as on Blackwell: nvmlDeviceGetNvLinkErrorCounter answers NotSupported for
    every counter; NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS (215) answers per link
    (the link in scopeId), as nvml.h directs ("unsupported for Blackwell+. Please use
    NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_*")."""
    m = nvlink_nvml(counters_code=NOT_SUPPORTED)
    link_count = m.nvmlDeviceGetFieldValues

    def fields(handle: int, ids: list[Any]) -> list[Any]:
        out = []
        for wanted in ids:
            if wanted == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
                out.extend(link_count(handle, [wanted]))
                continue
            field_id, link = wanted
            assert field_id == pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS
            v = pynvml.c_nvmlFieldValue_t()
            v.fieldId, v.scopeId = field_id, link
            v.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            v.nvmlReturn = 0
            v.value.ullVal = recoveries.get(link, 0)
            out.append(v)
        return out

    m.nvmlDeviceGetFieldValues = fields
    return m


def test_blackwell_recoveries_are_read_from_the_link_recovery_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    links = backend(monkeypatch, _blackwell_fields({9: 1})).nvlink(0)
    assert links.errors == {"recovery": tuple(1 if link == 9 else 0 for link in range(18))}
    # the recoveries come from the field; the rest has no Blackwell equivalent
    assert set(links.not_supported) == {"replay", "crc_flit", "crc_data", "ecc_data"}
    observed = _measure_one(links)
    judged = NVLINK.judge(observed, default_policy().section(NVLINK), SUMMARY)
    assert judged.status is CheckStatus.FAIL
    assert "recovery errors > 0 on GPU 0 link 9: 1" in judged.message


def _measure_one(links: NvlinkLinks) -> Any:
    class Hardware:
        def gpus(self) -> list[Any]:
            from gpuaccept.probe.hardware.base import GpuInfo  # noqa: PLC0415

            return [GpuInfo(0, "NVIDIA H100 80GB HBM3")]

        def nvlink(self, _gpu: int) -> NvlinkLinks:
            return links

    context = ProbeContext(nvlink_before=None)
    return measure(Hardware(), default_policy().section(NVLINK), context)  # type: ignore[arg-type]
