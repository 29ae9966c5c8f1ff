"""Hardware backends: the only way a check touches the machine."""

from gpuaccept.probe.hardware.base import (
    AllreduceMeasurement,
    CopyMeasurement,
    GpuFailedError,
    GpuHungError,
    GpuInfo,
    HardwareBackend,
    PcieLinkState,
    Unavailable,
    VersionInfo,
)

__all__ = [
    "AllreduceMeasurement",
    "CopyMeasurement",
    "GpuFailedError",
    "GpuHungError",
    "GpuInfo",
    "HardwareBackend",
    "PcieLinkState",
    "Unavailable",
    "VersionInfo",
]
