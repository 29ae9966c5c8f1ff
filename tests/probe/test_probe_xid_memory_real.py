"""The real backend's Xid listener, recovery action field and memory reads
against a fake ``pynvml`` (the shapes of nvidia-ml-py's ``pynvml.py``: event
data with ``device``/``eventType``/``eventData``, field values with
``nvmlReturn``/``valueType``/``value.uiVal``, ``nvmlDeviceGetRemappedRows``'s
4-tuple, ``nvmlDeviceGetEccMode``'s [current, pending])."""

import queue
import time
import types
from typing import Any

import pytest
from test_probe_real_backend import FakeNVMLError, backend, fake_nvml

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import BY_NAME
from gpuaccept.contracts.report import CheckStatus
from gpuaccept.probe.hardware.base import GpuFailedError, RemappedRows, Unavailable
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.runner import hardware_summary, run_check

XID_CRITICAL = 0x8
NOT_SUPPORTED = 3
TIMEOUT = 10
GPU_IS_LOST = 15


def with_events(
    module: types.ModuleType, supported: dict[int, int] | None = None
) -> "queue.Queue[Any]":
    """Adds an event set to ``module``; returns the queue a test puts events on."""
    events: queue.Queue[Any] = queue.Queue()
    registered: list[int] = []
    module.nvmlEventTypeXidCriticalError = XID_CRITICAL  # type: ignore[attr-defined]
    module.nvmlEventSetCreate = lambda: "event-set"  # type: ignore[attr-defined]
    module.nvmlEventSetFree = lambda s: None  # type: ignore[attr-defined]
    module.registered = registered  # type: ignore[attr-defined]

    def supported_types(handle: int) -> int:
        return (supported or {}).get(handle, 0xFFFF)

    def register(handle: int, types_: int, event_set: str) -> None:
        assert (types_, event_set) == (XID_CRITICAL, "event-set")
        registered.append(handle)

    def wait(event_set: str, timeout_ms: int) -> Any:
        try:
            return events.get(timeout=timeout_ms / 1000 / 10)
        except queue.Empty:
            raise FakeNVMLError(TIMEOUT) from None

    module.nvmlDeviceGetSupportedEventTypes = supported_types  # type: ignore[attr-defined]
    module.nvmlDeviceRegisterEvents = register  # type: ignore[attr-defined]
    module.nvmlEventSetWait_v2 = wait  # type: ignore[attr-defined]
    return events


def event(gpu: int, xid: int) -> Any:
    return types.SimpleNamespace(
        device=gpu, eventType=XID_CRITICAL, eventData=xid, gpuInstanceId=0, computeInstanceId=0
    )


