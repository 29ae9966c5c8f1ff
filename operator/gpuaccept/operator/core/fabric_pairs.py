"""The fabric pairs of one policy (pure): read finished pairs into both nodes'
statuses, start each pair's second pod once the first has an IP, and plan the
next pairs and the verdicts with :func:`.fabric_pairing.plan_fabric`
(docs/fabric.md, "What the operator does").

Every fact used here lives in the API server, so an operator killed at any
moment starts again from it: a pair's result is in both NodeAcceptance statuses
(keyed by the pair's identity) before its pods are deleted; a running pair is
its labelled pods; a rank-0 pod whose partner pod cannot be created (the
partner is gone or busy, the pod ended, or it waited too long) is deleted and
the pair recorded ``incomplete``, so no pod is left behind and no result lost.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpuaccept.checks.fabric_allreduce import CHECK, FabricAllreduceObserved
from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.nodeacceptance import (
    MAX_FABRIC_PAIRS,
    FabricPairRecord,
    FabricStatus,
    NodeAcceptanceStatus,
    Phase,
)
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core.fabric_pairing import (
    FabricPairingParams,
    FabricSituation,
    FabricVerdict,
    NodePair,
    PairOutcome,
    PairResult,
    WaitingNode,
    pair_outcome,
    plan_fabric,
    pod_outcome,
)
from gpuaccept.operator.core.model import (
    Action,
    CreateProbePod,
    DeleteProbePod,
    FabricPodLabels,
    NAView,
    NodeView,
    OperatorConfig,
    PatchNAStatus,
    PodView,
    PolicyView,
)
from gpuaccept.operator.core.podspec import (
    FabricPodRequest,
    fabric_pair_id,
    fabric_pod_manifest,
    fabric_pod_name,
)
from gpuaccept.operator.core.record import HELD_ACCEPT
from gpuaccept.operator.core.report_trust import trusted_report

PARTNER_START_GRACE_SECONDS = 120
"""How long a rank-0 pod may wait for its IP (and so for its partner pod) after it
was created, before the pair is given up as incomplete."""
POLL_SECONDS = 30.0
"""How soon the pairs are looked at again while one runs (pod events come sooner)."""


PARTNER_PHASES = frozenset({Phase.ACCEPTED, Phase.HELD})


def takes_part_in_fabric(
    status: NodeAcceptanceStatus, policy_name: str, spec: NodeAcceptancePolicySpec
) -> bool:
    """Whether the node with ``status`` is a member of the fabric pass of the policy
    ``policy_name`` with ``spec``: decided under it, the policy runs fabric tests, and the
    node waits (phase Fabric) or is a partner (Accepted/Held with fabric results, or
    any with ``idleAcceptedPartners``). Only a member's fabric pods are the pass's to
    delete; the node's own reconcile deletes any other (docs/fabric.md, Safety)."""
    if not spec.fabric.enabled or status.policy != policy_name:
        return False
    return status.phase == Phase.FABRIC or (
        status.phase in PARTNER_PHASES
        and (status.fabric is not None or spec.fabric.idle_accepted_partners)
    )


@dataclass(frozen=True)
class FabricMember:
    """A node under the policy that takes part in fabric tests: waiting (phase
    Fabric), or decided with fabric results or as a possible partner."""

    node: NodeView
    na: NAView
    pods: tuple[PodView, ...] = ()  # every probe pod on the node


@dataclass(frozen=True)
class FabricObserved:
    policy: PolicyView
    spec: NodeAcceptancePolicySpec
    members: tuple[FabricMember, ...]
    now: datetime
    config: OperatorConfig = field(default_factory=OperatorConfig)


@dataclass(frozen=True)
class FabricStep:
    """What one pass over a policy's pairs does."""

    writes: tuple[tuple[str, Action], ...] = ()
    """(node, action) in order: results into statuses before the pods are deleted."""
    verdicts: Mapping[str, FabricVerdict] = field(default_factory=dict)
    """For nodes in phase Fabric: what their own reconcile records."""
    started: tuple[NodePair, ...] = ()
    wake_in: float | None = None


