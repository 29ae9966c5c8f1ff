"""Measures :mod:`gpuaccept.checks.driver_libraries`: driver, CUDA and NCCL versions."""

from gpuaccept.checks.driver_libraries import DriverLibrariesObserved, DriverLibrariesPolicy
from gpuaccept.checks.spec import clip
from gpuaccept.probe.hardware.base import HardwareBackend, Unavailable
from gpuaccept.probe.measure.context import ProbeContext


def measure(
    hardware: HardwareBackend, policy: DriverLibrariesPolicy, context: ProbeContext
) -> DriverLibrariesObserved:
    v = hardware.versions()
    if not v.nvml_mismatch and not (v.kernel_module or v.nvml_library or v.gpu_drivers):
        note = f" ({'; '.join(v.notes)})" if v.notes else ""
        raise Unavailable(clip(f"no NVIDIA driver found{note}"))
    return DriverLibrariesObserved(
        kernel_module=v.kernel_module or None,
        nvml_library=v.nvml_library or None,
        nvml_mismatch=v.nvml_mismatch,
        gpu_drivers=sorted(set(v.gpu_drivers)) or None,
        cuda_driver=v.cuda_driver or None,
        cuda_runtime=v.cuda_runtime or None,
        nccl=v.nccl or None,
    )
