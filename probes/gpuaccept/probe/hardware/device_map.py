"""NVML GPU ↔ CUDA device, by UUID (or PCI bus id), never by index order.

NVML numbers GPUs by PCI bus id; CUDA's default order is "fastest first", and
``CUDA_VISIBLE_DEVICES`` may reorder or hide devices. NVML's UUID is
``GPU-<hex…>``; torch's ``get_device_properties(i).uuid`` prints the same hex
without the prefix. The PCI bus id is the fallback where a UUID is missing.
"""

from dataclasses import dataclass

from gpuaccept.probe.hardware.base import GpuInfo


@dataclass(frozen=True)
class CudaDevice:
    """What CUDA says about its device ``ordinal``."""

    ordinal: int
    uuid: str | None  # with or without the "GPU-" prefix
    bus_id: str | None  # "0000:1b:00.0" (any case; a 8-digit domain is accepted)


def uuid_key(uuid: str | None) -> str | None:
    if not uuid:
        return None
    return uuid.strip().lower().removeprefix("gpu-") or None


def bus_key(bus_id: str | None) -> str | None:
    """``"00000000:1B:00.0"`` or ``"0000:1b:00.0"`` → ``"0000:1b:00.0"``."""
    if not bus_id:
        return None
    domain, sep, rest = bus_id.strip().lower().rpartition(":")
    domain_part, sep2, bus = domain.rpartition(":")
    if not (sep and sep2):
        return None
    return f"{int(domain_part, 16):04x}:{bus}:{rest}"


def cuda_ordinals(gpus: list[GpuInfo], devices: list[CudaDevice]) -> dict[int, int]:
    """NVML index → CUDA ordinal for every GPU that CUDA also sees (by UUID, else bus id)."""
    by_uuid = {uuid_key(d.uuid): d.ordinal for d in devices if uuid_key(d.uuid)}
    by_bus = {bus_key(d.bus_id): d.ordinal for d in devices if bus_key(d.bus_id)}
    out: dict[int, int] = {}
    for gpu in gpus:
        ordinal = by_uuid.get(uuid_key(gpu.uuid)) if uuid_key(gpu.uuid) else None
        if ordinal is None and bus_key(gpu.bus_id):
            ordinal = by_bus.get(bus_key(gpu.bus_id))
        if ordinal is not None:
            out[gpu.index] = ordinal
    return out
