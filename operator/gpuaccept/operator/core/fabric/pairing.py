"""Fabric pairing: which pairs of nodes to test next, and which node of a failing
pair is the bad one (pure; docs/fabric.md).

A fabric test runs one all-reduce across two nodes. Its result is a fact about
the *pair*: a pair passes only if both nodes' NICs, cables and switch ports
carry the traffic, so a pass clears both nodes, and a failure says only that
one of the two (or both) is bad. This module turns the set of pair results into
verdicts and the next pairs to run:

* a pair that passes clears both nodes (:class:`FabricPassed`);
* a pair that fails is no verdict: each node is re-paired with a *different*
  partner, partners that already passed first;
* a node that failed with two different partners, each of which passed with a
  node other than this one (two different such nodes, none of them the other
  partner), is quarantined (:class:`FabricQuarantined`,
  ``FabricAllreduceFailed``) with those partners, figures and witnesses;
* a node that has no verdict by its deadline (counted from the moment it began
  waiting) and is not under test gets :class:`FabricNoPartner` with the
  action the parameters name: ``hold`` (it stays pending and may still be
  paired) or ``accept``;
* an incomplete pair (a pod never started, a node went away, the rendezvous
  never completed) is evidence against neither node, but the two are not paired
  again.

Verdicts follow from the whole set of results, not from the order the caller
saw them in: a node's verdict is the rule that held first in time (a pass
wins a tie). A node is in at most one pair at a time, running or planned (the
one-probe-per-node rule). The quarantine limit, dryRun and paused are the
operator's, applied to these verdicts as to any other.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpuaccept.checks import fabric_allreduce
from gpuaccept.checks.fabric_allreduce import FabricPolicy, NoPartnerAction
from gpuaccept.contracts.report import CheckResult, CheckStatus
from gpuaccept.operator.core.model import (
    FabricNoPartner,
    FabricPassed,
    FabricQuarantined,
    FabricVerdict,
    PairOutcome,
    PartnerFigure,
)

CONVICTION_NODES = 5
"""A conviction names five different nodes: the node, the two partners it failed
with ("two different partners") and the node each partner passed with."""


def pod_outcome(
    result: CheckResult | None, minimum_busbw_gbps: float | None, *, require_rdma: bool = True
) -> PairOutcome:
    """What one pod's ``fabric_allreduce`` result says about its pair, judged
    against the current minimum. No result (the pod or its node went away), an
    observation that does not parse, or an error before both nodes met is no
    evidence; an error once they met is a failure."""
    if result is None or result.check != fabric_allreduce.CHECK:
        return PairOutcome.INCOMPLETE
    try:
        observed = fabric_allreduce.parse(result.observed)
    except ValueError:
        return PairOutcome.INCOMPLETE
    if result.status is CheckStatus.ERROR or observed.phase is not None:
        return PairOutcome.FAILED if observed.phase == "allreduce" else PairOutcome.INCOMPLETE
    judged = fabric_allreduce.judge_fabric(
        observed, minimum_busbw_gbps, require_rdma=require_rdma
    ).status
    if judged is CheckStatus.PASS:
        return PairOutcome.PASSED
    return PairOutcome.FAILED if judged is CheckStatus.FAIL else PairOutcome.INCOMPLETE


def pair_outcome(outcomes: Iterable[PairOutcome]) -> PairOutcome:
    """The pair's outcome from its pods': both pods report the same figure (times
    averaged over both nodes), so one measured outcome is enough; a failure wins."""
    seen = set(outcomes)
    for outcome in (PairOutcome.FAILED, PairOutcome.PASSED):
        if outcome in seen:
            return outcome
    return PairOutcome.INCOMPLETE


@dataclass(frozen=True)
class FabricPairingParams:
    """The pairing's settings: the policy's ``fabric`` section maps onto these
    (:meth:`from_policy`; docs/fabric.md)."""

    deadline: timedelta = timedelta(minutes=30)
    """How long a node may wait for a verdict, from the moment it began waiting."""
    no_partner: NoPartnerAction = NoPartnerAction.HOLD
    """What a node without a verdict by its deadline gets."""
    idle_accepted_partners: bool = False
    """Whether accepted idle nodes that have not passed a pair in the results may be
    partners. Nodes that passed a pair are partners while idle either way."""
    witness_window: timedelta = timedelta(hours=24)
    """How long a pass counts as evidence that a partner is good (a witness, a cleared
    reference); an older one makes the partner untested again."""

    def __post_init__(self) -> None:
        if self.deadline <= timedelta(0):
            raise ValueError("deadline must be positive")

    @classmethod
    def from_policy(cls, section: FabricPolicy) -> FabricPairingParams:
        return cls(
            deadline=timedelta(seconds=section.deadline_seconds),
            no_partner=section.on_no_partner,
            idle_accepted_partners=section.idle_accepted_partners,
            witness_window=timedelta(seconds=section.witness_window_seconds),
        )


@dataclass(frozen=True)
class NodePair:
    """Two nodes tested together. ``first``'s pod starts first: it is rank 0 and its
    pod IP is the rendezvous address that ``second``'s pod is given."""

    first: str
    second: str

    def __post_init__(self) -> None:
        if self.first == self.second:
            raise ValueError(f"a node cannot pair with itself ({self.first})")

    @property
    def members(self) -> frozenset[str]:
        return frozenset((self.first, self.second))

    def partner_of(self, node: str) -> str:
        return self.second if node == self.first else self.first


