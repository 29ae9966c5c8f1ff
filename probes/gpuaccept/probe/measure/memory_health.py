"""Measures :mod:`gpuaccept.checks.memory_health`: each GPU's ECC mode and
counts, remapped rows and retired pages (NVML; no load needed)."""

from gpuaccept.checks.gpu_ranges import format_gpus
from gpuaccept.checks.gpu_sets import gpu_label
from gpuaccept.checks.memory_health import MemoryHealthObserved, MemoryHealthPolicy
from gpuaccept.probe.hardware.base import (
    NOT_SUPPORTED,
    GpuFailedError,
    GpuMemoryHealth,
    HardwareBackend,
    Unavailable,
)
from gpuaccept.probe.measure.context import ProbeContext

WHY_MAX = 120


def _ranges(gpus: list[int]) -> str | None:
    return format_gpus(gpus) if gpus else None


def _counts(values: dict[int, int | None]) -> dict[str, int] | None:
    over = {str(gpu): n for gpu, n in sorted(values.items()) if n}
    return over or None


def _no_ecc(h: GpuMemoryHealth) -> bool:
    """NVML answered NotSupported for the ECC mode: the GPU has no ECC ("Only applicable
    to devices with ECC", nvmlDeviceGetEccMode), which is an answer, not a part unread."""
    return h.ecc_mode is None and h.not_read.get("eccMode") == NOT_SUPPORTED


def _not_read(health: dict[int, GpuMemoryHealth], lost: dict[int, str]) -> dict[str, str]:
    """part → "GPU 0-7: why" (the first reason of each part)."""
    by_part: dict[str, dict[int, str]] = {}
    for gpu, h in health.items():
        for part, why in h.not_read.items():
            if not (part == "eccMode" and _no_ecc(h)):
                by_part.setdefault(part, {})[gpu] = why
    if lost:
        by_part["all"] = lost
    return {
        part: f"{gpu_label(format_gpus(list(gpus)))}: {sorted(set(gpus.values()))[0]}"[:WHY_MAX]
        for part, gpus in sorted(by_part.items())
    }


def _read(
    hardware: HardwareBackend, gpus: list[int]
) -> tuple[dict[int, GpuMemoryHealth], dict[int, str]]:
    """Each GPU's memory state, and the GPUs lost while reading it (why)."""
    health: dict[int, GpuMemoryHealth] = {}
    lost: dict[int, str] = {}
    for gpu in gpus:
        try:
            health[gpu] = hardware.memory_health(gpu)
        except GpuFailedError as exc:
            lost[gpu] = exc.detail
    if not health:
        raise Unavailable(f"no GPU's memory state readable: {sorted(set(lost.values()))[0]}")
    return health, lost


def _ecc(health: dict[int, GpuMemoryHealth]) -> tuple[str | None, str | None]:
    """The GPUs with ECC off, and those with ECC on and off pending (from the next boot)."""
    ecc = {g: h.ecc_mode for g, h in health.items() if h.ecc_mode is not None}
    off = [g for g, (current, _p) in ecc.items() if not current]
    pending_off = [g for g, (current, pending) in ecc.items() if current and not pending]
    return _ranges(off), _ranges(pending_off)


def _remaps(
    health: dict[int, GpuMemoryHealth],
) -> tuple[str | None, str | None, dict[str, list[int]] | None]:
    """The GPUs with a row remap pending, those with one failed, and the remapped rows
    (correctable, uncorrectable) of both."""
    rows = {g: h.remapped_rows for g, h in health.items() if h.remapped_rows is not None}
    flagged = [g for g, r in rows.items() if r.pending or r.failed]
    return (
        _ranges([g for g, r in rows.items() if r.pending]),
        _ranges([g for g, r in rows.items() if r.failed]),
        {str(g): [rows[g].correctable, rows[g].uncorrectable] for g in flagged} or None,
    )


def measure(
    hardware: HardwareBackend, policy: MemoryHealthPolicy, context: ProbeContext
) -> MemoryHealthObserved:
    infos = hardware.gpus()
    if not infos:
        raise Unavailable("no GPU to read")
    health, lost = _read(hardware, [info.index for info in infos])
    ecc_off, ecc_pending_off = _ecc(health)
    remap_pending, remap_failed, remapped_rows = _remaps(health)
    return MemoryHealthObserved(
        gpus=len(infos),
        ecc_off=ecc_off,
        ecc_pending_off=ecc_pending_off,
        ecc_unsupported=_ranges([g for g, h in health.items() if _no_ecc(h)]),
        volatile_uncorrected=_counts({g: h.volatile_uncorrected for g, h in health.items()}),
        aggregate_uncorrected=_counts({g: h.aggregate_uncorrected for g, h in health.items()}),
        remap_pending=remap_pending,
        remap_failed=remap_failed,
        remapped_rows=remapped_rows,
        retired_pages=_counts({g: h.retired_pages for g, h in health.items()}),
        retire_pending=_ranges([g for g, h in health.items() if h.retire_pending]),
        not_read=_not_read(health, lost) or None,
    )
