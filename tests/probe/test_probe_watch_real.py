"""The watch on the real backend against a fake ``pynvml`` (the shapes of
nvidia-ml-py, as the probe's own real-backend tests use them): the acceptance
probe's NVML Xid listener feeds the window, the counters are read at the
window's start and end, and a platform without an interface is not a fault."""

import threading
import types
from itertools import count
from typing import Any

import pytest
from test_probe_real_backend import FakeNVMLError, backend, fake_nvml
from test_probe_xid_memory_real import GPU_IS_LOST, event, fields, with_events

from gpuaccept.contracts.watch_report import WatchEnd
from gpuaccept.probe.watch import WallClockWatch, WatchSettings, run_watch

NOT_SUPPORTED = 3


def memory(module: types.ModuleType, *, pending_on: int | None = None) -> None:
    """ECC on; every read of a GPU's volatile counts is 3 more corrected and (GPU 1)
    1 more uncorrected than the last; ``pending_on``: that GPU's remap is pending."""
    reads: dict[tuple[int, int, int], Any] = {}

    def ecc(handle: int, error_type: int, counter: int) -> int:
        steps = reads.setdefault((handle, error_type, counter), count())
        n = next(steps)
        if counter != 0:  # aggregate
            return 0
        return 3 * n if error_type == 0 else (n if handle == 1 else 0)

    module.nvmlDeviceGetEccMode = lambda h: [1, 1]  # type: ignore[attr-defined]
    module.nvmlDeviceGetTotalEccErrors = ecc  # type: ignore[attr-defined]
    module.nvmlDeviceGetRemappedRows = lambda h: (  # type: ignore[attr-defined]
        0,
        1 if h == pending_on else 0,
        1 if h == pending_on else 0,
        0,
    )


def settings(window_s: float) -> WatchSettings:
    return WatchSettings(
        node_name="gpu-1",
        boot_id="boot-1",
        window_s=window_s,
        fatal_xids=frozenset({48, 64, 79, 95, 140}),
        gpus_expected=2,
    )


def test_a_fatal_xid_from_nvml_ends_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_nvml(gpus=2)
    events = with_events(module)
    memory(module)
    fields(module, 0)
    hw = backend(monkeypatch, module)
    events.put(event(1, 13))
    events.put(event(1, 79))
    report = run_watch(hw, WallClockWatch(hw.xid_listener, threading.Event()), settings(600))
    assert report.end_reason is WatchEnd.FATAL_XID
    assert report.watched_s < 600
    assert [(x.gpu, x.uuid, x.xid) for x in report.xids] == [(1, "GPU-1", 13), (1, "GPU-1", 79)]
    assert not report.simulated
    assert (report.gpus_seen, report.gpus_expected) == (2, 2)


def test_the_window_reports_increases_and_state_and_names_what_it_could_not_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = fake_nvml(gpus=2)
    with_events(module)
    memory(module, pending_on=0)
    fields(module, 0)
    hw = backend(monkeypatch, module)
    report = run_watch(hw, WallClockWatch(hw.xid_listener, threading.Event()), settings(0.5))
    assert report.end_reason is WatchEnd.WINDOW
    gpu0, gpu1 = report.gpus
    assert (gpu0.uuid, gpu0.remap_pending, gpu0.ecc_corrected, gpu0.ecc_uncorrected) == (
        "GPU-0",
        True,
        3,
        0,
    )
    assert (gpu1.remap_pending, gpu1.ecc_corrected, gpu1.ecc_uncorrected) == (False, 3, 1)
    # the fake has no fabric call (and answers 0 NVLinks): named, never a fault
    assert "fabric" in report.not_read
    assert not any(g.lost or g.nvlink_down or g.fabric for g in report.gpus)


