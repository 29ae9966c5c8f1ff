"""A policy change or a relabel never convicts a node on evidence the probe did not
measure, and a re-judge goes through the same acceptance gate as a fresh probe: a
stored report that cannot be judged, or cannot accept the node, starts a new round."""

from __future__ import annotations

from typing import Any

from world import World, make_report, spec

from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.contracts.report import CheckStatus, ProbeReport
from gpuaccept.operator.core import PolicyView

OFF = {"cpuGovernor": {"enabled": False}}


def without(report: ProbeReport, check: str) -> ProbeReport:
    return report.model_copy(update={"results": [r for r in report.results if r.check != check]})


def compacted(report: ProbeReport, check: str) -> ProbeReport:
    results = [
        r.model_copy(update={"observed": None}) if r.check == check else r for r in report.results
    ]
    return report.model_copy(update={"results": results})


def decided_under(report: ProbeReport, name: str = "default", **fields: Any) -> World:
    world = World(policies=[PolicyView(name, 1, spec(**fields))])
    world.settle()
    world.finish_with_report(report)
    world.settle()
    return world


def change_policy(world: World, name: str = "default", generation: int = 2, **fields: Any) -> None:
    world.policies = [PolicyView(name, generation, spec(**fields))]
    world.settle()


def assert_new_round(world: World, reason: str) -> None:
    st = world.status
    assert st.phase == Phase.PROBING, (st.phase, st.reason, st.message)
    assert st.report is None
    assert st.attempts == 1
    assert reason in (st.message or "") or reason == st.reason, st.message


def test_turning_a_check_on_measures_again_rather_than_convicts() -> None:
    world = decided_under(without(make_report(), "cpu_governor"), probe=OFF)
    assert world.status.phase == Phase.ACCEPTED
    change_policy(world)  # cpuGovernor enabled (the default)
    assert_new_round(world, "enabled since")
    assert world.status.reason == "PolicyNotMeasured"


def test_turning_a_check_on_measures_again_even_if_the_report_has_a_result() -> None:
    """The probe was not told the section: whatever it says of it was not asked for."""
    world = decided_under(make_report(), probe=OFF)
    change_policy(world)
    assert_new_round(world, "enabled since")


def test_a_changed_measuring_setting_measures_again() -> None:
    world = decided_under(make_report())
    change_policy(world, probe={"ncclAllreduce": {"maxMessageBytes": 1 << 20}})
    assert_new_round(world, "what the probe measures changed")


def test_a_compacted_result_under_a_changed_threshold_is_measured_again() -> None:
    """A compacted pass never accepts (the probe's word alone), so the case is a
    compacted failure: under a loosened threshold it is measured again, not kept."""
    report = compacted(make_report(), "nccl_allreduce")
    results = [
        r.model_copy(update={"status": CheckStatus.FAIL}) if r.check == "nccl_allreduce" else r
        for r in report.results
    ]
    world = decided_under(report.model_copy(update={"results": results}))
    assert (world.status.phase, world.status.reason) == (Phase.QUARANTINED, "NcclAllreduceFailed")
    change_policy(world, probe={"ncclAllreduce": {"minBusbwGBps": 1}})
    assert_new_round(world, "compacted")


def test_a_threshold_that_only_judges_is_still_judged_in_place() -> None:
    world = decided_under(make_report())
    change_policy(world, probe={"ncclAllreduce": {"minBusbwGBps": 100000}})
    assert (world.status.phase, world.status.reason) == (Phase.QUARANTINED, "NcclAllreduceFailed")
    assert world.status.rejudged


def test_relabelling_onto_a_stricter_policy_measures_again() -> None:
    world = decided_under(without(make_report(), "cpu_governor"), probe=OFF)
    world.policies = [PolicyView("strict", 1, spec())]
    world.settle()
    assert_new_round(world, "enabled since")


def test_a_report_stored_before_the_digests_is_measured_again_for_a_new_check() -> None:
    world = decided_under(without(make_report(), "cpu_governor"), probe=OFF)
    assert world.na is not None
    world.na = world.na.__class__(
        **{**world.na.__dict__, "status": world.status.model_copy(update={"probed_sections": None})}
    )
    change_policy(world)
    assert_new_round(world, "no result in the stored report")


def test_a_rejudge_of_7_of_8_gpus_with_gpu_count_off_measures_again() -> None:
    """A fresh probe refuses an accepting report that covers 7 of 8 GPUs; so does a re-judge."""
    world = decided_under(make_report(failing=["gpu_count"]))
    assert (world.status.phase, world.status.reason) == (Phase.QUARANTINED, "GpuCountFailed")
    change_policy(world, probe={"gpuCount": {"enabled": False}})
    assert_new_round(world, "ReportMismatch")
    assert world.status.phase != Phase.ACCEPTED


def test_a_count_mismatch_found_on_a_rejudge_never_convicts() -> None:
    world = decided_under(make_report())
    assert world.node is not None
    world.node = world.node.__class__(**{**world.node.__dict__, "gpus": 4})  # allocatable fell
    change_policy(world, probe={"pcieLink": {"minWidth": 8}})
    assert_new_round(world, "ReportMismatch")


FABRIC = {"enabled": True, "minBusbwGBps": 300}


def test_a_passing_rejudge_under_a_fabric_policy_goes_to_the_fabric_test() -> None:
    world = decided_under(make_report())
    assert world.status.phase == Phase.ACCEPTED
    change_policy(world, fabric=FABRIC)
    assert world.status.phase == Phase.FABRIC
    assert world.status.rejudged
