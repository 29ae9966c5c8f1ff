"""``reconcile(observed, judge) -> Plan``: the operator's whole decision logic.

Level-triggered, in the style of controller-runtime: whatever woke the
operator up (a node event, a pod event, a policy change, a restart), this
looks at what *is* and plans what *should be*. Applying a plan and reconciling
again yields a plan without writes, which is what makes duplicate events and
restarts harmless.

Fail safe: every unsure path (error, timeout, quarantine limit, paused, invalid or
mismatched report) leaves the node out of service, under the pending taint or
quarantined. An error never accepts a node.

This module picks the phase; each phase is planned in its own module:
:mod:`.pending`, :mod:`.probing`, :mod:`.decided`, with verdicts recorded by
:mod:`.verdict`, over one :class:`~.context.NodeContext` per node.
"""

from __future__ import annotations

from dataclasses import replace

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.api import OPT_OUT_ANNOTATION, REPROBE_ANNOTATION
from gpuaccept.contracts.nodeacceptance import (
    Condition,
    ConditionStatus,
    NodeAcceptanceStatus,
    Phase,
)
from gpuaccept.operator.core.capacity import adopting
from gpuaccept.operator.core.draclaim import claims_to_delete, without_claims
from gpuaccept.operator.core.fabric.membership import is_member
from gpuaccept.operator.core.fencerules import with_fence_rules
from gpuaccept.operator.core.model import (
    CreateNodeAcceptance,
    DeleteNodeAcceptance,
    DeleteProbePod,
    DeleteResourceClaim,
    Judge,
    NodeSnapshot,
    OperatorConfig,
    PatchNAStatus,
    Plan,
)
from gpuaccept.operator.core.nodecontext import (
    WAIT_FOR_DELETION_SECONDS,
    NodeContext,
    PlanBuilder,
)
from gpuaccept.operator.core.phases.decided import plan_decided
from gpuaccept.operator.core.phases.fabric import plan_fabric_phase
from gpuaccept.operator.core.phases.pending import plan_pending
from gpuaccept.operator.core.phases.probing import plan_probing
from gpuaccept.operator.core.phases.released import plan_release, plan_released, unapplied_release
from gpuaccept.operator.core.phases.reverifying import targeted
from gpuaccept.operator.core.phases.unknown import plan_unknown_phase
from gpuaccept.operator.core.podidentity import PodSplit, split_pods, with_recorded
from gpuaccept.operator.core.transitions import (
    DECIDED,
    attempt_abandoned,
    new_round,
    opted_out,
)

__all__ = ["reconcile"]


def reconcile(observed: NodeSnapshot, judge: Judge) -> Plan:
    """Plan the writes that bring the cluster in line for one node: its phase's, and
    its fenced GPUs' DeviceTaintRules in line with the status it leaves
    (core/fencerules.py)."""
    return with_fence_rules(observed, _reconcile(observed, judge), _fence_effect(observed))


def _fence_effect(observed: NodeSnapshot) -> str | None:
    """The node's policy's fence effect; None without a single valid policy."""
    if len(observed.policies) != 1 or observed.policies[0].spec is None:
        return None
    return observed.policies[0].spec.fencing.effect.value


def _reconcile(observed: NodeSnapshot, judge: Judge) -> Plan:
    split = _own_pods(observed)
    observed = replace(observed, pods=split.ours)
    out = PlanBuilder(observed)
    node = observed.node
    if node is None:
        return _node_deleted(_with_crashed(observed, split), out)
    if len(observed.policies) != 1:
        # 0: not governed. >= 2: a conflict, reported on the policies. No action.
        return out.build("no policy" if not observed.policies else "policy conflict")
    policy = observed.policies[0]
    spec = policy.spec
    if spec is None:
        return out.build(f"policy {policy.name} invalid: {policy.error}")
    spec = _as_configured(spec, observed.config)
    na = observed.na
    status = na.status if na is not None else NodeAcceptanceStatus()
    # during a suspect's re-verification, its policy with only the suspected checks
    ctx = targeted(NodeContext(observed, judge, node, policy, spec, status, split.foreign))
    if na is not None and na.unknown_phase is not None:  # a newer release's (a rollback)
        return plan_unknown_phase(ctx, out, na.unknown_phase)
    if na is not None and _watch_pods_only(split):
        return _with_record(ctx, out, _folded(ctx, split), split)
    return _phases(ctx, out, split)


