"""Phases ``Pending`` and ``Stalled``: clear out old pods, wait out backoff and
GPUs (until the policy's ``waitForGPUs`` deadline), start an attempt."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gpuaccept.contracts.api import GPU_RESOURCE, REPROBE_ANNOTATION
from gpuaccept.contracts.nodeacceptance import GpuPublishing, NodeAcceptanceStatus
from gpuaccept.contracts.policy_fields import GPUWaitExpiry
from gpuaccept.operator.core.capacity import REASON_QUARANTINE_LIMIT, adopting, take_out_allowed
from gpuaccept.operator.core.creationintent import creation_nonce, with_nonce
from gpuaccept.operator.core.draclaim import RESOURCE_CLAIM
from gpuaccept.operator.core.gpusharing import REASON_GPU_SHARING, sharing_refusal
from gpuaccept.operator.core.model import CreateProbePod, CreateResourceClaim, Plan
from gpuaccept.operator.core.nodecontext import (
    REASON_WAITING_FOR_GPUS,
    WAIT_FOR_DELETION_SECONDS,
    NodeContext,
    PlanBuilder,
    cut,
)
from gpuaccept.operator.core.nodestate import REASON_GPUS_UNHEALTHY
from gpuaccept.operator.core.phases.waiting import (
    REASON_CORDONED,
    REASON_UNTOLERATED_TAINT,
    WAIT_REASONS,
    blocked,
    untolerated_taint,
)
from gpuaccept.operator.core.podspec import (
    ProbeAttempt,
    probe_claim_manifest,
    probe_pod_manifest,
    probe_pod_name,
)
from gpuaccept.operator.core.transitions import (
    cordoned,
    probe_started,
    stalled,
    waiting_for_gpus,
)

# Phase Stalled: the node advertised no GPUs within the policy's waitForGPUs deadline.
REASON_NO_GPUS = "NoGPUsAdvertised"
# Phase Pending: a DRA node whose pool is not complete yet (core/gpupublishing.py).
REASON_WAITING_FOR_RESOURCE_SLICES = "WaitingForResourceSlices"
# Phase Waiting: the device plugin and a DRA driver both publish the node's GPUs.
REASON_GPUS_PUBLISHED_TWICE = "GPUsPublishedTwice"


def _attempt(ctx: NodeContext, st: NodeAcceptanceStatus) -> ProbeAttempt:
    """The attempt recorded in ``st`` (its name and serial); on a DRA node, through the
    claim named as its pod, expecting the pool's GPUs (core/draclaim.py)."""
    dra = ctx.gpus.mode == GpuPublishing.DRA
    return ProbeAttempt(
        name=st.probe_pod or "",
        serial=st.pod_serial,
        node=ctx.node,
        policy_name=ctx.policy.name,
        spec=ctx.spec,
        applied_taints=st.applied_taints,
        owner_uid=ctx.obs.na.uid if ctx.obs.na is not None else "",
        claim=(st.probe_pod or "") if dra else "",
        dra_gpus=ctx.gpus.dra_gpus if dra else (),
    )


def probe_manifest(ctx: NodeContext, st: NodeAcceptanceStatus) -> dict[str, Any]:
    """The pod of the attempt recorded in ``st`` (its name and serial)."""
    return probe_pod_manifest(_attempt(ctx, st), ctx.obs.config)


def claim_create(ctx: NodeContext, st: NodeAcceptanceStatus) -> CreateResourceClaim | None:
    """A DRA node's claim of the attempt in ``st``, carrying this pass's nonce (its
    intent must be on record in ``st``); None on a device-plugin node."""
    attempt = _attempt(ctx, st)
    if not attempt.claim:
        return None
    nonce = creation_nonce(ctx.obs.nonce_seed, RESOURCE_CLAIM, attempt.claim)
    manifest = with_nonce(probe_claim_manifest(attempt, ctx.obs.config), nonce)
    return CreateResourceClaim(attempt.claim, manifest, tuple(st.creation_intents))


ADOPTION_RETRY_SECONDS = 30
HELD_ADOPT = "Adopt"  # an in-service node's pending taint, deferred by the limit


def _adopt(ctx: NodeContext, out: PlanBuilder) -> Plan:
    """A node found in service: taken out of service (the pending taint) as the
    limit allows, counted from now; otherwise left in service, retried later."""
    st, obs = ctx.status, ctx.obs
    if ctx.spec.dry_run:  # nothing is taken out: the probe runs beside the workloads
        started = ctx.stamped(st, was_in_service=True)
        out.write_status(st, started)
        out.wake_in(1)
        return out.build("adopted under dryRun: left in service")
    out.needs_limit_lock = True  # takes (or is refused) a slot: one worker at a time
    decision = take_out_allowed(
        ctx.spec, obs.limit_counts, ceiling=obs.config.max_unavailable_ceiling
    )
    if not decision.allowed:
        message = cut(f"quarantine limit: {decision.why}; the node stays in service for now", 1000)
        waiting = ctx.stamped(
            st, reason=REASON_QUARANTINE_LIMIT, held_action=HELD_ADOPT, message=message
        )
        if waiting != st:
            out.write_status(st, waiting)
        out.wake_in(ADOPTION_RETRY_SECONDS)
        return out.build("adoption deferred by the limit")
    adopted = ctx.stamped(
        st,
        was_in_service=True,
        taken_out_time=obs.now,
        taken_out_gpus=None,  # the whole node
        reason=None,
        held_action=None,
    )
    adopted = adopted.model_copy(update={"message": None})
    out.write_status(st, adopted)
    out.ensure_node(ctx, adopted)
    out.wake_in(1)
    return out.build("adopted: taken out of service for its probe")


