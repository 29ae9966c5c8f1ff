"""Phase ``Probing``: watch this attempt's pod to a report, an error or the deadline."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuaccept.contracts.nodeacceptance import GpuPublishing, Reason
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core.acceptance_gate import acceptance_problem
from gpuaccept.operator.core.creationintent import creation_nonce, intend, intended_create
from gpuaccept.operator.core.draclaim import RESOURCE_CLAIM
from gpuaccept.operator.core.gpusharing import REASON_GPU_SHARING, admission_refused_by_sharing
from gpuaccept.operator.core.model import Plan, PodView
from gpuaccept.operator.core.nodecontext import (
    WAIT_FOR_DELETION_SECONDS,
    NodeContext,
    PlanBuilder,
    cut,
)
from gpuaccept.operator.core.phases.pending import claim_create, probe_manifest
from gpuaccept.operator.core.phases.startfailure import (
    REASON_REJECTED,
    StartFailure,
    create_refused,
    never_started,
    start_failure,
)
from gpuaccept.operator.core.phases.waiting import (
    REASON_EVICTED,
    REASON_POD_LOST,
    REASON_UNSCHEDULED,
    blocked,
)
from gpuaccept.operator.core.podidentity import (
    REASON_POD_NAME_TAKEN,
    foreign_pod_message,
)
from gpuaccept.operator.core.record import Evidence, attempt_failed, failing_verdict, record_verdict
from gpuaccept.operator.core.report_trust import (
    DEADLINE_EXCEEDED,
    PROBE_TIMEOUT,
    outcome_problem,
    trusted_report,
)

STATUS_WRITE_REFUSED = "StatusWriteRefused"

# Container states that will not resolve by waiting (the image-pull ones are
# start failures already, see startfailure.IMAGE_PULL_REASONS).
STUCK_WAITING = frozenset(
    {
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


# A kubelet (1.37 on the real node, tests/realnode) reports the container's end
# (terminated, exit code, the report) while the pod is still Running, and the
# terminal phase only once it has torn the pod down: the phase the probe's exit
# code must agree with comes a moment later (the pod's update wakes the node).
WAIT_FOR_PHASE_SECONDS = 10.0


def _ending(pod: PodView) -> bool:
    """The probe container ended, the pod's phase is not terminal yet."""
    return pod.terminated and pod.phase not in ("Succeeded", "Failed") and not pod.deleting


def _this_attempts_pod(ctx: NodeContext, out: PlanBuilder) -> PodView | None:
    """The pod recorded in status; any other live pod (an earlier attempt's) is deleted."""
    pod: PodView | None = None
    for candidate in ctx.obs.pods:
        if candidate.name == ctx.status.probe_pod:
            pod = candidate
        elif not candidate.deleting:  # stale pod of an earlier attempt
            out.delete_pod(candidate)
    return pod


def _attempt_pod_not_ours(ctx: NodeContext, out: PlanBuilder) -> Plan | None:
    """The attempt's name is held by a pod the operator did not create (its create
    was answered AlreadyExists, or the pod under that name is not the one on record),
    or its own pod was altered: never read as the node's evidence, never a verdict.
    The node waits, the pod is left for a person (a Warning Event names it), and the
    next attempt takes a new name."""
    name, obs = ctx.status.probe_pod, ctx.obs
    foreign = next((f for f in ctx.foreign_pods if f.pod.name == name), None)
    if foreign is not None:
        reason, why = foreign.reason, f"{foreign.why} (UID {foreign.pod.uid})"
    elif name and obs.pod_name_taken == name:
        reason = REASON_POD_NAME_TAKEN
        why = "the operator's create was answered AlreadyExists"
    else:
        return None
    message = foreign_pod_message(obs.config.namespace, name or "", reason, why)
    out.event("Node", "Warning", reason, message)
    return blocked(ctx, out, reason=reason, message=message, pod=None)


