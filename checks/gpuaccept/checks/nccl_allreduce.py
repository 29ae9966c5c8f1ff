"""``nccl_allreduce``: all-reduce bus bandwidth across every local GPU.

One process per GPU with ``torch.distributed`` (NCCL on GPUs; the same code
runs with gloo on CPU processes in the tests), a sweep of message sizes up to
``ncclAllreduce.maxMessageBytes`` (8 GiB by default, on the bandwidth
plateau) after warm-up. Timed as nccl-tests' ``src/common.cu`` does: per rank
a batch of back-to-back launches timed on the host up to completion, divided
by the iterations, then averaged across ranks; ``algbw = bytes / time``,
``busbw = algbw x 2(n-1)/n``. The figure judged is the busbw of the largest
message; the whole curve is reported. With one GPU busbw is undefined
(``skip``).

observed::

    {"backend": "nccl", "source": "measured", "ranks": 8, "bytes": 8589934592,
     "busbwGBps": 467.1, "algbwGBps": 266.9, "timing": "host-batch-mean",
     "sweep": [[2097152, 61.2], ..., [8589934592, 467.1]]}

(``sweep``: [bytes, busbw GB/s]; condensed, the busbw figures are rounded to
whole GB/s but the curve stays, and ``backend``, ``algbwGBps``, ``timing`` and
``bytes`` (the sweep's last size), never judged, are dropped).
``source: "profile"`` means the figure came from a simulated hardware profile.
"""

from pydantic import Field, JsonValue

from gpuaccept.checks.claims import Claims, busbw_bound
from gpuaccept.checks.gpu_models import not_a_full_board, per_model_value
from gpuaccept.checks.phase_estimate import NOT_ON_GPU, PhaseEstimate
from gpuaccept.checks.spec import (
    CheckJudgement,
    CheckSpec,
    FigureColumn,
    FiguresModel,
    ObservedModel,
    RunbookEntry,
    clip,
)
from gpuaccept.contracts.policy_fields import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REASON = "NcclAllreduceFailed"
BUSBW_FIGURE = "busbwGBps"  # the key figure's wire name (.status.figures.busbwGBps)


class NcclAllreducePolicy(CheckSwitch):
    min_busbw_gbps: float | None = Field(
        default=None,
        ge=0,
        alias="minBusbwGBps",
        description="Lowest acceptable all-reduce bus bandwidth, GB/s; unset: any positive figure.",
    )
    min_busbw_gbps_by_model: dict[str, float] = Field(
        default_factory=dict,
        alias="minBusbwGBpsByModel",
        description="Per GPU model: an exact NVML name, or a model class such as h100-sxm "
        "(docs/policy.md lists them); overrides minBusbwGBps for that model.",
    )
    max_message_bytes: int = Field(
        default=1 << 33,
        ge=1 << 10,
        le=1 << 34,
        description="The largest message of the sweep, the one judged (on the bandwidth plateau).",
    )
    iterations: int = Field(default=20, ge=1, le=1000, description="Timed all-reduces per size.")
    warmup_iterations: int = Field(
        default=5, ge=0, le=100, description="Untimed all-reduces before the timed ones."
    )

    def min_busbw_for(self, gpu_model: str | None) -> float | None:
        return per_model_value(self.min_busbw_gbps_by_model, gpu_model, self.min_busbw_gbps)


class NcclAllreduceObserved(ObservedModel):
    backend: str | None = None
    source: str | None = None  # "measured", or "profile" for a simulated node
    ranks: int
    bytes: int | None = None  # the largest message
    busbw_gbps: float = Field(alias="busbwGBps")
    algbw_gbps: float | None = Field(default=None, alias="algbwGBps")
    # how a size was timed: "host-batch-mean" (nccl-tests: host clock over the batch,
    # mean of the ranks); absent in older reports (CUDA events, slowest rank)
    timing: str | None = Field(default=None, max_length=32)
    sweep: list[tuple[int, float]] | None = None  # detail: [bytes, busbw GB/s] per message size


def judge(
    observed: NcclAllreduceObserved, policy: NcclAllreducePolicy, summary: HardwareSummary
) -> CheckJudgement:
    busbw = observed.busbw_gbps
    source = observed.source or "measured"
    label = " (from the simulated profile)" if source == "profile" else ""
    # The per-class figures are those of a full 8-GPU NVSwitch board; on a board without
    # NVSwitch or a slice of one only the global minimum (if any) holds.
    partial = not_a_full_board(summary)
    minimum = policy.min_busbw_gbps if partial else policy.min_busbw_for(summary.gpu_model)
    expected: JsonValue = {"minBusbwGBps": minimum} if minimum is not None else None
    figure = f"busbw {busbw:g} GB/s over {observed.ranks} GPUs{label}"
    if busbw <= 0:
        return CheckJudgement(CheckStatus.FAIL, expected, clip(f"{figure}: no bandwidth"))
    if minimum is None:
        why = f" ({partial}: the model's 8-GPU figure does not apply)" if partial else ""
        return CheckJudgement(CheckStatus.PASS, expected, clip(f"{figure}; no minimum set{why}"))
    if busbw < minimum:
        return CheckJudgement(CheckStatus.FAIL, expected, clip(f"{figure} < {minimum:g}"))
    return CheckJudgement(CheckStatus.PASS, expected, clip(f"{figure} >= {minimum:g}"))


