"""DRA nodes in service (pure): a GPU gone from the node's pool, and the taints the
DRA driver puts on its own devices.

On a node whose GPUs a DRA driver publishes there is no ``nvidia.com/gpu`` to fall
short; two signals take its place:

* **A GPU gone from the pool.** The ledger keeps the uuids of the pool's whole GPUs
  when it began (``draDevices``: at acceptance). A complete pool that lacks one of
  them, or a pool left incomplete, starts the same timer as allocatable below
  capacity (``unallocatableSince``); past ``allocatableGraceSeconds`` it is the same
  verdict (``GPUsUnallocatable``). A republish under a new generation that keeps the
  uuids is no loss, nor is one in progress that completes within the grace. A pool
  withdrawn whole (the driver stopped or uninstalled) is not judged, as a device
  plugin's capacity 0 is not, and nor is a pool that now carries MIG or VFIO devices
  (a GPU repartitioned is published under another uuid); a GPU gone is still seen by
  the watch (``GPULost``).
* **The driver's device taints** (``resource.k8s.io/v1`` ``spec.devices[].taints``,
  KEP-5055). NVIDIA's driver (kubernetes-sigs/dra-driver-nvidia-gpu,
  ``cmd/gpu-kubelet-plugin/device_health.go``, behind its alpha feature gate
  ``NVMLDeviceHealthCheck``) sets ``<driver>/xid=<code>`` (NoSchedule, or None for the
  application Xids it skips), ``<driver>/gpu-lost`` (NoSchedule, every device) and
  ``<driver>/unmonitored`` (None: it cannot watch that GPU). Each is recorded once in
  the ledger (``driverTaints``) and judged by the operator's rules, not by its
  effect: an Xid by its class (checks/xid_classes.py; fatal quarantines, the others
  are recorded: one taint is one occurrence, and the driver does not taint the same
  Xid twice, so the repeated and application counts stay the watch's), a lost GPU
  always (``GPULost``), an unmonitored GPU never (evidence not read: a Warning
  Event, never a quiet node).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from gpuaccept.checks.xid_classes import xid_class
from gpuaccept.contracts.inservice import (
    MAX_DRA_DEVICES,
    MAX_DRIVER_TAINTS,
    DriverTaint,
    InServiceEvent,
    InServiceStatus,
)
from gpuaccept.contracts.nodeacceptance import GpuPublishing
from gpuaccept.operator.core.gpupublishing import GPU_DEVICE_TYPE, MIG_DEVICE_TYPE, PublishedGpus
from gpuaccept.operator.core.inservice.evidence import (
    REASON_GPU_LOST,
    REASON_XID_FATAL,
    DeviceSeen,
    DraSeen,
    Finding,
)
from gpuaccept.operator.core.inservice.watchreport import KIND
from gpuaccept.operator.core.model import DeviceTaintView, DraDevice

# NVIDIA's driver's taint keys, under its driver name (TaintKeyXID, TaintKeyGPULost,
# TaintKeyUnmonitored: DriverName + "/xid", "/gpu-lost", "/unmonitored").
TAINT_XID = "xid"
TAINT_GPU_LOST = "gpu-lost"
TAINT_UNMONITORED = "unmonitored"
TAINTS = (TAINT_XID, TAINT_GPU_LOST, TAINT_UNMONITORED)

# How much older than the acceptance a taint must be dated to count as from before
# it. The API server dates a taint (``timeAdded``, a metav1.Time) in whole seconds,
# truncated, by its own clock; the acceptance is dated by the operator's clock to the
# microsecond. A taint set in the same second as the acceptance, or a clock skew of
# a second, would otherwise read as older than the acceptance and be dropped unjudged.
ACCEPTANCE_SLACK = timedelta(seconds=2)


def dra_seen(gpus: PublishedGpus) -> DraSeen | None:
    """What a DRA node's pools say now; None when the node publishes no GPU through a
    configured DRA driver (the device plugin's, both, none: its pool withdrawn)."""
    if gpus.mode != GpuPublishing.DRA or not gpus.pools:
        return None
    devices = tuple(
        DeviceSeen(_physical_gpu(d), p.driver, d.taints) for p in gpus.pools for d in p.devices
    )
    return DraSeen(
        complete=gpus.pools_complete,
        gpus=tuple(sorted({d.uuid or d.name for d in gpus.dra_gpus})),
        devices=devices,
        repartitioned=any(
            d.kind not in ("", GPU_DEVICE_TYPE) for p in gpus.pools for d in p.devices
        ),
        describe=gpus.describe(),
    )


def _physical_gpu(device: DraDevice) -> str:
    """The GPU a device's taints are evidence about: a MIG device's parent
    (attribute ``parentUUID``: an Xid on a MIG instance is its GPU's, and a fence
    follows the GPU to its MIG devices, core/fencerules.py), else the device's own
    uuid (its name without one)."""
    if device.kind == MIG_DEVICE_TYPE and device.parent_uuid:
        return device.parent_uuid
    return device.uuid or device.name


def baseline(ledger: InServiceStatus, dra: DraSeen | None) -> list[str]:
    """The GPUs the ledger holds the pool to: those it began with, else (a new ledger)
    those of the pool now, once it is complete."""
    if ledger.dra_devices or dra is None or not dra.complete:
        return list(ledger.dra_devices)
    return list(dra.gpus[:MAX_DRA_DEVICES])


def pool_short(devices: Sequence[str], dra: DraSeen | None, accepted: int = 0) -> str | None:
    """Why the node's pool falls short of ``devices`` (the GPUs it began with) or of
    the ``accepted`` GPUs its acceptance saw (0: unknown), or None when it does not
    (or cannot be judged: no baseline, no pool at all, or a pool repartitioned into
    MIG or VFIO devices)."""
    if not devices or dra is None:
        return None
    if not dra.complete:
        return f"its DRA pool is not complete ({dra.describe})"
    if dra.repartitioned:
        return None
    gone = sorted(set(devices) - set(dra.gpus))
    if gone:
        return (
            f"{len(devices) - len(gone)} of the {len(devices)} GPUs it published through "
            f"DRA when accepted are in its pool ({', '.join(gone)} gone)"
        )
    if len(dra.gpus) < accepted:
        return f"its DRA pool has {len(dra.gpus)} of the {accepted} GPUs its acceptance saw"
    return None


def _name(key: str, driver: str) -> str | None:
    """``xid``, ``gpu-lost`` or ``unmonitored`` for a key of the device's own driver."""
    prefix, _, name = key.partition("/")
    return name if prefix == driver and name in TAINTS else None


def _recorded(records: Iterable[DriverTaint], gpu: str, taint: DeviceTaintView) -> bool:
    return any(
        (r.gpu, r.key, r.value) == (gpu[:64], taint.key, taint.value[:63])
        and (taint.added is None or r.since == taint.added)
        for r in records
    )


def _xid(value: str) -> int | None:
    return int(value) if value.isascii() and value.isdigit() and 0 < int(value) < 65536 else None


def _event(record: DriverTaint) -> InServiceEvent:
    """The history entry of a driver taint: an Xid as the watch's are, else a signal."""
    name = record.key.rpartition("/")[2]
    code = _xid(record.value) if name == TAINT_XID else None
    if code is not None:
        return InServiceEvent(
            what=f"Xid {code}",
            kind=KIND[xid_class(code)],
            time=record.since,
            gpu=record.gpu,
            xid=code,
        )
    what = f"DRA taint {record.key}" + (f"={record.value}" if record.value else "")
    return InServiceEvent(what=what[:96], kind="signal", time=record.since, gpu=record.gpu)


def new_driver_taints(
    ledger: InServiceStatus, dra: DraSeen | None, now: datetime
) -> list[DriverTaint]:
    """The known driver taints on the pool's devices not yet recorded (a taint without
    a timeAdded is dated ``now``, its first sighting). An Xid or a lost GPU tainted
    before the ledger's acceptance is not new evidence: the acceptance probe came
    after it (the driver keeps a taint until it restarts, so a node re-probed without
    a reboot would otherwise be convicted again by what its probe cleared). An
    unmonitored GPU is a standing state, whenever it was tainted. "Before" means dated
    more than :data:`ACCEPTANCE_SLACK` before the acceptance: a taint the API server
    dated within that is judged (a fatal Xid counted once too often is a probe's
    question, a dropped one a blind window)."""
    if dra is None:
        return []
    accepted = ledger.accepted_time
    found: list[DriverTaint] = []
    for device in dra.devices:
        for taint in device.taints:
            name = _name(taint.key, device.driver)
            if name is None:
                continue
            before = (
                accepted is not None
                and taint.added is not None
                and taint.added < accepted - ACCEPTANCE_SLACK
            )
            if before and name != TAINT_UNMONITORED:
                continue
            if _recorded((*ledger.driver_taints, *found), device.gpu, taint):
                continue
            found.append(
                DriverTaint(
                    gpu=device.gpu[:64],
                    key=taint.key[:128],
                    value=taint.value[:63],
                    effect=taint.effect[:32],
                    since=taint.added or now,
                )
            )
    return found


def with_driver_taints(ledger: InServiceStatus, found: Sequence[DriverTaint]) -> InServiceStatus:
    """``ledger`` with ``found`` recorded (the latest :data:`MAX_DRIVER_TAINTS`) and in
    its history."""
    if not found:
        return ledger
    records = sorted(
        [*ledger.driver_taints, *found], key=lambda r: (r.since, r.gpu, r.key, r.value)
    )[-MAX_DRIVER_TAINTS:]
    events = [*ledger.events, *(_event(r) for r in found)]
    return ledger.model_copy(update={"driver_taints": records, "events": events})


def taint_findings(ledger: InServiceStatus) -> list[Finding]:
    """The verdicts the recorded driver taints give: an Xid whose class is fatal, a
    GPU lost. Every other taint is recorded only."""
    found: list[Finding] = []
    for record in ledger.driver_taints:
        name = record.key.rpartition("/")[2]
        code = _xid(record.value) if name == TAINT_XID else None
        where = f"GPU {record.gpu} at {record.since.isoformat()}"
        if code is not None and KIND[xid_class(code)] == "fatal":
            message = f"Xid {code} (fatal) on {where} (DRA driver taint {record.key})"
            found.append(
                Finding(
                    REASON_XID_FATAL,
                    message,
                    f"{REASON_XID_FATAL}:{code}",
                    record.since,
                    record.gpu,
                )
            )
        elif name == TAINT_GPU_LOST:
            message = f"GPU lost on {where} (DRA driver taint {record.key})"
            found.append(
                Finding(REASON_GPU_LOST, message, REASON_GPU_LOST, record.since, record.gpu)
            )
    return found


def unmonitored(found: Iterable[DriverTaint]) -> list[str]:
    """The GPUs ``found`` says the driver does not watch: evidence not read."""
    return sorted({r.gpu for r in found if r.key.rpartition("/")[2] == TAINT_UNMONITORED})
