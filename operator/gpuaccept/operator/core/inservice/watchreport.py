"""A watch pod's report as evidence (pure): read only from a pod the operator
created (its UID on record), bound to the node by the pod (its ``spec.nodeName``)
and to the boot by the ledger, never by what the report says of itself.

A report that cannot be read (no message, the contract refused, another node's, a
simulated one where the operator takes none) is no evidence: it never convicts and
never clears the node; the next window's pod watches again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuaccept.checks.xid_classes import XidClass as Classes
from gpuaccept.checks.xid_classes import xid_class
from gpuaccept.contracts.inservice import XidClass
from gpuaccept.contracts.watch_report import WatchEnd, WatchReport, decode_watch_message
from gpuaccept.operator.core.model import GpuStateSeen, NodeView, PodView, WatchEvidence, XidSeen

KIND: dict[Classes, XidClass] = {
    Classes.FATAL: "fatal",
    Classes.REPEATED: "repeated",
    Classes.MEMORY: "memory",
    Classes.APPLICATION: "application",
    Classes.UNCLASSIFIED: "other",
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


def _state(report: WatchReport) -> tuple[GpuStateSeen, ...]:
    found: list[GpuStateSeen] = []
    for g in report.gpus:
        gpu = _gpu(g.index, g.uuid)
        if g.lost:
            found.append(GpuStateSeen(gpu, "GPULost", "NVML: GPU is lost"))
        if g.remap_failed:
            found.append(GpuStateSeen(gpu, "RowRemapFailure"))
        if g.remap_pending:
            found.append(GpuStateSeen(gpu, "RowRemapPending"))
        if g.recovery_action != "none":
            found.append(GpuStateSeen(gpu, "RecoveryAction", g.recovery_action))
    lost = report.gpus_lost()
    marked = sum(1 for g in report.gpus if g.lost)
    if lost is not None and lost > marked and report.gpus_expected is not None:
        detail = f"{report.gpus_seen} of {report.gpus_expected} GPUs seen"
        found.append(GpuStateSeen("node", "GPULost", detail))
    return tuple(found)


def watch_evidence(pod: PodView, node: NodeView, *, accept_simulated: bool) -> WatchEvidence | str:
    """The evidence of ``pod``'s report, or why there is none."""
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
        state=_state(report),
    )