def condense(observed: NcclAllreduceObserved) -> NcclAllreduceObserved:
    """The curve stays (the report must show the plateau), with whole GB/s; algbw
    (busbw x n / 2(n-1)) and the timing method, never judged, go."""
    update: dict[str, object] = {"algbw_gbps": None, "timing": None, "backend": None}
    if observed.sweep and observed.bytes == observed.sweep[-1][0]:
        update["bytes"] = None  # the sweep's last size says it
    if observed.sweep is not None:
        update["sweep"] = [(size, float(round(busbw))) for size, busbw in observed.sweep]
    return observed.model_copy(update=update)


class NcclAllreduceFigures(FiguresModel):
    busbw_gbps: float | None = Field(
        default=None, ge=0, alias=BUSBW_FIGURE, description="All-reduce bus bandwidth, GB/s."
    )


def key_figures(observed: NcclAllreduceObserved) -> NcclAllreduceFigures:
    busbw = observed.busbw_gbps
    return NcclAllreduceFigures(busbw_gbps=busbw if busbw >= 0 else None)


# What the time budget assumes of the probe's sweep (a test ties it to the probe's).
SWEEP_STEPS = 5  # measure/nccl_allreduce.py: message sizes, each 8x the previous
SWEEP_FACTOR = 8
# Estimates (no GPU here).
RANK_START_S = 4.0  # spawn 8 interpreters that each import torch and gpuaccept
RANK_CUDA_S = 0.5  # each rank's CUDA context, in parallel
NCCL_INIT_S = 2.0  # ncclCommInitRank over 8 GPUs
RANK_TEARDOWN_S = 1.0  # destroy_process_group, the ranks' exit, the join
FALLBACK_BUSBW_GBPS = 320.0  # no minimum in the policy: the h100-sxm/h200-sxm default


def sweep_bytes(max_bytes: int) -> list[int]:
    """The all-reduce sweep's message sizes (the probe's ``sweep_sizes``)."""
    sizes: list[int] = []
    size = max_bytes
    while len(sizes) < SWEEP_STEPS and size >= 1024:
        sizes.insert(0, size)
        size //= SWEEP_FACTOR
    return sizes


def slowest_passing_busbw(section: NcclAllreducePolicy) -> float:
    """The lowest bus bandwidth the policy accepts (the slowest sweep that passes)."""
    minimums = [v for v in section.min_busbw_gbps_by_model.values() if v > 0]
    if section.min_busbw_gbps:
        minimums.append(section.min_busbw_gbps)
    return min(minimums) if minimums else FALLBACK_BUSBW_GBPS


def budget(section: NcclAllreducePolicy, gpus: int) -> PhaseEstimate:
    """One process per GPU, NCCL init and the sweep at the slowest rate that passes."""
    gpus = max(gpus, 2)  # one GPU: the check skips; the row keeps its two-GPU figure
    busbw = slowest_passing_busbw(section)
    algbw = busbw * gpus / (2 * (gpus - 1))
    rounds = section.warmup_iterations + section.iterations
    moved = rounds * sum(sweep_bytes(section.max_message_bytes))
    sweep = moved / (algbw * 1e9)
    fixed = RANK_START_S + RANK_CUDA_S + NCCL_INIT_S + RANK_TEARDOWN_S
    return PhaseEstimate(
        "all-reduce: spawn one process per GPU, NCCL init, the sweep",
        fixed + sweep,
        f"{RANK_START_S:g} s {gpus} processes start (spawn, import torch) + "
        f"{RANK_CUDA_S:g} s CUDA contexts + {NCCL_INIT_S:g} s NCCL init + "
        f"{rounds} x {sum(sweep_bytes(section.max_message_bytes)) / 2**30:.2f} GiB swept at "
        f"algbw {algbw:.0f} GB/s (busbw {busbw:g}, the lowest that passes) = {sweep:.1f} s + "
        f"{RANK_TEARDOWN_S:g} s teardown",
        "NCCL init: nccl-tests issue 273 logs 0.66 s on 8 GPUs (NCCL_DEBUG Init timings); "
        f"the rest {NOT_ON_GPU}",
    )


def claims(o: NcclAllreduceObserved, summary: HardwareSummary) -> Claims:
    """One rank per GPU of the report; busbw within twice a GPU's link rate."""
    most = busbw_bound(summary)
    out = Claims().count("ranks", o.ranks)
    out.figure("busbwGBps", o.busbw_gbps, most).figure("algbwGBps", o.algbw_gbps, most)
    out.each("sweep", [busbw for _, busbw in o.sweep or []], most)
    return out


SPEC = CheckSpec(
    measuring=frozenset({"max_message_bytes", "iterations", "warmup_iterations"}),
    judging=frozenset({"min_busbw_gbps", "min_busbw_gbps_by_model"}),
    name="nccl_allreduce",
    title="NCCL all-reduce",
    summary="all-reduce bus bandwidth across every local GPU at or above the policy minimum",
    reason=REASON,
    policy_model=NcclAllreducePolicy,
    observed_model=NcclAllreduceObserved,
    judge=judge,
    condense=condense,
    figures_model=NcclAllreduceFigures,
    key_figures=key_figures,
    columns=(FigureColumn("BusBW", BUSBW_FIGURE, "NCCL all-reduce GB/s.", position=1),),
    claims=claims,
    budget=budget,
    runbook=RunbookEntry(
        meaning="all-reduce busbw below the policy minimum",
        fix="NVLink/NVSwitch/fabric manager",
    ),
)