def _pod_missing(ctx: NodeContext, out: PlanBuilder, remaining: float) -> Plan:
    st, obs = ctx.status, ctx.obs
    if obs.pod_create_error:
        refused = create_refused(obs.pod_create_error)
        return blocked(ctx, out, reason=refused.reason, message=refused.message, pod=None)
    started = st.probe_started_time or obs.now
    if obs.now - started < timedelta(seconds=obs.config.pod_missing_grace_seconds) and st.probe_pod:
        # Status was written, the pod not (yet): create it. An AlreadyExists answer
        # means another pod holds the name (_attempt_pod_not_ours, next pass).
        # A new nonce on record first: the intent of the first create may have served
        # a pod that is gone, or never made (core/creationintent.py).
        new, create = intended_create(st, obs.nonce_seed, st.probe_pod, probe_manifest(ctx, st))
        if ctx.gpus.mode == GpuPublishing.DRA:  # its claim first, under a new intent too
            nonce = creation_nonce(obs.nonce_seed, RESOURCE_CLAIM, st.probe_pod)
            new = intend(new, RESOURCE_CLAIM, st.probe_pod, nonce)
        claim = claim_create(ctx, new)
        out.write_status(st, new)
        if claim is not None:
            out.actions.append(claim)
        out.actions.append(create)
        out.wake_in(remaining)
        return out.build("probe pod (re)created")
    # Never created (the API server refused or dropped the create for longer than
    # the grace), or deleted or evicted by someone else: nothing about the node.
    message = (
        "the probe pod was not created, or disappeared before it reported (an API server "
        "that did not take the create, an eviction, a deletion)"
    )
    return blocked(ctx, out, reason=REASON_POD_LOST, message=message, pod=None)


def plan_probing(ctx: NodeContext, out: PlanBuilder) -> Plan:
    st, obs = ctx.status, ctx.obs
    out.ensure_node(ctx, st)
    now = obs.now
    pod = _this_attempts_pod(ctx, out)
    timeout = obs.config.timeout_for(ctx.spec)
    deadline = (st.probe_started_time or now) + timedelta(
        seconds=timeout + obs.config.deadline_grace_seconds
    )
    remaining = (deadline - now).total_seconds()
    if obs.status_write_error:
        # The API server refused the status this attempt led to (e.g. a verdict):
        # writing it again would fail the same way. End the attempt instead.
        message = f"the API server refused the status update: {obs.status_write_error}"
        return attempt_failed(ctx, out, reason=STATUS_WRITE_REFUSED, message=message, pod=pod)
    if pod is None:
        return _attempt_pod_not_ours(ctx, out) or _pod_missing(ctx, out, remaining)
    failure = None if pod.deleting else start_failure(pod)
    if failure is not None:
        return _did_not_start(ctx, out, pod, failure)
    return _pod_progress(ctx, out, pod, deadline, timeout)


def _pod_progress(
    ctx: NodeContext, out: PlanBuilder, pod: PodView, deadline: datetime, timeout: int
) -> Plan:
    """The pod exists and did not fail to start: it ended, is ending, runs, is stuck or late."""
    now = ctx.obs.now
    remaining = (deadline - now).total_seconds()
    if _ending(pod) and now < deadline:
        out.wake_in(min(WAIT_FOR_PHASE_SECONDS, remaining))
        return out.build("the probe container ended; waiting for the pod's phase")
    if pod.terminated or pod.phase in ("Succeeded", "Failed"):
        return _pod_finished(ctx, out, pod)
    if pod.deleting and now < deadline:
        out.wake_in(min(WAIT_FOR_DELETION_SECONDS, remaining))
        return out.build("probe pod is being deleted")
    if not pod.deleting and pod.waiting_reason in STUCK_WAITING:
        message = f"{pod.waiting_reason}: {pod.waiting_message or ''}".strip()
        return attempt_failed(ctx, out, reason="ProbePodError", message=message, pod=pod)
    if now >= deadline:
        return _past_deadline(ctx, out, pod, timeout)
    out.wake_in(remaining)
    return out.build("probing")


