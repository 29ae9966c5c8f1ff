"""Measures :mod:`gpuaccept.checks.driver_libraries`: the node's driver versions, and
the probe image's CUDA runtime and NCCL (reported only)."""

from gpuaccept.checks.driver_libraries import (
    DriverLibrariesObserved,
    DriverLibrariesPolicy,
    ImageLibraries,
)
from gpuaccept.checks.spec import clip
from gpuaccept.probe.hardware.base import HardwareBackend, Unavailable
from gpuaccept.probe.measure.context import ProbeContext


def _short(value: str | None, limit: int) -> str | None:
    return value[:limit] if value else None


def measure(
    hardware: HardwareBackend, policy: DriverLibrariesPolicy, context: ProbeContext
) -> DriverLibrariesObserved:
    v = hardware.versions()
    if not v.nvml_mismatch and not (v.kernel_module or v.nvml_driver):
        note = f" ({'; '.join(v.notes)})" if v.notes else ""
        raise Unavailable(clip(f"no NVIDIA driver found{note}"))
    image = ImageLibraries(
        cuda_runtime=_short(v.cuda_runtime, 16),
        cuda_runtime_library=_short(v.cuda_runtime_library, 64),
        nccl=_short(v.nccl, 16),
        nccl_library=_short(v.nccl_library, 64),
    )
    return DriverLibrariesObserved(
        kernel_module=v.kernel_module or None,
        nvml_driver=v.nvml_driver or None,
        nvml_mismatch=v.nvml_mismatch,
        cuda_driver=v.cuda_driver or None,
        image=image if image.model_dump(exclude_none=True) else None,
    )
