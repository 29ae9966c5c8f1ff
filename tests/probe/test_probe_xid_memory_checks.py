"""``xid_errors`` and ``memory_health``: the pure judges (table tests), their
condensed forms, GPU range text, and the simulated probe run whose Xid listener
spans every load."""

from typing import get_args

import pytest
from probe_scenarios import HEALTHY, default_policy, fault, probe

from gpuaccept.checks import memory_health, xid_errors
from gpuaccept.checks.gpu_ranges import format_gpus, parse_gpus
from gpuaccept.checks.gpu_sets import merged
from gpuaccept.checks.memory_health import MemoryHealthObserved, MemoryHealthPolicy
from gpuaccept.checks.registry import BY_NAME
from gpuaccept.checks.xid_errors import XidErrorsObserved, XidErrorsPolicy, xid_sets
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.hardware.profile import RecoveryActionName, load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.measure.context import NodeGpuCounts
from gpuaccept.probe.runner import ProbeRun, measuring_order, run_probe

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


@pytest.mark.parametrize(
    ("observed", "status", "message"),
    [
        (xid(), CheckStatus.PASS, "no critical Xid on GPUs 0-7 in 80 s under load"),
        (
            xid(
                events=[{"gpu": 5, "xid": 79, "atS": 41.5, "during": "nccl_allreduce"}],
                xids={"5": [79]},
            ),
            CheckStatus.FAIL,
            "GPU 5: Xid 79 (GPU fallen off the bus: reboot the node; reseat or replace if it "
            "recurs) during nccl_allreduce",
        ),
        (
            xid(xids={"2": [94]}),
            CheckStatus.FAIL,
            "GPU 2: Xid 94 (contained ECC error: reset the GPU when convenient)",
        ),
        (
            xid(xids={"2": [92]}),
            CheckStatus.WARN,
            "GPU 2: Xid 92 (high single-bit ECC rate: watch it; no action unless it persists)",
        ),
        (
            xid(xids={"0-1": [13, 43]}),
            CheckStatus.PASS,
            "no critical Xid on GPUs 0-7 in 80 s under load; not judged: Xid 13, 43",
        ),
        (
            xid(recoveryAction={"gpu_reset": "3"}),
            CheckStatus.FAIL,
            "GPU 3: recovery action gpu_reset",
        ),
        (
            xid(recoveryAction={"recover_imex_domain": "0-7"}),
            CheckStatus.WARN,
            "GPUs 0-7: recovery action recover_imex_domain",
        ),
        (
            xid(xids={"-1": [48]}),
            CheckStatus.FAIL,
            "an unknown GPU: Xid 48 (double-bit ECC error: reset the GPU; replace it if it recurs)",
        ),
        (
            xid(
                notRead={
                    "recoveryAction": "GPUs 0-7: driver 550.54.15: no recovery action "
                    "field before R570"
                }
            ),
            CheckStatus.PASS,
            "no critical Xid on GPUs 0-7 in 80 s under load; recoveryAction not read: GPUs 0-7: "
            "driver 550.54.15: no recovery action field before R570",
        ),
    ],
)
def test_xid_judge(observed: XidErrorsObserved, status: CheckStatus, message: str) -> None:
    judgement = xid_errors.judge(observed, XidErrorsPolicy(), SUMMARY)
    assert (judgement.status, judgement.message) == (status, message)
    condensed = xid_errors.condense(observed)
    assert condensed.events is None
    assert xid_errors.judge(condensed, XidErrorsPolicy(), SUMMARY).status is status


def test_xid_policy_moves_a_code_between_lists() -> None:
    observed = xid(xids={"4": [13]})
    policy = XidErrorsPolicy(fail_on=[13], warn_on=[])
    assert xid_errors.judge(observed, policy, SUMMARY).status is CheckStatus.FAIL
    relaxed = XidErrorsPolicy(fail_on=[], warn_on=[92])
    assert xid_errors.judge(xid(xids={"5": [79]}), relaxed, SUMMARY).status is CheckStatus.PASS


def test_xid_malformed_gpu_set_is_an_error_not_a_pass() -> None:
    with pytest.raises(ValueError, match="range"):
        xid_errors.judge(xid(xids={"GPU five": [13]}), XidErrorsPolicy(), SUMMARY)


def test_xid_sets_group_gpus_with_the_same_xids() -> None:
    events = [(5, 79), (3, 94), (4, 94), (3, 94), (-1, 48)]
    assert xid_sets(events) == {"3-4": [94], "5": [79], "-1": [48]}


