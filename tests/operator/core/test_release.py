"""``kubectl gpuaccept release NODE`` as the operator carries it out (issue 25, item 3):
the request (who, when, why in the NodeAcceptance's annotations) is applied once,
whatever the phase; the node's owned taints and labels come off, its condition
and Events say who released it; it is left alone (reboots, policy changes) and
does not count against the limit; a re-probe hands it back."""

from __future__ import annotations

import dataclasses

from world import World, make_report, spec

from gpuaccept.contracts.nodeacceptance import ConditionStatus, Phase
from gpuaccept.operator.core import PolicyView, QuarantineLimitCounts
from gpuaccept.operator.core.capacity import in_service, out_of_service
from gpuaccept.operator.core.phases.released import release_request

WHO = {
    "gpuaccept.io/release-by": "alice@example.com",
    "gpuaccept.io/release-at": "2026-01-01T00:05:00Z",
    "gpuaccept.io/release-reason": "vendor replaced the riser; cannot reboot now",
}


def _quarantined() -> World:
    world = World()
    world.settle()
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    assert world.status.phase == Phase.QUARANTINED
    assert "gpuaccept.io/quarantined" in world.taint_keys()
    return world


def _ask(world: World, annotations: dict[str, str]) -> None:
    assert world.na is not None
    world.na = dataclasses.replace(world.na, annotations=annotations)


def test_a_released_node_is_back_in_service_with_a_record_of_who_and_when() -> None:
    world = _quarantined()
    _ask(world, WHO)
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.RELEASED, "Released")
    assert st.release is not None
    assert (st.release.by, st.release.requested_at) == (
        WHO["gpuaccept.io/release-by"],
        WHO["gpuaccept.io/release-at"],
    )
    assert st.release.reason == WHO["gpuaccept.io/release-reason"]
    assert (st.release.from_phase, st.release.from_reason) == (Phase.QUARANTINED, "PcieLinkFailed")
    assert "alice@example.com" in (st.message or "")
    # the operator's taints and labels are off; the node says it was released
    assert world.taint_keys() == []
    assert world.node is not None
    assert world.node.labels["gpuaccept.io/acceptance"] == "released"
    assert "gpuaccept.io/reason" not in world.node.labels
    assert world.node.condition is not None
    assert (world.node.condition.status, world.node.condition.reason) == ("False", "Released")
    (accepted,) = [c for c in st.conditions if c.type == "Accepted"]
    assert (accepted.status, accepted.reason) == (ConditionStatus.FALSE, "Released")
    released = [e for e in world.events if e.reason == "Released"]
    assert sorted(e.kind for e in released) == ["Node", "NodeAcceptance"]
    assert all("alice@example.com" in e.message for e in released)
    # it is in service: the limit does not count it
    assert in_service(st)
    assert not out_of_service(st)


def test_a_release_is_applied_once_and_left_alone() -> None:
    world = _quarantined()
    _ask(world, WHO)
    world.settle()
    events = len(world.events)
    # a reboot and a policy change do not take it back
    assert world.node is not None
    world.node = dataclasses.replace(world.node, boot_id="boot-2")
    world.policies = [PolicyView(name="default", generation=2, spec=spec(maxQuarantined=3))]
    assert world.settle().actions == ()
    assert world.status.phase == Phase.RELEASED
    assert len(world.events) == events
    assert world.pods == {}


def test_a_reprobe_hands_a_released_node_back_and_the_record_stays() -> None:
    world = _quarantined()
    _ask(world, WHO)
    world.settle()
    assert world.node is not None
    world.node = dataclasses.replace(world.node, annotations={"gpuaccept.io/reprobe": "now"})
    world.settle()
    st = world.status
    assert st.phase == Phase.PROBING
    assert st.was_in_service  # it was in service: it counts against the limit now
    assert "gpuaccept.io/pending" in world.taint_keys()
    assert st.release is not None
    assert st.release.by == "alice@example.com"
    # the same request is not applied again (the record names it)
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    # a new request (a new time) is
    _ask(world, {**WHO, "gpuaccept.io/release-at": "2026-01-02T00:00:00Z"})
    world.settle()
    assert world.status.phase == Phase.RELEASED
    assert world.status.release is not None
    assert world.status.release.from_phase == Phase.ACCEPTED


def test_a_reprobe_of_a_released_node_waits_for_the_limit() -> None:
    world = _quarantined()
    _ask(world, WHO)
    world.settle()
    world.limit_counts = QuarantineLimitCounts(quarantined=5, matched=10)  # limit 5 reached
    assert world.node is not None
    world.node = dataclasses.replace(world.node, annotations={"gpuaccept.io/reprobe": "now"})
    world.settle()
    assert world.status.phase == Phase.RELEASED
    assert world.status.held_action == "Reprobe"
    assert world.taint_keys() == []  # still in service


def test_a_release_during_a_probe_gives_the_attempt_back() -> None:
    world = World()
    world.settle()
    assert world.status.phase == Phase.PROBING
    attempts = world.status.attempts
    _ask(world, WHO)
    world.settle()
    assert world.status.phase == Phase.RELEASED
    assert world.status.attempts == attempts - 1
    assert world.pods == {}
    assert world.taint_keys() == []


def test_a_request_needs_who_and_when() -> None:
    assert release_request({"gpuaccept.io/release-by": "alice"}) is None
    assert release_request({"gpuaccept.io/release-at": "now"}) is None
    request = release_request(WHO)
    assert request is not None
    assert request.by == "alice@example.com"
    world = _quarantined()
    _ask(world, {"gpuaccept.io/release-by": "alice"})
    world.settle()
    assert world.status.phase == Phase.QUARANTINED
