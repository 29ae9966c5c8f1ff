"""Phase ``Pending``: clear out old pods, wait out backoff and GPUs, start an attempt."""

from __future__ import annotations

from typing import Any

from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.operator.core.context import (
    REASON_PROBE_ERROR,
    REASON_WAITING_FOR_GPUS,
    WAIT_FOR_DELETION_SECONDS,
    NodeContext,
    PlanBuilder,
)
from gpuaccept.operator.core.model import CreateProbePod, Plan
from gpuaccept.operator.core.podspec import ProbeAttempt, probe_pod_manifest, probe_pod_name
from gpuaccept.operator.core.verdict import attempt_failed


def probe_manifest(ctx: NodeContext, st: NodeAcceptanceStatus) -> dict[str, Any]:
    """The pod of the attempt recorded in ``st`` (its name and serial)."""
    attempt = ProbeAttempt(
        name=st.probe_pod or "",
        serial=st.pod_serial,
        node=ctx.node,
        policy_name=ctx.policy.name,
        spec=ctx.spec,
        applied_taints=st.applied_taints,
    )
    return probe_pod_manifest(attempt, ctx.obs.config)


def plan_pending(ctx: NodeContext, out: PlanBuilder) -> Plan:
    st, spec, obs, node = ctx.status, ctx.spec, ctx.obs, ctx.node
    out.ensure_node(ctx, st)
    # One pod at a time: clear out any earlier pod first.
    for pod in obs.pods:
        if not pod.deleting:
            out.delete_pod(pod)
    if obs.pods:
        out.wake_in(WAIT_FOR_DELETION_SECONDS)
        return out.build("waiting for an earlier probe pod to go")
    if st.attempts >= spec.probe_run.retries + 1:  # inconsistent; fail safe
        return attempt_failed(
            ctx, out, reason=REASON_PROBE_ERROR, message="attempts exhausted", pod=None
        )
    now = obs.now
    if st.next_attempt_time is not None and now < st.next_attempt_time:
        out.wake_in((st.next_attempt_time - now).total_seconds())
        return out.build("backing off")
    if node.gpus <= 0:
        # The device plugin has not advertised nvidia.com/gpu yet (a node that
        # just joined): a probe now would request no GPU. The Node update that
        # adds them wakes this node again; it stays out meanwhile.
        out.write_status(
            st,
            st.model_copy(
                update={
                    "reason": REASON_WAITING_FOR_GPUS,
                    "message": "the node advertises no allocatable nvidia.com/gpu yet",
                }
            ),
        )
        return out.build("waiting for allocatable GPUs")
    serial = st.pod_serial + 1
    name = probe_pod_name(obs.config.pod_prefix, node.name, serial)
    waited = st.reason == REASON_WAITING_FOR_GPUS  # over now: not this attempt's reason
    new = ctx.stamped(
        st,
        reason=None if waited else st.reason,
        message=None if waited else st.message,
        phase=Phase.PROBING,
        attempts=st.attempts + 1,
        pod_serial=serial,
        probe_pod=name,
        probe_started_time=now,
        next_attempt_time=None,
        held_action=None,
    )
    new = ctx.with_applied_taints(new)
    # Status first: the attempt is on record before its pod exists, so a
    # restart in between recreates the same pod name, never a second pod.
    out.write_status(st, new)
    out.actions.append(CreateProbePod(name, probe_manifest(ctx, new)))
    out.wake_in(obs.config.timeout_for(spec) + obs.config.deadline_grace_seconds)
    return out.build(f"probe attempt {new.attempts}")
