"""A ``pynvml`` stand-in that answers from a capture: what the capture holds is
answered as the driver answered nvidia-smi; what it printed ``N/A`` raises NVML's
NotSupported (3), what it printed as deprecated raises Deprecated (26); what it does
not hold raises NoData (``NVML_ERROR_NO_DATA``),
which no reader of the probe takes for an answer. The error class, the error
codes and the structures are the installed nvidia-ml-py's, so the real backend's
readers see exactly the types a real driver gives them.

Driver-dependent answers: ``nvmlDeviceGetCurrentClocksEventReasons`` is NVML's
from R535 (before, the ``...ThrottleReasons`` name): an older driver raises
FunctionNotFound for it. The fabric structure version the driver fills is the
newest whose fields nvidia-smi printed (``Health Summary``: v3; ``Health``: v2;
else v1); a newer one raises ArgumentVersionMismatch, as NVML does.
"""

import types
from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

from gpuaccept.testsupport.captures.model import (
    ABSENT,
    DEPRECATED,
    NOT_AVAILABLE,
    FabricReading,
    GpuCapture,
    Missing,
    NodeCapture,
    Reading,
)

T = TypeVar("T")
NVML_CLOCK_SM = 1
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
FIELD_NVLINK_COUNT = 91
FIRST_EVENT_REASONS_BRANCH = 535


def error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def answer(reading: Reading[T]) -> T:
    """The reading's value, or the NVML error a driver gives for what it lacks."""
    if reading is NOT_AVAILABLE:
        raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)
    if reading is DEPRECATED:
        raise error(pynvml.NVML_ERROR_DEPRECATED)
    if isinstance(reading, Missing):
        raise error(pynvml.NVML_ERROR_NO_DATA)
    return reading


def _branch(driver: Reading[str]) -> int | None:
    if isinstance(driver, Missing):
        return None
    head = driver.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _cuda(text: Reading[str]) -> int:
    """``"12.2"`` → 12020, NVML's form."""
    major, _, minor = answer(text).partition(".")
    return int(major) * 1000 + int(minor or 0) * 10


def _field(code: int, value: int = 0) -> Any:
    field = pynvml.c_nvmlFieldValue_t()
    field.nvmlReturn = code
    field.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    field.value.uiVal = value
    return field


class CaptureNvml:
    """The functions, for one capture; :func:`module` wraps them as ``pynvml``."""

    def __init__(self, capture: NodeCapture) -> None:
        self.capture = capture
        self.branch = _branch(capture.driver)

    def gpu(self, handle: int) -> GpuCapture:
        if not 0 <= handle < len(self.capture.gpus):
            raise error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.capture.gpus[handle]

    def init(self) -> None:
        if not self.capture.gpus:  # the capture has no NVML answer at all
            raise error(pynvml.NVML_ERROR_NO_DATA)

    def count(self) -> int:
        return len(self.capture.gpus)

    def pci_info(self, handle: int) -> Any:
        return types.SimpleNamespace(busId=answer(self.gpu(handle).bus_id))

    def event_reasons(self, handle: int) -> int:
        if self.branch is not None and self.branch < FIRST_EVENT_REASONS_BRANCH:
            raise error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return answer(self.gpu(handle).clock_event_reasons)

    def clock(self, handle: int, clock: int, *, maximum: bool) -> int:
        if clock != NVML_CLOCK_SM:
            raise error(pynvml.NVML_ERROR_NO_DATA)
        gpu = self.gpu(handle)
        return answer(gpu.sm_clock_max_mhz if maximum else gpu.sm_clock_mhz)

    def field_values(self, handle: int, ids: list[int]) -> list[Any]:
        gpu = self.gpu(handle)
        out = []
        for field_id in ids:
            if field_id == FIELD_NVLINK_COUNT:
                links = gpu.nvlink_active
                out.append(
                    _field(pynvml.NVML_ERROR_NO_DATA)
                    if isinstance(links, Missing)
                    else _field(pynvml.NVML_SUCCESS, len(links))
                )
            else:
                # 226/227 and the recovery action (230) included: nvidia-smi prints "GPU Reset
                # Status" from R535, but which NVML call it reads is not known (issue 37 item 15:
                # the fields arrive in R560), so the capture's answer is not replayed as a field
                out.append(_field(pynvml.NVML_ERROR_NO_DATA))
        return out

    def nvlink_state(self, handle: int, link: int) -> int:
        links = answer(self.gpu(handle).nvlink_active)
        if not 0 <= link < len(links):
            raise error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 1 if links[link] else 0

    def fabric_v(self, handle: int, ref: Any) -> None:
        fabric = answer(self.gpu(handle).fabric)
        info = ref._obj
        version = {
            pynvml.c_nvmlGpuFabricInfo_v3_t: 3,
            pynvml.c_nvmlGpuFabricInfo_v2_t: 2,
        }.get(type(info))
        newest = (
            3
            if fabric.health_summary is not ABSENT
            else (2 if fabric.health_mask is not ABSENT else 1)
        )
        if version is None or version > newest:
            raise error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        self._fill(info, fabric)
        if not isinstance(fabric.health_mask, Missing):
            info.healthMask = fabric.health_mask
        if version == 3 and not isinstance(fabric.health_summary, Missing):
            info.healthSummary = fabric.health_summary

    def fabric_v1(self, handle: int, ref: Any) -> None:
        fabric = answer(self.gpu(handle).fabric)
        self._fill(ref._obj, fabric)

    @staticmethod
    def _fill(info: Any, fabric: FabricReading) -> None:
        info.state = fabric.state
        info.status = fabric.status

    def ecc_errors(self, handle: int, error_type: int, counter: int) -> int:
        gpu = self.gpu(handle)
        if error_type != NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            raise error(pynvml.NVML_ERROR_NO_DATA)  # corrected counts are not read from captures
        return answer(
            gpu.volatile_uncorrected if counter == NVML_VOLATILE_ECC else gpu.aggregate_uncorrected
        )

    def remapped_rows(self, handle: int) -> tuple[int, int, int, int]:
        rows = answer(self.gpu(handle).remapped_rows)
        return rows.correctable, rows.uncorrectable, int(rows.pending), int(rows.failure)

    def retired_pages(self, handle: int, cause: int) -> list[int]:
        gpu = self.gpu(handle)
        count = answer(gpu.retired_single_bit if cause == 0 else gpu.retired_double_bit)
        return list(range(count))  # the count is the capture's; the addresses are not in it

    def pair(self, reading: Reading[tuple[bool, bool]]) -> list[int]:
        current, pending = answer(reading)
        return [int(current), int(pending)]


