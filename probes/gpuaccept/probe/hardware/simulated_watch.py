"""A simulated node's life in service: the profile's ``inService`` timeline, played
on a virtual clock for one ``gpuaccept probe watch`` window.

The timeline's times are seconds from the start of each window. As the clock
passes them, its Xids reach the listener's log (an Xid 79 also takes its GPU off
the bus, as in acceptance), and the GPUs' durable state changes (a remap
pending or failed, a GPU lost, an NVLink down, a recovery action, counter
ramps): the simulated backend then answers NVML's questions with the changed
profile. The clock moves instantly; with a time scale above 0
(``GPUACCEPT_SIM_TIME_SCALE``) each simulated second also takes that many real
seconds.
"""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gpuaccept.probe.hardware.base import GpuInfo
from gpuaccept.probe.hardware.profile import (
    Gpu,
    GpuMemory,
    GpuOverride,
    HardwareProfile,
    InServiceAt,
    InServiceTimeline,
    NvlinkCounterName,
    RemappedRowsSpec,
)
from gpuaccept.probe.hardware.simulated import FELL_OFF_BUS_XIDS, SimulatedBackend, simulated_uuid
from gpuaccept.probe.hardware.xid_events import XidLog

NVLINK_COUNTERS: dict[str, NvlinkCounterName] = {
    "nvlinkReplay": "replay",
    "nvlinkRecovery": "recovery",
    "nvlinkCrc": "crc",
}


LOST = 0  # in a timeline event: the GPU is lost (no Xid; NVML's wait answers GPU_IS_LOST)


def timeline_events(timeline: InServiceTimeline) -> list[tuple[float, int, int]]:
    """Every Xid of the timeline as (seconds, GPU, Xid), and every GPU lost as
    (seconds, GPU, :data:`LOST`), in time order."""
    out = [
        (round(e.at_s + i * e.every_s, 3), e.gpu, e.xid)
        for e in timeline.events
        for i in range(e.count)
    ]
    out += [(t.at_s, t.gpu, LOST) for t in timeline.gpus_lost]
    return sorted(out)


def _ramp_added(add: int, from_s: float, to_s: float, now: float) -> int:
    if now < from_s:
        return 0
    if to_s <= from_s or now >= to_s:
        return add
    return int(add * (now - from_s) / (to_s - from_s))


def profile_at(base: HardwareProfile, now: float, fallen: frozenset[int]) -> HardwareProfile:
    """``base`` as the timeline has changed it by ``now`` (GPUs in ``fallen`` lost)."""
    timeline = base.in_service
    if timeline is None:
        return base
    gpus = base.gpus
    overrides = dict(gpus.overrides)
    for index in range(gpus.count):
        override = overrides.get(index) or GpuOverride()
        overrides[index] = override.model_copy(
            update=_gpu_at(timeline, gpus.gpu(index), index, now, index in fallen)
        )
    return base.model_copy(update={"gpus": gpus.model_copy(update={"overrides": overrides})})


def _passed(times: list[InServiceAt], gpu: int, now: float) -> bool:
    """Whether one of the timeline's times for ``gpu`` is at or before ``now``."""
    return any(t.gpu == gpu and t.at_s <= now for t in times)


def _gpu_at(
    timeline: InServiceTimeline, gpu: Gpu, index: int, now: float, fallen: bool
) -> dict[str, object]:
    """One GPU's override fields as the timeline has changed them by ``now``: its memory
    (rows remapped, ECC counts), its NVLinks (down, error counts), its recovery action,
    and whether it is lost."""
    memory, nvlink = gpu.memory, gpu.nvlink
    mem_update: dict[str, object] = {"remapped_rows": _rows_at(timeline, memory, index, now)}
    errors = {name: dict(per_link) for name, per_link in nvlink.errors_before.items()}
    for ramp in timeline.ramps:
        if ramp.gpu != index:
            continue
        added = _ramp_added(ramp.add, ramp.from_s, ramp.to_s, now)
        if ramp.counter == "eccUncorrected":
            mem_update["volatile_uncorrected"] = memory.volatile_uncorrected + added
        elif ramp.counter == "eccCorrected":
            mem_update["volatile_corrected"] = memory.volatile_corrected + added
        else:
            per_link = errors.setdefault(NVLINK_COUNTERS[ramp.counter], {})
            per_link[ramp.link] = per_link.get(ramp.link, 0) + added
    down = {d.link for d in timeline.nvlink_down if d.gpu == index and d.at_s <= now}
    update: dict[str, object] = {
        "memory": memory.model_copy(update=mem_update),
        "nvlink": nvlink.model_copy(
            update={"inactive": sorted(set(nvlink.inactive) | down), "errors_before": errors}
        ),
    }
    actions = sorted(
        (a.at_s, a.action) for a in timeline.recovery_action if a.gpu == index and a.at_s <= now
    )
    if actions:
        update["recovery_action"] = actions[-1][1]
    if fallen or _passed(timeline.gpus_lost, index, now):
        update["lost"] = "before"
    return update


