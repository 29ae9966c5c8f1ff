"""A watch pod's report as evidence (pure): read only from a pod the operator
created (its UID on record), bound to the node by the pod (its ``spec.nodeName``)
and to the boot by the ledger, never by what the report says of itself.

A report that cannot be read (no message, the contract refused, another node's, a
simulated one where the operator takes none) is no evidence: it never convicts and
never clears the node; the next window's pod watches again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuaccept.checks.xid_classes import XidClass, xid_class
from gpuaccept.contracts.inservice import XidClassName
from gpuaccept.contracts.watch_report import (
    WatchEnd,
    WatchGpu,
    WatchReport,
    decode_watch_message,
)
from gpuaccept.operator.core.model import (
    GpuStateSeen,
    NodeView,
    PodView,
    StateWhat,
    WatchEvidence,
    XidSeen,
)

KIND: dict[XidClass, XidClassName] = {
    XidClass.FATAL: "fatal",
    XidClass.REPEATED: "repeated",
    XidClass.MEMORY: "memory",
    XidClass.APPLICATION: "application",
    XidClass.UNCLASSIFIED: "other",
}


def _gpu(index: int, uuid: str | None) -> str:
    return uuid or f"GPU{index}"


def _within(at: datetime, pod: PodView) -> datetime:
    """``at`` held to the pod's lifetime where the kubelet gives it."""
    if pod.created is not None and at < pod.created:
        return pod.created
    if pod.finished is not None and at > pod.finished:
        return pod.finished
    return at


def _xids(report: WatchReport, pod: PodView) -> tuple[XidSeen, ...]:
    """Each burst as its first event, and its last when it has more than one."""
    seen: list[XidSeen] = []
    for burst in report.xids:
        kind = KIND[xid_class(burst.xid)]
        gpu = _gpu(burst.gpu, burst.uuid)
        times = {burst.first_s, burst.last_s} if burst.count > 1 else {burst.first_s}
        for offset in sorted(times):
            at = _within(report.started_at + timedelta(seconds=offset), pod)
            seen.append(XidSeen(gpu, burst.xid, kind, at))
    return tuple(seen)


CONTAINED_XID = 94  # ROBUST_CHANNEL_CONTAINED_ERROR: the uncorrected error was contained


def _contained(report: WatchReport) -> set[int]:
    """The GPUs the report names a contained uncorrected ECC error (Xid 94) on."""
    return {b.gpu for b in report.xids if b.xid == CONTAINED_XID}


def _gpu_state(g: WatchGpu, contained: bool) -> list[GpuStateSeen]:
    """Every durable state one GPU entry shows; which of them quarantine is the
    policy's (``inService.gpuState``, :func:`~.xids.state_findings`)."""
    gpu = _gpu(g.index, g.uuid)
    found: list[GpuStateSeen] = []
    if g.lost:
        found.append(GpuStateSeen(gpu, "GPULost", "NVML: GPU is lost"))
    if g.remap_failed:
        found.append(GpuStateSeen(gpu, "RowRemapFailure"))
    if g.remap_pending:
        found.append(GpuStateSeen(gpu, "RowRemapPending"))
    if g.recovery_action != "none":
        found.append(GpuStateSeen(gpu, "RecoveryAction", g.recovery_action))
    if g.ecc_uncorrected:
        what: StateWhat = "EccContained" if contained else "EccUncorrected"
        found.append(GpuStateSeen(gpu, what, str(g.ecc_uncorrected)))
    if g.nvlink_down:
        found.append(GpuStateSeen(gpu, "NVLinkDown", ",".join(str(n) for n in g.nvlink_down)))
    if g.nvlink_errors:
        counts = ",".join(f"{k}={v}" for k, v in sorted(g.nvlink_errors.items()))
        found.append(GpuStateSeen(gpu, "NVLinkErrors", counts))
    if g.fabric:
        found.append(GpuStateSeen(gpu, "Fabric", g.fabric))
    return found


def _state(report: WatchReport, expected: int | None) -> tuple[GpuStateSeen, ...]:
    """The report's durable state. GPUs missing are counted against ``expected`` (the
    physical GPUs the node's acceptance saw through NVML, as the watch sees them),
    never against ``nvidia.com/gpu`` capacity, which counts replicas or MIG devices
    once the node shares its GPUs; None: the report's own ``gpusExpected``."""
    contained = _contained(report)
    found = [s for g in report.gpus for s in _gpu_state(g, g.index in contained)]
    if report.end_reason in (WatchEnd.NO_DEVICE_ACCESS, WatchEnd.FAILED):
        return tuple(found)
    want = expected if expected else report.gpus_expected
    if want is not None and report.gpus_seen < want:
        detail = f"{report.gpus_seen} of {want} GPUs seen"
        found.append(GpuStateSeen("node", "GPULost", detail))
    return tuple(found)


def watch_evidence(
    pod: PodView, node: NodeView, *, accept_simulated: bool, expected_gpus: int | None = None
) -> WatchEvidence | str:
    """The evidence of ``pod``'s report, or why there is none. ``expected_gpus``: the
    GPUs the node's acceptance saw (None: unknown)."""
    if pod.node_name and pod.node_name != node.name:
        return f"pod {pod.name} is bound to {pod.node_name}, not {node.name}"
    if not pod.message:
        return f"pod {pod.name} ended without a report ({pod.reason or pod.phase})"
    try:
        report = decode_watch_message(pod.message)
    except ValueError as error:
        return f"pod {pod.name}: unreadable report: {str(error)[:200]}"
    if report.node_name != node.name:
        return f"pod {pod.name}: report names node {report.node_name}, not {node.name}"
    if report.simulated and not accept_simulated:
        return f"pod {pod.name}: a simulated report, and simulated reports are not taken"
    if report.end_reason is WatchEnd.NO_DEVICE_ACCESS:
        return f"pod {pod.name}: the watch saw no GPU (the runtime hid them): no evidence"
    return WatchEvidence(
        key=f"{pod.uid or pod.name}/{report.started_at.isoformat()}",
        boot_id=report.boot_id,
        start=report.started_at,
        end=report.ended_at,
        xids=_xids(report, pod),
        state=_state(report, expected_gpus),
        not_read=tuple(sorted(report.not_read.items())),
    )
