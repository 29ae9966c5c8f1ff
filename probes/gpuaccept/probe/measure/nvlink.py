"""Measures :mod:`gpuaccept.checks.nvlink`: each GPU's active NVLinks and error counters.

The link count is the device's own (``NVML_FI_DEV_NVLINK_LINK_COUNT``), never
the binding's maximum of 36. A GPU NVML lost is named in ``failedGpus``; a
GPU whose link count NVML cannot give makes the check ``skip`` (naming it).

NVML's counters are cumulative since the driver loaded. The runner reads them once
before the first check (:func:`baseline`); the judged ``errors`` are the increase
over the probe's own run (its copies, load and all-reduce), as DCGM's NVLink health
watch judges new errors in its window. What was there before is ``errorsBefore``.
Each NVML counter is read on its own (``countersNotSupported`` names the ones NVML
answers NotSupported, per GPU; ``countersNotRead`` the ones it answers another error
on some link: those are not judged on that GPU, the others are).
"""

from gpuaccept.checks.gpu_ranges import format_gpus, group
from gpuaccept.checks.nvlink import NvlinkObserved, NvlinkPolicy
from gpuaccept.probe.hardware.base import (
    GpuFailedError,
    HardwareBackend,
    NvlinkLinks,
    Unavailable,
)
from gpuaccept.probe.measure.context import ProbeContext

FAILURE_MAX = 120


def baseline(hardware: HardwareBackend) -> dict[int, NvlinkLinks]:
    """Every usable GPU's counters before the probe loads anything (a GPU that cannot
    be read is left out: its counts are then judged since driver load)."""
    out: dict[int, NvlinkLinks] = {}
    try:
        gpus = hardware.gpus()
    except Exception:
        return out
    for gpu in gpus:
        if gpu.problem:
            continue
        try:
            out[gpu.index] = hardware.nvlink(gpu.index)
        except Exception:  # measured (and named) by the check itself
            continue
    return out


def _increase(now: tuple[int, ...], before: tuple[int, ...] | None) -> list[int]:
    """Per link: the count now minus before (a counter that went down was reset
    during the run: then all of it is new)."""
    if before is None or len(before) != len(now):
        return list(now)
    return [n - b if n >= b else n for n, b in zip(now, before, strict=True)]


def _add_counts(
    gpu: int,
    state: NvlinkLinks,
    first: NvlinkLinks | None,
    errors: dict[str, dict[str, int]],
    before_probe: dict[str, dict[str, int]],
) -> None:
    """One GPU's per-link increases (into ``errors``) and baseline counts."""
    for counter, per_link in (state.errors or {}).items():
        was = first.errors.get(counter) if first is not None and first.errors else None
        for link, count in enumerate(_increase(per_link, was)):
            if count > 0:
                errors.setdefault(counter, {})[f"{gpu}:{link}"] = count
        for link, count in enumerate(was or ()):
            if count > 0:
                before_probe.setdefault(counter, {})[f"{gpu}:{link}"] = count


def measure(
    hardware: HardwareBackend, policy: NvlinkPolicy, context: ProbeContext
) -> NvlinkObserved:
    gpus = hardware.gpus()
    if not gpus:
        raise Unavailable("no GPU to read NVLinks of")
    links: dict[int, int] = {}
    active: dict[int, int] = {}
    inactive: dict[str, list[int]] = {}
    errors: dict[str, dict[str, int]] = {}
    before_probe: dict[str, dict[str, int]] = {}
    unsupported: list[int] = []
    parts_unsupported: dict[str, list[int]] = {}
    parts_not_read: dict[str, list[int]] = {}
    no_baseline: list[int] = []
    failed: dict[str, str] = {}
    start = context.nvlink_before
    for gpu in gpus:
        try:
            if gpu.problem:
                raise GpuFailedError(gpu.index, "enumeration", gpu.problem)
            state = hardware.nvlink(gpu.index)
        except GpuFailedError as exc:
            failed[str(gpu.index)] = f"{exc.step}: {exc.detail}"[:FAILURE_MAX]
            links[gpu.index] = active[gpu.index] = 0
            continue
        links[gpu.index] = state.count
        active[gpu.index] = len(state.active)
        down = [link for link in range(state.count) if link not in state.active]
        if down:
            inactive[str(gpu.index)] = down
        for part in state.not_read:
            parts_not_read.setdefault(part, []).append(gpu.index)
        if state.errors is None:
            unsupported.append(gpu.index)
            continue
        for part in state.not_supported:
            parts_unsupported.setdefault(part, []).append(gpu.index)
        first = start.get(gpu.index) if start is not None else None
        if first is None or first.errors is None:
            no_baseline.append(gpu.index)
        _add_counts(gpu.index, state, first, errors, before_probe)
    return NvlinkObserved(
        links=group(links),
        active=group(active),
        inactive=inactive or None,
        errors=errors or None,
        errors_before=before_probe or None,
        counters_unsupported=format_gpus(unsupported) or None,
        counters_not_supported={p: format_gpus(g) for p, g in sorted(parts_unsupported.items())}
        or None,
        counters_not_read={p: format_gpus(g) for p, g in sorted(parts_not_read.items())} or None,
        since_driver_load=format_gpus(no_baseline) or None
        if start is not None
        else format_gpus([g.index for g in gpus if str(g.index) not in failed]) or None,
        failed_gpus=failed or None,
    )