def plan_pending(ctx: NodeContext, out: PlanBuilder) -> Plan:
    st, spec, obs, node = ctx.status, ctx.spec, ctx.obs, ctx.node
    if adopting(st, node, spec.pending_taint_key):
        return _adopt(ctx, out)
    out.ensure_node(ctx, st)
    # One pod at a time: clear out any earlier pod first.
    for pod in obs.pods:
        if not pod.deleting:
            out.delete_pod(pod)
    if obs.pods:
        out.wake_in(WAIT_FOR_DELETION_SECONDS)
        return out.build("waiting for an earlier probe pod to go")
    # More attempts on record than probeRun.retries now allows (it was lowered while
    # the node backed off): the next attempt is its last, never a verdict without one.
    now = obs.now
    if st.next_attempt_time is not None and now < st.next_attempt_time:
        out.wake_in((st.next_attempt_time - now).total_seconds())
        return out.build("backing off")
    refusal = sharing_refusal(node)
    if refusal is not None:  # MPS or a renamed resource: the probe cannot be admitted
        return blocked(ctx, out, reason=REASON_GPU_SHARING, message=refusal, pod=None)
    waiting = _publishing_waits(ctx, out)
    if waiting is not None:
        return waiting
    waiting = _waits_before_probing(ctx, out)
    if waiting is not None:
        return waiting
    return _start_attempt(ctx, out)


def _publishing_waits(ctx: NodeContext, out: PlanBuilder) -> Plan | None:
    """A wait for the way the node publishes its GPUs: both ways at once, no GPUs yet
    (or an incomplete DRA pool)."""
    publishing = ctx.gpus
    if publishing.mode == GpuPublishing.BOTH:
        return blocked(ctx, out, reason=REASON_GPUS_PUBLISHED_TWICE, message=_twice(ctx), pod=None)
    dra = publishing.mode == GpuPublishing.DRA
    if (dra and not publishing.ready) or (not dra and ctx.node.gpus <= 0):
        return _wait_for_gpus(ctx, out)
    return None


def _start_attempt(ctx: NodeContext, out: PlanBuilder) -> Plan:
    """A new attempt: on record first, then a DRA node's claim, then the pod."""
    st, obs, spec, node = ctx.status, ctx.obs, ctx.spec, ctx.node
    serial = st.pod_serial + 1
    name = probe_pod_name(obs.config.pod_prefix, node.name, serial)
    # The wait is over now: not this attempt's reason.
    waited = st.reason in (
        REASON_WAITING_FOR_GPUS,
        REASON_WAITING_FOR_RESOURCE_SLICES,
        REASON_NO_GPUS,
        REASON_GPUS_UNHEALTHY,
        *WAIT_REASONS,
    )
    new, nonce = probe_started(ctx, out, serial=serial, name=name, wait_over=waited)
    claim = claim_create(ctx, new)  # a DRA node's: its claim before its pod
    if claim is not None:
        out.actions.append(claim)
    out.actions.append(CreateProbePod(name, with_nonce(probe_manifest(ctx, new), nonce)))
    out.wake_in(obs.config.timeout_for(spec) + obs.config.deadline_grace_seconds)
    return out.build(f"probe attempt {new.attempts}")


def _waits_before_probing(ctx: NodeContext, out: PlanBuilder) -> Plan | None:
    """A reason not to start the probe pod now that is not the node's fault: a
    cordoned node (not probed unless asked), a NoExecute taint the pod would not
    tolerate (the kubelet refuses it, or evicts it)."""
    node = ctx.node
    asked = REPROBE_ANNOTATION in node.annotations or ctx.status.reprobe_requested
    if node.unschedulable and not asked:
        return _cordoned(ctx, out)
    tolerations = probe_manifest(ctx, ctx.status)["spec"].get("tolerations", [])
    taint = untolerated_taint(ctx.node.taints, tolerations)
    if taint is not None:
        message = (
            f"the node has the NoExecute taint {taint.key}={taint.value or ''}:NoExecute that "
            "the probe pod does not tolerate (operator flag --probe-tolerations)"
        )
        return blocked(ctx, out, reason=REASON_UNTOLERATED_TAINT, message=message, pod=None)
    return None