def _past_deadline(ctx: NodeContext, out: PlanBuilder, pod: PodView, timeout: int) -> Plan:
    """The pod has not ended by the attempt's deadline: it was never placed (a DRA
    node's pod the scheduler could not bind), never started, or it timed out."""
    if not pod.node_name and not pod.terminated:
        return blocked(
            ctx, out, reason=REASON_UNSCHEDULED, message=unscheduled_message(timeout), pod=pod
        )
    stalled = never_started(pod, timeout)
    if stalled is not None:
        return _did_not_start(ctx, out, pod, stalled)
    # A pod still terminating past it was e.g. evicted from a dead kubelet.
    stuck = "; the probe pod is stuck terminating" if pod.deleting else ""
    message = f"no result within {timeout}s{stuck}"
    return attempt_failed(ctx, out, reason="ProbeTimeout", message=message, pod=pod)


def unscheduled_message(timeout: int) -> str:
    return (
        f"the probe pod was not placed within {timeout}s: the scheduler could not allocate "
        "its ResourceClaim on the node (other claims hold its GPUs, the DeviceClass "
        "--dra-device-class is missing, or no scheduler runs; the pod's PodScheduled "
        "condition and events say which). Not the node's fault: tried again later"
    )


def _did_not_start(ctx: NodeContext, out: PlanBuilder, pod: PodView, failure: StartFailure) -> Plan:
    """The probe never ran: the node's fault is judged on its check (a driver/library
    mismatch quarantines with DriverLibrariesFailed); anything else is a failed attempt."""
    if failure.blocked:
        return blocked(ctx, out, reason=failure.reason, message=failure.message, pod=pod)
    shared = admission_refused_by_sharing(ctx.node, pod.pod_message or "")
    if failure.reason == REASON_REJECTED and shared is not None:
        return blocked(ctx, out, reason=REASON_GPU_SHARING, message=shared, pod=pod)
    if failure.check is None:
        return attempt_failed(ctx, out, reason=failure.reason, message=failure.message, pod=pod)
    reason = Reason(check=failure.check, reason=failure.reason, message=cut(failure.message, 500))
    return record_verdict(ctx, out, failing_verdict((reason,)), Evidence(pod=pod))


def _pod_finished(ctx: NodeContext, out: PlanBuilder, pod: PodView) -> Plan:
    """The pod ended: its report, judged, if the report and the pod's end can be trusted."""
    node = ctx.counted_node  # a DRA node's pool plays nvidia.com/gpu's part
    if pod.message:
        result = trusted_report(
            pod.message, node, accept_simulated=ctx.obs.config.accept_simulated_reports, pod=pod
        )
        if not isinstance(result, ProbeReport):
            return attempt_failed(ctx, out, reason=result.reason, message=result.message, pod=pod)
        verdict = ctx.judge_report(result)
        if isinstance(verdict, str):  # valid JSON the judge cannot use
            return attempt_failed(ctx, out, reason="InvalidReport", message=verdict, pod=pod)
        problem = outcome_problem(
            verdict, result, pod, node_gpus=max(node.gpus, node.gpu_capacity)
        ) or acceptance_problem(
            verdict, result, node, accept_simulated=ctx.obs.config.accept_simulated_reports
        )
        if problem is not None:
            return attempt_failed(ctx, out, reason=problem.reason, message=problem.message, pod=pod)
        return record_verdict(ctx, out, verdict, Evidence(report=result, pod=pod))
    if pod.deleting:  # ended without a report while someone else deleted it (an eviction)
        message = f"the probe pod was deleted or evicted before it reported ({pod.phase})"
        return blocked(ctx, out, reason=REASON_EVICTED, message=message, pod=pod)
    why = pod.reason or pod.phase
    detail = pod.pod_message or ""
    if pod.exit_code is not None:
        detail = f"exit code {pod.exit_code}. {detail}".strip()
    if pod.reason == DEADLINE_EXCEEDED:
        return attempt_failed(ctx, out, reason=PROBE_TIMEOUT, message=f"{why}: {detail}", pod=pod)
    return attempt_failed(
        ctx, out, reason="ProbeFailed", message=f"{why}: {detail or 'no report'}", pod=pod
    )
