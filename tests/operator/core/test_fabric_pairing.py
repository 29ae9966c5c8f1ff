"""Fabric pairing rules, one table row per rule and per adversarial case
(issue 14 item 3; docs/fabric.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from fabric_fleet import BAD_BUSBW, GOOD_BUSBW, T0, Fleet, run_fleet

from gpuaccept.checks.fabric_allreduce import NoPartnerAction
from gpuaccept.contracts.report import CheckResult, CheckStatus
from gpuaccept.operator.core.fabric.pairing import (
    FabricPairingParams,
    FabricPlan,
    FabricSituation,
    NodePair,
    PairResult,
    WaitingNode,
    pair_outcome,
    plan_fabric,
    pod_outcome,
)
from gpuaccept.operator.core.model import (
    REASON_FABRIC_FAILED,
    FabricNoPartner,
    FabricPassed,
    FabricQuarantined,
    PairOutcome,
    PartnerFigure,
)

HOUR = timedelta(hours=1)
PARAMS = FabricPairingParams(deadline=HOUR)
P, F, X = PairOutcome.PASSED, PairOutcome.FAILED, PairOutcome.INCOMPLETE


def result(a: str, b: str, outcome: PairOutcome, minute: int) -> PairResult:
    busbw = {P: GOOD_BUSBW, F: BAD_BUSBW, X: None}[outcome]
    return PairResult(NodePair(a, b), outcome, busbw, T0 + timedelta(minutes=minute))


@dataclass(frozen=True)
class Case:
    waiting: str  # space-separated names, waiting since T0
    results: tuple[PairResult, ...] = ()
    idle: str = ""
    running: tuple[NodePair, ...] = ()
    minutes: int = 30  # now, after T0
    params: FabricPairingParams = PARAMS

    def plan(self) -> FabricPlan:
        situation = FabricSituation(
            waiting=tuple(WaitingNode(n, T0) for n in self.waiting.split()),
            idle_accepted=frozenset(self.idle.split()),
            results=self.results,
            running=self.running,
            now=T0 + timedelta(minutes=self.minutes),
        )
        return plan_fabric(situation, self.params)


def kinds(plan: FabricPlan) -> dict[str, str]:
    return {name: type(v).__name__ for name, v in plan.verdicts.items()}


def pairs(plan: FabricPlan) -> set[frozenset[str]]:
    return {p.members for p in plan.next_pairs}


def pair(a: str, b: str) -> frozenset[str]:
    return frozenset((a, b))


def test_fresh_nodes_pair_among_themselves_in_arrival_order() -> None:
    plan = Case("a b c d").plan()
    assert pairs(plan) == {pair("a", "b"), pair("c", "d")}
    assert plan.verdicts == {}


def test_a_passing_pair_clears_both() -> None:
    plan = Case("a b", (result("a", "b", P, 5),)).plan()
    assert plan.verdicts == {
        "a": FabricPassed("b", GOOD_BUSBW, T0 + timedelta(minutes=5)),
        "b": FabricPassed("a", GOOD_BUSBW, T0 + timedelta(minutes=5)),
    }
    assert plan.next_pairs == ()


def test_a_failing_pair_is_no_verdict_and_each_meets_a_different_partner_that_passed() -> None:
    results = (result("a", "b", F, 5), result("c", "d", P, 5), result("e", "f", P, 5))
    plan = Case("a b c d e f", results).plan()
    assert kinds(plan) == {n: "FabricPassed" for n in "cdef"}
    assert {p.members & {"a", "b"} for p in plan.next_pairs} == {frozenset("a"), frozenset("b")}
    for p in plan.next_pairs:
        assert p.members - {"a", "b"} <= {"c", "d", "e", "f"}  # partners that passed


def test_partners_that_passed_come_before_untested_idle_accepted_nodes() -> None:
    results = (result("a", "b", F, 5), result("c", "d", P, 5))
    params = FabricPairingParams(deadline=HOUR, idle_accepted_partners=True)
    plan = Case("a b c d", results, idle="u1 u2", params=params).plan()
    assert pairs(plan) == {pair("a", "c"), pair("b", "d")}


def test_untested_idle_accepted_nodes_are_partners_only_when_the_parameters_allow() -> None:
    results = (result("a", "b", F, 5),)
    assert Case("a b", results, idle="u1 u2").plan().next_pairs == ()
    allowed = FabricPairingParams(deadline=HOUR, idle_accepted_partners=True)
    plan = Case("a b", results, idle="u1 u2", params=allowed).plan()
    assert pairs(plan) == {pair("a", "u1"), pair("b", "u2")}


def test_a_node_that_failed_with_two_partners_that_passed_with_others_is_quarantined() -> None:
    results = (
        result("a", "b", F, 5),
        result("c", "d", P, 5),
        result("e", "f", P, 5),
        result("c", "a", F, 10),
        result("e", "a", F, 15),
    )
    plan = Case("a", results).plan()
    verdict = plan.verdicts["a"]
    assert verdict == FabricQuarantined(
        failed_with=(
            PartnerFigure("c", F, BAD_BUSBW, T0 + timedelta(minutes=10)),
            PartnerFigure("e", F, BAD_BUSBW, T0 + timedelta(minutes=15)),
        ),
        partners_passed_with=("d", "f"),
        at=T0 + timedelta(minutes=15),
    )
    assert isinstance(verdict, FabricQuarantined)
    assert verdict.reason == REASON_FABRIC_FAILED == "FabricAllreduceFailed"
    assert verdict.message == (
        "fabric all-reduce failed with c (180.0 GB/s; it passed with d), "
        "e (180.0 GB/s; it passed with f)"
    )


def test_one_failure_with_a_partner_that_passed_is_not_enough() -> None:
    results = (result("a", "b", F, 5), result("c", "d", P, 5), result("c", "a", F, 10))
    plan = Case("a b", results, idle="c d").plan()
    assert "a" not in plan.verdicts
    assert pair("a", "d") in pairs(plan)  # the second partner that passed


def test_a_bad_node_whose_partners_are_not_yet_cleared_waits_for_them() -> None:
    # a failed with b and with c; neither has passed with anyone yet
    results = (result("a", "b", F, 5), result("a", "c", F, 10), result("d", "e", P, 10))
    waiting = "a b c d e"
    assert "a" not in Case(waiting, results).plan().verdicts
    # b and c each pass with a cleared node: the two failures now convict a
    later = (*results, result("b", "d", P, 15), result("c", "e", P, 15))
    plan = Case(waiting, later).plan()
    assert kinds(plan) == {
        "a": "FabricQuarantined",
        "b": "FabricPassed",
        "c": "FabricPassed",
        "d": "FabricPassed",
        "e": "FabricPassed",
    }


def test_two_bad_nodes_paired_together_are_each_tried_with_others_not_each_other() -> None:
    run = run_fleet(Fleet(("a", "b", "c", "d", "e", "f", "g", "h"), frozenset({"a", "b"})))
    assert kinds_of(run.verdicts) == {"a": "FabricQuarantined", "b": "FabricQuarantined"} | {
        n: "FabricPassed" for n in "cdefgh"
    }
    assert all(pair("a", "b") not in pairs(p) for p in run.plans[1:])
    a = run.verdicts["a"]
    assert isinstance(a, FabricQuarantined)
    assert {f.partner for f in a.failed_with} <= set("cdefgh")
    assert run.rounds == 3


def kinds_of(verdicts: dict[str, object]) -> dict[str, str]:
    return {name: type(v).__name__ for name, v in verdicts.items()}


def test_an_odd_node_out_meets_a_cleared_node_in_the_next_round() -> None:
    plan = Case("a b c").plan()
    assert pairs(plan) == {pair("a", "b")}
    later = Case("a b c", (result("a", "b", P, 5),)).plan()
    assert len(later.next_pairs) == 1
    assert later.next_pairs[0].members & {"a", "b"}
    assert "c" in later.next_pairs[0].members


def test_an_incomplete_pair_is_no_evidence_and_is_not_run_again() -> None:
    # b's pod never met a's (b's node went away): c and d passed; a fails with c
    results = (result("a", "b", X, 5), result("c", "d", P, 5), result("a", "c", F, 10))
    plan = Case("a", results, idle="c d e").plan()
    assert "a" not in plan.verdicts  # one failure with a cleared partner, b is no evidence
    assert pairs(plan) == {pair("a", "d")}


def test_a_cleared_partner_that_vanishes_mid_pair_convicts_no_one() -> None:
    # a's pairs with c and d ended incomplete (c and d went away mid-test)
    results = (
        result("c", "d", P, 5),
        result("c", "e", P, 5),
        result("a", "c", X, 10),
        result("a", "d", X, 15),
    )
    plan = Case("a", results, idle="e").plan()
    assert "a" not in plan.verdicts
    assert pairs(plan) == {pair("a", "e")}


def test_a_flapping_pair_that_failed_then_passed_clears_both() -> None:
    results = (result("a", "b", F, 5), result("a", "b", P, 10))
    assert kinds(Case("a b", results).plan()) == {"a": "FabricPassed", "b": "FabricPassed"}


def test_the_rule_that_held_first_decides_a_node_that_both_passed_and_failed() -> None:
    convicting = (
        result("c", "d", P, 1),
        result("e", "f", P, 1),
        result("a", "c", F, 5),
        result("a", "e", F, 10),
    )
    late_pass = Case("a", (*convicting, result("a", "g", P, 20))).plan()
    assert kinds(late_pass) == {"a": "FabricQuarantined"}
    early_pass = Case("a", (result("a", "g", P, 2), *convicting)).plan()
    assert kinds(early_pass) == {"a": "FabricPassed"}
    tie = Case("a", (*convicting, result("a", "g", P, 10))).plan()
    assert kinds(tie) == {"a": "FabricPassed"}  # a pass wins a tie


def test_an_untested_idle_node_that_never_passed_convicts_no_one() -> None:
    # u1 and u2 are accepted but bad: a fails with both, neither passed with anyone
    allowed = FabricPairingParams(deadline=HOUR, idle_accepted_partners=True)
    results = (result("u1", "a", F, 5), result("u2", "a", F, 10))
    plan = Case("a", results, idle="u1 u2", params=allowed).plan()
    assert plan.verdicts == {}


def test_a_node_under_test_is_not_planned_again() -> None:
    results = (result("c", "d", P, 5), result("a", "b", F, 5))
    plan = Case("a b", results, idle="c d", running=(NodePair("c", "a"),)).plan()
    assert pairs(plan) == {pair("b", "d")}


def test_no_partner_by_the_deadline_holds_by_default_and_the_node_may_still_be_paired() -> None:
    results = (result("a", "b", F, 5),)
    plan = Case("a b", results, minutes=61).plan()
    tried = (PartnerFigure("b", F, BAD_BUSBW, T0 + timedelta(minutes=5)),)
    assert plan.verdicts["a"] == FabricNoPartner(NoPartnerAction.HOLD, tried)
    assert kinds(plan) == {"a": "FabricNoPartner", "b": "FabricNoPartner"}
    # a new node arrives: the held nodes are paired again, no longer "no partner"
    situation = FabricSituation(
        waiting=(WaitingNode("a", T0), WaitingNode("b", T0), WaitingNode("n", T0 + HOUR)),
        idle_accepted=frozenset(),
        results=results,
        running=(),
        now=T0 + timedelta(minutes=61),
    )
    later = plan_fabric(situation, PARAMS)
    assert len(later.next_pairs) == 1
    assert set(later.verdicts) == {"a", "b"} - later.next_pairs[0].members


def test_no_partner_by_the_deadline_accepts_when_the_parameters_say_accept() -> None:
    accept = FabricPairingParams(deadline=HOUR, no_partner=NoPartnerAction.ACCEPT)
    plan = Case("a", minutes=60, params=accept).plan()
    assert plan.verdicts == {"a": FabricNoPartner(NoPartnerAction.ACCEPT, ())}
    assert Case("a", minutes=59, params=accept).plan().verdicts == {}


def test_a_node_under_test_at_its_deadline_waits_for_its_result() -> None:
    plan = Case("a b", running=(NodePair("a", "b"),), minutes=90).plan()
    assert plan == FabricPlan(verdicts={}, next_pairs=())


def test_two_nodes_one_bad_cannot_be_told_apart_and_are_held() -> None:
    run = run_fleet(Fleet(("a", "b"), frozenset({"a"})))
    assert run.verdicts == {}
    assert run.still_waiting == {"a", "b"}
    held = Case("a b", tuple(run.results), minutes=24 * 60).plan()
    assert kinds(held) == {"a": "FabricNoPartner", "b": "FabricNoPartner"}


def test_one_bad_node_among_32_new_nodes_is_found_in_two_rounds() -> None:
    nodes = tuple(f"gpu-{i:02d}" for i in range(32))
    run = run_fleet(Fleet(nodes, frozenset({"gpu-17"})))
    assert kinds_of(run.verdicts) == {
        n: "FabricQuarantined" if n == "gpu-17" else "FabricPassed" for n in nodes
    }
    # round 1: 16 pairs, one fails; round 2: the bad node and its partner each meet a
    # node that passed; the partner passes, the bad node fails with its second partner
    assert run.rounds == 2
    assert len(run.results) == 16 + 2


def test_parameters_and_pairs_refuse_what_cannot_be() -> None:
    with pytest.raises(ValueError, match="deadline must be positive"):
        FabricPairingParams(deadline=timedelta(0))
    with pytest.raises(ValueError, match="cannot pair with itself"):
        NodePair("a", "a")


def fabric_result(status: CheckStatus, **observed: object) -> CheckResult:
    base: dict[str, object] = {"nodes": 2, "nodeRank": 0, "localRanks": 8, "ranks": 16}
    return CheckResult(
        check="fabric_allreduce",
        status=status,
        observed=base | observed,
        duration_s=1.0,
    )


@pytest.mark.parametrize(
    ("result", "outcome"),
    [
        (fabric_result(CheckStatus.PASS, busbwGBps=371.0), P),
        (fabric_result(CheckStatus.PASS, busbwGBps=250.0), F),  # re-judged: below 300
        (fabric_result(CheckStatus.FAIL, busbwGBps=310.0), P),  # the minimum is the operator's
        (fabric_result(CheckStatus.ERROR, phase="rendezvous"), X),  # the pods never met
        (fabric_result(CheckStatus.ERROR, phase="allreduce"), F),  # they met, it broke
        (fabric_result(CheckStatus.ERROR), X),
        (CheckResult(check="fabric_allreduce", status=CheckStatus.PASS, duration_s=0), X),
        (CheckResult(check="probe", status=CheckStatus.ERROR, duration_s=0), X),
        (None, X),  # the pod or its node went away
    ],
)
def test_a_pods_result_is_judged_again_against_the_current_minimum(
    result: CheckResult | None, outcome: PairOutcome
) -> None:
    assert pod_outcome(result, 300.0) is outcome


@pytest.mark.parametrize(
    ("pods", "outcome"),
    [((P, P), P), ((P, X), P), ((X, X), X), ((F, P), F), ((X, F), F), ((), X)],
)
def test_a_pairs_outcome_from_its_two_pods(
    pods: tuple[PairOutcome, ...], outcome: PairOutcome
) -> None:
    assert pair_outcome(pods) is outcome


REPAIRED_AT = 60  # minutes after T0: the node began waiting again (a new round)


@pytest.mark.parametrize(
    "old_results",
    [
        (  # two failures, each partner passed with its own witness: a conviction once
            result("n", "p1", F, 10),
            result("n", "p2", F, 20),
            result("p1", "w1", P, 30),
            result("p2", "w2", P, 40),
        ),
        (result("p1", "n", P, 10),),  # a pass: a clearance once
    ],
    ids=["old conviction", "old pass"],
)
def test_results_from_before_a_node_began_waiting_decide_nothing(
    old_results: tuple[PairResult, ...],
) -> None:
    situation = FabricSituation(
        waiting=(WaitingNode("n", T0 + timedelta(minutes=REPAIRED_AT)),),
        idle_accepted=frozenset({"p1", "p2"}),
        results=old_results,
        running=(),
        now=T0 + timedelta(minutes=REPAIRED_AT + 1),
    )
    plan = plan_fabric(situation, PARAMS)
    assert plan.verdicts == {}
    assert [p.second for p in plan.next_pairs] == ["n"]  # tested again


def test_a_result_from_after_a_node_began_waiting_still_decides() -> None:
    situation = FabricSituation(
        waiting=(WaitingNode("n", T0 + timedelta(minutes=REPAIRED_AT)),),
        idle_accepted=frozenset({"p1"}),
        results=(result("p1", "n", P, REPAIRED_AT + 5),),
        running=(),
        now=T0 + timedelta(minutes=REPAIRED_AT + 6),
    )
    assert kinds(plan_fabric(situation, PARAMS)) == {"n": "FabricPassed"}


# ---------------------------------------------------------------- witness evidence expires

DAY = timedelta(days=1)


def _stale_case(
    *, r1_at: timedelta, r2_at: timedelta, rebooted: frozenset[str] = frozenset()
) -> FabricPlan:
    """A new node ``n`` fails with the idle references r1 and r2, which passed with
    w1 and w2 ``r1_at``/``r2_at`` before now."""
    now = T0 + timedelta(minutes=30)
    results = (
        PairResult(NodePair("r1", "w1"), P, GOOD_BUSBW, now - r1_at),
        PairResult(NodePair("r2", "w2"), P, GOOD_BUSBW, now - r2_at),
        result("n", "r1", F, 5),
        result("n", "r2", F, 10),
    )
    situation = FabricSituation(
        waiting=(WaitingNode("n", T0),),
        idle_accepted=frozenset({"r1", "r2", "w1", "w2"}),
        results=results,
        running=(),
        now=now,
        rebooted=rebooted,
    )
    return plan_fabric(situation, FabricPairingParams(deadline=HOUR, witness_window=DAY))


@pytest.mark.parametrize(
    ("r1_age", "r2_age", "rebooted", "convicted"),
    [
        (HOUR, HOUR, frozenset(), True),  # fresh witnesses convict, as before
        (60 * DAY, 60 * DAY, frozenset(), False),  # both passed 60 days ago
        (HOUR, 60 * DAY, frozenset(), False),  # one stale witness is one too few
        (DAY - timedelta(minutes=1), HOUR, frozenset(), True),  # just within the window
        (HOUR, HOUR, frozenset({"r1"}), False),  # r1 rebooted since its pass
        (HOUR, HOUR, frozenset({"w2"}), False),  # a pass with a rebooted node
    ],
)
def test_a_witness_pass_counts_only_within_its_window_and_boot(
    r1_age: timedelta, r2_age: timedelta, rebooted: frozenset[str], convicted: bool
) -> None:
    verdict = _stale_case(r1_at=r1_age, r2_at=r2_age, rebooted=rebooted).verdicts.get("n")
    assert isinstance(verdict, FabricQuarantined) == convicted, verdict


def test_stale_references_are_tested_again_not_trusted() -> None:
    """Idle partners whose passes expired are untested partners again (paired, but a
    failure with them convicts nobody), even without idleAcceptedPartners."""
    plan = _stale_case(r1_at=60 * DAY, r2_at=60 * DAY)
    assert "n" not in plan.verdicts
    assert plan.next_pairs  # n meets a partner not tried yet, or the references retest


def test_a_reference_that_failed_with_two_cleared_nodes_is_a_suspect() -> None:
    """r1 failed with c1 and c2, each of which passed with another node: r1 is in
    doubt, so n's failure with r1 does not count toward n's conviction."""
    results = (
        result("r1", "w1", P, 1),
        result("r2", "w2", P, 2),
        result("c1", "d1", P, 3),
        result("c2", "d2", P, 4),
        result("c1", "r1", F, 5),
        result("c2", "r1", F, 6),
        result("n", "r1", F, 7),
        result("n", "r2", F, 8),
    )
    case = Case("n", results, idle="r1 r2 w1 w2 c1 c2 d1 d2")
    assert "n" not in case.plan().verdicts
    # the same without r1's two failures: n is convicted
    trusted = Case("n", results[:4] + results[6:], idle="r1 r2 w1 w2 c1 c2 d1 d2")
    assert isinstance(trusted.plan().verdicts.get("n"), FabricQuarantined)


def test_a_suspect_reference_is_not_a_cleared_partner() -> None:
    results = (
        result("r1", "w1", P, 1),
        result("c1", "d1", P, 3),
        result("c2", "d2", P, 4),
        result("c1", "r1", F, 5),
        result("c2", "r1", F, 6),
        result("s", "x", F, 7),  # a suspect waiting for a cleared partner
    )
    plan = Case("s", results, idle="r1 w1 c1 c2 d1 d2").plan()
    (first,) = [p for p in plan.next_pairs if "s" in p.members]
    assert first.partner_of("s") != "r1"