def _cordoned(ctx: NodeContext, out: PlanBuilder) -> Plan:
    """A person cordoned the node (maintenance, a drain): no probe pod lands on it
    until it is uncordoned (the Node update wakes it) or a probe is asked for with
    the re-probe annotation. No attempt, no backoff."""
    message = (
        "the node is cordoned (spec.unschedulable): not probed until it is uncordoned, "
        f"or asked for with the annotation {REPROBE_ANNOTATION}"
    )
    new = cordoned(ctx, out, reason=REASON_CORDONED, message=message)
    out.ensure_node(ctx, new)
    return out.build("waiting: cordoned")


def _twice(ctx: NodeContext) -> str:
    return cut(
        f"the node has {ctx.node.gpu_capacity} {GPU_RESOURCE} from the device plugin and "
        f"ResourceSlices of a DRA driver ({ctx.gpus.describe()}): the same GPUs could be "
        "handed out twice, and the probe cannot tell which way workloads get them. Run one "
        "of the two on this node (or leave the driver out of the operator's --dra-driver)",
        1000,
    )


def _wait_for_gpus(ctx: NodeContext, out: PlanBuilder) -> Plan:
    """The device plugin has not advertised nvidia.com/gpu (a node that just
    joined), or a DRA node's pool is not complete yet: a probe now would request
    no GPU, or not all of them. The Node or ResourceSlice update that changes it
    wakes this node again; it stays out meanwhile, until the policy's
    ``waitForGPUs`` deadline, then it is Stalled (still probed once GPUs appear).
    """
    st, spec, now = ctx.status, ctx.spec, ctx.obs.now
    wait = spec.wait_for_gpus
    since = st.waiting_since or now
    deadline = since + timedelta(seconds=wait.timeout_seconds)
    dra = ctx.gpus.mode == GpuPublishing.DRA
    if now < deadline:
        if dra:
            reason = REASON_WAITING_FOR_RESOURCE_SLICES
            message = cut(f"the node's DRA pool is not complete yet: {ctx.gpus.describe()}", 1000)
        else:
            reason = REASON_WAITING_FOR_GPUS
            message = f"the node advertises no allocatable {GPU_RESOURCE} yet"
        waiting_for_gpus(ctx, out, reason=reason, message=message, since=since)
        out.wake_in((deadline - now).total_seconds())
        return out.build("waiting for a complete pool" if dra else "waiting for allocatable GPUs")
    unhealthy = ctx.node.gpu_capacity > 0
    reason = REASON_GPUS_UNHEALTHY if unhealthy else REASON_NO_GPUS
    if dra:
        message = cut(pool_stalled_message(ctx), 1000)
    else:
        message = cut(unhealthy_message(ctx) if unhealthy else stalled_message(ctx), 1000)
    if stalled(ctx, out, reason=reason, message=message, since=since):
        out.wake_in(1)  # the next pass brings the node in line with Stalled
    return out.build("stalled: no GPUs advertised")


def unhealthy_message(ctx: NodeContext) -> str:
    node = ctx.node
    return (
        f"the node has {node.gpu_capacity} {GPU_RESOURCE} in its capacity and none "
        f"allocatable within waitForGPUs.timeoutSeconds ({ctx.spec.wait_for_gpus.timeout_seconds}"
        " s): the device plugin marks every GPU unhealthy (its logs and the node's Xid "
        "events say why). The pending taint stays whatever waitForGPUs.onTimeout says: the "
        "node never takes pods unprobed. It is probed once it advertises GPUs."
    )


def pool_stalled_message(ctx: NodeContext) -> str:
    wait = ctx.spec.wait_for_gpus
    return (
        f"the node's DRA pool was not complete within waitForGPUs.timeoutSeconds "
        f"({wait.timeout_seconds} s): {ctx.gpus.describe()}. The DRA driver's kubelet plugin "
        "on the node publishes it (its logs say why it did not finish; check that it "
        f"tolerates the pending taint {ctx.spec.pending_taint_key}:NoSchedule); "
        f"waitForGPUs.onTimeout: {wait.on_timeout.value}. It is probed once the pool is "
        "complete."
    )


def stalled_message(ctx: NodeContext) -> str:
    wait, pending = ctx.spec.wait_for_gpus, ctx.spec.pending_taint_key
    if wait.on_timeout == GPUWaitExpiry.KEEP_PENDING_TAINT:
        taint = f"the pending taint stays (waitForGPUs.onTimeout: {wait.on_timeout.value})"
    else:
        taint = (
            f"the pending taint is removed (waitForGPUs.onTimeout: {wait.on_timeout.value}): "
            "the node takes pods unprobed"
        )
    return (
        f"no allocatable {GPU_RESOURCE} within waitForGPUs.timeoutSeconds "
        f"({wait.timeout_seconds} s). The common cause is a device plugin that does not "
        f"tolerate the pending taint {pending}:NoSchedule: add that toleration to its "
        f"DaemonSet (or check that this node has GPUs at all); {taint}. It is probed once "
        "it advertises GPUs."
    )
