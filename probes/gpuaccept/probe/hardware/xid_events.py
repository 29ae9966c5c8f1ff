"""Xid events recorded while the probe loads the GPUs.

:class:`XidLog` is what a backend's ``xid_listener()`` yields: the runner opens
it before the first check and closes it after the last, sets
:attr:`XidLog.phase` to the check that is running, and the ``xid_errors``
measurement reads it. The real backend's listener
(:func:`nvml_xid_listener`) is a thread waiting on an NVML event set; the
simulated backend records the Xids of its profile as each GPU is loaded.
"""

import contextlib
import ctypes
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gpuaccept.probe.hardware.nvml_errors import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_TIMEOUT,
    nvml_error_code,
)

WAIT_MS = 500  # each nvmlEventSetWait_v2 call; the stop flag is looked at in between
STOP_DEADLINE_S = 5.0
EVENTS_KEPT = 256  # a GPU in an Xid storm must not grow the log without bound


@dataclass(frozen=True)
class XidEvent:
    gpu: int  # NVML index; -1 when NVML named a device we do not know
    xid: int
    at_s: float  # seconds since the listener started
    during: str | None  # the check running when it arrived


class XidLog:
    """Thread-safe record of one listener's Xids, and what it watched."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started = clock()
        self._stopped: float | None = None
        self._lock = threading.Lock()
        self._events: list[XidEvent] = []
        self.dropped = 0
        self.phase: str | None = None
        self.watched: tuple[int, ...] = ()  # GPUs registered for Xid events
        self.unwatched: dict[int, str] = {}  # GPU → why it could not be registered
        self.problem: str | None = None  # why no GPU could be watched at all
        # The wait ended before the block did (an NVML error other than its timeout):
        # Xids after that were not seen. (seconds since the start, check, error, GPU lost)
        self.died: tuple[float, str | None, str, bool] | None = None

    def wait_failed(self, error: str, gpu_lost: bool) -> None:
        """The listener's wait stopped on ``error``; ``gpu_lost``: NVML answered
        GPU_IS_LOST (a GPU fell off the bus during the wait)."""
        at = round(self._clock() - self._started, 1)
        self.died = (at, self.phase, error, gpu_lost)
        self.problem = f"NVML event wait failed after {at:g} s: {error}"

    def record(self, gpu: int, xid: int) -> None:
        event = XidEvent(gpu, xid, round(self._clock() - self._started, 1), self.phase)
        with self._lock:
            if len(self._events) < EVENTS_KEPT:
                self._events.append(event)
            else:
                self.dropped += 1

    def stop(self) -> None:
        if self._stopped is None:
            self._stopped = self._clock()

    @property
    def seconds(self) -> float:
        """How long the listener listened: until its wait died, else until it stopped."""
        if self.died is not None:
            return self.died[0]
        end = self._stopped if self._stopped is not None else self._clock()
        return round(end - self._started, 1)

    def events(self) -> list[XidEvent]:
        with self._lock:
            return list(self._events)


def handle_key(handle: Any) -> Any:
    """A comparable key of an NVML device handle (a ctypes pointer compares by identity)."""
    if isinstance(handle, int):
        return handle
    with contextlib.suppress(TypeError, ctypes.ArgumentError):
        return ctypes.cast(handle, ctypes.c_void_p).value
    return handle


# What the listener calls in the binding; an older nvidia-ml-py may lack some of them.
EVENT_API = (
    "nvmlEventSetCreate",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
    "nvmlEventTypeXidCriticalError",
)


def _register(nvml: ModuleType, handles: list[Any], log: XidLog) -> Any:
    """An event set with every GPU that supports critical-Xid events registered on it."""
    event_set = nvml.nvmlEventSetCreate()
    xid_type = nvml.nvmlEventTypeXidCriticalError
    watched = []
    for gpu, handle in enumerate(handles):
        if handle is None:
            log.unwatched[gpu] = "NVML cannot open it"
            continue
        try:
            if not int(nvml.nvmlDeviceGetSupportedEventTypes(handle)) & xid_type:
                log.unwatched[gpu] = "no critical-Xid events (NVML)"
                continue
            nvml.nvmlDeviceRegisterEvents(handle, xid_type, event_set)
        except nvml.NVMLError as exc:
            log.unwatched[gpu] = f"NVML: {exc}"
            continue
        watched.append(gpu)
    log.watched = tuple(watched)
    return event_set


def _wait_loop(
    nvml: ModuleType, event_set: Any, keys: dict[Any, int], log: XidLog, stop: threading.Event
) -> None:
    xid_type = nvml.nvmlEventTypeXidCriticalError
    while not stop.is_set():
        try:
            data = nvml.nvmlEventSetWait_v2(event_set, WAIT_MS)
        except nvml.NVMLError as exc:
            code = nvml_error_code(exc)
            if code == NVML_ERROR_TIMEOUT:
                continue
            log.wait_failed(str(exc)[:120], gpu_lost=code == NVML_ERROR_GPU_IS_LOST)
            return
        except Exception as exc:  # anything else must not end the thread unseen
            log.wait_failed(f"{type(exc).__name__}: {exc}"[:120], gpu_lost=False)
            return
        try:
            if int(data.eventType) & xid_type:
                log.record(keys.get(handle_key(data.device), -1), int(data.eventData))
        except Exception as exc:  # an event that cannot be read: the rest is not seen
            log.wait_failed(f"{type(exc).__name__}: {exc}"[:120], gpu_lost=False)
            return


@contextlib.contextmanager
def nvml_xid_listener(
    nvml: ModuleType | None, handles: list[Any], why_not: str | None
) -> Iterator[XidLog]:
    """Listen for critical Xids on every GPU in ``handles`` until the block ends.

    Never raises: what could not be watched is recorded in the log."""
    log = XidLog()
    if nvml is None:
        log.problem = why_not or "NVML unavailable"
        yield log
        log.stop()
        return
    missing = [name for name in EVENT_API if not hasattr(nvml, name)]
    if missing:  # an older nvidia-ml-py: nothing to listen with, and no pass for it
        log.problem = f"the NVML binding has no {', '.join(missing)}"
        yield log
        log.stop()
        return
    try:
        event_set = _register(nvml, handles, log)
    except nvml.NVMLError as exc:
        log.problem = f"NVML cannot create an event set: {exc}"
        yield log
        log.stop()
        return
    keys = {handle_key(h): gpu for gpu, h in enumerate(handles) if h is not None}
    stop = threading.Event()
    thread = threading.Thread(
        target=_wait_loop,
        args=(nvml, event_set, keys, log, stop),
        name="gpuaccept-xid",
        daemon=True,
    )
    if log.watched:
        thread.start()
    try:
        yield log
    finally:
        stop.set()
        if log.watched:
            thread.join(STOP_DEADLINE_S)
        log.stop()
        if not thread.is_alive():  # a wait still in NVML keeps its set
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlEventSetFree(event_set)
