"""Whose an in-service finding is, for ``fencing.mode: gpu`` (pure): one GPU's, which can
be fenced, or the node's.

An in-service verdict on a DRA node under ``fencing.mode: gpu`` fences single GPUs when
every finding it rests on is one GPU's (:data:`FENCIBLE_REASONS`, the finding naming a
GPU of the acceptance report); any other finding keeps today's node verdict:

======================  =========  ================================================
reason                  whose      why
======================  =========  ================================================
XidFatal                the GPU    48 double-bit ECC, 64 remap failure, 79 fallen
                                   off the bus, 95 uncontained ECC, 140 unrecovered
                                   ECC: reported by that GPU, about its memory or
                                   its own bus link (docs/policy.md, "In-service Xid
                                   classes"); the watch or the DRA driver's taint
                                   names it
RowRemapFailure         the GPU    its memory could not remap a row (NVML
                                   remapped-rows failure flag of that device)
RowRemapPending         the GPU    a remap waits for that GPU's reset
EccUncorrected          the GPU    that device's volatile uncorrected ECC count
GPULost                 the node   the GPU is gone from the node's pool or its driver
                                   lost it: no device is left for a rule to select,
                                   and it returns only with the node's driver
GPURecoveryAction       the node   NVML's recovery action may be a node reboot or a
                                   drain of the GPU's peer-to-peer partners
NVLinkDown/Errors,      the node   a link between GPUs slows the node's all-reduce
FabricDegraded                     (issue 40: then it is the node)
XidRepeated             the node   it counts 74 (NVLink) as well as GSP errors
GPUsUnallocatable,      the node   about no single GPU
UnhealthyCondition
======================  =========  ================================================

:func:`in_service_attribution` turns the findings into the verdict's
:class:`~gpuaccept.checks.attribution.Attribution`: the GPUs fenced already (by the
acceptance or an earlier in-service fence) and the new ones, check
:data:`~gpuaccept.operator.core.model.IN_SERVICE_CHECK`. The one fencing decision
(core/fencing.py) then fences them all within ``maxFencedGpus`` (the GPUs fenced already
counted) or quarantines the node, and core/record.py applies it after dryRun and the
limit. Fences accumulate: a fence is never dropped for a newer one, nor by a verdict of
the node's that is held (:func:`standing_fences`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gpuaccept.checks.attribution import Attribution
from gpuaccept.contracts.nodeacceptance import GpuVerdict
from gpuaccept.operator.core.inservice.evidence import (
    REASON_ECC_UNCORRECTED,
    REASON_REMAP_FAILURE,
    REASON_REMAP_PENDING,
    REASON_XID_FATAL,
    Finding,
)
from gpuaccept.operator.core.model import IN_SERVICE_CHECK

# The in-service reasons that belong to the one GPU the finding names (the table above).
FENCIBLE_REASONS = frozenset(
    {REASON_XID_FATAL, REASON_REMAP_FAILURE, REASON_REMAP_PENDING, REASON_ECC_UNCORRECTED}
)


def fenced_uuids(gpus: Iterable[GpuVerdict]) -> frozenset[str]:
    """The UUIDs of the fenced GPUs among ``gpus`` (the status's ``gpuVerdicts``): their
    in-service findings are left out of the node's verdict."""
    return frozenset(g.uuid for g in gpus if g.fenced and g.uuid)


def standing_fences(gpus: Iterable[GpuVerdict]) -> Attribution:
    """A verdict that is the node's (no check of it per-GPU) carrying the fences that
    stand: a hold of it (dryRun, the limit, a common cause) leaves them as they are,
    and a quarantine ends them (core/record.py), the node's taint taking over."""
    return Attribution(gpus=tuple(g for g in gpus if g.fenced))


def _one_gpu_s(finding: Finding, known: Mapping[str, int]) -> bool:
    """``finding`` belongs to one GPU that the acceptance report names."""
    return finding.reason in FENCIBLE_REASONS and finding.gpu is not None and finding.gpu in known


def in_service_attribution(
    findings: Sequence[Finding], gpus: Sequence[GpuVerdict], report_uuids: Sequence[str | None]
) -> Attribution:
    """The GPUs ``findings`` fence beside those fenced already (``gpus`` marked fenced),
    by their index in the acceptance report (``report_uuids``); the node's verdict
    (:func:`standing_fences`) when any finding is not one GPU's or names a GPU the
    report does not."""
    index = {uuid: i for i, uuid in enumerate(report_uuids) if uuid}
    kept = [g for g in gpus if g.fenced]
    if not findings or not all(_one_gpu_s(f, index) for f in findings):
        return standing_fences(gpus)
    have = {g.uuid for g in kept}
    named = sorted({f.gpu for f in findings if f.gpu is not None} - have)
    new = [GpuVerdict(index=index[u], uuid=u, checks=[IN_SERVICE_CHECK]) for u in named]
    both = tuple(sorted([*kept, *new], key=lambda g: g.index))
    return Attribution(gpus=both, per_gpu_checks=frozenset(c for g in both for c in g.checks))
