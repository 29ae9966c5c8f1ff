"""Measures :mod:`gpuaccept.checks.throttle_reasons`: clock event reasons under load."""

from gpuaccept.checks.throttle_reasons import ThrottleReasonsObserved, ThrottleReasonsPolicy
from gpuaccept.probe import clocks
from gpuaccept.probe.hardware.base import HardwareBackend, Unavailable
from gpuaccept.probe.measure.context import ProbeContext

SAMPLE_INTERVAL_S = 0.5


def measure(
    hardware: HardwareBackend, policy: ThrottleReasonsPolicy, context: ProbeContext
) -> ThrottleReasonsObserved:
    gpus = [g.index for g in hardware.gpus()]
    if not gpus:
        raise Unavailable("no GPU to sample")
    samples = max(1, round(policy.sample_seconds / SAMPLE_INTERVAL_S))
    seen = dict.fromkeys(gpus, 0)
    context.progress("loading GPUs")
    with hardware.gpu_load():
        for n in range(samples):
            context.progress(f"sample {n + 1}/{samples}")
            for gpu in gpus:
                seen[gpu] |= hardware.clock_event_reasons(gpu)
            if n + 1 < samples:
                hardware.sleep(SAMPLE_INTERVAL_S)
    reasons: dict[str, list[int] | int] = {}
    for gpu, mask in seen.items():
        for name in clocks.decode(mask):
            if name not in clocks.IGNORED:
                gpus_with = reasons.setdefault(name, [])
                assert isinstance(gpus_with, list)
                gpus_with.append(gpu)
    return ThrottleReasonsObserved(samples=samples, reasons=reasons)
