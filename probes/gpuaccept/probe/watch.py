"""``gpuaccept probe watch``'s core: one in-service watch window on one node.

The watch opens the same critical-Xid listener as the acceptance probe
(:mod:`gpuaccept.probe.hardware.xid_events`), reads the durable state once at
the start of the window (the baselines of the counters) and once at its end,
and puts no load on the GPUs. It stops early on an Xid of the fatal list, on a
listener whose wait failed (a GPU fell off the bus), or on a stop request
(SIGTERM). What it saw becomes a :class:`~gpuaccept.contracts.watch_report.WatchReport`.

Where the time comes from is a :class:`WatchSource`: the real one is the wall
clock and the hardware's own listener; the simulated one
(:mod:`gpuaccept.probe.hardware.simulated_watch`) plays the profile's
in-service timeline on a virtual clock.
"""

import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Protocol, TypeVar

from gpuaccept.checks.xid_classes import XidClass, xid_class
from gpuaccept.checks.xid_errors import RECOVERY_ACTION_BY_VALUE
from gpuaccept.contracts.report import HardwareMode
from gpuaccept.contracts.watch_report import (
    BURST_MERGE_S,
    EVENTS_MAX,
    GPUS_MAX,
    IB_PORTS_MAX,
    WatchEnd,
    WatchGpu,
    WatchIbPort,
    WatchReport,
    WatchXid,
    fit_watch_report,
)
from gpuaccept.probe import PROBE_VERSION
from gpuaccept.probe.hardware.base import (
    FabricInfo,
    GpuFailedError,
    GpuInfo,
    GpuMemoryHealth,
    GpuSettings,
    NvlinkLinks,
)
from gpuaccept.probe.hardware.infiniband import InfinibandView
from gpuaccept.probe.hardware.xid_events import XidEvent, XidLog

POLL_S = 0.5  # how often the window looks at the listener's log and the stop flag
NOT_READ_CHARS = 160
T = TypeVar("T")


class WatchHardware(Protocol):
    """What the watch reads: a subset of the probe's backends (no load, no CUDA)."""

    mode: HardwareMode

    def gpus(self) -> list[GpuInfo]: ...

    def gpu_problem(self) -> str | None: ...

    def boot_id(self) -> str | None: ...

    def memory_health(self, gpu: int) -> GpuMemoryHealth: ...

    def ecc_corrected(self, gpu: int) -> int: ...

    def gpu_recovery_action(self, gpu: int) -> int: ...

    def nvlink(self, gpu: int) -> NvlinkLinks: ...

    def gpu_fabric(self, gpu: int) -> FabricInfo: ...

    def gpu_settings(self, gpu: int) -> GpuSettings: ...

    def infiniband(self) -> InfinibandView: ...

    def close(self) -> None: ...


class WatchSource(Protocol):
    """The window's time and events."""

    def listener(self) -> AbstractContextManager[XidLog]:
        """The critical-Xid listener, open for the window."""
        ...

    def now(self) -> float:
        """Seconds since the window started."""
        ...

    def wait(self, seconds: float) -> bool:
        """Let ``seconds`` pass (fewer on a stop request); True: stop requested."""
        ...

    def uuid(self, gpu: GpuInfo) -> str | None:
        """The GPU's UUID (NVML's; a simulated node makes one up)."""
        ...


@dataclass(frozen=True)
class WatchSettings:
    node_name: str
    boot_id: str
    window_s: float
    fatal_xids: frozenset[int]
    gpus_expected: int | None = None
    burst_merge_s: float = BURST_MERGE_S  # the policy's inService.xid.burstMergeSeconds
    started_at: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))


# --- bursts -------------------------------------------------------------------


def merge_bursts(
    events: Sequence[XidEvent], uuids: dict[int, str | None], merge_s: float = BURST_MERGE_S
) -> list[WatchXid]:
    """The events as bursts: per (GPU, Xid), each event less than ``merge_s`` after
    the previous one joins its burst (a duplicate is one more count). Ordered by the
    first event of each burst. Pure: the order of ``events`` does not matter."""
    by_key: dict[tuple[int, int], list[float]] = {}
    for event in events:
        by_key.setdefault((event.gpu, event.xid), []).append(event.at_s)
    bursts: list[WatchXid] = []
    for (gpu, xid), times in by_key.items():
        times.sort()
        first = last = times[0]
        count = 1
        for at in times[1:]:
            if at - last < merge_s:
                last, count = at, count + 1
                continue
            bursts.append(_burst((gpu, xid), uuids, (first, last, count)))
            first = last = at
            count = 1
        bursts.append(_burst((gpu, xid), uuids, (first, last, count)))
    return sorted(bursts, key=lambda b: (b.first_s, b.gpu, b.xid))