@dataclass(frozen=True)
class _PairPods:
    labels: FabricPodLabels
    rank0: PodView | None
    rank1: PodView | None

    @property
    def pair(self) -> NodePair:
        return NodePair(self.labels.first, self.labels.second)

    @property
    def pods(self) -> tuple[PodView, ...]:
        return tuple(p for p in (self.rank0, self.rank1) if p is not None)


def _pairs(members: Iterable[FabricMember]) -> dict[str, _PairPods]:
    found: dict[str, _PairPods] = {}
    for member in members:
        for pod in member.pods:
            labels = pod.fabric
            if labels is None:
                continue
            current = found.get(labels.pair) or _PairPods(labels, None, None)
            if labels.rank == 0:
                current = _PairPods(current.labels, pod, current.rank1)
            else:
                current = _PairPods(current.labels, current.rank0, pod)
            found[labels.pair] = current
    return found


def _recorded(na: NAView | None, pair: str) -> bool:
    fabric = na.status.fabric if na is not None else None
    return na is None or (fabric is not None and any(r.pair == pair for r in fabric.pairs))


def _pod_result(
    pod: PodView, member: FabricMember | None, obs: FabricObserved
) -> tuple[PairOutcome, float | None, str]:
    """One ended pod's outcome, judged against the policy's current minimum."""
    if member is None or not pod.message:
        return PairOutcome.INCOMPLETE, None, f"pod {pod.name}: no report"
    node = member.node
    report = trusted_report(pod.message, node, accept_simulated=obs.config.accept_simulated_reports)
    if not isinstance(report, ProbeReport):
        return PairOutcome.INCOMPLETE, None, f"pod {pod.name}: {report.message}"
    result = next((r for r in report.results if r.check == CHECK), None)
    outcome = pod_outcome(result, obs.spec.fabric.min_busbw_gbps)
    busbw = None
    if result is not None:
        try:
            busbw = FabricAllreduceObserved.model_validate(result.observed).busbw_gbps
        except ValueError:
            busbw = None
    return outcome, busbw, (result.message if result is not None else "")[:200]


@dataclass
class _Builder:
    obs: FabricObserved
    members: dict[str, FabricMember]
    writes: list[tuple[str, Action]] = field(default_factory=list)
    statuses: dict[str, NodeAcceptanceStatus] = field(default_factory=dict)
    new_results: list[PairResult] = field(default_factory=list)
    running: list[NodePair] = field(default_factory=list)
    deletes: list[tuple[str, PodView]] = field(default_factory=list)

    def status(self, node: str) -> NodeAcceptanceStatus | None:
        member = self.members.get(node)
        if member is None:
            return None
        return self.statuses.get(node, member.na.status)

    def record(self, pp: _PairPods, outcome: PairOutcome, busbw: float | None, why: str) -> None:
        """The pair's result into both nodes' statuses (those that lack it)."""
        now = self.obs.now
        self.new_results.append(PairResult(pp.pair, outcome, busbw, now))
        for rank, node in enumerate((pp.labels.first, pp.labels.second)):
            st = self.status(node)
            if st is None or _recorded(self.members[node].na, pp.labels.pair):
                continue
            fabric = st.fabric or FabricStatus()
            record = FabricPairRecord(
                pair=pp.labels.pair,
                partner=pp.pair.partner_of(node),
                node_rank=rank,
                outcome=outcome.value,
                busbw_gbps=busbw,
                finished_at=now,
                message=why[:240],
            )
            pairs = [*fabric.pairs, record][-MAX_FABRIC_PAIRS:]
            summary = fabric.summary if fabric.verdict else _running_summary(pairs)
            self.statuses[node] = st.model_copy(
                update={"fabric": fabric.model_copy(update={"pairs": pairs, "summary": summary})}
            )

    def delete(self, pp: _PairPods) -> None:
        for pod in pp.pods:
            if not pod.deleting:
                node = pp.labels.first if pod is pp.rank0 else pp.labels.second
                self.deletes.append((node, pod))


