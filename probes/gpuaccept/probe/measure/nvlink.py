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

from dataclasses import dataclass, field

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


@dataclass
class _Tally:
    """What reading every GPU's links gathers, field by field of :class:`NvlinkObserved`."""

    links: dict[int, int] = field(default_factory=dict)
    active: dict[int, int] = field(default_factory=dict)
    inactive: dict[str, list[int]] = field(default_factory=dict)
    errors: dict[str, dict[str, int]] = field(default_factory=dict)
    before_probe: dict[str, dict[str, int]] = field(default_factory=dict)
    unsupported: list[int] = field(default_factory=list)
    parts_unsupported: dict[str, list[int]] = field(default_factory=dict)
    parts_not_read: dict[str, list[int]] = field(default_factory=dict)
    no_baseline: list[int] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    def fail(self, gpu: int, exc: GpuFailedError) -> None:
        self.failed[str(gpu)] = f"{exc.step}: {exc.detail}"[:FAILURE_MAX]
        self.links[gpu] = self.active[gpu] = 0

    def add(self, gpu: int, state: NvlinkLinks, first: NvlinkLinks | None) -> None:
        """One GPU's links, its counters judged against ``first`` (its baseline)."""
        self.links[gpu] = state.count
        self.active[gpu] = len(state.active)
        down = [link for link in range(state.count) if link not in state.active]
        if down:
            self.inactive[str(gpu)] = down
        for part in state.not_read:
            self.parts_not_read.setdefault(part, []).append(gpu)
        if state.errors is None:
            self.unsupported.append(gpu)
            return
        for part in state.not_supported:
            self.parts_unsupported.setdefault(part, []).append(gpu)
        if first is None or first.errors is None:
            self.no_baseline.append(gpu)
        _add_counts(gpu, state, first, self.errors, self.before_probe)

    def since_driver_load(self, gpus: list[int], baseline_read: bool) -> str | None:
        """The GPUs whose counts are judged since the driver loaded: those without a
        baseline, or every GPU read when no baseline was taken."""
        if baseline_read:
            return format_gpus(self.no_baseline) or None
        return format_gpus([g for g in gpus if str(g) not in self.failed]) or None


def _parts(by_part: dict[str, list[int]]) -> dict[str, str] | None:
    return {part: format_gpus(gpus) for part, gpus in sorted(by_part.items())} or None


def measure(
    hardware: HardwareBackend, policy: NvlinkPolicy, context: ProbeContext
) -> NvlinkObserved:
    gpus = hardware.gpus()
    if not gpus:
        raise Unavailable("no GPU to read NVLinks of")
    tally = _Tally()
    start = context.nvlink_before
    for gpu in gpus:
        try:
            if gpu.problem:
                raise GpuFailedError(gpu.index, "enumeration", gpu.problem)
            state = hardware.nvlink(gpu.index)
        except GpuFailedError as exc:
            tally.fail(gpu.index, exc)
            continue
        tally.add(gpu.index, state, start.get(gpu.index) if start is not None else None)
    return NvlinkObserved(
        links=group(tally.links),
        active=group(tally.active),
        inactive=tally.inactive or None,
        errors=tally.errors or None,
        errors_before=tally.before_probe or None,
        counters_unsupported=format_gpus(tally.unsupported) or None,
        counters_not_supported=_parts(tally.parts_unsupported),
        counters_not_read=_parts(tally.parts_not_read),
        since_driver_load=tally.since_driver_load([g.index for g in gpus], start is not None),
        failed_gpus=tally.failed or None,
    )