def _burst(
    key: tuple[int, int], uuids: dict[int, str | None], span: tuple[float, float, int]
) -> WatchXid:
    gpu, xid = key
    first, last, count = span
    return WatchXid(
        gpu=gpu if 0 <= gpu < GPUS_MAX else -1,
        uuid=uuids.get(gpu),
        xid=xid,
        first_s=round(first, 1),
        last_s=round(last, 1),
        count=count,
    )


def keep_rank(burst: WatchXid) -> int:
    """The size guard's order: the fatal class last to go, then the hardware classes,
    then the rest (:func:`~gpuaccept.contracts.watch_report.fit_watch_report`)."""
    cls = xid_class(burst.xid)
    if cls is XidClass.FATAL:
        return 0
    if cls in (XidClass.REPEATED, XidClass.MEMORY):
        return 1
    return 2


# --- durable state ----------------------------------------------------------------


@dataclass
class GpuState:
    """One GPU's readings at one moment; None: not read."""

    lost: bool = False
    volatile_uncorrected: int | None = None
    volatile_corrected: int | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    recovery_action: str | None = None
    nvlink_active: frozenset[int] | None = None
    nvlink_errors: dict[str, int] | None = None
    fabric: str | None = None


def _fabric_text(info: FabricInfo) -> str | None:
    """Not None when the GPU's fabric is away from registered-and-healthy."""
    if info.state in ("unsupported", "not_supported"):
        return None
    if info.state != "completed":
        return info.state
    if info.status != 0:
        return f"completed:status{info.status}"
    if info.conditions:
        return ("completed:" + ",".join(info.conditions))[:48]
    return None


class _Reads:
    """Per-interface reads that never raise: a lost GPU is marked lost, an interface
    that does not answer is named once in ``not_read``."""

    def __init__(self, not_read: dict[str, str]) -> None:
        self.not_read = not_read

    def __call__(self, part: str, gpu: int, state: GpuState, read: Callable[[], T]) -> T | None:
        if state.lost:
            return None
        try:
            return read()
        except GpuFailedError:
            state.lost = True
        except Exception as exc:  # an interface this platform lacks is no fault
            self.not_read.setdefault(part, f"GPU {gpu}: {exc}"[:NOT_READ_CHARS])
        return None


# What NVML answers for a GPU it has lost (nvmlErrorString(NVML_ERROR_GPU_IS_LOST),
# pynvml's table): the one answer on opening a GPU that means it is gone.
LOST_WORDS = ("gpu is lost", "gpu_is_lost")


def opened_lost(problem: str) -> bool:
    """Whether NVML's answer on opening a GPU says the GPU is lost. Any other error
    (no permission, an unknown error, a driver that is busy) leaves it unread."""
    text = problem.lower()
    return any(word in text for word in LOST_WORDS)


def _links(reads: _Reads, hardware: WatchHardware, gpu: int, state: GpuState) -> None:
    """The GPU's active NVLinks and error counters; none on a GPU in MIG mode, whose
    links NVML reports down (DCGM's health watch treats them as disabled there), and
    whose instances' Xids the watch does not get: both named in ``not_read``."""
    settings = reads("mig", gpu, state, partial(hardware.gpu_settings, gpu))
    if settings is not None and settings.mig_current:
        reads.not_read.setdefault("nvlinks", f"GPU {gpu}: MIG mode (links read as down)")
        # nvml.h, nvmlEventSetWait_v2: in MIG mode an unprivileged caller gets only the
        # events that affect the whole device, not its instances'
        reads.not_read.setdefault("xidMig", f"GPU {gpu}: MIG mode: no instance-level Xids")
        return
    links = reads("nvlinks", gpu, state, partial(hardware.nvlink, gpu))
    if links is not None:
        state.nvlink_active = frozenset(links.active)
        if links.errors is not None:
            state.nvlink_errors = {name: sum(per_link) for name, per_link in links.errors.items()}


