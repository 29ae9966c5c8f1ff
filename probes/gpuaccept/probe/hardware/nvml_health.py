"""NVML reads of the state earlier faults left on a GPU: memory health (ECC,
remapped rows, retired pages) and the GPU recovery action field.

Constants are nvml.h's, as the installed nvidia-ml-py (``pynvml.py``) spells
them. The recovery action is a *field* (``nvmlDeviceGetFieldValues``), and
NVML field IDs are not stable across driver branches: it is read only with the
numbering of the driver present (:data:`RECOVERY_ACTION_FIELD_IDS`), else the
part is not read, with the reason.
"""

from types import ModuleType
from typing import Any

from gpuaccept.probe.hardware.base import (
    NOT_SUPPORTED,
    GpuFailedError,
    GpuMemoryHealth,
    RemappedRows,
)
from gpuaccept.probe.hardware.nvml_errors import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NOT_SUPPORTED,
    nvml_error_code,
    nvml_failure,
)

NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSES = (0, 1)  # multiple single-bit errors, double-bit error
NVML_VALUE_TYPE_UNSIGNED_INT = 1
# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION by driver branch: (first branch, last branch
# or None for "up to the installed binding's", field ID). NVML added the field in
# R565 (release notes "Changes between v560 and v565"); the issue and NVIDIA's
# memory-error guide name R570 as the first production branch with it. nvml.h of
# R570, R580 and the installed binding (13.615) all give 230.
RECOVERY_ACTION_FIELD_IDS: tuple[tuple[int, int | None, int], ...] = ((570, None, 230),)
RECOVERY_ACTION_MAX = 7  # NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT
# Before the recovery action field, NVML answered the same question with two flags:
# NVML_FI_DEV_RESET_STATUS 226 ("reset required") and NVML_FI_DEV_DRAIN_AND_RESET_STATUS
# 227 ("drain and reset recommended"), nvidia-smi -q's "GPU Reset Status" section. The
# installed binding numbers them 226/227 and marks them "Deprecated use
# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION instead"; NVML's change log deprecates them where
# it adds NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET. They exist from R560 only: nvml.h at
# NVIDIA/go-nvml's syncs has NVML_FI_MAX 197 at CUDA 12.2 (R535), 200 at 12.4 (R550),
# 223 at 12.5 (R555), and 226/227 first at 12.6 (R560). Read on R560 up to the last
# branch before the recovery action field; before R560 neither is asked for (the part is
# not read, with the reason). (first branch, last branch, reset field, drain field)
RESET_STATUS_FIELD_IDS: tuple[tuple[int, int, int, int], ...] = ((560, 569, 226, 227),)
FIRST_RESET_STATUS_BRANCH = RESET_STATUS_FIELD_IDS[0][0]
RECOVERY_ACTION_GPU_RESET = 1  # NVML_GPU_RECOVERY_ACTION_GPU_RESET
RECOVERY_ACTION_DRAIN_AND_RESET = 4  # NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET


def driver_branch(version: str | None) -> int | None:
    """``"570.124.06"`` → 570; None when unknown."""
    head = (version or "").split(".", 1)[0]
    return int(head) if head.isdigit() else None


def recovery_action_field_id(driver_version: str | None) -> int | None:
    branch = driver_branch(driver_version)
    if branch is None:
        return None
    for first, last, field_id in RECOVERY_ACTION_FIELD_IDS:
        if branch >= first and (last is None or branch <= last):
            return field_id
    return None


def reset_status_field_ids(driver_version: str | None) -> tuple[int, int] | None:
    """(reset required, drain and reset recommended) field IDs of the driver present;
    None where the driver has the recovery action field instead, or is unknown."""
    branch = driver_branch(driver_version)
    if branch is None:
        return None
    for first, last, reset_field, drain_field in RESET_STATUS_FIELD_IDS:
        if first <= branch <= last:
            return reset_field, drain_field
    return None


def _field_uint(value: Any, gpu: int, field_id: int) -> int:
    """One field value's unsigned int; raises ValueError with why it is not one,
    GpuFailedError when NVML lost the GPU."""
    returned = int(value.nvmlReturn)
    if returned == NVML_ERROR_GPU_IS_LOST:
        raise GpuFailedError(gpu, "recovery action", "NVML: GPU is lost")
    if returned != 0:
        name = "NotSupported" if returned == NVML_ERROR_NOT_SUPPORTED else f"NVML error {returned}"
        raise ValueError(f"field {field_id}: {name}")
    if int(value.valueType) != NVML_VALUE_TYPE_UNSIGNED_INT:
        raise ValueError(f"field {field_id} has value type {int(value.valueType)}, not uint")
    return int(value.value.uiVal)


def read_reset_status(nvml: ModuleType, handle: Any, gpu: int, fields: tuple[int, int]) -> int:
    """The recovery action the older reset-status flags stand for: drain and reset
    when that flag is set, a GPU reset when "reset required" is, else none. The
    drain flag alone may be NotSupported (nvidia-smi prints N/A for it on some
    GPUs): "reset required" then decides. Raises ValueError with why it cannot be
    read, GpuFailedError when NVML lost the GPU."""
    reset_field, drain_field = fields
    try:
        reset_value, drain_value = nvml.nvmlDeviceGetFieldValues(handle, [reset_field, drain_field])
    except nvml.NVMLError as exc:
        if nvml_error_code(exc) == NVML_ERROR_GPU_IS_LOST:
            raise GpuFailedError(gpu, "recovery action", f"NVML: {exc}") from exc
        raise ValueError(f"NVML: {exc}") from exc
    reset = _field_uint(reset_value, gpu, reset_field)
    try:
        drain = _field_uint(drain_value, gpu, drain_field)
    except ValueError:
        drain = 0
    if drain:
        return RECOVERY_ACTION_DRAIN_AND_RESET
    return RECOVERY_ACTION_GPU_RESET if reset else 0


