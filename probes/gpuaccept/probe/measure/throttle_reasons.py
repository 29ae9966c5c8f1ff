"""Measures :mod:`gpuaccept.checks.throttle_reasons`: clock event reasons under load.

Every GPU is kept busy; each GPU's reason bitmask is sampled every
:data:`SAMPLE_INTERVAL_S`, first through the policy's warm-up (not counted),
then through the judged window, counting per GPU in how many judged samples
each reason was active. The SM clock is sampled with it (median per GPU).

Only the instantaneous bitmask is used. NVML's clock-event-reason *duration*
fields (``NVML_FI_DEV_CLOCKS_EVENT_REASON_*``) were renumbered between driver
branches: the IDs 269-271 of the installed nvidia-ml-py name power-smoothing
fields on an R580 driver, which answers them without error; and
``nvmlDeviceGetViolationStatus`` is deprecated in NVML 13. Reading either
would mean trusting a numbering the driver present may not share.
"""

import contextlib
import math
import statistics
from dataclasses import dataclass, field

from gpuaccept.checks.throttle_reasons import ThrottleReasonsObserved, ThrottleReasonsPolicy
from gpuaccept.probe import clocks
from gpuaccept.probe.hardware.base import (
    GpuFailedError,
    HardwareBackend,
    PerGpuFigures,
    Unavailable,
)
from gpuaccept.probe.measure.context import LoadClocks, MatmulLoad, ProbeContext

SAMPLE_INTERVAL_S = 0.25  # 60 judged samples in the default 15 s window (docs/policy.md)
FAILURE_MAX = 120


def sample_counts(policy: ThrottleReasonsPolicy) -> tuple[int, int]:
    """(warm-up samples, judged samples) for ``policy`` at :data:`SAMPLE_INTERVAL_S`."""
    warmup = math.ceil(policy.warmup_seconds / SAMPLE_INTERVAL_S)
    judged = max(1, round(policy.sample_seconds / SAMPLE_INTERVAL_S))
    return warmup, judged


Tally = tuple[dict[str, int], dict[int, list[tuple[int, int]]], dict[int, str]]


def _sample(
    hardware: HardwareBackend, gpu: int, counted: bool, tally: Tally, missed: dict[int, str]
) -> bool:
    """One sample of one GPU into (reason counts, SM clocks, failed GPUs); False when
    NVML did not answer this sample (a transient error: recorded, the others go on)."""
    counts, sm, failed = tally
    try:
        mask = hardware.clock_event_reasons(gpu)
    except GpuFailedError as exc:
        failed[gpu] = f"{exc.step}: {exc.detail}"[:FAILURE_MAX]
        return False
    except Unavailable as exc:
        missed.setdefault(gpu, str(exc)[:FAILURE_MAX])
        return False
    if not counted:
        return True
    for name in clocks.decode(mask):  # ignored ones too: gpu_config judges app clocks
        counts[name] = counts.get(name, 0) + 1
    with contextlib.suppress(Unavailable):
        sm.setdefault(gpu, []).append(hardware.sm_clock(gpu))
    return True


@dataclass
class _Sampling:
    """What sampling every GPU's reasons gathers: per GPU, the judged samples in which
    each reason was active, the (SM clock, max) samples, the judged samples NVML
    answered, the first error of a sample it did not, and the GPUs that failed."""

    gpus: list[int]
    failed: dict[int, str]
    active: dict[int, dict[str, int]] = field(default_factory=dict)
    sm: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    read: dict[int, int] = field(default_factory=dict)
    missed: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.active = {gpu: {} for gpu in self.gpus}
        self.read = dict.fromkeys(self.gpus, 0)

    def sample_every_gpu(self, hardware: HardwareBackend, counted: bool) -> None:
        for gpu in self.gpus:
            if gpu not in self.failed and _sample(
                hardware, gpu, counted, (self.active[gpu], self.sm, self.failed), self.missed
            ):
                self.read[gpu] += counted

    def fail_the_unread(self) -> None:
        """A GPU no judged sample could be read of is not judged as clean; when that is
        every GPU, NVML cannot answer."""
        for gpu in self.gpus:
            if gpu not in self.failed and self.read[gpu] == 0:
                missed = self.missed.get(gpu, "?")
                self.failed[gpu] = f"clock event reasons not read in any sample: {missed}"
        if all(gpu in self.failed and self.read[gpu] == 0 for gpu in self.gpus) and self.missed:
            first = self.missed[min(self.missed)]
            raise Unavailable(f"NVML answered no clock event reasons sample: {first}")

    def clocks_complete(self) -> bool:
        """Whether every GPU that did not fail has an SM clock sample."""
        return all(self.sm.get(gpu) for gpu in self.gpus if gpu not in self.failed)

    def sm_clocks(self) -> dict[int, list[tuple[int, int]]]:
        """Every GPU's (SM clock, max) samples; [(0, 0)], 0 MHz, for a failed GPU."""
        return {gpu: self.sm.get(gpu) or [(0, 0)] for gpu in self.gpus}

    def active_fractions(self) -> dict[str, list[float]]:
        """Per reason not ignored, per GPU: the fraction of the samples read of it (a
        missed one is not a clean one) in which the reason was active."""
        names = sorted(
            {name for counts in self.active.values() for name in counts}.difference(clocks.IGNORED)
        )
        return {
            name: [
                round(self.active[gpu].get(name, 0) / max(self.read[gpu], 1), 3)
                for gpu in self.gpus
            ]
            for name in names
        }

    def missed_samples(self, judged: int) -> dict[str, int] | None:
        return {
            str(gpu): judged - self.read[gpu]
            for gpu in self.gpus
            if gpu not in self.failed and self.read[gpu] < judged
        } or None


