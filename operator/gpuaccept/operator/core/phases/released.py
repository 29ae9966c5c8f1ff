"""A release a person asks for (``kubectl gpuaccept release NODE``), and phase
``Released`` (pure).

The request is three annotations on the NodeAcceptance: who (the requester's
username, which the plugin reads from a SelfSubjectReview and the chart's admission
rule holds to the requester), when, and why. A request not yet applied (its who and
when differ from ``status.release``) is applied whatever the phase: the node goes
to phase ``Released``, the operator's own taints and labels come off it (the
acceptance label says ``released``), its GPUAcceptance condition says who released
it, a probe pod of its own goes (the attempt given back), and Events on the Node and
the NodeAcceptance record who and when. ``status.release`` keeps the record through
later rounds, so the same request is never applied twice.

This is what the runbook's release by hand does (the node matched by no policy,
the operator's taints and label removed), without changing any selector: a
released node is left alone, through reboots and policy changes, and does not
count against the quarantine limit (it is in service). A re-probe request
(``kubectl gpuaccept reprobe NODE``, the annotation) hands it back: a new round,
taken out of service only as the limit allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuaccept.contracts.api import (
    RELEASE_AT_ANNOTATION,
    RELEASE_BY_ANNOTATION,
    RELEASE_REASON_ANNOTATION,
    REPROBE_ANNOTATION,
)
from gpuaccept.operator.core.model import Plan
from gpuaccept.operator.core.nodecontext import NodeContext, PlanBuilder, cut
from gpuaccept.operator.core.transitions import new_round, released


@dataclass(frozen=True)
class ReleaseRequest:
    by: str
    at: str
    reason: str = ""


def release_request(annotations: Mapping[str, str]) -> ReleaseRequest | None:
    """The request the annotations make; None without both who and when."""
    by = annotations.get(RELEASE_BY_ANNOTATION, "").strip()
    at = annotations.get(RELEASE_AT_ANNOTATION, "").strip()
    if not by or not at:
        return None
    reason = annotations.get(RELEASE_REASON_ANNOTATION, "").strip()
    return ReleaseRequest(by=cut(by, 253), at=cut(at, 64), reason=cut(reason, 512))


def unapplied_release(ctx: NodeContext) -> ReleaseRequest | None:
    """The NodeAcceptance's release request when it has not been applied yet."""
    na = ctx.obs.na
    request = release_request(na.annotations) if na is not None else None
    done = ctx.status.release
    if request is None or (
        done is not None and (done.by, done.requested_at) == (request.by, request.at)
    ):
        return None
    return request


def plan_release(ctx: NodeContext, out: PlanBuilder, request: ReleaseRequest) -> Plan:
    """Apply ``request``: phase Released, the node's owned taints and labels off."""
    return released(ctx, out, by=request.by, at=request.at, reason=request.reason)


def plan_released(ctx: NodeContext, out: PlanBuilder) -> Plan:
    """Phase Released: left alone (a leftover probe pod goes, the node's owned taints
    and labels stay off) until a re-probe is asked for, which hands it back."""
    node, spec, st = ctx.node, ctx.spec, ctx.status
    if REPROBE_ANNOTATION in node.annotations and spec.reprobe.on_annotation:
        out.remove_annotation = True
        message = f"annotation {REPROBE_ANNOTATION} was set: the released node is handed back"
        return new_round(ctx, out, reason="ReprobeRequested", message=message)
    for pod in ctx.obs.pods:
        if not pod.deleting:
            out.delete_pod(pod)
    out.write_status(st, ctx.with_applied_keys(st))
    out.ensure_node(ctx, st)
    return out.build("released")
