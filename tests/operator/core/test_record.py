"""The status is the record of a verdict; its Events are best effort (issue 10, item 7c).

A kill between the status write and the Events loses the Events: after the
restart the verdict is complete everywhere that counts (status, taints, label,
condition, the pod deleted) and no Event is re-emitted. docs/operator.md says so.
"""

from __future__ import annotations

import dataclasses

from world import World, make_report

from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.core import EmitEvent, PatchNAStatus


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