def measure(
    hardware: HardwareBackend, policy: ThrottleReasonsPolicy, context: ProbeContext
) -> ThrottleReasonsObserved:
    infos = hardware.gpus()
    gpus = [g.index for g in infos]
    if not gpus:
        raise Unavailable("no GPU to sample")
    warmup, judged = sample_counts(policy)
    run = _Sampling(gpus, {g.index: g.problem[:FAILURE_MAX] for g in infos if g.problem})
    context.progress("loading GPUs")
    tflops, matrix = _sample_under_load(hardware, context, run, warmup, judged)
    run.fail_the_unread()
    sm = run.sm_clocks()
    context.under_load = _load_clocks(policy, judged, run.active, sm, run.failed)
    medians = {gpu: round(statistics.median(c for c, _m in sm[gpu])) for gpu in gpus}
    context.matmul_load = _matmul_load(tflops, matrix, judged, medians)
    complete = run.clocks_complete()
    return ThrottleReasonsObserved(
        samples=judged,
        warmup_samples=warmup,
        active_fraction=run.active_fractions(),
        sm_clock_mhz=[medians[gpu] for gpu in gpus] if complete else None,
        sm_clock_max_mhz=[max(m for _c, m in sm[gpu]) for gpu in gpus] if complete else None,
        failed_gpus={str(gpu): what for gpu, what in sorted(run.failed.items())} or None,
        missed_samples=run.missed_samples(judged),
    )


def _matmul_load(
    tflops: PerGpuFigures, matrix: int, judged: int, medians: dict[int, int]
) -> MatmulLoad:
    """The load's figures for gpu_compute: its TFLOPS, timed over the judged window,
    and each GPU's median SM clock (a GPU without one, 0 MHz, left out)."""
    return MatmulLoad(
        tflops=tflops,
        matrix=matrix,
        timed_seconds=judged * SAMPLE_INTERVAL_S,
        sm_clock_mhz={gpu: mhz for gpu, mhz in medians.items() if mhz > 0},
    )


def _sample_under_load(
    hardware: HardwareBackend, context: ProbeContext, run: _Sampling, warmup: int, judged: int
) -> tuple[PerGpuFigures, int]:
    """Every GPU loaded, sampled through the warm-up and the judged window; the load's
    TFLOPS per GPU and matrix size (for gpu_compute). A load thread that hung or failed
    fails that GPU, by name."""
    tflops, matrix = PerGpuFigures({}), 0
    try:
        with hardware.gpu_load() as timer:
            matrix = timer.matrix
            for n in range(warmup + judged):
                counted = n >= warmup
                if n == warmup:  # gpu_compute times the load's matmuls from here on
                    timer.start()
                context.progress(f"{'sample' if counted else 'warm-up'} {n + 1}/{warmup + judged}")
                run.sample_every_gpu(hardware, counted)
                if n + 1 < warmup + judged:
                    hardware.sleep(SAMPLE_INTERVAL_S)
            tflops = timer.figures()
    except GpuFailedError as exc:
        run.failed.setdefault(exc.gpu, f"{exc.step}: {exc.detail}"[:FAILURE_MAX])
    return tflops, matrix


def _load_clocks(
    policy: ThrottleReasonsPolicy,
    judged: int,
    active: dict[int, dict[str, int]],
    sm: dict[int, list[tuple[int, int]]],
    failed: dict[int, str],
) -> LoadClocks:
    """The samples' clock facts for ``gpu_config``: application clocks, SM clock / max,
    and the GPUs a power or thermal reason held (their clock is low for that reason)."""
    app = "applications_clocks_setting"
    fraction: dict[int, float] = {}
    for gpu, samples in sm.items():
        maximum = max(m for _c, m in samples)
        if gpu not in failed and maximum > 0:
            fraction[gpu] = round(statistics.median(c for c, _m in samples) / maximum, 3)
    return LoadClocks(
        samples=judged,
        app_clocks_fraction={
            gpu: round(counts.get(app, 0) / judged, 3) for gpu, counts in active.items()
        },
        sm_clock_fraction=fraction,
        limited=frozenset(
            gpu
            for gpu, counts in active.items()
            if any(
                n not in clocks.IGNORED and c / judged > policy.max_active_fraction
                for n, c in counts.items()
            )
        ),
    )
