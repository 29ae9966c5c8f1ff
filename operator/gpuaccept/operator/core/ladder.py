"""What a quarantined node needs (pure): a machine-readable ladder.

Each quarantined node gets one rung, the most a person or a tool must do before
probing it again makes sense: ``ResetGPU`` (a GPU reset applies it), ``RebootNode``
(a reboot may clear it), ``NeedsPerson`` (hardware, cabling, configuration, or a
node that keeps coming back), or ``None`` (nothing: the node is not quarantined).
gpuaccept itself never resets or reboots anything; the rung is written on the
Node (condition ``GPUAcceptanceRemedy``, its reason; label ``gpuaccept.io/remedy``)
for NodeHealthCheck, a cloud's auto-repair or a person to act on. A reboot gives
the node a new bootID, and gpuaccept probes it again.

The rungs follow NVIDIA's own words: the Xid catalogue's resolution per Xid
(``xid_errors.XID_CATALOGUE``), NVML's GPU recovery action
(``nvmlDeviceGpuRecoveryAction_t``: gpu_reset, node_reboot, ...), and the
remapped-rows states (a pending remap is applied by a GPU reset, a failed one
means replacing the GPU). Everything else a probe finds (a slow link, a slow GPU,
drift, a configuration) needs a person. When reasons differ, the highest rung wins.
"""

from __future__ import annotations

from enum import IntEnum

from gpuaccept.checks import driver_libraries, gpu_count, memory_health, xid_errors
from gpuaccept.checks.gpu_ranges import parse_gpus
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase, Reason
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core.model import IN_SERVICE_CHECK


class Rung(IntEnum):
    NONE = 0
    RESET_GPU = 1
    REBOOT_NODE = 2
    NEEDS_PERSON = 3


REMEDY_REASON = {
    Rung.NONE: "None",
    Rung.RESET_GPU: "ResetGPU",
    Rung.REBOOT_NODE: "RebootNode",
    Rung.NEEDS_PERSON: "NeedsPerson",
}
REMEDY_LABEL_VALUE = {
    Rung.RESET_GPU: "reset-gpu",
    Rung.REBOOT_NODE: "reboot-node",
    Rung.NEEDS_PERSON: "person",
}

RA = xid_errors.RecoveryAction
RECOVERY_RUNG: dict[str, Rung] = {
    RA.GPU_RESET: Rung.RESET_GPU,
    RA.DRAIN_AND_RESET: Rung.RESET_GPU,
    RA.BUS_RESET: Rung.RESET_GPU,
    RA.DRAIN_P2P: Rung.RESET_GPU,
    RA.NODE_REBOOT: Rung.REBOOT_NODE,
    RA.SYSTEM_REBOOT: Rung.REBOOT_NODE,
}
# The Xid catalogue's resolution (xid_errors.XID_CATALOGUE): "reset the GPU" → a
# reset, "reboot the node" → a reboot, "replace the GPU" → a person.
XID_RUNG = {79: Rung.REBOOT_NODE, 64: Rung.NEEDS_PERSON}
XID_RESET = frozenset({48, 63, 74, 94, 95, 119, 120, 140})


def _observed(report: ProbeReport | None, check: str) -> object | None:
    if report is None:
        return None
    return next((r.observed for r in report.results if r.check == check), None)


def _xid_rung(report: ProbeReport | None) -> Rung:
    raw = _observed(report, xid_errors.SPEC.name)
    if raw is None:
        return Rung.NEEDS_PERSON
    try:
        observed = xid_errors.SPEC.parse(raw)  # type: ignore[arg-type]
    except ValueError:
        return Rung.NEEDS_PERSON
    rungs = [RECOVERY_RUNG.get(a, Rung.NEEDS_PERSON) for a in observed.recovery_action or {}]
    stop = observed.listener_stopped
    if stop is not None and stop.gpu_lost:
        rungs.append(Rung.REBOOT_NODE)  # NVML lost a GPU (fallen off the bus)
    for codes in (observed.xids or {}).values():
        for xid in codes:
            rungs.append(XID_RUNG.get(xid, Rung.RESET_GPU if xid in XID_RESET else Rung.NONE))
    found = max(rungs, default=Rung.NONE)
    return found if found != Rung.NONE else Rung.NEEDS_PERSON


def _memory_rung(report: ProbeReport | None) -> Rung:
    raw = _observed(report, memory_health.SPEC.name)
    if raw is None:
        return Rung.NEEDS_PERSON
    try:
        observed = memory_health.SPEC.parse(raw)  # type: ignore[arg-type]
    except ValueError:
        return Rung.NEEDS_PERSON
    if observed.remap_failed or observed.ecc_off or observed.retired_pages:
        return Rung.NEEDS_PERSON  # replace the GPU, or turn ECC on: a person
    pending = [observed.remap_pending, observed.retire_pending, observed.ecc_pending_off]
    if any(parse_gpus(p) for p in pending if p) or observed.volatile_uncorrected:
        return Rung.RESET_GPU
    return Rung.NEEDS_PERSON


# An in-service verdict's reason (core/inservice): what the watch saw says the rung.
IN_SERVICE_RUNG = {
    "GPULost": Rung.REBOOT_NODE,  # fallen off the bus: a reboot brings it back or not
    "GPUsUnallocatable": Rung.REBOOT_NODE,  # the device plugin gave a GPU up
    "RowRemapFailure": Rung.NEEDS_PERSON,  # replace the GPU
    "RowRemapPending": Rung.RESET_GPU,  # a reset completes the remap
    "EccUncorrected": Rung.RESET_GPU,  # a reset clears it and remaps the row
    "GPURecoveryAction": Rung.RESET_GPU,
    "XidRepeated": Rung.RESET_GPU,
}


def _in_service_rung(reason: Reason) -> Rung:
    if reason.reason == "XidFatal":
        words = reason.message.split()
        xid = int(words[1]) if len(words) > 1 and words[1].isdigit() else 0
        return XID_RUNG.get(xid, Rung.RESET_GPU if xid in XID_RESET else Rung.NEEDS_PERSON)
    return IN_SERVICE_RUNG.get(reason.reason, Rung.NEEDS_PERSON)


def reason_rung(reason: Reason, report: ProbeReport | None) -> Rung:
    """The rung one reason calls for."""
    if reason.check == IN_SERVICE_CHECK:
        return _in_service_rung(reason)
    if reason.check == xid_errors.SPEC.name:
        return _xid_rung(report)
    if reason.check == memory_health.SPEC.name:
        return _memory_rung(report)
    if reason.check == driver_libraries.SPEC.name and "mismatch" in reason.message:
        return Rung.REBOOT_NODE  # kernel module and user-space driver differ
    if reason.check == gpu_count.SPEC.name:
        return Rung.REBOOT_NODE  # a GPU gone from the bus (Xid 79: reboot the node)
    return Rung.NEEDS_PERSON


def remedy(st: NodeAcceptanceStatus) -> Rung:
    """The rung of a node with status ``st`` (``NONE`` unless quarantined)."""
    if st.phase != Phase.QUARANTINED:
        return Rung.NONE
    rungs = [reason_rung(r, st.report) for r in st.reasons]
    return max(rungs, default=Rung.NEEDS_PERSON)