def _running_summary(pairs: list[FabricPairRecord]) -> str:
    last = pairs[-1]
    figure = f" {last.busbw_gbps:.1f} GB/s" if last.busbw_gbps is not None else ""
    return f"pair {len(pairs)} {last.outcome}{figure}"[:64]


def _eligible_partner(member: FabricMember | None) -> bool:
    """Can a fabric pod still go on this node? (It exists, is under this pass, and has
    no other probe pod.)"""
    if member is None or member.node.gpus <= 0:
        return False
    return all(p.fabric is not None for p in member.pods if not p.deleting)


def _step_pair(b: _Builder, pp: _PairPods) -> None:
    obs, labels = b.obs, pp.labels
    first, second = b.members.get(labels.first), b.members.get(labels.second)
    if _recorded(first.na if first else None, labels.pair) and _recorded(
        second.na if second else None, labels.pair
    ):
        b.delete(pp)  # read already: the pods are leftovers
        return
    r0, r1 = pp.rank0, pp.rank1
    timeout = timedelta(
        seconds=obs.config.fabric.timeout_seconds + obs.config.deadline_grace_seconds
    )
    if r1 is None:
        if r0 is None:
            return
        created = r0.created or obs.now
        waited = obs.now - created >= timedelta(seconds=PARTNER_START_GRACE_SECONDS)
        if r0.ended or r0.deleting or not _eligible_partner(second) or waited:
            b.record(pp, PairOutcome.INCOMPLETE, None, "the partner pod was never created")
            b.delete(pp)
            return
        if r0.pod_ip and second is not None:
            request = FabricPodRequest(
                labels=FabricPodLabels(labels.pair, 1, labels.first, labels.second),
                node=second.node,
                policy_name=obs.policy.name,
                spec=obs.spec,
                rendezvous_address=r0.pod_ip,
                applied_taints=second.na.status.applied_taints,
            )
            manifest = fabric_pod_manifest(request, obs.config)
            name = fabric_pod_name(obs.config.pod_prefix, labels.pair, 1)
            b.writes.append((labels.second, CreateProbePod(name, manifest)))
        b.running.append(pp.pair)
        return
    if r0 is None:
        if r1.ended:
            outcome, busbw, why = _pod_result(r1, second, obs)
            b.record(pp, pair_outcome([outcome]), busbw, why or "the rank-0 pod went away")
        else:
            b.record(pp, PairOutcome.INCOMPLETE, None, "the rank-0 pod went away")
        b.delete(pp)
        return
    if r0.ended and r1.ended:
        results = [_pod_result(r0, first, obs), _pod_result(r1, second, obs)]
        outcome = pair_outcome(r[0] for r in results)
        figures = [r[1] for r in results if r[1] is not None]
        why = "; ".join(r[2] for r in results if r[2])
        b.record(pp, outcome, max(figures) if figures else None, why)
        b.delete(pp)
        return
    started = min(p.created or obs.now for p in pp.pods)
    if obs.now - started >= timeout:
        ended = [_pod_result(p, first if p is r0 else second, obs) for p in pp.pods if p.ended]
        outcome = pair_outcome([*(r[0] for r in ended), PairOutcome.INCOMPLETE])
        figures = [r[1] for r in ended if r[1] is not None]
        b.record(pp, outcome, max(figures) if figures else None, "the pair ran past its deadline")
        b.delete(pp)
        return
    b.running.append(pp.pair)


def _results(members: Iterable[FabricMember], extra: Iterable[PairResult]) -> list[PairResult]:
    found: dict[tuple[str, str, datetime], PairResult] = {}
    seen: set[str] = set()
    for member in members:
        fabric = member.na.status.fabric
        for record in fabric.pairs if fabric is not None else ():
            if record.pair in seen:
                continue
            seen.add(record.pair)
            name = member.node.name
            pair = (
                NodePair(name, record.partner)
                if record.node_rank == 0
                else NodePair(record.partner, name)
            )
            result = PairResult(
                pair, PairOutcome(record.outcome), record.busbw_gbps, record.finished_at
            )
            found[(pair.first, pair.second, record.finished_at)] = result
    for result in extra:
        found.setdefault((result.pair.first, result.pair.second, result.finished_at), result)
    return list(found.values())


