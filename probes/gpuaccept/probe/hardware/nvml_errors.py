"""NVML's error codes as the probe uses them, and what an NVML error means for a
measurement: one place for every NVML reader (real.py, nvml_links, nvml_health,
xid_events). The codes are ``nvmlReturn_t`` values of nvml.h (and the installed
nvidia-ml-py's ``NVML_ERROR_*``)."""

from gpuaccept.probe.hardware.errors import GpuFailedError, Unavailable

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25


def nvml_error_code(exc: BaseException) -> int | None:
    """The ``nvmlReturn_t`` of an ``NVMLError`` (its ``value``), else None."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def nvml_failure(gpu: int, step: str, exc: BaseException) -> Exception:
    """GPU_IS_LOST fails that GPU; any other NVML error means NVML cannot answer."""
    if nvml_error_code(exc) == NVML_ERROR_GPU_IS_LOST:
        return GpuFailedError(gpu, step, f"NVML: {exc} (GPU_IS_LOST)")
    return Unavailable(f"GPU {gpu}: NVML cannot report {step}: {exc}")