def _memory(reads: _Reads, hardware: WatchHardware, gpu: int, state: GpuState) -> None:
    health = reads("memory", gpu, state, partial(hardware.memory_health, gpu))
    if health is not None:
        state.volatile_uncorrected = health.volatile_uncorrected
        rows = health.remapped_rows
        if rows is not None:
            state.remap_pending, state.remap_failed = rows.pending, rows.failed
        elif health.retire_pending is not None:
            state.remap_pending = health.retire_pending


def read_state(
    hardware: WatchHardware, gpus: Sequence[GpuInfo], not_read: dict[str, str]
) -> dict[int, GpuState]:
    """Each GPU's state. A GPU NVML could not open is lost only when NVML said so
    (GPU_IS_LOST); any other answer leaves it unread, named in ``not_read``."""
    reads = _Reads(not_read)
    out: dict[int, GpuState] = {}
    for info in gpus:
        gpu = info.index
        state = GpuState(lost=info.problem is not None and opened_lost(info.problem))
        out[gpu] = state
        if info.problem is not None:
            if not state.lost:
                not_read.setdefault(f"gpu{gpu}", info.problem[:NOT_READ_CHARS])
            continue
        _memory(reads, hardware, gpu, state)
        state.volatile_corrected = reads(
            "eccCorrected", gpu, state, partial(hardware.ecc_corrected, gpu)
        )
        action = reads("recoveryAction", gpu, state, partial(hardware.gpu_recovery_action, gpu))
        if action is not None and 0 <= action < len(RECOVERY_ACTION_BY_VALUE):
            state.recovery_action = RECOVERY_ACTION_BY_VALUE[action].value
        _links(reads, hardware, gpu, state)
        fabric = reads("fabric", gpu, state, partial(hardware.gpu_fabric, gpu))
        if fabric is not None:
            state.fabric = _fabric_text(fabric)
    return out


def _increase(before: int | None, after: int | None) -> int:
    """A counter's increase; a counter that went down was reset (a GPU reset): what
    it counts now is all new."""
    if after is None:
        return 0
    if before is None or after < before:
        return after if before is not None else 0
    return after - before


def gpu_entry(index: int, uuid: str | None, start: GpuState, end: GpuState) -> WatchGpu:
    """What the window says about one GPU: the end state and the increases over it."""
    errors: dict[str, int] = {}
    for name, count in (end.nvlink_errors or {}).items():
        grew = _increase((start.nvlink_errors or {}).get(name), count)
        if grew:
            errors[name] = grew
    down: list[int] = []
    if start.nvlink_active is not None and end.nvlink_active is not None:
        down = sorted(start.nvlink_active - end.nvlink_active)
    return WatchGpu(
        index=index,
        uuid=uuid,
        lost=end.lost,
        ecc_uncorrected=_increase(start.volatile_uncorrected, end.volatile_uncorrected),
        ecc_corrected=_increase(start.volatile_corrected, end.volatile_corrected),
        remap_pending=bool(end.remap_pending),
        remap_failed=bool(end.remap_failed),
        recovery_action=end.recovery_action or "none",
        nvlink_down=down,
        nvlink_errors=errors,
        fabric=end.fabric,
    )


def ib_ports(hardware: WatchHardware, not_read: dict[str, str]) -> list[WatchIbPort] | None:
    try:
        view = hardware.infiniband()
    except Exception as exc:
        not_read["ib"] = str(exc)[:NOT_READ_CHARS]
        return None
    ports = [p for hca in view.hcas for p in hca.ports]
    if not ports:
        return None
    return [
        WatchIbPort(name=p.name[:40], state=p.state[:16], rate_gbps=p.rate_gbps)
        for p in ports[:IB_PORTS_MAX]
    ]


# --- the window -----------------------------------------------------------------


def _listen(source: WatchSource, settings: WatchSettings, log: XidLog) -> WatchEnd:
    """Wait out the window, looking at the log every :data:`POLL_S`."""
    looked = 0
    while True:
        events = log.events()
        if any(e.xid in settings.fatal_xids for e in events[looked:]):
            return WatchEnd.FATAL_XID
        looked = len(events)
        if log.died is not None:
            return WatchEnd.GPU_LOST if log.died[3] else WatchEnd.LISTENER_FAILED
        left = settings.window_s - source.now()
        if left <= 0:
            return WatchEnd.WINDOW
        if source.wait(min(POLL_S, left)):
            return WatchEnd.TERMINATED


