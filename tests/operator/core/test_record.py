"""Recording an outcome (core/record.py): one path for every phase.

The Events of each outcome are the same whether a single-node report or a fabric
pair pass led to it. The status is the record of a verdict; its Events are best
effort: a kill between the status write and the Events loses the Events, and
after the restart the verdict is complete everywhere that counts (status,
taints, label, condition, the pod deleted) and no Event is re-emitted
(docs/operator.md says so).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from world import World, make_report, spec

from gpuaccept.checks.fabric_allreduce import NoPartnerAction
from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.core import EmitEvent, PatchNAStatus, PolicyView, QuarantineLimitCounts
from gpuaccept.operator.core.model import (
    FabricNoPartner,
    FabricPassed,
    FabricQuarantined,
    FabricVerdict,
    PairOutcome,
    PartnerFigure,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
FAILED = (
    PartnerFigure("gpu-2", PairOutcome.FAILED, 120.0, T0),
    PartnerFigure("gpu-3", PairOutcome.FAILED, 118.0, T0),
)
FABRIC_QUARANTINED = FabricQuarantined(FAILED, ("gpu-4", "gpu-5"), T0)
FULL = QuarantineLimitCounts(quarantined=5, matched=10)
NA = "NodeAcceptance"


def single_node(verdict: str, **policy: object) -> World:
    """A probing node whose report passes (``verdict`` "pass") or fails."""
    world = World(policies=[PolicyView("default", 1, spec(**policy))])
    world.settle()
    world.events.clear()
    world.finish_with_report(make_report(failing=[] if verdict == "pass" else ["pcie_link"]))
    return world


def fabric(verdict: FabricVerdict, **policy: object) -> World:
    """A node waiting in phase Fabric that the pair pass gives ``verdict``."""
    world = World(policies=[PolicyView("default", 1, spec(fabric={"enabled": True}, **policy))])
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.FABRIC
    world.events.clear()
    world.fabric_verdict = verdict
    return world


# how the node gets there, the quarantine limit's counts -> (kind, type, reason) of its Events
EVENTS = {
    "accepted on its report": (lambda: single_node("pass"), None, [(NA, "Normal", "Accepted")]),
    "accepted by a fabric pass": (
        lambda: fabric(FabricPassed("gpu-2", 390.0, T0)), None, [(NA, "Normal", "Accepted")],
    ),
    "enters fabric": (
        lambda: single_node("pass", fabric={"enabled": True}), None,
        [(NA, "Normal", "FabricPending")],
    ),
    "quarantined on its report": (
        lambda: single_node("fail"), None,
        [("Node", "Warning", "Quarantined"), (NA, "Warning", "Quarantined")],
    ),
    "quarantined by a fabric pass": (
        lambda: fabric(FABRIC_QUARANTINED), None,
        [("Node", "Warning", "Quarantined"), (NA, "Warning", "Quarantined")],
    ),
    "held by the limit on its report": (
        lambda: single_node("fail"), FULL,
        [("Node", "Warning", "BreakerOpen"), (NA, "Warning", "BreakerOpen")],
    ),
    "held by the limit after a fabric pass": (
        lambda: fabric(FABRIC_QUARANTINED), FULL,
        [("Node", "Warning", "BreakerOpen"), (NA, "Warning", "BreakerOpen")],
    ),
    "dry run, would accept, on its report": (
        lambda: single_node("pass", dryRun=True), None, [(NA, "Normal", "DryRun")],
    ),
    "dry run, would accept, after a fabric pass": (
        lambda: fabric(FabricPassed("gpu-2", 390.0, T0), dryRun=True), None,
        [(NA, "Normal", "DryRun")],
    ),
    "dry run, would quarantine, on its report": (
        lambda: single_node("fail", dryRun=True), None, [(NA, "Warning", "DryRun")],
    ),
    "dry run, would quarantine, after a fabric pass": (
        lambda: fabric(FABRIC_QUARANTINED, dryRun=True), None, [(NA, "Warning", "DryRun")],
    ),
    "no fabric partner, held: a wait": (
        lambda: fabric(FabricNoPartner(NoPartnerAction.HOLD, ())), None,
        [(NA, "Warning", "FabricNoPartner")],
    ),
}  # fmt: skip


@pytest.mark.parametrize(("start", "counts", "events"), EVENTS.values(), ids=EVENTS.keys())
def test_each_outcome_has_the_same_events_on_either_path(
    start: object, counts: QuarantineLimitCounts | None, events: list[tuple[str, str, str]]
) -> None:
    world = start()  # type: ignore[operator]
    if counts is not None:
        world.limit_counts = counts
    world.settle()
    assert [(e.kind, e.type, e.reason) for e in world.events] == events
    world.settle()
    assert world.plan().actions == ()  # and not again


def killed_after_the_status_write(world: World) -> None:
    """Apply the verdict's plan up to and including the status write, then stop."""
    plan = world.plan()
    kinds = [type(a) for a in plan.actions]
    assert kinds.index(PatchNAStatus) < kinds.index(EmitEvent)
    world.apply(dataclasses.replace(plan, actions=plan.actions[: kinds.index(PatchNAStatus) + 1]))


def test_a_verdict_whose_events_were_lost_is_complete_after_a_restart() -> None:
    world = World()
    world.settle()
    world.finish_with_report(make_report(failing=["pcie_link"]))
    killed_after_the_status_write(world)
    assert world.events == []
    world.settle()  # the restarted operator
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "PcieLinkFailed")
    assert "gpuaccept.io/quarantined" in world.taint_keys()
    assert world.node is not None
    assert world.node.labels["gpuaccept.io/acceptance"] == "quarantined"
    assert world.node.condition is not None
    assert world.node.condition.reason == "PcieLinkFailed"
    assert world.pods == {}
    assert world.events == []  # best effort: not re-emitted
