"""The fleet rules (core/fleet.py) as table tests over plain snapshots."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from world import spec

from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase, PhaseCounts
from gpuaccept.operator.core import NAView, NodeView, PolicyView, QuarantineLimitCounts
from gpuaccept.operator.core.fleet import (
    FleetSnapshot,
    PolicyTally,
    held_to_release,
    matching_policies,
    policy_status,
    quarantine_allowed,
    quarantine_limit_just_reached,
    same_status,
    tally,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
EARLIER = "2025-12-31T00:00:00Z"


@pytest.mark.parametrize(
    ("max_quarantined", "matched", "limit"),
    [
        ("10%", 0, 1),
        ("10%", 1, 1),
        ("10%", 9, 1),  # cluster-api's maxUnhealthy would round this down to 0
        ("10%", 10, 1),
        ("10%", 19, 1),
        ("10%", 20, 2),
        ("25%", 7, 1),
        ("50%", 7, 3),
        ("100%", 7, 7),
        ("0%", 5, 0),
        ("0%", 500, 0),
        (0, 5, 0),
        (3, 1, 3),  # an absolute count is as given
    ],
)
def test_max_quarantined_count_rounds_to_at_least_one(
    max_quarantined: int | str, matched: int, limit: int
) -> None:
    assert spec(maxQuarantined=max_quarantined).max_quarantined_count(matched) == limit


@pytest.mark.parametrize(
    ("max_quarantined", "quarantined", "matched", "already", "allowed"),
    [
        (5, 0, 10, False, True),
        (5, 4, 10, False, True),  # the last slot
        (5, 5, 10, False, False),  # full
        (5, 5, 10, True, True),  # already quarantined here: no new slot
        (0, 0, 10, False, False),  # quarantine nothing
        ("10%", 0, 10, False, True),  # 10% of 10 = 1
        ("10%", 1, 10, False, False),
        ("10%", 0, 9, False, True),  # 10% of 9: at least 1, never 0 from a percentage
        ("10%", 1, 9, False, False),
        ("10%", 0, 3, False, True),  # a small fleet: its first bad node is quarantined
        ("0%", 0, 10, False, False),  # "0%" quarantines nothing
        ("50%", 2, 6, False, True),
        ("50%", 3, 6, False, False),
        ("100%", 9, 10, False, True),
    ],
)
def test_quarantine_allowed(
    max_quarantined: int | str, quarantined: int, matched: int, already: bool, allowed: bool
) -> None:
    counts = QuarantineLimitCounts(quarantined=quarantined, matched=matched)
    policy = spec(maxQuarantined=max_quarantined)
    assert quarantine_allowed(policy, counts, already_quarantined=already) is allowed


GPU = {"gpu": "yes"}
A = PolicyView("a", 1, spec(nodeSelector=GPU))
B = PolicyView("b", 1, spec(nodeSelector={"pool": "b"}))
BAD = PolicyView("bad", 3, None, "spec.maxQuarantined: bad value")


def _node(name: str, **labels: str) -> NodeView:
    return NodeView(name=name, labels=labels)


def _na(name: str, policy: str, phase: Phase, reason: str | None = None) -> NAView:
    return NAView(name, NodeAcceptanceStatus(phase=phase, policy=policy, reason=reason))


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({}, []),
        ({"gpu": "yes"}, ["a"]),
        ({"gpu": "no"}, []),
        ({"gpu": "yes", "pool": "b"}, ["a", "b"]),  # a conflict
        ({"pool": "b"}, ["b"]),
    ],
)
def test_matching_policies(labels: dict[str, str], expected: list[str]) -> None:
    assert [p.name for p in matching_policies((A, B, BAD), labels)] == expected


def test_tally_counts_conflicts_limit_and_held() -> None:
    snapshot = FleetSnapshot(
        policies=(A, B, BAD),
        nodes=(
            _node("n1", gpu="yes"),
            _node("n2", gpu="yes"),
            _node("n3", gpu="yes", pool="b"),
            _node("n4", pool="b"),
        ),
        acceptances=(
            _na("n1", "a", Phase.QUARANTINED, "PcieLinkFailed"),
            _na("n2", "a", Phase.HELD, "BreakerOpen"),
            _na("n4", "b", Phase.ACCEPTED),
            _na("gone", "deleted-policy", Phase.QUARANTINED),
        ),
    )
    shares = tally(snapshot)
    assert set(shares) == {"a", "b", "bad"}
    a = shares["a"]
    assert (a.matched, a.conflicts, a.limit) == (3, ("n3",), 5)
    assert a.counts == PhaseCounts(quarantined=1, held=1)
    assert a.quarantined == {"n1"}
    assert a.held_by_limit == ("n2",)
    # the fleet: 4 nodes some policy matches; out of service under any policy, n1 and
    # the NodeAcceptance of a deleted policy's node (n2 is a new node, never in service)
    assert a.fleet_unavailable == {"n1", "gone"}
    assert a.limit_counts("n1") == QuarantineLimitCounts(
        quarantined=0, matched=3, fleet_matched=4, fleet_unavailable=1
    )
    assert a.limit_counts("n2") == QuarantineLimitCounts(
        quarantined=1, matched=3, fleet_matched=4, fleet_unavailable=2
    )
    assert (shares["b"].matched, shares["b"].conflicts) == (2, ("n3",))
    assert shares["bad"] == PolicyTally(
        fleet_matched=4, fleet_unavailable=frozenset({"n1", "gone"})
    )
    assert tally(snapshot, only="b") == {"b": shares["b"]}


@pytest.mark.parametrize(
    ("policy", "share", "released"),
    [
        (A, PolicyTally(), ()),
        (A, PolicyTally(matched=10, held_by_limit=("n2",)), ("n2",)),
        (
            A,
            PolicyTally(
                matched=10, quarantined=frozenset({"1", "2", "3", "4", "5"}), held_by_limit=("x",)
            ),
            (),
        ),
        (
            A,
            PolicyTally(
                matched=10, quarantined=frozenset({"1", "2", "3", "4"}), held_by_limit=("x", "y")
            ),
            ("x", "y"),  # each re-plans under the lock; one gets the slot
        ),
        (BAD, PolicyTally(held_by_limit=("n2",)), ()),
    ],
)
def test_held_to_release(policy: PolicyView, share: PolicyTally, released: tuple[str, ...]) -> None:
    assert held_to_release(policy, share) == released


def test_a_node_the_fleet_ceiling_holds_is_not_released_while_the_fleet_is_full() -> None:
    """Room under the policy's own limit, none under the fleet's 50% of 4 nodes."""
    share = PolicyTally(
        matched=1, held_by_limit=("n1",), fleet_matched=4, fleet_unavailable=frozenset({"2", "3"})
    )
    assert held_to_release(A, share) == ("n1",)  # no ceiling: the policy alone has room
    assert held_to_release(A, share, "50%") == ()
    room = dataclasses.replace(share, fleet_unavailable=frozenset({"2"}))
    assert held_to_release(A, room, "50%") == ("n1",)


def _conditions(status: object) -> dict[str, tuple[str, str, str]]:
    conditions = status.conditions  # type: ignore[attr-defined]
    return {c.type: (c.status.value, c.reason, c.message) for c in conditions}


@pytest.mark.parametrize(
    ("policy", "share", "ready", "breaker"),
    [
        (
            A,
            PolicyTally(matched=3, limit=5),
            ("True", "Reconciling", "3 node(s) matched"),
            ("False", "BelowLimit", "quarantine limit 5"),
        ),
        (
            A,
            PolicyTally(matched=3, conflicts=("n9", "n3"), limit=5),
            (
                "False",
                "PolicyConflict",
                "2 node(s) match more than one policy and are left alone: n3, n9",
            ),
            ("False", "BelowLimit", "quarantine limit 5"),
        ),
        (
            BAD,
            PolicyTally(),
            ("False", "InvalidSpec", "spec.maxQuarantined: bad value"),
            ("False", "BelowLimit", "quarantine limit 0"),
        ),
        (
            A,
            PolicyTally(
                matched=3,
                held_by_limit=("n2",),
                limit=1,
                quarantined=frozenset({"n1"}),
                out_of_service=frozenset({"n2"}),
            ),
            ("True", "Reconciling", "3 node(s) matched"),
            (
                "True",
                "QuarantineLimitReached",
                "1 node(s) held back: taking them out of service would exceed maxQuarantined"
                " (limit 1, 2 out of service), quarantineRate or the operator's fleet-wide"
                " ceiling (each node's message says which); raise them (or wait out the"
                " window) to let them through",
            ),
        ),
    ],
)
def test_policy_status_conditions(
    policy: PolicyView,
    share: PolicyTally,
    ready: tuple[str, str, str],
    breaker: tuple[str, str, str],
) -> None:
    status = policy_status(policy, share, {}, NOW)
    assert _conditions(status) == {"Ready": ready, "BreakerOpen": breaker}
    assert status.breaker_open is bool(share.held_by_limit)
    assert status.matched_nodes == share.matched
    assert status.out_of_service == len(share.quarantined) + len(share.out_of_service)
    assert status.held_back == len(share.held_by_limit)
    assert status.observed_generation == policy.generation
    assert all(c.last_transition_time == NOW for c in status.conditions)


def test_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    old = {
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": EARLIER},
            {"type": "BreakerOpen", "status": "True", "lastTransitionTime": EARLIER},
        ]
    }
    status = policy_status(A, PolicyTally(matched=1, limit=5), old, NOW)
    stamps = {c.type: c.last_transition_time for c in status.conditions}
    assert stamps["Ready"] == datetime(2025, 12, 31, tzinfo=UTC)  # still True
    assert stamps["BreakerOpen"] == NOW  # True -> False


def test_same_status_ignores_transition_times_and_quarantine_limit_event_on_reaching() -> None:
    share = PolicyTally(matched=1, held_by_limit=("n1",), limit=0)
    status = policy_status(A, share, {}, NOW)
    wire = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    later = policy_status(A, share, {}, datetime(2026, 2, 1, tzinfo=UTC))
    later_wire = later.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert wire != later_wire
    assert same_status(wire, later_wire)
    assert quarantine_limit_just_reached({}, status)
    assert not quarantine_limit_just_reached(wire, status)


CONTROL_PLANE = {"node-role.kubernetes.io/control-plane": ""}
MASTER = {"node-role.kubernetes.io/master": "true"}
OPTED_IN = PolicyView("cp", 1, spec(nodeSelector=GPU, includeControlPlane=True))


@pytest.mark.parametrize(
    ("labels", "policies", "expected"),
    [
        (GPU, [A], ["a"]),
        ({**GPU, **CONTROL_PLANE}, [A], []),  # a control-plane node is never selected...
        ({**GPU, **MASTER}, [A], []),
        ({**GPU, **CONTROL_PLANE}, [OPTED_IN], ["cp"]),  # ...unless the policy opts in
    ],
)
def test_control_plane_nodes_only_under_a_policy_that_opts_in(
    labels: dict[str, str], policies: list[PolicyView], expected: list[str]
) -> None:
    assert [p.name for p in matching_policies(policies, labels)] == expected


def test_a_selector_naming_a_control_plane_role_needs_the_opt_in() -> None:
    with pytest.raises(ValueError, match="includeControlPlane"):
        spec(nodeSelector=CONTROL_PLANE)
    assert spec(nodeSelector=CONTROL_PLANE, includeControlPlane=True).include_control_plane


def test_tally_counts_waiting_and_stalled_nodes() -> None:
    def na(name: str, phase: Phase) -> NAView:
        return NAView(name, NodeAcceptanceStatus(phase=phase, policy="a"))

    snapshot = FleetSnapshot(
        policies=(A,),
        nodes=(NodeView("n1", labels=GPU), NodeView("n2", labels=GPU)),
        acceptances=(na("n1", Phase.PENDING), na("n2", Phase.STALLED)),
    )
    counts = tally(snapshot)["a"].counts
    assert (counts.pending, counts.stalled) == (1, 1)


@pytest.mark.parametrize(
    ("include", "allow", "said"),
    [
        (False, False, False),
        (False, True, False),
        (True, True, False),
        (True, False, True),  # the policy asks for what this operator never reaches
    ],
)
def test_ready_says_when_include_control_plane_reaches_nothing(
    include: bool, allow: bool, said: bool
) -> None:
    policy = PolicyView("cp", 1, spec(nodeSelector=GPU, includeControlPlane=include))
    status = policy_status(
        policy, PolicyTally(matched=2, limit=1), {}, NOW, allow_control_plane=allow
    )
    (ready,) = [c for c in status.conditions if c.type == "Ready"]
    assert ready.status.value == "True"
    assert ready.message.startswith("2 node(s) matched")
    assert ("includeControlPlane has no effect" in ready.message) is said