@dataclass(frozen=True)
class PairResult:
    pair: NodePair
    outcome: PairOutcome
    busbw_gbps: float | None
    """The pair's busbw at the largest message (None: not measured)."""
    finished_at: datetime


@dataclass(frozen=True)
class WaitingNode:
    """A node that passed the single-node checks and waits for its fabric verdict."""

    name: str
    waiting_since: datetime


@dataclass(frozen=True)
class FabricSituation:
    waiting: tuple[WaitingNode, ...]
    idle_accepted: frozenset[str]
    """Accepted nodes with no pod that requests GPUs (possible partners)."""
    results: tuple[PairResult, ...]
    running: tuple[NodePair, ...]
    now: datetime
    unavailable: frozenset[str] = frozenset()
    """Waiting nodes that cannot take a fabric pod now (no GPUs advertised, another
    probe pod): judged and given their deadline verdict, never paired."""
    rebooted: frozenset[str] = frozenset()
    """Nodes whose bootID changed since their last probe: their passes on record are
    from an older boot and vouch for nothing now."""


@dataclass(frozen=True)
class FabricPlan:
    verdicts: Mapping[str, FabricVerdict]
    """A verdict for each waiting node that has one; the others are still pending."""
    next_pairs: tuple[NodePair, ...]
    """Pairs to start now; no node is in two pairs, running or planned."""


@dataclass
class _History:
    """What the results say about one node."""

    pairs: list[PairResult] = field(default_factory=list)

    def tried(self, node: str) -> set[str]:
        return {r.pair.partner_of(node) for r in self.pairs}

    def outcomes(self, node: str, outcome: PairOutcome) -> list[PairResult]:
        return sorted(
            (r for r in self.pairs if r.outcome is outcome),
            key=lambda r: (r.finished_at, r.pair.partner_of(node)),
        )


def _figure(node: str, result: PairResult) -> PartnerFigure:
    return PartnerFigure(
        result.pair.partner_of(node), result.outcome, result.busbw_gbps, result.finished_at
    )


def _histories(results: Iterable[PairResult], since: Mapping[str, datetime]) -> dict[str, _History]:
    """Each node's results. A waiting node's history starts when it began waiting: a
    result from before (partners' statuses keep it after a repair and a new round)
    is not evidence about the node as it is now, neither for its verdict nor as a
    partner already tried."""
    histories: dict[str, _History] = {}
    for result in results:
        for node in result.pair.members:
            start = since.get(node)
            if start is not None and result.finished_at < start:
                continue
            histories.setdefault(node, _History()).pairs.append(result)
    return histories