def test_default_xid_lists_are_the_catalogue_defaults() -> None:
    policy = default_policy().xid_errors
    assert sorted(policy.fail_on) == [48, 63, 64, 74, 79, 94, 95, 119, 120, 140, 154]
    assert policy.warn_on == [92]
    assert set(xid_errors.XID_CATALOGUE) == {*policy.fail_on, *policy.warn_on}


def test_profile_recovery_actions_are_nvml_order() -> None:
    assert get_args(RecoveryActionName) == tuple(a.value for a in xid_errors.RecoveryAction)


def mem(**fields: object) -> MemoryHealthObserved:
    return MemoryHealthObserved.model_validate({"gpus": 8, **fields})


@pytest.mark.parametrize(
    ("observed", "status", "message"),
    [
        (mem(), CheckStatus.PASS, "ECC and memory healthy on 8 GPUs"),
        (
            mem(remapPending="5", remappedRows={"5": [0, 2]}, aggregateUncorrected={"5": 2}),
            CheckStatus.FAIL,
            "GPU 5: row remap pending (0 correctable, 2 uncorrectable rows remapped; reset "
            "needed); GPU 5: 2 uncorrected ECC errors in the GPU's lifetime",
        ),
        (
            mem(remapFailed="3"),
            CheckStatus.FAIL,
            "GPU 3: row remapping failed (replace the GPU)",
        ),
        (
            mem(volatileUncorrected={"1": 2}),
            CheckStatus.FAIL,
            "GPU 1: 2 uncorrected ECC errors since the driver loaded",
        ),
        (mem(eccOff="4"), CheckStatus.FAIL, "GPU 4: ECC off"),
        (mem(eccPendingOff="0-7"), CheckStatus.FAIL, "GPUs 0-7: ECC off after the next reset"),
        (
            mem(retirePending="2", retiredPages={"2": 3}),
            CheckStatus.FAIL,
            "GPU 2: page retirement pending (reset needed)",
        ),
        (mem(retiredPages={"2": 61}), CheckStatus.FAIL, "GPU 2: 61 retired pages (replace)"),
        (mem(retiredPages={"2": 60}), CheckStatus.PASS, "ECC and memory healthy on 8 GPUs"),
        (
            mem(aggregateUncorrected={"2": 1}),
            CheckStatus.WARN,
            "GPU 2: 1 uncorrected ECC errors in the GPU's lifetime",
        ),
        (
            mem(notRead={"eccMode": "GPU 6: NotSupported"}),
            CheckStatus.PASS,
            "ECC and memory healthy on 8 GPUs; eccMode not read: GPU 6: NotSupported",
        ),
    ],
)
def test_memory_judge(observed: MemoryHealthObserved, status: CheckStatus, message: str) -> None:
    judgement = memory_health.judge(observed, MemoryHealthPolicy(), SUMMARY)
    assert (judgement.status, judgement.message) == (status, message)
    condensed = memory_health.condense(observed)
    assert condensed.remapped_rows is None
    assert memory_health.judge(condensed, MemoryHealthPolicy(), SUMMARY).status is status


def test_memory_pending_gpus_with_the_same_rows_share_one_reason() -> None:
    observed = mem(remapPending="1-2,5", remappedRows={"1": [0, 1], "2": [0, 1], "5": [3, 0]})
    message = memory_health.judge(observed, MemoryHealthPolicy(), SUMMARY).message
    assert message == (
        "GPUs 1-2: row remap pending (0 correctable, 1 uncorrectable rows remapped; reset "
        "needed); GPU 5: row remap pending (3 correctable, 0 uncorrectable rows remapped; "
        "reset needed)"
    )


def test_memory_policy_relaxes_thresholds() -> None:
    observed = mem(volatileUncorrected={"1": 2}, eccOff="3", aggregateUncorrected={"1": 2})
    policy = MemoryHealthPolicy(
        require_ecc=False, max_volatile_uncorrected=2, warn_aggregate_uncorrected=5
    )
    assert memory_health.judge(observed, policy, SUMMARY).status is CheckStatus.PASS


def test_memory_malformed_gpu_set_is_an_error_not_a_pass() -> None:
    with pytest.raises(ValueError, match="range"):
        memory_health.judge(mem(remapFailed="all"), MemoryHealthPolicy(), SUMMARY)


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
        run = ProbeRun(
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
    # driver 550: no recovery action either, and no listener: nothing to judge
    assert result.status is CheckStatus.SKIP
    assert "no Xid listener ran" in result.message


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
