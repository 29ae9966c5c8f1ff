"""Fabric pairing over whole fleets: random (hypothesis) and, for small fleets,
every placement of the bad nodes. The model (docs/fabric.md): a pair passes
exactly when both nodes are good."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from fabric_fleet import Fleet, FleetRun, run_fleet
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaccept.operator.core.fabric.pairing import (
    FabricPairingParams,
    FabricSituation,
    NodePair,
    PairResult,
    WaitingNode,
    plan_fabric,
)
from gpuaccept.operator.core.model import FabricPassed, FabricQuarantined, PairOutcome

BOUNDED_ROUNDS = 3
"""Rounds to every verdict when a batch of n new nodes holds k bad ones and
n >= 4k + 2 (docs/fabric.md, "The bound")."""


def has_enough_good_nodes(n: int, k: int) -> bool:
    return n >= 4 * k + 2


def assert_within_the_bound(run: FleetRun, n: int, k: int) -> None:
    """At most 3 rounds and floor(n/2) + 3k + 1 pairs (docs/fabric.md)."""
    assert run.rounds <= BOUNDED_ROUNDS, (n, k, run.rounds)
    assert len(run.results) <= n // 2 + 3 * k + 1, (n, k, len(run.results))


GOOD_NODES_TO_CONVICT = 4
"""A conviction needs two good partners and a different good witness for each."""


def assert_found_exactly(
    run: FleetRun, nodes: tuple[str, ...], bad: frozenset[str], good_partners: int = 0
) -> None:
    """Each good node passed; each bad node quarantined, or with fewer than four good
    nodes (nothing can convict), left without a verdict. ``good_partners``: good
    nodes besides ``nodes`` that may be partners."""
    convictable = len(set(nodes) - bad) + good_partners >= GOOD_NODES_TO_CONVICT
    for node in nodes:
        verdict = run.verdicts.get(node)
        if node not in bad:
            assert isinstance(verdict, FabricPassed), (node, verdict)
        elif convictable:
            assert isinstance(verdict, FabricQuarantined), (node, verdict)
        else:
            assert verdict is None, (node, verdict)


def assert_pairs_are_honest(run: FleetRun) -> None:
    """One pair per node at a time, never the same two nodes twice."""
    seen: set[frozenset[str]] = set()
    for plan in run.plans:
        members = [node for pair in plan.next_pairs for node in pair.members]
        assert len(members) == len(set(members)), plan.next_pairs
        for pair in plan.next_pairs:
            assert pair.members not in seen, pair
            seen.add(pair.members)


@st.composite
def fleets(draw: st.DrawFn) -> tuple[Fleet, int]:
    n = draw(st.integers(min_value=2, max_value=48))
    k = draw(st.integers(min_value=0, max_value=n - 2))  # at least two good nodes
    nodes = tuple(f"gpu-{i:02d}" for i in range(n))
    bad = frozenset(draw(st.permutations(nodes))[:k])
    idle = tuple(f"idle-{i}" for i in range(draw(st.integers(min_value=0, max_value=3))))
    return Fleet(nodes, bad, idle), k


@settings(max_examples=150, deadline=None)
@given(fleets(), st.booleans())
def test_every_bad_node_is_found_and_no_good_node_is_blamed(
    drawn: tuple[Fleet, int], idle_partners: bool
) -> None:
    fleet, k = drawn
    params = FabricPairingParams(deadline=timedelta(days=1), idle_accepted_partners=idle_partners)
    run = run_fleet(fleet, params, max_rounds=400)
    idle = len(fleet.idle_accepted) if idle_partners else 0
    assert_found_exactly(run, fleet.new_nodes, fleet.bad, idle)
    assert_pairs_are_honest(run)
    if has_enough_good_nodes(len(fleet.new_nodes), k):
        assert_within_the_bound(run, len(fleet.new_nodes), k)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(min_value=3, max_value=40).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(min_value=1, max_value=n - 2))
    ),
    st.sets(st.integers(min_value=0, max_value=10_000)),
)
def test_one_flapping_bad_node_never_gets_a_good_node_quarantined(
    sizes: tuple[int, int], lucky: set[int]
) -> None:
    """One bad node's pairs sometimes pass (its link flaps), even with another bad
    node, clearing both; the other bad nodes fail every other pair. A conviction
    names two partners and a different witness for each, and the flapping node
    can fill only one of those four places (docs/fabric.md), so no good node is
    quarantined."""
    n, k = sizes
    nodes = tuple(f"gpu-{i:02d}" for i in range(n))
    bad = frozenset(nodes[:k])
    flapping = nodes[0]
    calls = itertools.count()

    def passes_anyway(pair: NodePair) -> bool:
        return flapping in pair.members and next(calls) in lucky

    run = run_fleet(Fleet(nodes, bad, passes_anyway=passes_anyway), max_rounds=400)
    for node in set(nodes) - bad:
        assert not isinstance(run.verdicts.get(node), FabricQuarantined), node
    assert_pairs_are_honest(run)


def test_every_placement_of_bad_nodes_in_small_batches() -> None:
    """All fleets of 2-9 new nodes with at least two good ones: each good node
    passed, each bad one quarantined where it can be; within the bound where it applies."""
    for n in range(2, 10):
        nodes = tuple(f"n{i}" for i in range(n))
        for k in range(n - 1):
            for bad in itertools.combinations(nodes, k):
                run = run_fleet(Fleet(nodes, frozenset(bad)), max_rounds=200)
                assert_found_exactly(run, nodes, frozenset(bad))
                assert_pairs_are_honest(run)
                if has_enough_good_nodes(n, k):
                    assert_within_the_bound(run, n, k)


# ---------------------------------------------------------------- expired evidence

WINDOW = timedelta(days=1)
NOW = datetime(2026, 12, 1, tzinfo=UTC)
NAMES = ("n", "a", "b", "c", "d", "e")


@st.composite
def histories(draw: st.DrawFn) -> tuple[tuple[PairResult, ...], frozenset[str]]:
    """Any pair results among six nodes, every pass either older than the window or
    with a node rebooted since (so no pass vouches for anyone)."""
    rebooted = frozenset(draw(st.sets(st.sampled_from(NAMES[1:]))))
    results = []
    for a, b in draw(st.lists(st.sampled_from(list(itertools.combinations(NAMES, 2))))):
        passed = draw(st.booleans())
        if passed and not ({a, b} & rebooted):
            age = WINDOW + timedelta(minutes=draw(st.integers(1, 60 * 24 * 90)))
        else:
            age = timedelta(minutes=draw(st.integers(1, 60 * 24 * 90)))
        outcome = PairOutcome.PASSED if passed else PairOutcome.FAILED
        results.append(PairResult(NodePair(a, b), outcome, None, NOW - age))
    return tuple(results), rebooted


@settings(max_examples=200, deadline=None)
@given(histories())
def test_expired_or_pre_reboot_passes_never_convict(
    case: tuple[tuple[PairResult, ...], frozenset[str]],
) -> None:
    results, rebooted = case
    situation = FabricSituation(
        waiting=tuple(WaitingNode(n, NOW - 1000 * WINDOW) for n in ("n", "a")),
        idle_accepted=frozenset(NAMES[2:]),
        results=results,
        running=(),
        now=NOW,
        rebooted=rebooted,
    )
    plan = plan_fabric(situation, FabricPairingParams(witness_window=WINDOW))
    convicted = {n for n, v in plan.verdicts.items() if isinstance(v, FabricQuarantined)}
    assert not convicted, plan.verdicts


def test_every_staleness_of_the_four_witness_passes() -> None:
    """The five-node conviction (n failed with p1, p2; each passed with w1, w2) over
    every choice of stale, pre-reboot or fresh for each of the two passes: n is
    convicted exactly when both still vouch."""
    kinds = ("fresh", "stale", "rebooted")
    for k1, k2 in itertools.product(kinds, repeat=2):
        ages = {"fresh": timedelta(hours=1), "stale": 2 * WINDOW, "rebooted": timedelta(hours=1)}
        rebooted = frozenset(
            {name for name, kind in (("p1", k1), ("p2", k2)) if kind == "rebooted"}
        )
        results = (
            PairResult(NodePair("p1", "w1"), PairOutcome.PASSED, None, NOW - ages[k1]),
            PairResult(NodePair("p2", "w2"), PairOutcome.PASSED, None, NOW - ages[k2]),
            PairResult(NodePair("n", "p1"), PairOutcome.FAILED, None, NOW - timedelta(minutes=9)),
            PairResult(NodePair("n", "p2"), PairOutcome.FAILED, None, NOW - timedelta(minutes=8)),
        )
        situation = FabricSituation(
            waiting=(WaitingNode("n", NOW - timedelta(minutes=10)),),
            idle_accepted=frozenset({"p1", "p2", "w1", "w2"}),
            results=results,
            running=(),
            now=NOW,
            rebooted=rebooted,
        )
        plan = plan_fabric(situation, FabricPairingParams(witness_window=WINDOW))
        convicted = isinstance(plan.verdicts.get("n"), FabricQuarantined)
        assert convicted == (k1 == k2 == "fresh"), (k1, k2, plan.verdicts)