def _is_partner(member: FabricMember) -> bool:
    """Accepted (or would be, in a dry run), in service, with no probe pod of its own."""
    st, node = member.na.status, member.node
    accepted = st.phase == Phase.ACCEPTED or (
        st.phase == Phase.HELD and st.held_action == HELD_ACCEPT
    )
    return accepted and not node.unschedulable and _eligible_partner(member)


def plan_fabric_pass(obs: FabricObserved) -> FabricStep:
    """Read the finished pairs, carry on the started ones, plan verdicts and new pairs."""
    members = {m.node.name: m for m in obs.members}
    b = _Builder(obs, members)
    for pp in sorted(_pairs(obs.members).values(), key=lambda p: p.labels.pair):
        _step_pair(b, pp)
    busy = {n for pair in b.running for n in pair.members}
    waiting_members = [
        m for m in obs.members if m.na.status.phase == Phase.FABRIC and m.na.status.fabric
    ]
    waiting = tuple(
        WaitingNode(m.node.name, (m.na.status.fabric.waiting_since or obs.now))
        for m in waiting_members
        if m.na.status.fabric is not None
    )
    # A waiting node that cannot take a pod now (e.g. its GPU count dropped to 0) is
    # never paired, but still judged and given its verdict at the deadline.
    unavailable = frozenset(
        m.node.name for m in waiting_members if m.node.name not in busy and not _eligible_partner(m)
    )
    idle = frozenset(m.node.name for m in obs.members if _is_partner(m)) - busy
    situation = FabricSituation(
        waiting=waiting,
        idle_accepted=idle,
        results=tuple(_results(obs.members, b.new_results)),
        running=tuple(b.running),
        now=obs.now,
        unavailable=unavailable,
    )
    plan = plan_fabric(situation, FabricPairingParams.from_policy(obs.spec.fabric))
    # Results first (both statuses), then the read pods go, then pods start: a restart
    # between any two writes finds what it needs in the API server.
    writes: list[tuple[str, Action]] = [
        (node, PatchNAStatus(members[node].na.name, members[node].na.resource_version, st))
        for node, st in sorted(b.statuses.items())
    ]
    writes += [(node, DeleteProbePod(pod.name, force=pod.ended)) for node, pod in b.deletes]
    writes += b.writes
    started: list[NodePair] = []
    if not obs.spec.paused:
        planned_at = obs.now.isoformat()
        for pair in plan.next_pairs:
            first = members[pair.first]
            labels = FabricPodLabels(
                fabric_pair_id(pair.first, pair.second, planned_at), 0, pair.first, pair.second
            )
            request = FabricPodRequest(
                labels=labels,
                node=first.node,
                policy_name=obs.policy.name,
                spec=obs.spec,
                rendezvous_address=None,
                applied_taints=first.na.status.applied_taints,
            )
            name = fabric_pod_name(obs.config.pod_prefix, labels.pair, 0)
            writes.append(
                (pair.first, CreateProbePod(name, fabric_pod_manifest(request, obs.config)))
            )
            started.append(pair)
    wake = _wake_in(obs, waiting, params_deadline=obs.spec.fabric.deadline_seconds)
    if b.running or started:
        wake = POLL_SECONDS if wake is None else min(wake, POLL_SECONDS)
    verdicts = {
        n: v for n, v in plan.verdicts.items() if members[n].na.status.phase == Phase.FABRIC
    }
    return FabricStep(tuple(writes), verdicts, tuple(started), wake)


def _wake_in(
    obs: FabricObserved, waiting: Iterable[WaitingNode], *, params_deadline: int
) -> float | None:
    """Seconds to the next waiting node's deadline (then its verdict is due)."""
    deadlines = [
        (w.waiting_since + timedelta(seconds=params_deadline) - obs.now).total_seconds()
        for w in waiting
    ]
    future = [d for d in deadlines if d > 0]
    return max(min(future), 0.5) if future else None
