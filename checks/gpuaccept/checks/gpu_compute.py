"""``gpu_compute``: dense matmul throughput of every GPU, against a per-model
minimum and against the node's other GPUs.

bf16 is timed in the load ``throttle_reasons`` already runs (one thread per GPU,
``n x n`` bf16 matmuls, ``n`` = 8192): once its warm-up is over, every batch of
matmuls is timed with CUDA events, and TFLOPS = 2·n³·matmuls / seconds of GPU
time, per GPU, over the judged window; the SM clock is the median those samples
saw. So the GPUs are loaded once for both checks. When ``throttle_reasons`` is
off (or produced no figures) this check runs the same load itself for
``gpuCompute.ownLoadSeconds`` after a short warm-up. fp8 (``torch._scaled_mm``,
e4m3 inputs, bf16 output; compute capability 8.9 or later) is a separate short
phase of ``fp8Seconds``; where the GPU or torch cannot run it, fp8 is recorded
as not measured, and only bf16 is judged.

A GPU fails when its figure is below the policy's minimum for the model, or its
bf16 figure more than ``maxBelowMedianPercent`` (25) below the median of the
node's measured GPUs; more than ``warnBelowMedianPercent`` (8) below it warns
(:mod:`gpuaccept.checks.per_gpu_figures`: 3 GPUs or more; with exactly 2, the
lower against the higher, naming both). fp8's sibling rule only warns unless
``fp8SiblingsFail`` (its 2 s window's spread has not been measured on a GPU).
A GPU that failed or hung under the load, or has no figure, fails by name.

observed::

    {"source": "measured", "matrix": 8192, "timedSeconds": 15.0,
     "bf16Tflops": [741.2, 738.9, ...], "fp8Tflops": [1318.4, ...],
     "smClockMHz": [1980, 1980, ...]}

(``fp8Skipped``: why fp8 was not measured; ``failedGpus``: GPU → what happened;
a failed GPU's figure is 0.) Condensed: per precision ``[lowest, median, GPU of
the lowest, GPUs measured, the faster half's median]`` (``bf16``, ``fp8``; earlier
probes: the first four) and ``failed`` (GPU ranges);
``source`` is left out (the report says whether the hardware was simulated).
"""

from typing import Annotated

from pydantic import Field, JsonValue, model_validator

from gpuaccept.checks.claims import SM_CLOCK_MAX_MHZ, Claims, bf16_bound
from gpuaccept.checks.gpu_models import per_model_value
from gpuaccept.checks.gpu_ranges import format_gpus, parse_gpus
from gpuaccept.checks.per_gpu_figures import (
    FigureRule,
    NodeGpus,
    Spread,
    failed_text,
    judge_figure,
    measured,
    spread,
    without_figure,
)
from gpuaccept.checks.phase_estimate import LOAD_RAMP_S, NOT_ON_GPU, PhaseEstimate
from gpuaccept.checks.spec import CheckJudgement, CheckSpec, ObservedModel, RunbookEntry, clip
from gpuaccept.contracts.policy_fields import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REASON = "GpuComputeFailed"
Tflops = Annotated[float, Field(ge=0, le=1_000_000)]