def _rows_at(
    timeline: InServiceTimeline, memory: GpuMemory, index: int, now: float
) -> RemappedRowsSpec | None:
    """The GPU's remapped rows with the pending and failed remaps the timeline has
    flagged by ``now``."""
    rows = memory.remapped_rows
    if rows is None:
        return None
    pending = _passed(timeline.remap_pending, index, now)
    failed = _passed(timeline.remap_failed, index, now)
    if not (pending or failed):
        return rows
    return rows.model_copy(
        update={"pending": rows.pending or pending, "failed": rows.failed or failed}
    )


class SimulatedWatch:
    """The :class:`~gpuaccept.probe.watch.WatchSource` of a simulated node."""

    def __init__(
        self,
        backend: SimulatedBackend,
        node_name: str,
        time_scale: float = 0.0,
        stop: threading.Event | None = None,
    ) -> None:
        self.backend = backend
        self._base = backend.profile
        self._node_name = node_name
        self._time_scale = time_scale
        self._stop = stop or threading.Event()
        self._now = 0.0
        timeline = self._base.in_service or InServiceTimeline()
        self._events = timeline_events(timeline)
        timed = [
            *timeline.remap_pending,
            *timeline.remap_failed,
            *timeline.gpus_lost,
            *timeline.nvlink_down,
            *timeline.recovery_action,
        ]
        bounds = [s for r in timeline.ramps for s in (r.from_s, r.to_s)]
        self._changes = sorted({t.at_s for t in timed} | set(bounds))
        self._ramps = [(r.from_s, r.to_s) for r in timeline.ramps]
        self._fallen: set[int] = set()
        self._log: XidLog | None = None

    def no_device_access(self) -> bool:
        return bool(self._base.in_service and self._base.in_service.no_device_access)

    def now(self) -> float:
        return self._now

    def uuid(self, gpu: GpuInfo) -> str | None:
        return gpu.uuid or simulated_uuid(self._node_name, gpu.index)

    @contextmanager
    def listener(self) -> Iterator[XidLog]:
        log = XidLog(clock=self.now)
        gpus = self.backend.gpus()
        log.watched = tuple(g.index for g in gpus if g.problem is None)
        log.unwatched = {g.index: "NVML cannot open it" for g in gpus if g.problem}
        self._log = log
        try:
            yield log
        finally:
            self._log = None
            log.stop()

    def _changed(self, before: float, after: float) -> bool:
        """Whether the timeline's state can differ between the two times."""
        return any(before < at <= after for at in self._changes) or any(
            start < after and before < end for start, end in self._ramps
        )

    def _move_to(self, at: float, *, force: bool = False) -> None:
        before, self._now = self._now, at
        if force or self._changed(before, at):
            self.backend.profile = profile_at(self._base, at, frozenset(self._fallen))

    def wait(self, seconds: float) -> bool:
        target = self._now + seconds
        while self._events and self._events[0][0] <= target:
            at, gpu, xid = self._events.pop(0)
            self._move_to(max(at, self._now))
            if gpu in self._fallen:
                continue  # a GPU off the bus raises no more events
            if xid == LOST:  # as NVML's event wait answers on a real node
                if self._log is not None and self._log.died is None:
                    self._log.wait_failed(f"GPU {gpu}: NVML: GPU is lost", gpu_lost=True)
                continue
            if self._log is not None:
                self._log.record(gpu, xid)
            if xid in FELL_OFF_BUS_XIDS:
                self._fallen.add(gpu)
                self._move_to(self._now, force=True)
        self._move_to(target)
        if self._time_scale > 0:
            return self._stop.wait(seconds * self._time_scale)
        return self._stop.is_set()