def module(capture: NodeCapture) -> types.ModuleType:
    """A ``pynvml`` module answering from ``capture`` (install it as ``sys.modules["pynvml"]``)."""
    nvml = CaptureNvml(capture)
    m = types.ModuleType("pynvml")
    for name in dir(pynvml):  # the binding's constants and structures, as the real one has them
        if name.startswith(("NVML_", "c_nvml")) or name in ("NVMLError",):
            setattr(m, name, getattr(pynvml, name))

    def per_gpu(getter: Callable[[GpuCapture], Reading[T]]) -> Callable[[int], T]:
        return lambda handle: answer(getter(nvml.gpu(handle)))

    functions: dict[str, Callable[..., Any]] = {
        "nvmlInit": nvml.init,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": nvml.count,
        "nvmlDeviceGetHandleByIndex": lambda index: (nvml.gpu(index), index)[1],
        "nvmlDeviceGetName": per_gpu(lambda g: g.name),
        "nvmlDeviceGetUUID": per_gpu(lambda g: g.uuid),
        "nvmlDeviceGetPciInfo": nvml.pci_info,
        "nvmlDeviceGetCurrPcieLinkGeneration": per_gpu(lambda g: g.pcie_gen),
        "nvmlDeviceGetMaxPcieLinkGeneration": per_gpu(lambda g: g.pcie_gen_max),
        "nvmlDeviceGetGpuMaxPcieLinkGeneration": per_gpu(lambda g: g.pcie_gen_device_max),
        "nvmlDeviceGetCurrPcieLinkWidth": per_gpu(lambda g: g.pcie_width),
        "nvmlDeviceGetMaxPcieLinkWidth": per_gpu(lambda g: g.pcie_width_max),
        "nvmlDeviceGetCurrentClocksEventReasons": nvml.event_reasons,
        "nvmlDeviceGetCurrentClocksThrottleReasons": per_gpu(lambda g: g.clock_event_reasons),
        "nvmlDeviceGetClockInfo": lambda h, c: nvml.clock(h, c, maximum=False),
        "nvmlDeviceGetMaxClockInfo": lambda h, c: nvml.clock(h, c, maximum=True),
        "nvmlSystemGetDriverVersion": lambda: answer(capture.driver),
        "nvmlSystemGetCudaDriverVersion_v2": lambda: _cuda(capture.cuda),
        "nvmlDeviceGetFieldValues": nvml.field_values,
        "nvmlDeviceGetNvLinkState": nvml.nvlink_state,
        "nvmlDeviceGetNvLinkErrorCounter": lambda h, link, counter: answer(ABSENT),
        "nvmlDeviceGetGpuFabricInfoV": nvml.fabric_v,
        "nvmlDeviceGetGpuFabricInfo": nvml.fabric_v1,
        "nvmlDeviceGetEnforcedPowerLimit": per_gpu(lambda g: g.power_limit_mw),
        "nvmlDeviceGetPowerManagementDefaultLimit": per_gpu(lambda g: g.default_power_limit_mw),
        "nvmlDeviceGetPersistenceMode": per_gpu(
            lambda g: g.persistence if isinstance(g.persistence, Missing) else int(g.persistence)
        ),
        "nvmlDeviceGetMigMode": lambda h: nvml.pair(nvml.gpu(h).mig_mode),
        "nvmlDeviceGetComputeMode": per_gpu(lambda g: g.compute_mode),
        "nvmlDeviceGetEccMode": lambda h: nvml.pair(nvml.gpu(h).ecc_mode),
        "nvmlDeviceGetTotalEccErrors": nvml.ecc_errors,
        "nvmlDeviceGetRemappedRows": nvml.remapped_rows,
        "nvmlDeviceGetRetiredPages": nvml.retired_pages,
        "nvmlDeviceGetRetiredPagesPendingStatus": per_gpu(
            lambda g: (
                g.retired_pending
                if isinstance(g.retired_pending, Missing)
                else int(g.retired_pending)
            )
        ),
    }
    for name, function in functions.items():
        setattr(m, name, function)
    return m


__all__ = ["CaptureNvml", "answer", "error", "module"]