class GpuComputePolicy(CheckSwitch):
    min_bf16_tflops: float | None = Field(
        default=None,
        ge=0,
        description="Lowest acceptable bf16 matmul TFLOPS of any GPU; unset: no minimum.",
    )
    min_bf16_tflops_by_model: dict[str, Tflops] = Field(
        default_factory=dict,
        description="Per GPU model (exact NVML name or model class such as h100-sxm); "
        "overrides minBf16Tflops for that model.",
    )
    min_fp8_tflops: float | None = Field(
        default=None, ge=0, description="Lowest acceptable fp8 TFLOPS; unset: no minimum."
    )
    min_fp8_tflops_by_model: dict[str, Tflops] = Field(
        default_factory=dict, description="Per GPU model; overrides minFp8Tflops."
    )
    warn_below_median_percent: float = Field(
        default=8.0,
        ge=0,
        le=100,
        description="A GPU warns when its figure is more than this many percent below the "
        "median of the node's GPUs (3 GPUs or more; with 2, the lower against the higher).",
    )
    max_below_median_percent: float = Field(
        default=25.0,
        ge=0,
        le=100,
        description="A GPU fails when its bf16 figure is more than this many percent below "
        "the median of the node's GPUs (3 GPUs or more; with 2, the lower against the "
        "higher, naming both). 25: beyond the 22 % most that healthy identical GPUs differ "
        "across whole clusters (SC22); the within-node spread is not measured, so less warns.",
    )
    fp8_siblings_fail: bool = Field(
        default=False,
        description="Whether the sibling rule fails on fp8 as on bf16; false: an fp8 figure "
        "beyond either threshold only warns (fp8's short window has no measured spread yet).",
    )
    fp8: bool = Field(
        default=True, description="Also time fp8 matmuls, where the GPU supports them."
    )
    fp8_seconds: float = Field(
        default=2.0, gt=0, le=60, description="The timed fp8 phase, after a 1 s warm-up."
    )
    own_load_seconds: float = Field(
        default=5.0,
        gt=0,
        le=600,
        description="The timed bf16 phase (after a 1 s warm-up) when throttleReasons did "
        "not load the GPUs (disabled, or no figures).",
    )

    @model_validator(mode="after")
    def _warn_before_fail(self) -> "GpuComputePolicy":
        if self.warn_below_median_percent > self.max_below_median_percent:
            raise ValueError("warnBelowMedianPercent must not exceed maxBelowMedianPercent")
        return self

    def bf16_minimum(self, gpu_model: str | None) -> float | None:
        return per_model_value(self.min_bf16_tflops_by_model, gpu_model, self.min_bf16_tflops)

    def fp8_minimum(self, gpu_model: str | None) -> float | None:
        return per_model_value(self.min_fp8_tflops_by_model, gpu_model, self.min_fp8_tflops)


class GpuComputeObserved(ObservedModel):
    source: str | None = Field(default=None, max_length=16)  # "measured" | "profile"
    matrix: int | None = Field(default=None, ge=1)  # n of the n x n x n matmuls
    timed_seconds: float | None = Field(default=None, ge=0)  # the timed bf16 window
    bf16_tflops: list[Tflops] | None = Field(default=None, max_length=64)
    fp8_tflops: list[Tflops] | None = Field(default=None, max_length=64)
    sm_clock_mhz: list[int] | None = Field(default=None, alias="smClockMHz", max_length=64)
    fp8_skipped: str | None = Field(default=None, max_length=160)
    failed_gpus: dict[str, str] | None = None  # GPU -> what happened
    # condensed: [lowest, median, GPU of the lowest, GPUs measured, the faster half's
    # median]; failed GPUs as ranges
    bf16: Spread | None = None
    fp8: Spread | None = None
    failed: str | None = Field(default=None, max_length=200)


def _failed(observed: GpuComputeObserved) -> dict[int, str]:
    if observed.failed_gpus is not None:
        return {int(g): what for g, what in observed.failed_gpus.items()}
    return dict.fromkeys(parse_gpus(observed.failed), "under load") if observed.failed else {}


def judge(
    observed: GpuComputeObserved, policy: GpuComputePolicy, summary: HardwareSummary
) -> CheckJudgement:
    warn, fail = policy.warn_below_median_percent, policy.max_below_median_percent
    rules = (
        FigureRule("bf16", "TFLOPS", policy.bf16_minimum(summary.gpu_model), fail, warn),
        FigureRule(
            "fp8",
            "TFLOPS",
            policy.fp8_minimum(summary.gpu_model),
            fail if policy.fp8_siblings_fail else None,
            warn,
        ),
    )
    expected: JsonValue = {
        "minBf16Tflops": rules[0].minimum,
        "minFp8Tflops": rules[1].minimum,
        "warnBelowMedianPercent": warn,
        "maxBelowMedianPercent": fail,
        "fp8SiblingsFail": policy.fp8_siblings_fail,
    }
    failed = _failed(observed)
    clocks = dict(enumerate(observed.sm_clock_mhz or []))
    bad = failed_text(failed)
    warnings: list[str] = []
    notes: list[str] = []
    node = NodeGpus(summary.gpu_count, frozenset(failed))
    for rule, figures, condensed in (
        (rules[0], observed.bf16_tflops, observed.bf16),
        (rules[1], observed.fp8_tflops, observed.fp8),
    ):
        verdict = judge_figure(figures, condensed, node, rule, clocks)
        bad += verdict.failures
        warnings += verdict.warnings
        if verdict.note is not None:
            notes.append(verdict.note)
    label = " (simulated profile)" if observed.source == "profile" else ""
    if bad:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(bad) + label))
    if not notes:
        return CheckJudgement(CheckStatus.FAIL, expected, "no GPU produced a matmul figure")
    if observed.fp8_skipped:
        notes.append(f"fp8 not measured: {observed.fp8_skipped}")
    if warnings:
        return CheckJudgement(CheckStatus.WARN, expected, clip("; ".join(warnings + notes) + label))
    return CheckJudgement(CheckStatus.PASS, expected, clip("; ".join(notes) + label))