def _phases(ctx: NodeContext, out: PlanBuilder, split: PodSplit) -> Plan:
    first = _new_node(ctx, out) if ctx.obs.na is None else _record_pods(ctx, out, split)
    first = (
        first
        or _crash_window_pods(ctx, out, split)
        or _spent_claims(ctx, out)
        or _before_any_phase(ctx, out)
    )
    if first is not None:
        return first
    if ctx.spec.paused:
        return _paused(ctx, out)
    return _by_phase(ctx, out)


def _watch_pods_only(split: PodSplit) -> bool:
    """The pods just created, their UIDs not on record yet, are all watch pods."""
    watch = {p.name for p in split.ours if p.watch is not None}
    return bool(split.to_record) and all(r.name in watch for r in split.to_record)


def _folded(ctx: NodeContext, split: PodSplit) -> NodeContext:
    """``ctx`` whose status has the new watch pods' UIDs on record: they ride the
    status write the phase makes anyway (the in-service ledger's: one write a
    window, docs/benchmarks.md "One status write per window")."""
    present = [*(p.name for p in split.ours), *(f.pod.name for f in split.foreign)]
    return replace(ctx, status=with_recorded(ctx.status, split.to_record, present))


def _with_record(ctx: NodeContext, out: PlanBuilder, folded: NodeContext, split: PodSplit) -> Plan:
    """The phases' plan for ``folded``; the record written alone first when that plan
    writes no status (a pod is read only once its UID is on record)."""
    plan = _phases(folded, out, replace(split, to_record=()))
    if any(isinstance(a, PatchNAStatus) for a in plan.actions):
        return plan
    alone = PlanBuilder(ctx.obs)
    alone.write_status(ctx.status, folded.status)
    return replace(plan, actions=(*alone.actions, *plan.actions))


def _as_configured(
    spec: NodeAcceptancePolicySpec, config: OperatorConfig
) -> NodeAcceptancePolicySpec:
    """The policy as this operator runs it: without watch pods under --no-watch-pods."""
    if spec.in_service.watch_pods and not config.watch_pods:
        watchless = spec.in_service.model_copy(update={"watch_pods": False})
        return spec.model_copy(update={"in_service": watchless})
    return spec


def _by_phase(ctx: NodeContext, out: PlanBuilder) -> Plan:
    """The plan of the node's phase module."""
    node, spec, status = ctx.node, ctx.spec, ctx.status
    if status.phase == Phase.RELEASED:
        return plan_released(ctx, out)
    if status.phase == Phase.FABRIC:
        return plan_fabric_phase(ctx, out)
    if status.phase in DECIDED:
        return plan_decided(ctx, out)
    if REPROBE_ANNOTATION in node.annotations and spec.reprobe.on_annotation:
        # Not probed yet in this round: the coming probe satisfies the request. Set
        # while a probe runs, it is kept: it may have been asked for after whatever
        # that probe measures (a repair), so it starts a round once this one is decided.
        out.remove_annotation = status.phase != Phase.PROBING
    if status.phase == Phase.PROBING:
        return plan_probing(ctx, out)
    return plan_pending(ctx, out)


def _own_pods(observed: NodeSnapshot) -> PodSplit:
    """Only the operator's own pods (their UIDs on record, or just created) are the
    phases' to read and delete; the others are left alone (core/podidentity.py)."""
    na = observed.na
    return split_pods(
        observed.pods,
        na.status if na is not None else NodeAcceptanceStatus(),
        observed.created_pods,
        node=observed.node_name,
        owner=na.uid if na is not None else "",
    )