def test_a_gpu_lost_during_the_wait_ends_the_window_with_it_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = fake_nvml(gpus=2)
    with_events(module)
    memory(module)
    fields(module, 0)
    hw = backend(monkeypatch, module)
    waits = count()

    def wait(event_set: str, timeout_ms: int) -> Any:
        if next(waits) == 0:
            raise FakeNVMLError(10)  # the timeout: nothing yet
        module.nvmlDeviceGetRemappedRows = lost_rows  # type: ignore[attr-defined]
        raise FakeNVMLError(GPU_IS_LOST)

    def lost_rows(handle: int) -> Any:
        if handle == 1:
            raise FakeNVMLError(GPU_IS_LOST)
        return (0, 0, 0, 0)

    module.nvmlEventSetWait_v2 = wait  # type: ignore[attr-defined]
    report = run_watch(hw, WallClockWatch(hw.xid_listener, threading.Event()), settings(600))
    assert report.end_reason is WatchEnd.GPU_LOST
    assert [g.index for g in report.gpus if g.lost] == [1]
    assert report.gpus_lost() == 1


def test_a_stop_request_ends_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_nvml(gpus=1)
    with_events(module)
    memory(module)
    fields(module, 0)
    hw = backend(monkeypatch, module)
    stop = threading.Event()
    stop.set()
    report = run_watch(hw, WallClockWatch(hw.xid_listener, stop), settings(600))
    assert report.end_reason is WatchEnd.TERMINATED


def test_without_nvml_the_watch_has_no_device_access(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = backend(monkeypatch, None)
    report = run_watch(hw, WallClockWatch(hw.xid_listener, threading.Event()), settings(600))
    assert (report.end_reason, report.gpus_seen) == (WatchEnd.NO_DEVICE_ACCESS, 0)
    assert report.gpus_lost() is None
    assert "not installed" in report.not_read["gpus"]


def test_nvml_with_no_gpu_is_no_device_access(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = backend(monkeypatch, fake_nvml(gpus=0))
    report = run_watch(hw, WallClockWatch(hw.xid_listener, threading.Event()), settings(600))
    assert report.end_reason is WatchEnd.NO_DEVICE_ACCESS
    assert report.not_read["gpus"] == "NVML reports no GPU"


def test_corrected_ecc_not_supported_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_nvml(gpus=1)
    with_events(module)
    memory(module)
    fields(module, 0)

    def ecc(handle: int, error_type: int, counter: int) -> int:
        if error_type == 0:
            raise FakeNVMLError(NOT_SUPPORTED)
        return 0

    module.nvmlDeviceGetTotalEccErrors = ecc  # type: ignore[attr-defined]
    hw = backend(monkeypatch, module)
    report = run_watch(hw, WallClockWatch(hw.xid_listener, threading.Event()), settings(0))
    assert "eccCorrected" in report.not_read
    assert report.gpus[0].ecc_corrected == 0


@pytest.mark.parametrize(
    ("code", "lost"),
    [(GPU_IS_LOST, True), (4, False), (999, False)],  # NO_PERMISSION, UNKNOWN
    ids=["gpu-is-lost", "no-permission", "unknown"],
)
def test_a_gpu_nvml_cannot_open_is_lost_only_on_gpu_is_lost(
    monkeypatch: pytest.MonkeyPatch, code: int, lost: bool
) -> None:
    """nvml.h: only NVML_ERROR_GPU_IS_LOST says the GPU is gone; any other answer on
    opening it leaves it unread (named in notRead), not lost."""
    module = fake_nvml(gpus=2)
    with_events(module)
    memory(module)
    fields(module, 0)

    def handle(index: int) -> int:
        if index == 1:
            raise FakeNVMLError(code)
        return index

    module.nvmlDeviceGetHandleByIndex = handle  # type: ignore[attr-defined]
    hw = backend(monkeypatch, module)
    report = run_watch(hw, WallClockWatch(hw.xid_listener, threading.Event()), settings(0))
    assert [g.index for g in report.gpus if g.lost] == ([1] if lost else [])
    assert report.gpus_seen == 2
    assert ("gpu1" in report.not_read) is not lost
