"""Phase ``Waiting``: the probe could not run, and not because of the node (pure).

An image that cannot be pulled, a pod the API server refuses (admission, a
quota, a LimitRange, a missing RuntimeClass), a pod that was never created or
vanished (an API server refusing for long, an eviction, a deletion), GPU pods
still on the node (the kubelet's ``OutOfnvidia.com/gpu``), a NoExecute taint
the probe does not tolerate, a kubelet refusing the pod because the node no
longer matches the pod's required node affinity (the operator's base selector,
no control-plane role): none of these is evidence about the node. The node
waits in phase ``Waiting`` under its reason, still under the pending taint,
and tries again with a backoff that grows with how long it has waited (from
``probeRun.backoffSeconds`` up to the operator's cap), for as long as it
lasts. The attempt is given back: a wait never counts against
``probeRun.retries`` and never ends in a verdict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuaccept.operator.core.history import reverifying
from gpuaccept.operator.core.model import Plan, PodView, Taint
from gpuaccept.operator.core.nodecontext import NodeContext, PlanBuilder
from gpuaccept.operator.core.podidentity import REASON_POD_ALTERED, REASON_POD_NAME_TAKEN
from gpuaccept.operator.core.transitions import blocked_waits, give_up

REASON_IMAGE_UNAVAILABLE = "ImageUnavailable"
REASON_POD_REFUSED = "PodRefused"
REASON_NODE_BUSY = "NodeBusy"
REASON_EVICTED = "Evicted"
REASON_POD_LOST = "ProbePodLost"
REASON_UNTOLERATED_TAINT = "UntoleratedTaint"
REASON_CORDONED = "Cordoned"
REASON_NODE_AFFINITY = "NodeAffinityRefused"
# A DRA node's probe pod the scheduler did not place by the deadline (its claim not
# allocated): core/phases/probing.py
REASON_UNSCHEDULED = "ProbePodUnscheduled"
WAIT_REASONS = frozenset(
    {
        REASON_IMAGE_UNAVAILABLE,
        REASON_POD_REFUSED,
        REASON_NODE_BUSY,
        REASON_EVICTED,
        REASON_POD_LOST,
        REASON_UNTOLERATED_TAINT,
        REASON_CORDONED,
        REASON_NODE_AFFINITY,
        REASON_UNSCHEDULED,
        REASON_POD_NAME_TAKEN,
        REASON_POD_ALTERED,
        "RuntimeClassMissing",
        "GPUSharing",  # core/gpusharing.py
        "GPUsPublishedTwice",  # core/phases/pending.py (device plugin and DRA at once)
        # An earlier release's (a DRA node, before the probe's claim; before fabric
        # pairs through claims): a node upgraded while it waited under one
        "ProbeThroughClaimNotBuilt",
        "DRAFabricNotBuilt",
    }
)


def wait_backoff(ctx: NodeContext) -> float:
    """Seconds to the next try: the time waited so far, at least
    ``probeRun.backoffSeconds`` and at most the operator's cap (so it about
    doubles with every try)."""
    st, now = ctx.status, ctx.obs.now
    since = st.blocked_since or now
    waited = (now - since).total_seconds()
    low = float(ctx.spec.probe_run.backoff_seconds)
    return min(max(waited, low), float(ctx.obs.config.max_backoff_seconds))


def blocked(
    ctx: NodeContext, out: PlanBuilder, *, reason: str, message: str, pod: PodView | None
) -> Plan:
    """This attempt could not run for ``reason`` (not the node's): wait and retry,
    the attempt given back. A re-verification gives up instead: the node goes back to
    service as it was accepted (a GPU pod that came first wins)."""
    st = ctx.status
    if reverifying(st) is not None:
        return give_up(ctx, out, reason=reason, message=message)
    backoff = wait_backoff(ctx)
    new = blocked_waits(ctx, out, reason=reason, message=message, backoff=backoff)
    out.ensure_node(ctx, new)
    if pod is not None and not pod.deleting:
        out.delete_pod(pod)
    out.wake_in(backoff)
    return out.build(f"waiting: {reason}")


def tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    """Kubernetes' ``Toleration.ToleratesTaint``."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    if key and key != taint.key:
        return False
    if (toleration.get("operator") or "Equal") == "Exists":
        return True
    return bool(key) and (toleration.get("value") or "") == (taint.value or "")


def untolerated_taint(
    node_taints: Iterable[Taint], tolerations: Iterable[Mapping[str, Any]]
) -> Taint | None:
    """A NoExecute taint on the node that the probe pod does not tolerate: the
    kubelet would refuse the pod or evict it mid-probe (it is pinned by
    ``nodeName``, so a NoSchedule taint does not matter)."""
    tolerations = list(tolerations)
    for taint in node_taints:
        if taint.effect == "NoExecute" and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None