def _record_pods(ctx: NodeContext, out: PlanBuilder, split: PodSplit) -> Plan | None:
    """Pods just created: their UIDs on record before anything else is planned."""
    if not split.to_record:
        return None
    status = ctx.status
    present = [*(p.name for p in split.ours), *(f.pod.name for f in split.foreign)]
    out.write_status(status, with_recorded(status, split.to_record, present))
    return out.build("probe pod recorded: " + ", ".join(p.name for p in split.to_record))


def _crash_window_pods(ctx: NodeContext, out: PlanBuilder, split: PodSplit) -> Plan | None:
    """The operator's own pods created just before a restart, their UIDs never
    recorded (core/creationintent.py): deleted unread before any phase runs, and the
    attempt one of them served given back. An undecided node plans nothing else until
    they are gone (one probe pod on the node at a time); a decided one goes on (None):
    a pod stuck terminating on a dead kubelet must not hold its phase."""
    if not split.crashed:
        return None
    for pod in split.crashed:
        if not pod.deleting:
            out.delete_pod(pod)
    if ctx.status.phase not in UNDECIDED:
        return None
    names = {pod.name for pod in split.crashed}
    if ctx.status.phase == Phase.PROBING and ctx.status.probe_pod in names:
        attempt_abandoned(
            ctx,
            out,
            message=f"the probe pod {ctx.status.probe_pod} was created just before an "
            "operator restart, its UID never recorded: deleted unread, a new attempt follows",
        )
    out.ensure_node(ctx, ctx.status)
    out.wake_in(WAIT_FOR_DELETION_SECONDS)
    return out.build("crash-window pods deleted: " + ", ".join(sorted(names)))


def _spent_claims(ctx: NodeContext, out: PlanBuilder) -> Plan | None:
    """The probe claims on record that no attempt needs any more, and the fabric pods'
    claims of a node that is no longer a member of its fabric pass (core/draclaim.py):
    deleted (the executor checks each one's nonce first: a claim another creator made
    under the name is left), then their intents dropped; a crash in between deletes
    them again."""
    status = ctx.status
    member = is_member(status, ctx.policy.name, ctx.spec, ctx.node.labels)
    names = claims_to_delete(status, ctx.obs.pods, fabric_member=member)
    if not names:
        return None
    intents = tuple(status.creation_intents)
    out.actions.extend(DeleteResourceClaim(name, intents) for name in names)
    out.write_status(status, without_claims(status, names))
    out.wake_in(1)
    return out.build("probe claims deleted: " + ", ".join(names))


def _new_node(ctx: NodeContext, out: PlanBuilder) -> Plan:
    """Its NodeAcceptance is created. A node found in service is taken out (the
    pending taint) only as the limit allows: its phase Pending decides
    (core/phases/pending.py). An opted-out node is left alone."""
    node, status = ctx.node, ctx.status
    out.actions.append(CreateNodeAcceptance(node.name, ctx.policy.name))
    in_service = adopting(status, node, ctx.spec.pending_taint_key)
    if OPT_OUT_ANNOTATION not in node.annotations and not in_service:
        out.ensure_node(ctx, status)
    return out.build("new node")


def _before_any_phase(ctx: NodeContext, out: PlanBuilder) -> Plan | None:
    """An opted-out node, a new node under an old name, a status the API server
    refused, or a release to apply; else None."""
    status, node, error = ctx.status, ctx.node, ctx.obs.status_write_error
    opted_out = _opt_out(ctx, out)
    if opted_out is not None:
        return opted_out
    if status.node_uid and node.uid and status.node_uid != node.uid:
        # Deleted and created again under its name: a new node, nothing inherited.
        message = f"node {node.name} was re-created (UID {status.node_uid} -> {node.uid})"
        return new_round(ctx, out, reason="NodeRecreated", message=message)
    if error and status.phase != Phase.PROBING:
        return _status_refused(ctx, out, error)
    request = unapplied_release(ctx)  # a person's word: applied even when paused
    if request is not None:
        return plan_release(ctx, out, request)
    return None


