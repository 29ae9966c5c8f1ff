"""``xid_errors`` and ``memory_health``: the pure judges (table tests), their
condensed forms, GPU range text, and the simulated probe run whose Xid listener
spans every load."""

from typing import get_args

import pytest
from probe_scenarios import HEALTHY, default_policy, fault, probe

from gpuaccept.checks import xid_errors
from gpuaccept.checks.gpu_ranges import format_gpus, parse_gpus
from gpuaccept.checks.gpu_sets import merged
from gpuaccept.checks.registry import BY_NAME
from gpuaccept.checks.xid_errors import XidErrorsObserved, xid_sets
from gpuaccept.contracts.inservice import NvmlRecoveryAction
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.measure.context import NodeGpuCounts
from gpuaccept.probe.runner import RunSetup, measuring_order, run_probe

SUMMARY = HardwareSummary(gpu_count=8)


@pytest.mark.parametrize(
    ("indices", "text"),
    [([], ""), ([5], "5"), ([0, 1, 2, 3, 5], "0-3,5"), ([7, 0, 1, 1], "0-1,7"), ([3, 4], "3-4")],
)
def test_gpu_ranges_round_trip(indices: list[int], text: str) -> None:
    assert format_gpus(indices) == text
    if text:
        assert parse_gpus(text) == sorted(set(indices))


@pytest.mark.parametrize("bad", ["", "a", "3-1", "0-999", "1,,2", "-1"])
def test_gpu_ranges_refuse_garbage(bad: str) -> None:
    with pytest.raises(ValueError, match="range"):
        parse_gpus(bad)


def test_merged_counts_keep_every_gpu_and_the_largest() -> None:
    assert merged({"3": 2, "5": 7, "6": 1}) == {"3,5-6": 7}
    assert merged({"3": 2}) == {"3": 2}


def xid(**fields: object) -> XidErrorsObserved:
    return XidErrorsObserved.model_validate({"watched": "0-7", "listenedS": 80.0, **fields})


def test_xid_sets_group_gpus_with_the_same_xids() -> None:
    events = [(5, 79), (3, 94), (4, 94), (3, 94), (-1, 48)]
    assert xid_sets(events) == {"3-4": [94], "5": [79], "-1": [48]}


def test_default_xid_lists_are_the_catalogue_defaults() -> None:
    policy = default_policy().xid_errors
    assert sorted(policy.fail_on) == [48, 63, 64, 74, 79, 94, 95, 119, 120, 140, 154]
    assert policy.warn_on == [92]
    assert set(xid_errors.XID_CATALOGUE) == {*policy.fail_on, *policy.warn_on}


def test_profile_recovery_actions_are_nvml_order() -> None:
    assert get_args(NvmlRecoveryAction) == tuple(a.value for a in xid_errors.RecoveryAction)


# --- the simulated probe run -------------------------------------------------------


def test_xid_is_recorded_with_gpu_and_the_check_that_loaded_it() -> None:
    report = probe(fault("xid-79-under-load"))
    result = report.result("xid_errors")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert isinstance(result.observed, dict)
    assert result.observed["xids"] == {"5": [79]}
    # GPU 5 is first loaded by its PCIe copy: the listener was already open then
    assert result.observed["events"] == [{"gpu": 5, "xid": 79, "atS": 0.0, "during": "pcie_link"}]
    assert result.message.startswith("GPU 5: Xid 79 (GPU fallen off the bus")


def test_report_keeps_registry_order_though_xid_errors_is_measured_last() -> None:
    report = probe(HEALTHY)
    listed = [r.check for r in report.results]
    assert listed == list(BY_NAME)  # the registry's order
    assert listed.index("xid_errors") < listed.index("memory_health")  # not where measured
    order = [c.name for c in measuring_order(list(BY_NAME.values()))]
    assert order[-1] == "xid_errors"
    assert order.index("memory_health") < order.index("xid_errors")


def test_listener_spans_a_load_that_runs_after_xid_errors_in_the_list() -> None:
    """Even listed first, xid_errors sees the Xids of a load listed after it."""
    profile = load_profile(fault("xid-79-under-load"))
    hardware = SimulatedBackend(profile)
    try:
        run = RunSetup(
            node_name="n",
            context=ProbeContext(node_gpus=NodeGpuCounts(allocatable=8, capacity=8)),
            checks=[BY_NAME["xid_errors"], BY_NAME["throttle_reasons"]],
        )
        report = run_probe(hardware, default_policy(), run)
    finally:
        hardware.close()
    assert [r.check for r in report.results] == ["xid_errors", "throttle_reasons"]
    result = report.result("xid_errors")
    assert result is not None
    assert isinstance(result.observed, dict)
    assert result.observed["events"][0]["during"] == "throttle_reasons"
    assert result.status is CheckStatus.FAIL


def test_xid_errors_outside_a_probe_run_names_the_missing_listener() -> None:
    hardware = SimulatedBackend(load_profile(HEALTHY))
    try:
        from gpuaccept.probe.runner import run_check  # noqa: PLC0415

        result = run_check(
            BY_NAME["xid_errors"], hardware, default_policy(), ProbeContext(), SUMMARY
        )
    finally:
        hardware.close()
    # no GPU watched for Xids (issue 37, item 5) and, on driver 550, no recovery action
    # field (item 15): nothing read, a skip naming both, never a pass
    assert result.status is CheckStatus.SKIP
    assert "no Xid listener ran (measured outside a probe run)" in result.message
    assert "no recovery action or reset status field before R560" in result.message


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("row-remap-pending", "GPU 5: row remap pending (0 correctable, 1 uncorrectable rows"),
        ("row-remap-failed", "GPU 3: row remapping failed (replace the GPU)"),
        ("ecc-uncorrected", "GPU 1: 2 uncorrected ECC errors since the driver loaded"),
        ("ecc-disabled", "GPU 4: ECC off"),
        ("recovery-action-reset", "GPU 2: recovery action gpu_reset"),
    ],
)
def test_fault_profiles_name_the_gpu(name: str, message: str) -> None:
    report = probe(fault(name))
    failing = [r for r in report.results if r.status is CheckStatus.FAIL]
    assert len(failing) == 1
    assert failing[0].message.startswith(message)
