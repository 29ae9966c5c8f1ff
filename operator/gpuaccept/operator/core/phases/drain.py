"""The drain of a quarantined node through the Eviction API (pure; docs/operator.md,
"Quarantine and drain").

A ``NoExecute`` taint makes the taint manager delete every pod that does not
tolerate it, at once and past every PodDisruptionBudget. gpuaccept never applies
one: under ``quarantine.taintEffect: NoExecute`` it applies the quarantine taint
as ``NoSchedule`` and drains the node through the Eviction API
(``policy/v1`` Eviction), which the API server refuses while a pod's
PodDisruptionBudget allows no disruption; those pods are tried again every
:data:`DRAIN_RETRY_SECONDS` until the drain is done. Only a node gpuaccept
quarantined is drained, so the quarantine limit bounds the drains too.

Which pods (:func:`evictable`): every pod bound to the node that has not ended,
except those a drain leaves (as ``kubectl drain`` does): DaemonSet pods, static
pods' mirrors, gpuaccept's own probe pods, pods already being deleted, and pods
that tolerate the quarantine taint with effect ``NoExecute`` (the pods a
``NoExecute`` taint would have left).
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuaccept.contracts.api import ACCEPTANCE_KIND
from gpuaccept.contracts.nodeacceptance import DrainStatus, NodeAcceptanceStatus, Phase
from gpuaccept.contracts.policy_fields import TaintEffect
from gpuaccept.operator.core.model import DrainNode, NodePod, Taint
from gpuaccept.operator.core.nodecontext import NodeContext, PlanBuilder, cut
from gpuaccept.operator.core.nodestate import quarantine_taint
from gpuaccept.operator.core.phases.waiting import tolerates
from gpuaccept.operator.core.podspec import MANAGED_BY_VALUE

DRAIN_RETRY_SECONDS = 30.0
REASON_DRAINED = "Drained"
REASON_DRAIN_BLOCKED = "DrainBlocked"


def evictable(pods: Iterable[NodePod], taint: Taint, *, namespace: str) -> list[NodePod]:
    """The pods on the node a drain evicts (see the module docstring); ``namespace``:
    gpuaccept's own, whose probe pods stay."""
    no_execute = Taint(taint.key, "NoExecute", taint.value)
    return [
        pod
        for pod in pods
        if pod.phase not in ("Succeeded", "Failed")
        and not pod.deleting
        and not pod.mirror
        and "DaemonSet" not in pod.owner_kinds
        and not (pod.namespace == namespace and pod.managed_by == MANAGED_BY_VALUE)
        and not any(tolerates(t, no_execute) for t in pod.tolerations)
    ]


def drains(ctx: NodeContext, st: NodeAcceptanceStatus) -> bool:
    """The node is quarantined under a policy whose quarantine evicts (not in dryRun)."""
    spec = ctx.spec
    return (
        st.phase == Phase.QUARANTINED
        and spec.quarantine.taint_effect == TaintEffect.NO_EXECUTE
        and not spec.dry_run
    )


def drain_status(
    ctx: NodeContext, out: PlanBuilder, st: NodeAcceptanceStatus
) -> tuple[NodeAcceptanceStatus, DrainNode | None]:
    """``st`` with the drain carried on (started, then each try's result recorded
    until nothing is left to evict), and the drain to run once it is written; its
    Events and wake-up into ``out``."""
    if not drains(ctx, st) or (st.drain is not None and st.drain.done is not None):
        return st, None
    now, result = ctx.obs.now, ctx.obs.drain
    drain = st.drain or DrainStatus(started=now)
    fresh = result if result is not None and result.started == drain.started else None
    if fresh is not None and fresh.done:
        message = f"drained through the Eviction API (last evicted: {len(fresh.evicted)} pods)"
        out.event(ACCEPTANCE_KIND, "Normal", REASON_DRAINED, message)
        done = drain.model_copy(update={"done": now, "blocked": []})
        return st.model_copy(update={"drain": done}), None
    if fresh is not None:
        blocked = [cut(b, 300) for b in fresh.blocked[:10]]
        if not drain.blocked:
            message = "the drain waits for PodDisruptionBudgets: " + "; ".join(blocked)
            out.event(ACCEPTANCE_KIND, "Warning", REASON_DRAIN_BLOCKED, message)
        drain = drain.model_copy(update={"blocked": blocked})
        due = (fresh.at - now).total_seconds() + DRAIN_RETRY_SECONDS
        if due > 0:
            out.wake_in(due)
            return st.model_copy(update={"drain": drain}), None
    out.wake_in(DRAIN_RETRY_SECONDS)
    taint, namespace = quarantine_taint(ctx.spec), ctx.obs.config.namespace
    action = DrainNode(ctx.node.name, taint, namespace, drain.started)
    return st.model_copy(update={"drain": drain}), action
