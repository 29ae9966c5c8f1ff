"""Health in service on the in-memory world (policy inService), through the one
verdict path: an accepted node whose GPUs stay unallocatable past the grace is
quarantined (taint, condition, remedy), one whose device plugin comes back within
it stays accepted; dryRun holds; the quarantine limit holds it in service
(BreakerOpen) and lets it through once there is room; a common cause is held in
service (CommonCause), never quarantined; a hold whose evidence is gone is lifted;
a fatal Xid in a watch report quarantines at once; a quarantined node comes back
only through a new acceptance probe after a new boot; on a DRA node, a GPU gone from
its pool past the grace is quarantined, the driver's fatal Xid taint quarantines and
its unmonitored taint raises WatchBlind."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from world import PENDING, T0, World, spec

from gpuaccept.contracts.api import REMEDY_LABEL
from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.core import PolicyView, QuarantineLimitCounts
from gpuaccept.operator.core.model import (
    ConditionSeen,
    CreateProbePod,
    DeviceTaintView,
    DraDevice,
    ResourceSliceView,
    SignatureSeen,
    WatchEvidence,
    XidSeen,
)

QUARANTINE = "gpuaccept.io/quarantined"
GRACE = 60


def accepted(**fields: Any) -> World:
    section = {"enabled": True, "allocatableGraceSeconds": GRACE}
    section.update(fields.pop("inService", {}))
    policy = spec(inService=section, **fields)
    world = World(policies=[PolicyView(name="default", generation=1, spec=policy)])
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.status.phase in (Phase.ACCEPTED, Phase.HELD)
    return world


# The Node's signal alone (no watch pods): allocatable short is judged at its grace.
SIGNALS_ONLY = {"watchPods": False}


def set_node(world: World, **change: Any) -> None:
    assert world.node is not None
    world.node = dataclasses.replace(world.node, **change)


def test_the_ledger_is_recorded_once_accepted() -> None:
    world = accepted()
    ledger = world.status.in_service
    assert ledger is not None
    assert ledger.boot_id == "boot-1"
    assert ledger.accepted_time == world.status.last_probe_time
    assert not world.settle().actions  # a fixed point: no write per pass


def test_allocatable_short_past_the_grace_quarantines() -> None:
    world = accepted(inService=SIGNALS_ONLY)
    set_node(world, gpus=7)
    plan = world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert plan.requeue_after == GRACE  # woken at the grace's end, no Node event needed
    world.advance(GRACE)
    world.settle()
    st = world.status
    assert st.phase == Phase.QUARANTINED
    assert st.reason == "GPUsUnallocatable"
    assert st.reasons[0].check == "in_service"
    assert "7 of 8 GPUs allocatable" in (st.message or "")
    assert QUARANTINE in world.taint_keys()
    assert world.node is not None
    assert world.node.labels[REMEDY_LABEL] == "reboot-node"
    assert st.in_service is not None
    assert st.in_service.verdict is not None
    assert st.in_service.verdict.window_start == T0
    assert [e.reason for e in world.events if e.kind == "Node"][-1] == "Quarantined"


def test_a_device_plugin_restart_within_the_grace_stays_accepted() -> None:
    world = accepted()
    set_node(world, gpus=0)
    world.settle()
    world.advance(20)
    set_node(world, gpus=8)
    world.settle()
    world.advance(GRACE * 10)
    world.settle()
    st = world.status
    assert st.phase == Phase.ACCEPTED
    assert st.reason is None
    assert st.in_service is not None
    assert st.in_service.unallocatable_since is None
    assert [e.what for e in st.in_service.events] == ["GPUsUnallocatable"]


def test_a_condition_held_quarantines_and_a_flapping_one_does_not() -> None:
    rule = {"type": "KernelDeadlock", "status": "True", "durationSeconds": 30}
    world = accepted(inService={"unhealthyConditions": [rule]})
    for i in range(5):  # flapping: True for 20 s, then False
        set_node(world, conditions=(ConditionSeen("KernelDeadlock", "True", world.now),))
        world.settle()
        world.advance(20)
        set_node(world, conditions=(ConditionSeen("KernelDeadlock", "False", world.now),))
        world.settle()
        world.advance(5 + i)
    assert world.status.phase == Phase.ACCEPTED
    set_node(world, conditions=(ConditionSeen("KernelDeadlock", "True", world.now),))
    world.settle()
    world.advance(30)
    world.settle()
    assert world.status.phase == Phase.QUARANTINED
    assert world.status.reason == "UnhealthyCondition"


def test_dry_run_holds() -> None:
    world = accepted(dryRun=True, inService=SIGNALS_ONLY)
    assert world.status.held_action == "Accept"
    set_node(world, gpus=7)
    world.settle()
    world.advance(GRACE)
    world.settle()
    st = world.status
    assert (st.phase, st.reason, st.held_action) == (Phase.HELD, "DryRun", "Quarantine")
    assert QUARANTINE not in world.taint_keys()
    set_node(world, gpus=8)  # the evidence is gone: back to "would accept"
    world.settle()
    assert (world.status.phase, world.status.held_action) == (Phase.HELD, "Accept")


def test_the_limit_holds_in_service_then_lets_it_through() -> None:
    world = accepted(inService=SIGNALS_ONLY)
    world.limit_counts = QuarantineLimitCounts(quarantined=5, matched=10)
    set_node(world, gpus=7)
    world.settle()
    world.advance(GRACE)
    world.settle()
    st = world.status
    assert (st.phase, st.reason, st.held_action) == (Phase.ACCEPTED, "BreakerOpen", "Quarantine")
    assert QUARANTINE not in world.taint_keys()
    world.limit_counts = QuarantineLimitCounts(quarantined=0, matched=10)
    world.advance(30)
    world.settle()
    assert world.status.phase == Phase.QUARANTINED


def test_each_pass_while_a_verdict_settles_is_a_fixed_point_on_a_moving_clock() -> None:
    """Between the evidence and its settling (correlation.settleSeconds), passes a
    moment apart write nothing: each write would wake the next pass at once."""
    world = accepted(inService={**SIGNALS_ONLY, "allocatableGraceSeconds": 2})
    set_node(world, gpus=7)
    world.settle_ticking()
    world.advance(2)  # past the grace, within the settle delay (15 s from the onset)
    world.settle_ticking()  # the verdict is recorded pending once, then stays put
    ledger = world.status.in_service
    assert ledger is not None
    assert ledger.verdict is not None
    assert ledger.verdict.pending
    world.advance(5)
    assert not world.settle_ticking().actions
    assert world.status.in_service == ledger
    world.advance(10)  # settled: quarantined
    world.settle_ticking()
    assert world.status.phase == Phase.QUARANTINED


def test_a_held_verdict_whose_evidence_is_gone_is_lifted() -> None:
    world = accepted(inService=SIGNALS_ONLY)
    world.limit_counts = QuarantineLimitCounts(quarantined=5, matched=10)
    set_node(world, gpus=7)
    world.settle()
    world.advance(GRACE)
    world.settle()
    assert world.status.reason == "BreakerOpen"
    set_node(world, gpus=8)
    world.settle()
    st = world.status
    assert (st.phase, st.reason, st.held_action, st.reasons) == (Phase.ACCEPTED, None, None, [])
    assert "InServiceCleared" in [e.reason for e in world.events]


def report(world: World, key: str, *xids: tuple[int, str]) -> WatchEvidence:
    seen = tuple(XidSeen("GPU-3", xid, kind, world.now) for xid, kind in xids)  # type: ignore[arg-type]
    return WatchEvidence(key, "boot-1", world.now - timedelta(minutes=30), world.now, seen)


def test_a_fatal_xid_quarantines_once_settled_and_a_new_boot_reprobes() -> None:
    world = accepted()
    world.advance(3600)
    world.watch_reports = (report(world, "pod-a", (79, "fatal")),)
    plan = world.settle()
    st = world.status  # pending: recorded, in service, woken when it settles
    assert (st.phase, st.reason) == (Phase.ACCEPTED, None)
    assert st.in_service is not None
    assert st.in_service.verdict is not None
    assert st.in_service.verdict.pending
    assert QUARANTINE not in world.taint_keys()
    assert plan.requeue_after == 15
    world.advance(15)
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "XidFatal")
    assert world.node is not None
    assert world.node.labels[REMEDY_LABEL] == "reboot-node"
    world.watch_reports = ()
    set_node(world, boot_id="boot-2")  # repaired: rebooted
    world.settle()
    assert world.status.phase == Phase.PROBING  # probed again before it returns
    assert any(isinstance(a, CreateProbePod) for plan in world.log[-3:] for a in plan.actions)


def test_application_xids_make_a_suspect_never_a_verdict() -> None:
    world = accepted(reverify={"enabled": True})
    world.watch_reports = (report(world, "pod-a", (13, "application")),)
    world.settle()
    world.advance(600)
    world.watch_reports = (report(world, "pod-b", (13, "application")),)
    world.settle()
    st = world.status
    assert st.phase == Phase.ACCEPTED
    assert st.in_service is not None
    assert [s.xid for s in st.in_service.suspects] == [13]
    assert st.reverify is not None
    assert [s.checks for s in st.reverify.suspicions] == [["xid_errors", "gpu_compute"]]
    assert "InServiceSuspect" in [e.reason for e in world.events]
    world.settle()  # replayed: nothing new
    assert len(world.status.reverify.suspicions) == 1  # type: ignore[union-attr]


def test_a_common_cause_is_held_in_service() -> None:
    world = accepted()
    world.in_service_fleet = tuple(
        SignatureSeen(f"gpu-{i}", "XidFatal:79", world.now) for i in range(2, 5)
    )
    world.watch_reports = (report(world, "pod-a", (79, "fatal")),)
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.ACCEPTED, "CommonCause")
    assert QUARANTINE not in world.taint_keys()
    assert PENDING not in world.taint_keys()
    assert "CommonCause" in [e.reason for e in world.events if e.kind == "Node"]


def test_off_by_default() -> None:
    world = World()
    world.settle()
    world.finish_with_report()
    world.settle()
    set_node(world, gpus=0)
    world.advance(86400)
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.status.in_service is None


def to_dra(world: World, taints: dict[int, tuple[DeviceTaintView, ...]] | None = None) -> None:
    """The node's GPUs move from the device plugin to NVIDIA's DRA driver: capacity 0
    (the kubelet, its device plugin gone), the pool published (gpu-<i>, GPU-<i>)."""
    marks = taints or {}
    devices = tuple(
        DraDevice(f"gpu-{i}", uuid=f"GPU-{i}", kind="gpu", taints=marks.get(i, ()))
        for i in range(8)
    )
    set_node(world, gpus=0, gpu_capacity=0)
    world.resource_slices = (
        ResourceSliceView("s1", "gpu.nvidia.com", "gpu-1", 1, 1, "gpu-1", devices),
    )


def test_a_dra_pool_that_loses_a_gpu_past_the_grace_quarantines() -> None:
    world = accepted(inService=SIGNALS_ONLY)
    to_dra(world)
    world.settle()
    assert world.status.in_service is not None
    assert world.status.in_service.dra_devices == [f"GPU-{i}" for i in range(8)]
    assert not world.settle().actions  # a fixed point: no write per pass
    world.resource_slices = (
        dataclasses.replace(world.resource_slices[0], devices=world.resource_slices[0].devices[:7]),
    )
    plan = world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert plan.requeue_after == GRACE
    world.advance(GRACE)
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "GPUsUnallocatable")
    assert "GPU-7 gone" in (st.message or "")
    assert QUARANTINE in world.taint_keys()


def test_a_dra_driver_s_fatal_xid_taint_quarantines_and_unmonitored_is_said() -> None:
    world = accepted(inService=SIGNALS_ONLY)
    to_dra(world)
    world.settle()
    world.advance(30)
    unmonitored = DeviceTaintView("gpu.nvidia.com/unmonitored", "", "None", world.now)
    to_dra(world, {5: (unmonitored,)})
    world.settle()
    blind = [e for e in world.events if e.reason == "WatchBlind"]
    assert len(blind) == 1
    assert "GPU-5" in blind[0].message
    assert world.status.phase == Phase.ACCEPTED
    world.settle()
    assert len([e for e in world.events if e.reason == "WatchBlind"]) == 1  # said once
    assert not world.settle().actions  # the taint seen again: nothing to write
    xid79 = DeviceTaintView("gpu.nvidia.com/xid", "79", "NoSchedule", world.now)
    to_dra(world, {5: (unmonitored,), 2: (xid79,)})
    world.settle()
    world.advance(20)  # past correlation.settleSeconds
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "XidFatal")
    assert st.in_service is not None
    assert st.in_service.verdict is not None
    assert st.in_service.verdict.gpu == "GPU-2"