def wait_for(predicate: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_listener_records_each_xid_with_its_gpu_and_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_nvml(gpus=2)
    events = with_events(module)
    hw = backend(monkeypatch, module)
    with hw.xid_listener() as log:
        log.phase = "throttle_reasons"
        events.put(event(1, 79))
        wait_for(log.events)
        log.phase = "nccl_allreduce"
        events.put(event(0, 94))
        wait_for(lambda: len(log.events()) == 2)
    assert module.registered == [0, 1]  # type: ignore[attr-defined]
    assert log.watched == (0, 1)
    assert [(e.gpu, e.xid, e.during) for e in log.events()] == [
        (1, 79, "throttle_reasons"),
        (0, 94, "nccl_allreduce"),
    ]


def test_listener_names_a_gpu_without_xid_events(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_nvml(gpus=2)
    with_events(module, supported={1: 0x1})  # GPU 1: no critical-Xid bit
    hw = backend(monkeypatch, module)
    with hw.xid_listener() as log:
        pass
    assert log.watched == (0,)
    assert log.unwatched == {1: "no critical-Xid events (NVML)"}


def test_listener_without_nvml_records_why(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = backend(monkeypatch, None)
    with hw.xid_listener() as log:
        pass
    assert log.watched == ()
    assert log.problem is not None
    assert "not installed" in log.problem


def fields(
    module: types.ModuleType,
    action: int,
    *,
    returned: int = 0,
    kind: int = 1,
    by_field: dict[int, tuple[int, int]] | None = None,
) -> list[int]:
    """NVML's field values: every field asked answers ``action`` (or, from
    ``by_field``, its own (return code, value))."""
    asked: list[int] = []

    def get(handle: int, ids: list[int]) -> list[Any]:
        asked.extend(ids)
        answers = []
        for field_id in ids:
            code, value = (by_field or {}).get(field_id, (returned, action))
            answers.append(
                types.SimpleNamespace(
                    nvmlReturn=code, valueType=kind, value=types.SimpleNamespace(uiVal=value)
                )
            )
        return answers

    module.nvmlDeviceGetFieldValues = get  # type: ignore[attr-defined]
    return asked


@pytest.mark.parametrize("driver", ["570.124.06", "580.65.06"])
def test_recovery_action_read_with_the_drivers_numbering(
    monkeypatch: pytest.MonkeyPatch, driver: str
) -> None:
    module = fake_nvml()
    module.nvmlSystemGetDriverVersion = lambda: driver  # type: ignore[attr-defined]
    asked = fields(module, 2)
    assert backend(monkeypatch, module).gpu_recovery_action(1) == 2
    assert asked == [230]


@pytest.mark.parametrize("driver", ["525.147.05", "535.183.06", "550.54.15", "555.42.06"])
def test_recovery_action_not_read_on_a_driver_without_either_field(
    monkeypatch: pytest.MonkeyPatch, driver: str
) -> None:
    """nvml.h at NVIDIA/go-nvml's syncs: NVML_FI_MAX is 197 at CUDA 12.2 (R535), 200 at
    12.4 (R550) and 223 at 12.5 (R555); NVML_FI_DEV_RESET_STATUS 226 and
    NVML_FI_DEV_DRAIN_AND_RESET_STATUS 227 first appear at 12.6 (R560) (issue 37, item 15)."""
    module = fake_nvml()
    module.nvmlSystemGetDriverVersion = lambda: driver  # type: ignore[attr-defined]
    asked = fields(module, 0)
    with pytest.raises(
        Unavailable,
        match=rf"driver {driver}: no recovery action or reset status field before R560",
    ):
        backend(monkeypatch, module).gpu_recovery_action(0)
    assert asked == []  # not even asked: 226, 227 and 230 name no field there


RESET_REQUIRED, DRAIN_AND_RESET = 226, 227  # NVML_FI_DEV_RESET_STATUS, _DRAIN_AND_RESET_STATUS


@pytest.mark.parametrize(
    ("driver", "answers", "action"),
    [
        ("560.35.03", {RESET_REQUIRED: (0, 0), DRAIN_AND_RESET: (0, 0)}, 0),
        ("560.35.03", {RESET_REQUIRED: (0, 1), DRAIN_AND_RESET: (0, 0)}, 1),  # GPU_RESET
        ("565.57.01", {RESET_REQUIRED: (0, 1), DRAIN_AND_RESET: (0, 1)}, 4),  # DRAIN_AND_RESET
        # nvidia-smi prints "Drain and Reset Recommended: N/A" where the flag is not
        # supported: "reset required" alone decides
        ("565.57.01", {RESET_REQUIRED: (0, 1), DRAIN_AND_RESET: (NOT_SUPPORTED, 0)}, 1),
    ],
)
def test_recovery_action_before_r570_from_the_reset_status_fields(
    monkeypatch: pytest.MonkeyPatch, driver: str, answers: dict[int, tuple[int, int]], action: int
) -> None:
    module = fake_nvml()
    module.nvmlSystemGetDriverVersion = lambda: driver  # type: ignore[attr-defined]
    asked = fields(module, 0, by_field=answers)
    assert backend(monkeypatch, module).gpu_recovery_action(0) == action
    assert asked == [RESET_REQUIRED, DRAIN_AND_RESET]  # never 230 on these branches


def test_reset_status_that_cannot_be_read_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_nvml()
    module.nvmlSystemGetDriverVersion = lambda: "560.35.03"  # type: ignore[attr-defined]
    fields(module, 0, by_field={RESET_REQUIRED: (NOT_SUPPORTED, 0)})
    with pytest.raises(Unavailable, match="GPU 0: field 226: NotSupported"):
        backend(monkeypatch, module).gpu_recovery_action(0)


@pytest.mark.parametrize(
    ("action", "returned", "kind", "why"),
    [
        (0, NOT_SUPPORTED, 1, "NotSupported"),
        (9, 0, 1, "answered 9, not a recovery action"),
        (1, 0, 0, "value type 0"),
    ],
)
def test_recovery_action_answers_that_cannot_be_trusted_are_not_read(
    monkeypatch: pytest.MonkeyPatch, action: int, returned: int, kind: int, why: str
) -> None:
    module = fake_nvml()
    module.nvmlSystemGetDriverVersion = lambda: "570.124.06"  # type: ignore[attr-defined]
    fields(module, action, returned=returned, kind=kind)
    with pytest.raises(Unavailable, match=why):
        backend(monkeypatch, module).gpu_recovery_action(0)


def test_recovery_action_of_a_lost_gpu_fails_that_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_nvml()
    module.nvmlSystemGetDriverVersion = lambda: "570.124.06"  # type: ignore[attr-defined]
    fields(module, 0, returned=GPU_IS_LOST)
    with pytest.raises(GpuFailedError, match="GPU 1"):
        backend(monkeypatch, module).gpu_recovery_action(1)


def memory(
    module: types.ModuleType,
    *,
    ecc: list[int] | None = None,
    rows: tuple[int, int, int, int] | None = (0, 0, 0, 0),
    retired: list[int] | None = None,
    lost: bool = False,
) -> None:
    def answer(value: Any) -> Any:
        def get(handle: int, *args: int) -> Any:
            if lost:
                raise FakeNVMLError(GPU_IS_LOST)
            if value is None:
                raise FakeNVMLError(NOT_SUPPORTED)
            return value(*args) if callable(value) else value

        return get

    counts = {(1, 0): 2, (1, 1): 5}  # (uncorrected, volatile) 2, (uncorrected, aggregate) 5
    module.nvmlDeviceGetEccMode = answer(ecc if ecc is not None else [1, 1])  # type: ignore[attr-defined]
    module.nvmlDeviceGetTotalEccErrors = answer(lambda e, c: counts[(e, c)])  # type: ignore[attr-defined]
    module.nvmlDeviceGetRemappedRows = answer(rows)  # type: ignore[attr-defined]
    pages = (lambda cause: list(range(retired[cause]))) if retired is not None else None
    module.nvmlDeviceGetRetiredPages = answer(pages)  # type: ignore[attr-defined]
    module.nvmlDeviceGetRetiredPagesPendingStatus = answer(1 if retired else None)  # type: ignore[attr-defined]


def test_memory_of_an_h100_reads_remapped_rows_not_retired_pages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = fake_nvml()
    memory(module, rows=(3, 1, 1, 0))
    health = backend(monkeypatch, module).memory_health(0)
    assert health.ecc_mode == (True, True)
    assert (health.volatile_uncorrected, health.aggregate_uncorrected) == (2, 5)
    assert health.remapped_rows == RemappedRows(3, 1, pending=True, failed=False)
    assert (health.retired_pages, health.retire_pending) == (None, None)
    assert health.not_read == {}


def test_memory_of_a_page_retirement_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_nvml()
    memory(module, rows=None, retired=[40, 24])
    health = backend(monkeypatch, module).memory_health(0)
    assert health.remapped_rows is None
    assert (health.retired_pages, health.retire_pending) == (64, True)
    assert health.not_read == {}


def test_memory_without_either_mechanism_or_ecc_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_nvml()
    memory(module, ecc=[0, 0], rows=None, retired=None)
    health = backend(monkeypatch, module).memory_health(0)
    assert health.ecc_mode == (False, False)
    assert health.volatile_uncorrected is None  # ECC off: no counters
    assert health.not_read == {"remappedRows": "NotSupported, and no page retirement either"}


def test_memory_of_a_lost_gpu_fails_that_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_nvml()
    memory(module, lost=True)
    with pytest.raises(GpuFailedError, match="GPU 1"):
        backend(monkeypatch, module).memory_health(1)


def test_memory_health_check_names_the_pending_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_nvml(gpus=2)
    memory(module, rows=(0, 2, 1, 0))
    hw = backend(monkeypatch, module)
    result = run_check(
        BY_NAME["memory_health"], hw, ProbePolicy(), ProbeContext(), hardware_summary(hw)
    )
    assert result.status is CheckStatus.FAIL
    assert result.message.startswith(
        "GPUs 0-1: row remap pending (0 correctable, 2 uncorrectable rows remapped; reset needed)"
    )


def test_xid_check_on_the_real_backend_judges_the_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_nvml(gpus=2)
    module.nvmlSystemGetDriverVersion = lambda: "560.35.03"  # type: ignore[attr-defined]
    fields(module, 0)
    events = with_events(module)
    hw = backend(monkeypatch, module)
    with hw.xid_listener() as log:
        events.put(event(1, 95))
        wait_for(log.events)
        result = run_check(
            BY_NAME["xid_errors"],
            hw,
            ProbePolicy(),
            ProbeContext(xids=log),
            hardware_summary(hw),
        )
    assert result.status is CheckStatus.FAIL
    assert result.message.startswith("GPU 1: Xid 95 (uncontained ECC error")
    assert isinstance(result.observed, dict)
    assert "notRead" not in result.observed  # R560: the reset-status fields answered


def test_a_listener_that_stops_early_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_nvml(gpus=2)
    with_events(module)
    fields(module, 0)

    def broken_wait(event_set: str, timeout_ms: int) -> Any:
        raise FakeNVMLError(999)  # NVML_ERROR_UNKNOWN

    module.nvmlEventSetWait_v2 = broken_wait  # type: ignore[attr-defined]
    hw = backend(monkeypatch, module)
    with hw.xid_listener() as log:
        wait_for(lambda: log.problem is not None)
        result = run_check(
            BY_NAME["xid_errors"], hw, ProbePolicy(), ProbeContext(xids=log), hardware_summary(hw)
        )
    # a listener that died is no evidence of "no critical Xid": an error, named
    assert result.status is CheckStatus.ERROR
    assert "the Xid listener stopped after" in result.message
    assert "NVML error 999" in result.message
