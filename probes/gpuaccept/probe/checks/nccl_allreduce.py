"""``nccl_allreduce``: all-reduce bus bandwidth across every local GPU.

One process per GPU with ``torch.distributed`` (NCCL on GPUs, timed with CUDA
events; the same code runs with gloo on CPU processes in the tests), a sweep
of message sizes up to ``ncclAllreduce.maxMessageBytes`` (1 GiB by default)
after warm-up. As in nccl-tests: ``algbw = bytes / time``, ``busbw = algbw x
2(n-1)/n``, and the slowest rank's time counts. The headline figure is the
busbw of the largest message. With one GPU busbw is undefined (``skip``).

observed::

    {"backend": "nccl", "source": "measured", "ranks": 8, "bytes": 1073741824,
     "busbwGBps": 452.1, "algbwGBps": 258.3,
     "sweep": [[1048576, 61.2], ..., [1073741824, 452.1]]}

(``sweep``: [bytes, busbw GB/s]; dropped when condensed). ``source:
"profile"`` means the figure came from a simulated hardware profile.
"""

from pydantic import JsonValue

from gpuaccept.contracts.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.checks.base import (
    Judgement,
    Observation,
    ProbeContext,
    as_object,
    clip,
    get_float,
    get_int,
    opt_str,
    round_figure,
)
from gpuaccept.probe.hardware.base import HardwareBackend, Unavailable

SWEEP_STEPS = 5
SWEEP_FACTOR = 8


def sweep_sizes(max_bytes: int, steps: int = SWEEP_STEPS, factor: int = SWEEP_FACTOR) -> list[int]:
    """Message sizes ending at ``max_bytes``: 1 GiB → 256 KiB, 2, 16, 128 MiB, 1 GiB."""
    sizes: list[int] = []
    size = max_bytes
    while len(sizes) < steps and size >= 1024:
        sizes.insert(0, size)
        size //= factor
    return sizes


def busbw_of(observed: JsonValue) -> float | None:
    try:
        return get_float(as_object(observed), "busbwGBps")
    except ValueError:
        return None


class NcclAllreduce:
    name = "nccl_allreduce"
    title = "NCCL all-reduce"
    reason = "NcclAllreduceFailed"

    def measure(
        self, hardware: HardwareBackend, policy: ProbePolicy, context: ProbeContext
    ) -> Observation:
        gpus = hardware.gpus()
        if len(gpus) < 2:
            raise Unavailable(
                "all-reduce bus bandwidth needs at least 2 GPUs "
                f"({len(gpus)} visible; busbw = algbw x 2(n-1)/n)"
            )
        p = policy.nccl_allreduce
        context.progress(f"{len(gpus)} ranks, up to {p.max_message_bytes >> 20} MiB")
        m = hardware.allreduce(sweep_sizes(p.max_message_bytes), p.iterations, p.warmup_iterations)
        return Observation(
            {
                "backend": m.backend,
                "source": m.source,
                "ranks": m.ranks,
                "bytes": m.sweep[-1][0],
                "busbwGBps": round_figure(m.busbw_gbps),
                "algbwGBps": round_figure(m.algbw_gbps),
                "sweep": [[size, round_figure(busbw)] for size, _t, _alg, busbw in m.sweep],
            }
        )

    def judge(
        self, observed: JsonValue, policy: ProbePolicy, summary: HardwareSummary
    ) -> Judgement:
        obj = as_object(observed)
        busbw = get_float(obj, "busbwGBps")
        ranks = get_int(obj, "ranks")
        source = opt_str(obj, "source") or "measured"
        label = " (from the simulated profile)" if source == "profile" else ""
        minimum = policy.nccl_allreduce.min_busbw_for(summary.gpu_model)
        expected: JsonValue = {"minBusbwGBps": minimum} if minimum is not None else None
        figure = f"busbw {busbw:g} GB/s over {ranks} GPUs{label}"
        if busbw <= 0:
            return Judgement(CheckStatus.FAIL, expected, clip(f"{figure}: no bandwidth"))
        if minimum is None:
            return Judgement(CheckStatus.PASS, expected, clip(f"{figure}; no minimum set"))
        if busbw < minimum:
            return Judgement(CheckStatus.FAIL, expected, clip(f"{figure} < {minimum:g}"))
        return Judgement(CheckStatus.PASS, expected, clip(f"{figure} >= {minimum:g}"))

    def condense(self, observed: JsonValue) -> JsonValue:
        obj = dict(as_object(observed))
        obj.pop("sweep", None)
        return obj


CHECK = NcclAllreduce()
