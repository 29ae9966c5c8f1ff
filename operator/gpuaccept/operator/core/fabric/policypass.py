"""The fabric pairs of one policy (pure): read finished pairs into both nodes'
statuses, start each pair's second pod once the first has an IP, and plan the
next pairs and the verdicts with :func:`.pairing.plan_fabric`
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
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from gpuaccept.checks import fabric_allreduce
from gpuaccept.checks.fabric_allreduce import CHECK
from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.api import ACCEPTANCE_KIND
from gpuaccept.contracts.nodeacceptance import (
    MAX_FABRIC_PAIRS,
    FabricPairRecord,
    FabricStatus,
    GpuPublishing,
    NodeAcceptanceStatus,
    Phase,
)
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core.creationintent import intended_create
from gpuaccept.operator.core.draclaim import (
    fabric_claims_to_delete,
    intended_claim,
    without_claims,
)
from gpuaccept.operator.core.fabric.membership import (
    can_take_fabric_pod,
    is_idle_partner,
)
from gpuaccept.operator.core.fabric.pairing import (
    FabricPairingParams,
    FabricSituation,
    NodePair,
    PairResult,
    WaitingNode,
    pair_outcome,
    plan_fabric,
    pod_outcome,
)
from gpuaccept.operator.core.gpupublishing import NO_GPUS_PUBLISHED, PublishedGpus, counted_node
from gpuaccept.operator.core.model import (
    Action,
    CreatedPod,
    DeleteProbePod,
    DeleteResourceClaim,
    EmitEvent,
    FabricPodLabels,
    FabricVerdict,
    NAView,
    NodeView,
    OperatorConfig,
    PairOutcome,
    PatchNAStatus,
    PodView,
    PolicyView,
)
from gpuaccept.operator.core.podidentity import (
    REASON_POD_NAME_TAKEN,
    split_pods,
    with_recorded,
)
from gpuaccept.operator.core.podspec import (
    FabricPodRequest,
    fabric_claim_manifest,
    fabric_pair_id,
    fabric_pair_nonce,
    fabric_pod_manifest,
    fabric_pod_name,
)
from gpuaccept.operator.core.report_trust import trusted_report

PARTNER_START_GRACE_SECONDS = 120
"""How long a rank-0 pod may wait for its IP (and so for its partner pod) after it
was created, before the pair is given up as incomplete."""
POLL_SECONDS = 30.0
"""How soon the pairs are looked at again while one runs (pod events come sooner)."""


@dataclass(frozen=True)
class FabricMember:
    """A node under the policy that takes part in fabric tests: waiting (phase
    Fabric), or decided with fabric results or as a possible partner."""

    node: NodeView
    na: NAView
    pods: tuple[PodView, ...] = ()  # every probe pod on the node
    # How it publishes its GPUs (core/gpupublishing.py): a DRA node's fabric pods get
    # them through a claim each, as its probe pod does (core/draclaim.py).
    gpus: PublishedGpus = NO_GPUS_PUBLISHED

    @property
    def dra(self) -> bool:
        return self.gpus.mode == GpuPublishing.DRA

    @property
    def counted(self) -> NodeView:
        """The node as its pods are sized and its reports held to (a DRA node's
        complete pools' GPUs as its nvidia.com/gpu)."""
        return counted_node(self.node, self.gpus)


@dataclass(frozen=True)
class FabricSnapshot:
    policy: PolicyView
    spec: NodeAcceptancePolicySpec
    members: tuple[FabricMember, ...]  # those for which membership.is_member holds
    now: datetime
    config: OperatorConfig = field(default_factory=OperatorConfig)
    # The fabric pods this process created, by node and name, until the statuses
    # record them; and, by node, a pod name whose create was answered AlreadyExists
    # (core/podidentity.py).
    created_pods: Mapping[str, Mapping[str, CreatedPod]] = field(default_factory=dict)
    names_taken: Mapping[str, str] = field(default_factory=dict)
    # A random value drawn by the runtime for this pass: the seed of its pods' nonces
    # (core/creationintent.py). Never stored.
    nonce_seed: str = ""
    # The operator process's random key, from which each new pair's nonce is derived
    # (fabric_pair_nonce); empty: pairs without a nonce. The partner's pod copies rank
    # 0's, so a restarted operator (another key) still gives both pods the same one.
    pair_key: bytes = b""


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


@dataclass(frozen=True)
class PodResult:
    """What one ended pod says about its pair."""

    outcome: PairOutcome
    busbw_gbps: float | None
    why: str


def _pod_result(pod: PodView, member: FabricMember | None, obs: FabricSnapshot) -> PodResult:
    """One ended pod's outcome, judged against the policy's current minimum."""
    if member is None or not pod.message:
        return PodResult(PairOutcome.INCOMPLETE, None, f"pod {pod.name}: no report")
    report = trusted_report(
        pod.message, member.counted, accept_simulated=obs.config.accept_simulated_reports, pod=pod
    )
    if not isinstance(report, ProbeReport):
        return PodResult(PairOutcome.INCOMPLETE, None, f"pod {pod.name}: {report.message}")
    result = next((r for r in report.results if r.check == CHECK), None)
    fabric = obs.spec.fabric
    outcome = pod_outcome(result, fabric.min_busbw_gbps, require_rdma=fabric.require_rdma)
    busbw = None
    if result is not None:
        try:
            busbw = fabric_allreduce.parse(result.observed).busbw_gbps
        except ValueError:
            busbw = None
    return PodResult(outcome, busbw, (result.message if result is not None else "")[:200])


def _combined(results: list[PodResult], extra: tuple[PairOutcome, ...] = ()) -> PodResult:
    """The pair's result from its ended pods' (``extra``: outcomes without a pod)."""
    figures = [r.busbw_gbps for r in results if r.busbw_gbps is not None]
    return PodResult(
        pair_outcome([*(r.outcome for r in results), *extra]),
        max(figures) if figures else None,
        "; ".join(r.why for r in results if r.why),
    )


@dataclass
class _PassBuilder:
    """One pass's writes as it reads the pairs: statuses, deletions, second pods."""

    obs: FabricSnapshot
    members: dict[str, FabricMember]
    writes: list[tuple[str, Action]] = field(default_factory=list)
    statuses: dict[str, NodeAcceptanceStatus] = field(default_factory=dict)
    new_results: list[PairResult] = field(default_factory=list)
    running: list[NodePair] = field(default_factory=list)
    deletes: list[tuple[str, PodView]] = field(default_factory=list)
    foreign: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # node -> pod names
    creating: dict[str, set[str]] = field(default_factory=dict)  # node -> pods created now
    claim_deletes: list[tuple[str, DeleteResourceClaim]] = field(default_factory=list)

    def name_taken(self, node: str, name: str) -> bool:
        """A pod the operator did not create holds ``name`` on ``node``, or the create
        of ``name`` was answered AlreadyExists."""
        return name in self.foreign.get(node, ()) or self.obs.names_taken.get(node) == name

    def create(self, request: FabricPodRequest) -> None:
        """The pod of ``request`` on its node: the intent to create it (and, on a DRA
        node, its claim's) into the node's status (written before every create of the
        pass), then the claim's create, then the pod's (core/creationintent.py)."""
        node, obs = request.node.name, self.obs
        st = self.status(node)
        if st is None:
            return
        name = fabric_pod_name(obs.config.pod_prefix, request.labels.pair, request.labels.rank)
        if request.claim:
            claim_manifest = fabric_claim_manifest(request, obs.config)
            st, claim = intended_claim(st, obs.nonce_seed, claim_manifest, fabric=True)
            self.writes.append((node, claim))
        manifest = fabric_pod_manifest(request, obs.config)
        self.statuses[node], create = intended_create(st, obs.nonce_seed, name, manifest)
        self.writes.append((node, create))
        self.creating.setdefault(node, set()).add(name)

    def spent_claims(self) -> None:
        """The fabric claims on record that no pod of a member needs (core/draclaim.py):
        deleted first of the pass's writes, then their intents dropped with its
        statuses (a restart in between deletes them again)."""
        for node, member in sorted(self.members.items()):
            st = self.status(node)
            if st is None:
                continue
            names = fabric_claims_to_delete(st, member.pods, self.creating.get(node, ()))
            if not names:
                continue
            intents = tuple(st.creation_intents)
            self.claim_deletes += [(node, DeleteResourceClaim(n, intents)) for n in names]
            self.statuses[node] = without_claims(st, names)

    def status(self, node: str) -> NodeAcceptanceStatus | None:
        member = self.members.get(node)
        if member is None:
            return None
        return self.statuses.get(node, member.na.status)

    def record(self, pods: _PairPods, result: PodResult) -> None:
        """The pair's result into both nodes' statuses (those that lack it)."""
        now = self.obs.now
        self.new_results.append(PairResult(pods.pair, result.outcome, result.busbw_gbps, now))
        for rank, node in enumerate((pods.labels.first, pods.labels.second)):
            st = self.status(node)
            if st is None or _recorded(self.members[node].na, pods.labels.pair):
                continue
            fabric = st.fabric or FabricStatus()
            record = FabricPairRecord(
                pair=pods.labels.pair,
                partner=pods.pair.partner_of(node),
                node_rank=rank,
                outcome=result.outcome.value,
                busbw_gbps=result.busbw_gbps,
                finished_at=now,
                message=result.why[:240],
            )
            pairs = [*fabric.pairs, record][-MAX_FABRIC_PAIRS:]
            summary = fabric.summary if fabric.verdict else _running_summary(pairs)
            self.statuses[node] = st.model_copy(
                update={"fabric": fabric.model_copy(update={"pairs": pairs, "summary": summary})}
            )

    def finish(self, pods: _PairPods, result: PodResult) -> None:
        """The pair is over: its result recorded, its pods deleted."""
        self.record(pods, result)
        self.delete(pods)

    def delete(self, pods: _PairPods) -> None:
        for pod in pods.pods:
            if not pod.deleting:
                node = pods.labels.first if pod is pods.rank0 else pods.labels.second
                self.deletes.append((node, pod))


def _running_summary(pairs: list[FabricPairRecord]) -> str:
    last = pairs[-1]
    figure = f" {last.busbw_gbps:.1f} GB/s" if last.busbw_gbps is not None else ""
    return f"pair {len(pairs)} {last.outcome}{figure}"[:64]


def _can_take_pod(member: FabricMember | None) -> bool:
    return member is not None and can_take_fabric_pod(member.counted, member.pods)


def _request(
    obs: FabricSnapshot,
    member: FabricMember,
    labels: FabricPodLabels,
    rendezvous_address: str | None,
    nonce: str,
) -> FabricPodRequest:
    """The pod of rank ``labels.rank`` on ``member``: on a DRA node through the claim
    named as the pod, one rank per GPU of its complete pools."""
    name = fabric_pod_name(obs.config.pod_prefix, labels.pair, labels.rank)
    return FabricPodRequest(
        labels=labels,
        node=member.node,
        policy_name=obs.policy.name,
        spec=obs.spec,
        rendezvous_address=rendezvous_address,
        applied_taints=member.na.status.applied_taints,
        owner_uid=member.na.uid,
        nonce=nonce,
        claim=name if member.dra else "",
        dra_gpus=member.gpus.dra_gpus if member.dra else (),
    )


def _incomplete(why: str) -> PodResult:
    return PodResult(PairOutcome.INCOMPLETE, None, why)


def _step_pair(b: _PassBuilder, pods: _PairPods) -> None:
    """Carry one pair on by the state its pods are in."""
    labels = pods.labels
    first, second = b.members.get(labels.first), b.members.get(labels.second)
    if _recorded(first.na if first else None, labels.pair) and _recorded(
        second.na if second else None, labels.pair
    ):
        b.delete(pods)  # read already: the pods are leftovers
    elif pods.rank1 is None:
        if pods.rank0 is not None:
            _second_pod_due(b, pods, pods.rank0, second)
    elif pods.rank0 is None:
        _rank0_gone(b, pods, pods.rank1, second)
    elif pods.rank0.ended and pods.rank1.ended:
        b.finish(
            pods,
            _combined(
                [_pod_result(pods.rank0, first, b.obs), _pod_result(pods.rank1, second, b.obs)]
            ),
        )
    else:
        _both_started(b, pods, first, second)


def _second_pod_due(
    b: _PassBuilder, pods: _PairPods, rank0: PodView, second: FabricMember | None
) -> None:
    """Only the rank-0 pod exists: start the partner's pod once it has an IP, or give
    the pair up (the pod ended, the partner cannot take a pod, it waited too long, a
    pod the operator did not create holds the partner pod's name)."""
    obs, labels = b.obs, pods.labels
    name = fabric_pod_name(obs.config.pod_prefix, labels.pair, 1)
    if _partner_name_taken(b, pods, name, second):
        return
    waited = obs.now - (rank0.created or obs.now) >= timedelta(seconds=PARTNER_START_GRACE_SECONDS)
    if rank0.ended or rank0.deleting or not _can_take_pod(second) or waited:
        b.finish(pods, _incomplete("the partner pod was never created"))
        return
    if rank0.pod_ip and second is not None:
        rank1 = FabricPodLabels(labels.pair, 1, labels.first, labels.second)
        b.create(_request(obs, second, rank1, rank0.pod_ip, rank0.fabric_nonce))
    b.running.append(pods.pair)


def _partner_name_taken(
    b: _PassBuilder, pods: _PairPods, name: str, second: FabricMember | None
) -> bool:
    """A pod the operator did not create holds the name of the pair's second pod: it
    is never read; the pair ends incomplete (evidence against neither node), and a
    Warning Event on the partner's NodeAcceptance names the pod, left for a person."""
    if second is None or not b.name_taken(second.node.name, name):
        return False
    message = (
        f"a pod {b.obs.config.namespace}/{name} that gpuaccept did not create holds the name "
        f"of the second pod of the fabric pair {pods.labels.pair}: it is not read, and is "
        "left in place for a person to inspect and delete; the pair is recorded incomplete "
        "(evidence against neither node)"
    )
    b.writes.append((second.node.name, _warning(second.na, message)))
    b.finish(pods, _incomplete(f"the partner pod's name {name} is taken"))
    return True


def _warning(na: NAView, message: str) -> EmitEvent:
    return EmitEvent(
        ACCEPTANCE_KIND, na.name, na.uid, "Warning", REASON_POD_NAME_TAKEN, message[:1000]
    )


def _rank0_gone(
    b: _PassBuilder, pods: _PairPods, rank1: PodView, second: FabricMember | None
) -> None:
    """The rank-0 pod went away: the rank-1 pod's result if it ended, else incomplete."""
    if rank1.ended:
        result = _pod_result(rank1, second, b.obs)
        why = result.why or "the rank-0 pod went away"
        b.finish(pods, PodResult(pair_outcome([result.outcome]), result.busbw_gbps, why))
    else:
        b.finish(pods, _incomplete("the rank-0 pod went away"))


def _both_started(
    b: _PassBuilder, pods: _PairPods, first: FabricMember | None, second: FabricMember | None
) -> None:
    """Both pods exist, not both ended: running, or past the pair's deadline."""
    obs = b.obs
    timeout = timedelta(
        seconds=obs.config.fabric.timeout_seconds + obs.config.deadline_grace_seconds
    )
    started = min(p.created or obs.now for p in pods.pods)
    if obs.now - started < timeout:
        b.running.append(pods.pair)
        return
    ended = [
        _pod_result(p, first if p is pods.rank0 else second, obs) for p in pods.pods if p.ended
    ]
    result = _combined(ended, (PairOutcome.INCOMPLETE,))
    b.finish(pods, PodResult(result.outcome, result.busbw_gbps, "the pair ran past its deadline"))


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


def _own_pods(obs: FabricSnapshot) -> tuple[dict[str, FabricMember], _PassBuilder]:
    """Each member with only the operator's own pods (core/podidentity.py), and a pass
    builder that records the UIDs of pods only the create's answer vouches for yet."""
    members: dict[str, FabricMember] = {}
    records: dict[str, NodeAcceptanceStatus] = {}
    foreign: dict[str, tuple[str, ...]] = {}
    for member in obs.members:
        name, st = member.node.name, member.na.status
        split = split_pods(
            member.pods,
            st,
            obs.created_pods.get(name, {}),
            node=name,
            owner=member.na.uid,
        )
        members[name] = replace(member, pods=split.ours)
        foreign[name] = tuple(f.pod.name for f in split.foreign)
        if split.to_record:
            records[name] = with_recorded(st, split.to_record, [p.name for p in member.pods])
    return members, _PassBuilder(obs, members, statuses=records, foreign=foreign)


def plan_fabric_pass(obs: FabricSnapshot) -> FabricStep:
    """Read the finished pairs, carry on the started ones, plan verdicts and new pairs."""
    members, b = _own_pods(obs)
    for pods in sorted(_pairs(members.values()).values(), key=lambda p: p.labels.pair):
        _step_pair(b, pods)
    situation = _situation(obs, b)
    plan = plan_fabric(situation, FabricPairingParams.from_policy(obs.spec.fabric))
    started = () if obs.spec.paused else plan.next_pairs
    for pair in started:
        _first_pod(b, members[pair.first], pair)
    b.spent_claims()
    writes = _ordered_writes(b)
    wake = _wake_in(obs, situation.waiting, params_deadline=obs.spec.fabric.deadline_seconds)
    if b.running or started:
        wake = POLL_SECONDS if wake is None else min(wake, POLL_SECONDS)
    verdicts = {
        n: v for n, v in plan.verdicts.items() if members[n].na.status.phase == Phase.FABRIC
    }
    return FabricStep(tuple(writes), verdicts, tuple(started), wake)


def _situation(obs: FabricSnapshot, b: _PassBuilder) -> FabricSituation:
    """What the pairing algorithm sees once the pairs were read."""
    busy = {n for pair in b.running for n in pair.members}
    waiting: list[WaitingNode] = []
    unavailable: set[str] = set()
    idle: set[str] = set()
    rebooted: set[str] = set()
    for name, m in b.members.items():
        st = m.na.status
        if st.probed_boot_id and st.probed_boot_id != m.node.boot_id:
            rebooted.add(name)
        if st.phase == Phase.FABRIC and st.fabric is not None:
            waiting.append(WaitingNode(name, st.fabric.waiting_since or obs.now))
            # A waiting node that cannot take a pod now (e.g. its GPU count dropped to
            # 0) is never paired, but still judged and given its verdict at the deadline.
            if name not in busy and not _can_take_pod(m):
                unavailable.add(name)
        if name not in busy and is_idle_partner(st, m.counted, m.pods):
            idle.add(name)
    return FabricSituation(
        waiting=tuple(waiting),
        idle_accepted=frozenset(idle),
        results=tuple(_results(b.members.values(), b.new_results)),
        running=tuple(b.running),
        now=obs.now,
        unavailable=frozenset(unavailable),
        rebooted=frozenset(rebooted),
    )


def _ordered_writes(b: _PassBuilder) -> list[tuple[str, Action]]:
    """Spent claims go first, then results (both statuses), then the read pods go,
    then pods start (a DRA node's claim before its pod): a restart between any two
    writes finds what it needs in the API server."""
    writes: list[tuple[str, Action]] = list(b.claim_deletes)
    writes += [
        (node, PatchNAStatus(b.members[node].na.name, b.members[node].na.resource_version, st))
        for node, st in sorted(b.statuses.items())
    ]
    writes += [(node, DeleteProbePod(pod.name, force=pod.ended)) for node, pod in b.deletes]
    return writes + b.writes


def _first_pod(b: _PassBuilder, first: FabricMember, pair: NodePair) -> None:
    """The rank-0 pod of a new pair (its IP is the partner's rendezvous address)."""
    obs = b.obs
    planned_at = obs.now.isoformat()
    labels = FabricPodLabels(
        fabric_pair_id(pair.first, pair.second, planned_at), 0, pair.first, pair.second
    )
    b.create(_request(obs, first, labels, None, fabric_pair_nonce(obs.pair_key, labels.pair)))


def _wake_in(
    obs: FabricSnapshot, waiting: Iterable[WaitingNode], *, params_deadline: int
) -> float | None:
    """Seconds to the next waiting node's deadline (then its verdict is due)."""
    deadlines = [
        (w.waiting_since + timedelta(seconds=params_deadline) - obs.now).total_seconds()
        for w in waiting
    ]
    future = [d for d in deadlines if d > 0]
    return max(min(future), 0.5) if future else None
