"""Fence the GPU or quarantine the node (pure): the policy's ``fencing`` section applied
to a judged verdict on a node that publishes its GPUs one way or the other.

:func:`fencing_decision` answers, for a verdict that does not accept the node:

=======================================================  =================================
the verdict, the policy, the node                         outcome
=======================================================  =================================
``fencing.mode: node`` (the default)                      quarantine the node
a reason that is the node's (a node-level check, an       quarantine the node
error, a skip, a failure not tied to GPUs)
a per-GPU failure of a check not in ``fencing.checks``    quarantine the node
more failing GPUs than ``fencing.maxFencedGpus``          quarantine the node
a device-plugin node (no supported way to take one GPU    quarantine the node
out from outside its plugin)
``mode: gpu``, a DRA node, every failure per-GPU and      fence those GPUs
fencible, within the bound
=======================================================  =================================

In every case the per-GPU verdict (which GPUs failed which checks) is recorded in the
status (``gpuVerdicts``), so that it shows on a quarantined node too.

A decision to fence is carried out by core/record.py (the node ``Accepted`` with those
GPUs fenced, after dryRun and the limit) and core/fencerules.py (one DeviceTaintRule per
fenced GPU). Where it cannot be (the API server serves no DeviceTaintRules or refused
the node's rule write, or a GPU is not one device of the node's ResourceSlices), the
node is quarantined with reason
:data:`REASON_FENCING_UNAVAILABLE`, naming the GPUs: a bad GPU is never left in service
unfenced.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from gpuaccept.checks.attribution import Attribution
from gpuaccept.checks.fencing_policy import FencingMode, FencingPolicy
from gpuaccept.checks.verdict import Verdict
from gpuaccept.contracts.nodeacceptance import GpuPublishing, GpuVerdict
from gpuaccept.operator.core.model import IN_SERVICE_CHECK

REASON_FENCING_UNAVAILABLE = "FencingUnavailable"
# How long the runtime holds a refused DeviceTaintRule write (400/403/422: RBAC, an
# admission policy) against the node (NodeSnapshot.fence_rule_write_error): meanwhile
# a decision to fence quarantines it; then a new fence tries the write again.
FENCE_RULE_REFUSED_RETRY_SECONDS = 300.0


@dataclass(frozen=True)
class FencingDecision:
    """The GPUs to fence (empty: the node's verdict stands), and why the node's verdict
    stands where ``fencing.mode`` is ``gpu`` ("" otherwise)."""

    fence: tuple[GpuVerdict, ...] = ()
    why_node: str = ""


def gpu_names(gpus: tuple[GpuVerdict, ...]) -> str:
    return ", ".join(f"GPU {g.index}" + (f" ({g.uuid})" if g.uuid else "") for g in gpus)


def new_fences(
    standing: Iterable[GpuVerdict], fence: Iterable[GpuVerdict]
) -> tuple[GpuVerdict, ...]:
    """The GPUs of ``fence`` not fenced among ``standing`` (the status's ``gpuVerdicts``),
    by UUID where the GPU has one, else by index: the fence takes them out now."""
    fenced = {g.uuid or g.index for g in standing if g.fenced}
    return tuple(g for g in fence if (g.uuid or g.index) not in fenced)


def with_standing_fences(attribution: Attribution, gpus: Iterable[GpuVerdict]) -> Attribution:
    """``attribution`` with the GPUs fenced among ``gpus`` (the status's
    ``gpuVerdicts``) beside its own: the verdict of a targeted re-verification, which
    re-tested only some checks, so that its fencing decision counts the fences that stand
    (``maxFencedGpus``) and keeps them. A fenced GPU the verdict names again keeps its
    fence's checks and adds the new ones. ``per_gpu_checks`` stays the verdict's: a
    check's failure is the node's or the GPUs' by what the new report shows."""
    standing = {g.index: g for g in gpus if g.fenced}
    if not standing:
        return attribution
    joined = dict(standing)
    for gpu in attribution.gpus:
        old = standing.get(gpu.index)
        joined[gpu.index] = (
            gpu
            if old is None
            else old.model_copy(
                update={"checks": [*old.checks, *(c for c in gpu.checks if c not in old.checks)]}
            )
        )
    return replace(attribution, gpus=tuple(joined[i] for i in sorted(joined)))


def fencing_decision(
    verdict: Verdict, fencing: FencingPolicy, publishing: GpuPublishing | None
) -> FencingDecision:
    """Fence single GPUs, or let the node's verdict stand (the table above)."""
    if verdict.accepted or fencing.mode is FencingMode.NODE:
        return FencingDecision()
    node_reasons = verdict.node_reasons
    if node_reasons:
        first = node_reasons[0]
        return FencingDecision(why_node=f"{first.check} ({first.reason}) is the node's")
    gpus = verdict.attribution.gpus
    # An in-service GPU verdict is attributed only where its reason is one GPU's
    # (core/inservice/gpufence.py): fencing.checks names the probe's checks.
    unfenced = sorted(
        {c for g in gpus for c in g.checks if c != IN_SERVICE_CHECK and not fencing.fences(c)}
    )
    if unfenced or not gpus:
        named = ", ".join(unfenced) or "none"
        return FencingDecision(why_node=f"checks not in fencing.checks: {named}")
    if len(gpus) > fencing.max_fenced_gpus:
        return FencingDecision(
            why_node=f"{len(gpus)} GPUs failed, over fencing.maxFencedGpus="
            f"{fencing.max_fenced_gpus}"
        )
    if publishing is not GpuPublishing.DRA:
        how = publishing.value if publishing is not None else "no GPU publishing seen"
        return FencingDecision(
            why_node=f"{how} node: a GPU is fenced only through DRA ({gpu_names(gpus)})"
        )
    return FencingDecision(fence=gpus)
