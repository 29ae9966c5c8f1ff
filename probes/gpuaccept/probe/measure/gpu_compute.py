"""Measures :mod:`gpuaccept.checks.gpu_compute`: matmul TFLOPS per GPU.

bf16 comes from the ``throttle_reasons`` load (``context.matmul_load``), whose
batches are timed after its warm-up: the GPUs are loaded once. When that load
did not run or timed nothing (``throttleReasons`` disabled, or skipped), the
same load runs here for :data:`OWN_WARMUP_S` plus ``ownLoadSeconds``, the SM
clock sampled as ``throttle_reasons`` samples it. fp8 is a short phase of its
own (:data:`OWN_WARMUP_S` plus ``fp8Seconds``); where no GPU can run it, the
reason is recorded (``fp8Skipped``) and only bf16 is judged. That includes a node
on which every GPU's fp8 load failed with the same error (digits aside) while bf16
ran: one software limit (cuBLASLt without an fp8 kernel for this torch and
driver), not eight faulty GPUs at once.
"""

import contextlib
import re
import statistics

from gpuaccept.checks.gpu_compute import GpuComputeObserved, GpuComputePolicy
from gpuaccept.contracts.report import HardwareMode
from gpuaccept.probe.hardware.base import (
    GpuFailedError,
    HardwareBackend,
    MatmulPrecision,
    PerGpuFigures,
    Unavailable,
)
from gpuaccept.probe.measure.context import MatmulLoad, ProbeContext

OWN_WARMUP_S = 1.0  # clocks ramp and cuBLAS picks its kernel within the first batches
SAMPLE_INTERVAL_S = 0.5  # the SM clock, as throttle_reasons samples it
FAILURE_MAX = 120


def _timed_load(
    hardware: HardwareBackend, precision: MatmulPrecision, seconds: float, clocks: bool
) -> MatmulLoad:
    """A load of its own: warm-up, then ``seconds`` timed (and the SM clock sampled)."""
    sm: dict[int, list[int]] = {}
    figures, matrix = PerGpuFigures({}), 0
    sampled = range(len(hardware.gpus())) if clocks else range(0)
    try:
        with hardware.gpu_load(precision) as timer:
            matrix = timer.matrix
            hardware.sleep(OWN_WARMUP_S)
            timer.start()
            waited = 0.0
            while waited < seconds:
                step = min(SAMPLE_INTERVAL_S, seconds - waited)
                hardware.sleep(step)
                waited += step
                for gpu in sampled:
                    with contextlib.suppress(Unavailable, GpuFailedError):
                        sm.setdefault(gpu, []).append(hardware.sm_clock(gpu)[0])
            figures = timer.figures()
    except GpuFailedError as exc:  # a load thread hung or failed: that GPU, by name
        failed = dict(figures.failed)
        failed.setdefault(exc.gpu, f"{exc.step}: {exc.detail}")
        figures = PerGpuFigures({g: v for g, v in figures.values.items() if g != exc.gpu}, failed)
    return MatmulLoad(
        tflops=figures,
        matrix=matrix,
        timed_seconds=seconds,
        sm_clock_mhz={gpu: round(statistics.median(c)) for gpu, c in sm.items() if c},
    )


def same_failure_everywhere(fp8: PerGpuFigures, bf16: PerGpuFigures) -> str | None:
    """The one error every GPU's fp8 load failed with (compared with digits masked, so
    a device number in the text does not count), when bf16 ran on some GPU; else None."""
    if fp8.values or not fp8.failed or not bf16.values:
        return None
    shapes = {re.sub(r"\d+", "#", what) for what in fp8.failed.values()}
    return next(iter(fp8.failed.values())) if len(shapes) == 1 else None


def _per_gpu(values: dict[int, float], count: int) -> list[float]:
    return [values.get(gpu, 0.0) for gpu in range(count)]


def _bf16_load(
    hardware: HardwareBackend, policy: GpuComputePolicy, context: ProbeContext
) -> MatmulLoad:
    """throttleReasons' load when it timed the GPUs, else a bf16 load of this check's own."""
    load = context.matmul_load
    if load is None or not (load.tflops.values or load.tflops.failed):
        context.progress("bf16 matmuls (throttleReasons did not load the GPUs)")
        load = _timed_load(hardware, "bf16", policy.own_load_seconds, clocks=True)
    if not (load.tflops.values or load.tflops.failed):
        raise Unavailable(f"no GPU timed a matmul ({hardware.gpu_problem() or 'no figure'})")
    return load


def _fp8(
    hardware: HardwareBackend,
    policy: GpuComputePolicy,
    bf16: PerGpuFigures,
    failed: dict[int, str],
    count: int,
) -> tuple[list[float] | None, str | None]:
    """The fp8 TFLOPS of the ``count`` GPUs (its failures added to ``failed``), or why
    there are none."""
    if not policy.fp8:
        return None, "off in the policy (gpuCompute.fp8)"
    try:
        timed = _timed_load(hardware, "fp8", policy.fp8_seconds, clocks=False).tflops
        everywhere = same_failure_everywhere(timed, bf16)
        if everywhere is not None:
            raise Unavailable(f"every GPU failed it: {everywhere}")
    except Unavailable as exc:
        return None, str(exc)[:160]
    _add_failures(failed, timed.failed)
    return _per_gpu(timed.values, count), None


def _add_failures(failed: dict[int, str], more: dict[int, str]) -> None:
    """Each GPU's first failure is the one kept."""
    failed.update({g: what for g, what in more.items() if g not in failed})


def measure(
    hardware: HardwareBackend, policy: GpuComputePolicy, context: ProbeContext
) -> GpuComputeObserved:
    infos = hardware.gpus()
    if not infos:
        raise Unavailable("no GPU to time")
    count = len(infos)
    load = _bf16_load(hardware, policy, context)
    failed = {g.index: g.problem for g in infos if g.problem}
    _add_failures(failed, load.tflops.failed)
    if policy.fp8:
        context.progress("fp8 matmuls")
    fp8, skipped = _fp8(hardware, policy, load.tflops, failed, count)
    clocks = load.sm_clock_mhz
    return GpuComputeObserved(
        source="profile" if hardware.mode is HardwareMode.SIMULATED else "measured",
        matrix=load.matrix or None,
        timed_seconds=round(load.timed_seconds, 3),
        bf16_tflops=_per_gpu(load.tflops.values, count),
        fp8_tflops=fp8,
        sm_clock_mhz=[clocks.get(g, 0) for g in range(count)] if clocks else None,
        fp8_skipped=skipped,
        failed_gpus={str(g): what[:FAILURE_MAX] for g, what in sorted(failed.items())} or None,
    )