def _fresh_passes(
    histories: Mapping[str, _History], since: datetime, rebooted: frozenset[str]
) -> dict[str, _History]:
    """The histories with only the passes that still count as evidence about a
    partner: finished within the witness window (at or after ``since``) and not
    before a node's reboot (``rebooted``: nodes whose bootID changed since their
    last probe, so every pass they have on record is from an older boot)."""
    out: dict[str, _History] = {}
    for node, history in histories.items():
        kept = [
            r
            for r in history.pairs
            if r.outcome is not PairOutcome.PASSED
            or (r.finished_at >= since and not r.pair.members & rebooted)
        ]
        out[node] = _History(kept)
    return out


def _suspect(reference: str, node: str, fresh: Mapping[str, _History]) -> bool:
    """``reference`` failed with two different cleared nodes (each with a fresh pass
    with a node other than it), ``node`` aside: the reference itself is in doubt, so
    its failures are no evidence against anyone until it is tested again."""
    history = fresh.get(reference)
    if history is None:
        return False
    cleared = set()
    for failure in history.outcomes(reference, PairOutcome.FAILED):
        partner = failure.pair.partner_of(reference)
        if partner != node and _witnesses(partner, reference, fresh):
            cleared.add(partner)
    return len(cleared) >= 2


WITNESSES_KEPT = 4
"""Earliest passes kept per partner: a conviction excludes at most three nodes as
a partner's witness (the node, the other partner, the other witness)."""


def _witnesses(partner: str, node: str, histories: Mapping[str, _History]) -> list[PairResult]:
    """``partner``'s earliest passes with nodes other than ``node``, one per witness."""
    history = histories.get(partner)
    found: dict[str, PairResult] = {}
    for passed in history.outcomes(partner, PairOutcome.PASSED) if history else []:
        witness = passed.pair.partner_of(partner)
        if witness != node and witness not in found:
            found[witness] = passed
            if len(found) == WITNESSES_KEPT:
                break
    return list(found.values())


def _conviction(
    node: str, histories: Mapping[str, _History], fresh: Mapping[str, _History] | None = None
) -> FabricQuarantined | None:
    """The earliest proof that ``node`` is bad: it failed with two partners, and each
    partner passed with a witness, the five nodes all different. Then one flapping
    bad node, whose pairs sometimes pass, cannot get a good node quarantined: a good
    node fails only with bad partners, a bad node passes only in a pair with the
    flapping one, and the flapping node can stand in only one of the four places."""
    evidence = histories if fresh is None else fresh  # the passes that still count
    first_failure: dict[str, PairResult] = {}
    for failure in histories[node].outcomes(node, PairOutcome.FAILED):
        partner = failure.pair.partner_of(node)
        if not _suspect(partner, node, evidence):
            first_failure.setdefault(partner, failure)
    witnesses = {p: _witnesses(p, node, evidence) for p in first_failure}
    best: tuple[datetime, str, str, PairResult, PairResult] | None = None
    for p1, p2 in itertools.combinations(sorted(first_failure), 2):
        for w1 in witnesses[p1]:
            for w2 in witnesses[p2]:
                q1, q2 = w1.pair.partner_of(p1), w2.pair.partner_of(p2)
                if len({node, p1, p2, q1, q2}) < CONVICTION_NODES:
                    continue
                at = max(
                    first_failure[p1].finished_at,
                    first_failure[p2].finished_at,
                    w1.finished_at,
                    w2.finished_at,
                )
                if best is None or (at, p1, p2) < best[:3]:
                    best = (at, p1, p2, w1, w2)
    if best is None:
        return None
    at, p1, p2, w1, w2 = best
    failed_with = tuple(
        sorted(
            (_figure(node, first_failure[p]) for p in (p1, p2)),
            key=lambda f: (f.finished_at, f.partner),
        )
    )
    passed_with = {p1: w1.pair.partner_of(p1), p2: w2.pair.partner_of(p2)}
    return FabricQuarantined(
        failed_with=failed_with,
        partners_passed_with=tuple(passed_with[f.partner] for f in failed_with),
        at=at,
    )