def run_watch(hardware: WatchHardware, source: WatchSource, settings: WatchSettings) -> WatchReport:
    """One window, fitted to the termination message."""
    started = settings.started_at()
    gpus = hardware.gpus()
    not_read: dict[str, str] = {}
    uuids = {g.index: source.uuid(g) for g in gpus}
    if not gpus:
        problem = hardware.gpu_problem() or "no GPU visible"
        return ended_at_once(settings, hardware.mode, WatchEnd.NO_DEVICE_ACCESS, problem)
    start_state = read_state(hardware, gpus, {})
    with source.listener() as log:
        end = _listen(source, settings, log)
        watched = source.now()
        events = log.events()
        if log.dropped:
            not_read["xidEvents"] = f"{log.dropped} events after the first kept were not kept"
        if log.problem and not log.watched:
            not_read["xid"] = log.problem[:NOT_READ_CHARS]
        elif log.unwatched:
            first = min(log.unwatched)
            not_read["xid"] = f"GPU {first}: {log.unwatched[first]}"[:NOT_READ_CHARS]
    end_state = read_state(hardware, gpus, not_read)
    entries = [
        gpu_entry(g.index, uuids.get(g.index), start_state[g.index], end_state[g.index])
        for g in gpus
        if g.index < GPUS_MAX
    ]
    ib = ib_ports(hardware, not_read)
    seen = WindowSeen(
        watched,
        end,
        len(gpus),
        not_read,
        merge_bursts(events, uuids, settings.burst_merge_s),
        entries,
        ib,
    )
    report = _report(settings, hardware.mode, started, seen)
    return fit_watch_report(report, keep_first=keep_rank)


@dataclass
class WindowSeen:
    """What one window saw, before it becomes a report."""

    watched_s: float
    end: WatchEnd
    gpus_seen: int
    not_read: dict[str, str]
    xids: list[WatchXid] = field(default_factory=list)
    entries: list[WatchGpu] = field(default_factory=list)
    ib: list[WatchIbPort] | None = None


def ended_at_once(
    settings: WatchSettings, mode: HardwareMode, end: WatchEnd, why: str
) -> WatchReport:
    """The report of a watch that saw nothing: no GPU visible (``noDeviceAccess``) or
    one that could not run (``failed``); ``why`` goes to ``notRead``."""
    started = settings.started_at()
    key = "gpus" if end is WatchEnd.NO_DEVICE_ACCESS else "watch"
    seen = WindowSeen(0.0, end, 0, {key: why[:NOT_READ_CHARS]})
    return _report(settings, mode, started, seen)


def _report(
    settings: WatchSettings, mode: HardwareMode, started: datetime, seen: WindowSeen
) -> WatchReport:
    ended = datetime.now(UTC)
    kept = sorted(seen.xids, key=lambda b: (keep_rank(b), b.first_s))[:EVENTS_MAX]
    return WatchReport(
        node_name=settings.node_name,
        boot_id=settings.boot_id[:64],
        probe_version=PROBE_VERSION,
        simulated=mode is HardwareMode.SIMULATED,
        started_at=started,
        ended_at=max(ended, started),
        window_s=settings.window_s,
        watched_s=round(max(0.0, seen.watched_s), 1),
        end_reason=seen.end,
        ended_early=seen.end is not WatchEnd.WINDOW,
        gpus_expected=settings.gpus_expected,
        gpus_seen=min(seen.gpus_seen, GPUS_MAX),
        xids=sorted(kept, key=lambda b: (b.first_s, b.gpu, b.xid)),
        xids_dropped=len(seen.xids) - len(kept),
        gpus=seen.entries,
        ib_ports=seen.ib,
        not_read=dict(list(seen.not_read.items())[:12]),
    )


class WallClockWatch:
    """The :class:`WatchSource` of a real node: the wall clock, the backend's own NVML
    listener, and a stop flag (set on SIGTERM)."""

    def __init__(
        self,
        listen: Callable[[], AbstractContextManager[XidLog]],
        stop: threading.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._listen = listen
        self._stop = stop
        self._clock = clock
        self._start = clock()

    def listener(self) -> AbstractContextManager[XidLog]:
        return self._listen()

    def now(self) -> float:
        return self._clock() - self._start

    def wait(self, seconds: float) -> bool:
        return self._stop.wait(seconds)

    def uuid(self, gpu: GpuInfo) -> str | None:
        return gpu.uuid
