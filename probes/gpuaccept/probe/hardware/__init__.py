"""Hardware backends: the only way a check touches the machine."""

from gpuaccept.probe.hardware.base import (
    AllreduceMeasurement,
    CopyMeasurement,
    GpuInfo,
    HardwareBackend,
    PcieLinkState,
    Unavailable,
    VersionInfo,
)

__all__ = [
    "AllreduceMeasurement",
    "CopyMeasurement",
    "GpuInfo",
    "HardwareBackend",
    "PcieLinkState",
    "Unavailable",
    "VersionInfo",
]
