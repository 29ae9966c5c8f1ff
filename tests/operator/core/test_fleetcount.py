"""The incremental fleet count (core/fleetcount.py) against the snapshot tally it replaces.

Each row is a sequence of changes (policies, node labels, NodeAcceptance
statuses, deletions); after every step, :class:`FleetCount` must answer what
:func:`~gpuaccept.operator.core.fleet.tally` answers for a snapshot of the same
objects, and its quarantine-limit counts must be those of
:meth:`PolicyTally.limit_counts` for every node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from world import spec

from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.operator.core import NAView, NodeView, PolicyView, Taint
from gpuaccept.operator.core.capacity import take_out_allowed
from gpuaccept.operator.core.fleet import FleetSnapshot, PolicyTally, tally
from gpuaccept.operator.core.fleetcount import FleetCount

GPU = {"gpu": "yes"}
A = PolicyView("a", 1, spec(nodeSelector=GPU, maxQuarantined="50%"))
A2 = PolicyView("a", 2, spec(nodeSelector={"pool": "a"}))  # policy a, new selector
B = PolicyView("b", 1, spec(nodeSelector={"pool": "b"}))
BAD = PolicyView("bad", 3, None, "spec.maxQuarantined: bad value")
EVERY = PolicyView("every-gpu", 1, spec(nodeSelector=GPU))
NOBODY = PolicyView("nobody", 1, spec(nodeSelector={"pool": "none", "gpu": "yes"}))


@dataclass(frozen=True)
class Policies:
    views: tuple[PolicyView, ...]


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str] | None  # None: deleted


@dataclass(frozen=True)
class Acceptance:
    name: str
    status: NodeAcceptanceStatus | None  # None: deleted


Step = Policies | Node | Acceptance


def _status(
    policy: str,
    phase: Phase,
    reason: str | None = None,
    *,
    was_in_service: bool = False,
    taken_out: int | None = None,  # seconds after T0
) -> NodeAcceptanceStatus:
    return NodeAcceptanceStatus(
        phase=phase,
        policy=policy,
        reason=reason,
        was_in_service=was_in_service,
        taken_out_time=None if taken_out is None else T0 + timedelta(seconds=taken_out),
    )


def _fenced(policy: str, taken_out: int, fenced: int) -> NodeAcceptanceStatus:
    """Accepted with ``fenced`` GPUs fenced in service ``taken_out`` seconds after T0."""
    return _status(policy, Phase.ACCEPTED, taken_out=taken_out).model_copy(
        update={"fenced": f"{fenced}/8", "taken_out_gpus": fenced}
    )


T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(seconds=400)  # the window (300 s) holds what was taken out after 100 s


def _normalised(shares: Mapping[str, PolicyTally]) -> dict[str, PolicyTally]:
    """The snapshot tally with its conflicts and held nodes in name order."""
    return {
        name: PolicyTally(
            matched=share.matched,
            conflicts=tuple(sorted(share.conflicts)),
            counts=share.counts,
            quarantined=share.quarantined,
            held_by_limit=tuple(sorted(share.held_by_limit)),
            limit=share.limit,
            out_of_service=share.out_of_service,
            taken_out=tuple(sorted(share.taken_out)),
            window_seconds=share.window_seconds,
            fleet_matched=share.fleet_matched,
            fleet_unavailable=share.fleet_unavailable,
            matched_gpus=share.matched_gpus,
            gpus_out=share.gpus_out,
            taken_out_gpus=share.taken_out_gpus,
        )
        for name, share in shares.items()
    }


SEQUENCES: list[Sequence[Step]] = [
    # nodes join, are probed, accepted, quarantined, held by the limit
    [
        Policies((A, B, BAD)),
        Node("n1", GPU),
        Node("n2", GPU),
        Node("n3", {**GPU, "pool": "b"}),
        Node("n4", {"pool": "b"}),
        Acceptance("n1", _status("a", Phase.PENDING)),
        Acceptance("n1", _status("a", Phase.PROBING)),
        Acceptance("n1", _status("a", Phase.QUARANTINED, "PcieLinkFailed")),
        Acceptance("n2", _status("a", Phase.HELD, "BreakerOpen")),
        Acceptance("n2", _status("a", Phase.HELD, "BreakerOpen")),  # the same again
        Acceptance("n4", _status("b", Phase.ACCEPTED)),
        Acceptance("gone", _status("deleted-policy", Phase.QUARANTINED)),
        Acceptance("n2", _status("a", Phase.QUARANTINED, "PcieLinkFailed")),  # released
        Acceptance("n1", _status("a", Phase.ACCEPTED)),  # re-probed and passed
    ],
    # labels change (out of and into a selector, into a conflict), objects go
    [
        Node("n1", GPU),  # before any policy is known
        Acceptance("n1", _status("a", Phase.STALLED)),
        Policies((A,)),
        Node("n2", {"other": "x"}),
        Node("n2", GPU),
        Policies((A, B)),
        Node("n1", {**GPU, "pool": "b"}),
        Node("n1", {"pool": "b"}),
        Acceptance("n1", None),
        Node("n2", None),
        Node("n2", None),  # deleted twice
        Acceptance("never-seen", None),
    ],
    # a policy's selector changes, a policy goes, one comes back invalid
    [
        Policies((A, B)),
        Node("n1", GPU),
        Node("n2", {"pool": "a"}),
        Acceptance("n1", _status("a", Phase.QUARANTINED)),
        Acceptance("n2", _status("a", Phase.HELD, "BreakerOpen")),
        Policies((A2, B)),
        Policies((B,)),
        Acceptance("n3", _status("a", Phase.HELD, "NotBreaker")),
        Policies((BAD, B)),
        Policies((A, B)),
    ],
    # policies come and go over labelled nodes (only the nodes they match are matched
    # again): a conflict made and undone by a policy, the order
    # changed, a selector only a later node matches, a node gone, every policy gone
    [
        Node("n1", GPU),
        Node("n2", {**GPU, "pool": "b"}),
        Node("n3", {"pool": "b"}),
        Policies((B,)),
        Acceptance("n3", _status("b", Phase.QUARANTINED)),
        Policies((B, EVERY)),
        Policies((EVERY, B)),
        Policies((B, NOBODY)),
        Node("n4", {"pool": "none", "gpu": "yes"}),
        Node("n5", {"pool": "none"}),
        Policies((NOBODY, A, BAD)),
        Node("n2", None),
        Policies((A2, B)),
        Policies(()),
        Policies((NOBODY,)),
    ],
    # capacity: in-service nodes taken out for a new round, within the window or not
    [
        Policies((A, B)),
        Node("n1", GPU),
        Node("n2", GPU),
        Node("n3", GPU),
        Acceptance("n1", _status("a", Phase.ACCEPTED)),
        Acceptance("n1", _status("a", Phase.PROBING, was_in_service=True, taken_out=50)),
        Acceptance("n2", _status("a", Phase.PENDING, was_in_service=True, taken_out=150)),
        Acceptance("n3", _status("a", Phase.PROBING)),  # a new node: in no count
        Acceptance("n3", _status("a", Phase.QUARANTINED, taken_out=200)),
        Acceptance("n2", _status("a", Phase.ACCEPTED, "BreakerOpen", taken_out=150)),
        Acceptance("n1", _status("a", Phase.HELD, "DryRun", taken_out=50)),
        Acceptance("n3", None),
        # fences of GPUs in service: counted in the window as their GPUs (issue 40)
        Acceptance("n3", _fenced("a", taken_out=250, fenced=1)),
        Acceptance("n3", _fenced("a", taken_out=350, fenced=2)),
        Acceptance("n1", _fenced("a", taken_out=20, fenced=1)),  # before the window
    ],
]


@pytest.mark.parametrize(
    "steps",
    SEQUENCES,
    ids=["lifecycle", "relabel-delete", "policy-change", "policies-come-and-go", "capacity"],
)
@pytest.mark.parametrize("gpus", [0, 8], ids=["nodes-of-unknown-size", "8-gpu-nodes"])
def test_fleet_count_answers_what_the_snapshot_tally_answers(
    steps: Sequence[Step], gpus: int
) -> None:
    count = FleetCount()
    policies: tuple[PolicyView, ...] = ()
    nodes: dict[str, NodeView] = {}
    acceptances: dict[str, NAView] = {}
    exercised = False  # the limit's counts in GPUs were compared (8-GPU nodes)
    for step in steps:
        if isinstance(step, Policies):
            policies = step.views
            count.set_policies(policies)
        elif isinstance(step, Node):
            nodes.pop(step.name, None)
            if step.labels is not None:
                nodes[step.name] = NodeView(
                    name=step.name, labels=dict(step.labels), gpu_capacity=gpus
                )
            count.set_node_gpus(step.name, gpus if step.labels is not None else 0)
            count.set_node(step.name, None if step.labels is None else dict(step.labels))
        else:
            acceptances.pop(step.name, None)
            if step.status is not None:
                acceptances[step.name] = NAView(step.name, step.status)
            count.set_acceptance(step.name, step.status)
        snapshot = FleetSnapshot(
            policies=policies,
            nodes=tuple(nodes.values()),
            acceptances=tuple(acceptances.values()),
        )
        expected = _normalised(tally(snapshot))
        assert count.tally() == expected, step
        exercised |= any(share.matched_gpus is not None for share in expected.values())
        for policy, share in expected.items():
            for node in {*nodes, *acceptances, "absent"}:
                assert count.limit_counts(policy, node, NOW) == share.limit_counts(node, NOW)
                assert count.limit_counts(policy, node) == share.limit_counts(node), (
                    step,
                    policy,
                    node,
                )
    assert exercised == bool(gpus)


def test_a_policy_that_selects_no_node_matches_no_node_again() -> None:
    """Issue 42 item 10: 2,000 policies that select no node cost about 4 minutes of
    operator CPU. Each policy change matched every node against every policy again:
    200 policies added one at a time over 50 nodes were 10,000 node matchings (and each
    woke every node). Now a change matches again only the nodes its policy selects,
    before or after, and only those are handed on to be reconciled."""
    count = FleetCount()
    for number in range(50):
        count.set_node(f"n{number}", {**GPU, "pool": "a" if number < 5 else "b"})
    assert count.nodes_matched == 50
    policies: list[PolicyView] = []
    for number in range(200):
        policies.append(PolicyView(f"empty-{number}", 1, spec(nodeSelector={"pool": "x"})))
        count.set_policies(policies)
    assert count.nodes_matched == 50  # no node matched again
    assert count.take_affected() == set()
    count.set_policies([*policies, A2])  # selects pool a: five nodes
    assert count.nodes_matched == 55
    assert count.take_affected() == {f"n{number}" for number in range(5)}
    count.set_policies(policies)  # gone: the five it matched
    assert (count.nodes_matched, count.take_affected()) == (60, {f"n{n}" for n in range(5)})
    assert count.tally()["empty-0"].matched == 0


def test_quarantine_limit_counts_of_an_unknown_policy_are_zero() -> None:
    count = FleetCount()
    count.set_acceptance("n1", _status("a", Phase.QUARANTINED))
    assert count.limit_counts("a", "n2").quarantined == 1  # counted before the policy is known
    assert count.limit_counts("zzz", "n1").matched == 0
    assert count.tally() == {}


def test_an_accepted_node_whose_taint_is_still_on_counts_as_out_of_service() -> None:
    """The status is written before the Node is patched: until the taint is gone the
    node is still out of service, in the incremental count and in the snapshot tally."""
    pending = (Taint("gpuaccept.io/pending", "NoSchedule"),)
    accepted = _status("a", Phase.ACCEPTED)
    count = FleetCount()
    count.set_policies([A])
    for name in ("n1", "n2"):
        count.set_node(name, GPU, node_gated=True)
        count.set_acceptance(name, accepted)
    assert count.limit_counts("a", "n2").out_of_service == 1  # n1's taint not yet off
    snapshot = FleetSnapshot(
        policies=(A,),
        nodes=(NodeView("n1", labels=GPU, taints=pending), NodeView("n2", labels=GPU)),
        acceptances=(NAView("n1", accepted), NAView("n2", accepted)),
    )
    assert tally(snapshot)["a"].limit_counts("n2").out_of_service == 1
    count.set_node("n1", GPU, node_gated=False)  # the Node patch landed
    assert count.limit_counts("a", "n2").out_of_service == 0
    count.set_node("n1", GPU, node_gated=True)
    count.set_acceptance("n1", _status("a", Phase.QUARANTINED))  # counted as quarantined
    assert count.limit_counts("a", "n2").out_of_service == 0
    assert count.limit_counts("a", "n2").quarantined == 1


@dataclass(frozen=True)
class FenceRow:
    unknown_size: bool  # one matched node's GPU count is unknown (its pool not published)
    fenced: int  # of the other nodes, how many have a GPU fenced
    out_of_service: int  # the node counts the limit is given, this node excluded
    allowed: bool  # may this node be taken out (maxQuarantined 1 of 10)


FENCE_ROWS = {
    "a node of unknown size: each fenced node counts as one node out": FenceRow(
        unknown_size=True, fenced=8, out_of_service=8, allowed=False
    ),
    "a node of unknown size, no fence: the first take-out fits": FenceRow(
        unknown_size=True, fenced=0, out_of_service=0, allowed=True
    ),
    "a node of unknown size, one fence: it takes the one node's slot": FenceRow(
        unknown_size=True, fenced=1, out_of_service=1, allowed=False
    ),
}


@pytest.mark.parametrize("row", FENCE_ROWS.values(), ids=FENCE_ROWS.keys())
def test_a_fenced_node_counts_as_one_node_out_when_the_limit_counts_nodes(row: FenceRow) -> None:
    """Issue 40 review: where one matched node's size is unknown (a DRA node whose pool
    is not complete yet, every new node of a scale-up) the limit counts nodes; a fenced
    node is Accepted, so it was neither quarantined nor out, and every new fence or
    quarantine asked for "one more node" against a count without the earlier fences.
    Ten nodes, maxQuarantined 1: the fences must count, in the policy's count and in the
    operator's ceiling, incrementally and in the snapshot tally alike."""
    policy = PolicyView("a", 1, spec(fencing={"mode": "gpu"}, maxQuarantined=1))
    count = FleetCount()
    count.set_policies([policy])
    nodes, acceptances = [], []
    for number in range(10):
        name, gpus = f"n{number}", 0 if row.unknown_size and number == 0 else 8
        count.set_node_gpus(name, gpus)
        count.set_node(name, GPU)
        nodes.append(NodeView(name, labels=GPU, gpu_capacity=gpus))
        if 1 <= number <= row.fenced:
            fenced = NodeAcceptanceStatus(phase=Phase.ACCEPTED, policy="a", fenced="1/8")
            count.set_acceptance(name, fenced)
            acceptances.append(NAView(name, fenced))
    snapshot = FleetSnapshot(policies=(policy,), nodes=tuple(nodes), acceptances=tuple(acceptances))
    for limit in (count.limit_counts("a", "n9"), tally(snapshot)["a"].limit_counts("n9")):
        assert limit.matched_gpus is None  # counted in nodes
        assert (limit.unavailable, limit.fleet_out) == (row.out_of_service, row.out_of_service)
        assert take_out_allowed(policy.spec, limit).allowed == row.allowed
        assert take_out_allowed(policy.spec, limit, ceiling=1).allowed == (row.fenced == 0)