def _opt_out(ctx: NodeContext, out: PlanBuilder) -> Plan | None:
    """The node's ``gpuaccept.io/opt-out`` annotation: left alone (no probe, no
    taint, label or condition change; a running probe pod of its own goes, its
    attempt given back), and the status says so in its condition ``OptedOut``.
    None when the node is not opted out (the condition comes off first)."""
    st, node, now = ctx.status, ctx.node, ctx.obs.now
    others = [c for c in st.conditions if c.type != CONDITION_OPTED_OUT]
    if OPT_OUT_ANNOTATION not in node.annotations:
        if len(others) == len(st.conditions):
            return None
        out.write_status(st, st.model_copy(update={"conditions": others}))
        return out.build("opt-out lifted")
    condition = next((c for c in st.conditions if c.type == CONDITION_OPTED_OUT), None)
    if condition is None:
        condition = Condition(
            type=CONDITION_OPTED_OUT,
            status=ConditionStatus.TRUE,
            reason="Annotation",
            message=f"the node has the annotation {OPT_OUT_ANNOTATION}: the operator "
            "leaves it alone (no probe, no taint, label or condition change)",
            last_transition_time=now,
        )
    opted_out(ctx, out, [*others, condition])
    for pod in ctx.obs.pods:
        if not pod.deleting:
            out.delete_pod(pod)
    return out.build("opted out")


UNDECIDED = frozenset({Phase.PENDING, Phase.PROBING, Phase.STALLED, Phase.FABRIC, Phase.WAITING})


def _paused(ctx: NodeContext, out: PlanBuilder) -> Plan:
    """No new probes, nothing decided changes; undecided nodes stay out of service
    (a node found in service is left in it)."""
    status, spec = ctx.status, ctx.spec
    if status.phase in UNDECIDED and not adopting(status, ctx.node, spec.pending_taint_key):
        out.ensure_node(ctx, status)
    if status.policy is None:  # a new node: counted under its policy at once
        out.write_status(status, ctx.stamped(status))
    return out.build("paused")


CONDITION_OPTED_OUT = "OptedOut"

# How long a refused status write (400/422) is not tried again outside Probing.
STATUS_REFUSED_RETRY_SECONDS = 300.0


def _status_refused(ctx: NodeContext, out: PlanBuilder, error: str) -> Plan:
    """The API server refused the status this node's last plan wrote (outside
    Probing: a re-judge, a new round, a wait). Writing it again would be refused
    the same way, so nothing is written: the node stays as its stored status says
    (the executor logs the refusal), and the write is tried again later (the
    executor forgets the refusal after :data:`STATUS_REFUSED_RETRY_SECONDS`). In
    Probing the attempt ends instead (:mod:`.probing`)."""
    out.ensure_node(ctx, ctx.status)
    out.wake_in(STATUS_REFUSED_RETRY_SECONDS)
    return out.build(f"status write refused, kept as it was: {error}")


def _node_deleted(observed: NodeSnapshot, out: PlanBuilder) -> Plan:
    """Node deleted: its NodeAcceptance and probe pods go too."""
    if observed.na is not None:
        out.actions.append(DeleteNodeAcceptance(observed.na.name))
    for pod in observed.pods:
        if not pod.deleting:
            out.actions.append(DeleteProbePod(pod.name, force=True))
    return out.build("node deleted")


def _with_crashed(observed: NodeSnapshot, split: PodSplit) -> NodeSnapshot:
    """A deleted node's snapshot whose pods include its crash-window pods: they go too."""
    return replace(observed, pods=(*split.ours, *split.crashed))