def _judge(
    node: str, histories: Mapping[str, _History], fresh: Mapping[str, _History] | None = None
) -> FabricPassed | FabricQuarantined | None:
    history = histories.get(node)
    if history is None:
        return None
    passes = history.outcomes(node, PairOutcome.PASSED)
    passed = (
        FabricPassed(passes[0].pair.partner_of(node), passes[0].busbw_gbps, passes[0].finished_at)
        if passes
        else None
    )
    quarantined = _conviction(node, histories, fresh)
    if passed is not None and (quarantined is None or passed.at <= quarantined.at):
        return passed
    return quarantined


def plan_fabric(situation: FabricSituation, params: FabricPairingParams) -> FabricPlan:
    """The verdicts the results support, and the pairs to start now."""
    return _Planner.for_situation(situation, params).plan()


@dataclass
class _Planner:
    """One planning: the verdicts first, then the pairs, step by step (:meth:`plan`)."""

    situation: FabricSituation
    params: FabricPairingParams
    waiting: dict[str, WaitingNode]
    histories: dict[str, _History]
    verdicts: dict[str, FabricVerdict] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    """Nodes in a pair, running or planned (one pair per node)."""
    pairs: list[NodePair] = field(default_factory=list)
    planned_ref: dict[str, str] = field(default_factory=dict)
    """Suspect -> the partner planned for it now."""
    fresh: dict[str, _History] = field(default_factory=dict)
    """The histories with only the passes that still vouch for a partner."""

    @classmethod
    def for_situation(cls, situation: FabricSituation, params: FabricPairingParams) -> _Planner:
        waiting = {w.name: w for w in situation.waiting}
        since = {name: w.waiting_since for name, w in waiting.items()}
        used = {node for pair in situation.running for node in pair.members}
        histories = _histories(situation.results, since)
        fresh = _fresh_passes(histories, situation.now - params.witness_window, situation.rebooted)
        return cls(situation, params, waiting, histories, used=used, fresh=fresh)

    def plan(self) -> FabricPlan:
        self.judge_waiting()
        needers = self.needers()
        suspects = [w.name for w in needers if self.failures(w.name) > 0]
        fresh = [w.name for w in needers if self.failures(w.name) == 0]
        cleared, untested = self.references()
        self.pair_suspects(suspects, cleared)
        self.pair_fresh(fresh)
        self.pair_rest(fresh + suspects, cleared + untested)
        if any(node not in self.used for node in suspects):
            self.pair_witnesses(untested + cleared, cleared)
        self.no_partner_verdicts(needers)
        return FabricPlan(verdicts=self.verdicts, next_pairs=tuple(self.pairs))

    # ------------------------------------------------------------------ what is known
    def history(self, node: str) -> _History:
        return self.histories.get(node, _History())

    def partners(self, node: str, outcome: PairOutcome) -> set[str]:
        return {r.pair.partner_of(node) for r in self.history(node).outcomes(node, outcome)}

    def failures(self, node: str) -> int:
        return len(self.partners(node, PairOutcome.FAILED))

    def has_passed(self, node: str) -> bool:
        return bool(self.history(node).outcomes(node, PairOutcome.PASSED))

    def vouched_for(self, node: str) -> bool:
        """A reference to trust: a pass that still counts, and not itself in doubt."""
        fresh = self.fresh.get(node)
        return (
            fresh is not None
            and bool(fresh.outcomes(node, PairOutcome.PASSED))
            and not _suspect(node, "", self.fresh)
        )

    def entangled(self, node: str) -> set[str]:
        """Nodes a new partner of ``node`` should neither be nor have passed with, so
        that a failure with it can join a conviction: ``node``'s failed partners,
        the nodes those passed with, and the partners planned for them now."""
        out: set[str] = set()
        for partner in self.partners(node, PairOutcome.FAILED):
            out |= {partner} | self.partners(partner, PairOutcome.PASSED)
            if partner in self.planned_ref:
                ref = self.planned_ref[partner]
                out |= {ref} | self.partners(ref, PairOutcome.PASSED)
        return out

    # ------------------------------------------------------------------ the steps
    def judge_waiting(self) -> None:
        for name in sorted(self.waiting):
            judged = _judge(name, self.histories, self.fresh)
            if judged is not None:
                self.verdicts[name] = judged

    def needers(self) -> list[WaitingNode]:
        """Waiting nodes without a verdict and not under test, the most suspect first."""
        return sorted(
            (
                w
                for name, w in self.waiting.items()
                if name not in self.verdicts and name not in self.used
            ),
            key=lambda w: (-self.failures(w.name), w.waiting_since, w.name),
        )

    def references(self) -> tuple[list[str], list[str]]:
        """Free possible partners, the most reliable first: (those that passed a pair,
        untested accepted ones where ``idleAcceptedPartners`` allows them)."""
        passed = {n for n in self.waiting if isinstance(self.verdicts.get(n), FabricPassed)}
        available = passed | (self.situation.idle_accepted - set(self.waiting))
        by_reliability = sorted(available - self.used, key=lambda n: (self.failures(n), n))
        cleared = [n for n in by_reliability if self.vouched_for(n)]
        # A partner whose passes went stale (or a suspect reference) is tested again.
        untested = [
            n
            for n in by_reliability
            if not self.vouched_for(n)
            and (self.params.idle_accepted_partners or self.has_passed(n))
        ]
        return cleared, untested

    def pick(self, node: str, candidates: Iterable[str]) -> None:
        """Pair ``node`` with the first candidate that is free and not tried with it."""
        unavailable = self.situation.unavailable
        if node in self.used or node in unavailable:
            return
        skip = self.used | self.history(node).tried(node) | unavailable | {node}
        for candidate in candidates:
            if candidate not in skip:
                self.pairs.append(NodePair(candidate, node))
                self.used.update((candidate, node))
                return

    def pair_suspects(self, suspects: list[str], cleared: list[str]) -> None:
        """A suspect meets a partner that passed: the pair's result then says which it is."""
        for node in suspects:
            avoid = self.entangled(node)
            apart = [r for r in cleared if not ({r} | self.partners(r, PairOutcome.PASSED)) & avoid]
            self.pick(node, apart + cleared)
            if node in self.used:
                self.planned_ref[node] = next(p.first for p in self.pairs if p.second == node)

    def pair_fresh(self, fresh: list[str]) -> None:
        """Two fresh nodes together: a pass clears both at once."""
        for i, node in enumerate(fresh):
            self.pick(node, fresh[i + 1 :])

    def pair_rest(self, rest: list[str], references: list[str]) -> None:
        """What is left takes any partner it has not tried, the likeliest good first;
        the least suspect nodes first, with each other: two good nodes meet soonest."""
        ordered = sorted(rest, key=lambda n: (self.failures(n), self.waiting[n].waiting_since, n))
        for node in ordered:
            self.pick(node, references + ordered)

    def pair_witnesses(self, free: list[str], cleared: list[str]) -> None:
        """A suspect with no partner left may lack only witnesses: partners that passed
        with two different nodes. Free partners test each other, untested ones first."""
        for node in free:
            self.pick(node, cleared)

    def no_partner_verdicts(self, needers: list[WaitingNode]) -> None:
        """A node still without a pair at its deadline gets the no-partner verdict."""
        for w in needers:
            if w.name in self.used or self.situation.now < w.waiting_since + self.params.deadline:
                continue
            pairs = sorted(self.history(w.name).pairs, key=lambda r: r.finished_at)
            tried = tuple(_figure(w.name, r) for r in pairs)
            self.verdicts[w.name] = FabricNoPartner(self.params.no_partner, tried)
