"""Measures :mod:`gpuaccept.checks.nccl_allreduce`: an all-reduce sweep over every GPU."""

from gpuaccept.checks.nccl_allreduce import NcclAllreduceObserved, NcclAllreducePolicy
from gpuaccept.probe.hardware.base import HardwareBackend, NoSuchInterface, Unavailable
from gpuaccept.probe.measure.context import ProbeContext
from gpuaccept.probe.measure.rounding import round_figure

SWEEP_STEPS = 5
SWEEP_FACTOR = 8


def sweep_sizes(max_bytes: int, steps: int = SWEEP_STEPS, factor: int = SWEEP_FACTOR) -> list[int]:
    """Message sizes ending at ``max_bytes``: 8 GiB → 2, 16, 128 MiB, 1, 8 GiB."""
    sizes: list[int] = []
    size = max_bytes
    while len(sizes) < steps and size >= 1024:
        sizes.insert(0, size)
        size //= factor
    return sizes


def measure(
    hardware: HardwareBackend, policy: NcclAllreducePolicy, context: ProbeContext
) -> NcclAllreduceObserved:
    gpus = hardware.gpus()
    if len(gpus) < 2:
        # one GPU: nothing to measure (a node shape, NoSuchInterface); none: unavailable
        raise (NoSuchInterface if len(gpus) == 1 else Unavailable)(
            "all-reduce bus bandwidth needs at least 2 GPUs "
            f"({len(gpus)} visible; busbw = algbw x 2(n-1)/n)"
        )
    context.progress(f"{len(gpus)} ranks, up to {policy.max_message_bytes >> 20} MiB")
    m = hardware.allreduce(
        sweep_sizes(policy.max_message_bytes), policy.iterations, policy.warmup_iterations
    )
    return NcclAllreduceObserved(
        backend=m.backend,
        source=m.source,
        ranks=m.ranks,
        bytes=m.sweep[-1][0],
        busbw_gbps=round_figure(m.busbw_gbps),
        algbw_gbps=round_figure(m.algbw_gbps),
        timing=m.timing,
        sweep=[(size, round_figure(busbw)) for size, _t, _alg, busbw in m.sweep],
    )