def read_recovery_action(nvml: ModuleType, handle: Any, gpu: int, field_id: int) -> int:
    """The GPU's recovery action (0-7); raises ValueError with the reason it
    cannot be read, GpuFailedError when NVML lost the GPU."""
    try:
        value = nvml.nvmlDeviceGetFieldValues(handle, [field_id])[0]
    except nvml.NVMLError as exc:
        if nvml_error_code(exc) == NVML_ERROR_GPU_IS_LOST:
            raise GpuFailedError(gpu, "recovery action", f"NVML: {exc}") from exc
        raise ValueError(f"NVML: {exc}") from exc
    returned = int(value.nvmlReturn)
    if returned == NVML_ERROR_GPU_IS_LOST:
        raise GpuFailedError(gpu, "recovery action", "NVML: GPU is lost")
    if returned != 0:
        name = "NotSupported" if returned == NVML_ERROR_NOT_SUPPORTED else f"NVML error {returned}"
        raise ValueError(name)
    if int(value.valueType) != NVML_VALUE_TYPE_UNSIGNED_INT:
        raise ValueError(f"field {field_id} has value type {int(value.valueType)}, not uint")
    action = int(value.value.uiVal)
    if not 0 <= action <= RECOVERY_ACTION_MAX:  # another numbering: do not trust it
        raise ValueError(f"field {field_id} answered {action}, not a recovery action")
    return action


class _Reader:
    """One GPU's memory reads: NotSupported → None, GPU_IS_LOST → GpuFailedError."""

    def __init__(self, nvml: ModuleType, handle: Any, gpu: int) -> None:
        self.nvml, self.handle, self.gpu = nvml, handle, gpu
        self.not_read: dict[str, str] = {}

    def call(self, part: str, getter: str, *args: Any, quiet: bool = False) -> Any:
        try:
            return getattr(self.nvml, getter)(self.handle, *args)
        except self.nvml.NVMLError as exc:
            code = nvml_error_code(exc)
            if code == NVML_ERROR_GPU_IS_LOST:
                raise GpuFailedError(self.gpu, part, f"NVML: {exc}") from exc
            if not (quiet and code == NVML_ERROR_NOT_SUPPORTED):
                self.not_read[part] = (
                    NOT_SUPPORTED if code == NVML_ERROR_NOT_SUPPORTED else f"NVML: {exc}"
                )
            return None


def _remapped_rows(reader: _Reader) -> RemappedRows | None:
    """Ampere and later remap rows; NotSupported (quietly None) on earlier GPUs."""
    rows = reader.call("remappedRows", "nvmlDeviceGetRemappedRows", quiet=True)
    if rows is None:
        return None
    correctable, uncorrectable, pending, failed = (int(v) for v in rows)
    return RemappedRows(correctable, uncorrectable, bool(pending), bool(failed))


def _retired_pages(reader: _Reader) -> tuple[int | None, bool | None]:
    """(pages retired, retirement pending) on GPUs before Ampere; NotSupported on later ones."""
    counts = [
        reader.call("retiredPages", "nvmlDeviceGetRetiredPages", cause, quiet=True)
        for cause in NVML_PAGE_RETIREMENT_CAUSES
    ]
    if any(c is None for c in counts):
        if "remappedRows" not in reader.not_read and "retiredPages" not in reader.not_read:
            reader.not_read["remappedRows"] = "NotSupported, and no page retirement either"
        return None, None
    flag = reader.call("retiredPages", "nvmlDeviceGetRetiredPagesPendingStatus")
    return sum(len(c) for c in counts), (bool(flag) if flag is not None else None)


def read_memory_health(nvml: ModuleType, handle: Any, gpu: int) -> GpuMemoryHealth:
    reader = _Reader(nvml, handle, gpu)
    mode = reader.call("eccMode", "nvmlDeviceGetEccMode")
    ecc = (bool(mode[0]), bool(mode[1])) if mode is not None else None
    volatile = aggregate = None
    if ecc is None or ecc[0]:  # with ECC off there are no ECC counters to read
        volatile = reader.call(
            "volatileUncorrected",
            "nvmlDeviceGetTotalEccErrors",
            NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            NVML_VOLATILE_ECC,
        )
        aggregate = reader.call(
            "aggregateUncorrected",
            "nvmlDeviceGetTotalEccErrors",
            NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            NVML_AGGREGATE_ECC,
        )
    remapped = _remapped_rows(reader)
    retired, retire_pending = _retired_pages(reader) if remapped is None else (None, None)
    return GpuMemoryHealth(
        ecc_mode=ecc,
        volatile_uncorrected=int(volatile) if volatile is not None else None,
        aggregate_uncorrected=int(aggregate) if aggregate is not None else None,
        remapped_rows=remapped,
        retired_pages=retired,
        retire_pending=retire_pending,
        not_read=dict(reader.not_read),
    )


def read_volatile_corrected(nvml: ModuleType, handle: Any, gpu: int) -> int:
    """Corrected ECC errors since the driver loaded (``nvmlDeviceGetTotalEccErrors``,
    corrected, volatile): read by the in-service watch, not judged by acceptance."""
    try:
        return int(
            nvml.nvmlDeviceGetTotalEccErrors(
                handle, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC
            )
        )
    except nvml.NVMLError as exc:
        raise nvml_failure(gpu, "corrected ECC errors", exc) from exc