def condense(observed: GpuComputeObserved) -> GpuComputeObserved:
    failed = set(_failed(observed))
    for figures in (observed.bf16_tflops, observed.fp8_tflops):
        failed |= set(without_figure(figures or [], failed))  # "no figure": failed here
    update: dict[str, object] = {
        "source": None,  # the report says simulated or real
        "matrix": None,
        "timed_seconds": None,
        "sm_clock_mhz": None,
        "fp8_skipped": None,
        "failed_gpus": None,
        "failed": format_gpus(failed) or None,
    }
    if observed.bf16_tflops is not None:
        update.update(bf16_tflops=None, bf16=spread(measured(observed.bf16_tflops, failed)))
    if observed.fp8_tflops is not None:
        update.update(fp8_tflops=None, fp8=spread(measured(observed.fp8_tflops, failed)))
    return observed.model_copy(update=update)


FP8_WARMUP_S = 1.0  # measure/gpu_compute.py: OWN_WARMUP_S (a test ties them)


def budget(section: GpuComputePolicy, _gpus: int) -> PhaseEstimate:
    """The fp8 load (bf16 is timed in the throttle_reasons load)."""
    seconds = LOAD_RAMP_S + FP8_WARMUP_S + section.fp8_seconds + 0.5 if section.fp8 else 0.1
    return PhaseEstimate(
        "fp8 matmul phase (bf16 TFLOPS come from the throttle load)",
        seconds,
        f"{LOAD_RAMP_S:g} s ramp + {FP8_WARMUP_S:g} s warm-up + {section.fp8_seconds:g} s "
        "timed (`fp8Seconds`) + 0.5 s to stop; 0.1 s with `fp8: false`",
        f"the policy; {NOT_ON_GPU}",
    )


def claims(o: GpuComputeObserved, summary: HardwareSummary) -> Claims:
    """One figure per GPU (or a spread over the report's GPUs), within the peak TFLOPS."""
    out = Claims()
    for name, figures, most in (
        ("bf16Tflops", o.bf16_tflops, bf16_bound(summary)),
        ("fp8Tflops", o.fp8_tflops, 2 * bf16_bound(summary)),
        ("smClockMHz", o.sm_clock_mhz, SM_CLOCK_MAX_MHZ),
    ):
        out.per_gpu(name, figures).each(name, figures, most)
    out.keys("failedGpus", o.failed_gpus).ranges("failed", o.failed)
    for name, condensed, most in (
        ("bf16", o.bf16, bf16_bound(summary)),
        ("fp8", o.fp8, 2 * bf16_bound(summary)),
    ):
        out.spread(name, condensed, most, summary.gpu_count)
    return out


SPEC = CheckSpec(
    measuring=frozenset({"fp8", "fp8_seconds", "own_load_seconds"}),
    judging=frozenset(
        {
            "min_bf16_tflops",
            "min_bf16_tflops_by_model",
            "min_fp8_tflops",
            "min_fp8_tflops_by_model",
            "warn_below_median_percent",
            "max_below_median_percent",
            "fp8_siblings_fail",
        }
    ),
    name="gpu_compute",
    title="GPU compute throughput",
    summary="every GPU's dense bf16 (and fp8) matmul TFLOPS at or above the model minimum "
    "and within a percentage of the node's median GPU",
    reason=REASON,
    policy_model=GpuComputePolicy,
    observed_model=GpuComputeObserved,
    judge=judge,
    condense=condense,
    claims=claims,
    budget=budget,
    runbook=RunbookEntry(
        meaning="a GPU's matmul throughput below the model minimum or well below its siblings",
        fix="heatsink seating and cooling, clock caps (nvidia-smi -q -d CLOCK), GPU replacement",
    ),
)
