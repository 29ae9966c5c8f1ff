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
from gpuaccept.checks.spec import (
    CheckJudgement,
    CheckSpec,
    FailureOwnership,
    ObservedModel,
    RunbookEntry,
    clip,
)
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


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = """\
| field | default | meaning |
|-------|---------|---------|
| `minBf16Tflops`, `minBf16TflopsByModel` | unset | The lowest bf16 matmul TFLOPS a GPU may show (per model: an exact NVML name or a [model class](#gpu-model-classes)). |
| `minFp8Tflops`, `minFp8TflopsByModel` | unset | The same for fp8. |
| `warnBelowMedianPercent` | 8 | A GPU more than this far below the median of the node's measured GPUs warns (3 GPUs or more; with 2, the lower against the higher). |
| `maxBelowMedianPercent` | 25 | A GPU whose bf16 figure is more than this far below the median fails (3 GPUs or more; with 2, the lower against the higher, naming both). Below it, beyond `warnBelowMedianPercent`, warns. |
| `fp8SiblingsFail` | `false` | `false`: the sibling rule on fp8 only warns, at either threshold (its spread is unmeasured; see below). The fp8 minimum, when set, fails. |
| `fp8` | `true` | Time fp8 matmuls too, where the GPU can (compute capability 8.9 or later, a torch with `_scaled_mm`). |
| `fp8Seconds` | 2 | The timed fp8 phase, after a 1 s warm-up. |
| `ownLoadSeconds` | 5 | The timed bf16 phase (after a 1 s warm-up) when `throttleReasons` did not load the GPUs. |

**One load, two checks.** The bf16 figure is timed in the load that
`throttle_reasons` samples: every GPU runs 8192³ bf16 matmuls into a fixed
output, in batches of 8 between two CUDA events (`torch.cuda.Event(enable_timing=True)`),
each batch's first event recorded after one untimed matmul, so the GPU's queue
is never empty while the host (8 load threads sharing the GIL and the pod's CPU
quota) enqueues the batch: an event recorded on an idle GPU completes at once
and would count the host's delay as GPU time. The batches that begin after the
throttle warm-up are counted, and the figure is the **median** batch's TFLOPS
(2·8192³·8 / its GPU seconds), not Σflop/Σtime: a host stall that leaves the GPU
idle inside a batch slows that batch, not most of them, and the median of many
~12 ms batches is the sustained rate the throttle check samples. The SM clock
reported with it is the median the throttle samples saw. Each GPU's first three
counted batches are awaited (at most the load's 60 s deadline), so the figure
exists for any window length, even one sample. If `throttleReasons` is disabled
(or skipped), this check runs the same load itself for `ownLoadSeconds`, so it
never depends on another check's policy. fp8 cannot share the load (it would
change what the throttle samples see) and runs as a short phase of its own:
about 3.5 s with the 0.5 s ramp. Before it, one 16×16 `torch._scaled_mm` runs on
every GPU: if that raises (cuBLASLt answering NOT_SUPPORTED for this torch,
CUDA and driver), fp8 is a software limit, recorded in `fp8Skipped`, and no GPU
fails for it; the same holds when every GPU's fp8 load fails with one error
(digits aside) while bf16 ran. A GPU that cannot run fp8 (compute capability
below 8.9, a torch without `_scaled_mm`) also leaves fp8 unmeasured, with the
reason in `fp8Skipped`; bf16 is still judged.

**Every GPU accounted for.** The per-GPU lists have one figure per GPU of the
report's summary; a list of another length fails, and a GPU whose figure is 0
without being in `failedGpus` fails as "GPU n: no bf16 figure" (a probe that lost
a figure must not pass the node on the others).

**The sibling rule** is the part that needs no table: it works for models
nobody wrote a minimum for, and it catches the slow GPU that raises no throttle
reason (one GPU 15 % slower than its seven siblings, the case it was written for). It compares each
GPU with the median of the node's measured GPUs, so one or a few slow GPUs
cannot drag the reference down. With 3 GPUs or more the median is the
reference. With exactly 2, the median is their mean and each is as far from it
as the other, so neither can be called the slow one; but two GPUs of one model
more than the fail threshold apart make a bad node either way, so the lower is
judged against the higher and the message names both (`GPU 1: 519 TFLOPS bf16,
30 % below GPU 0's 742 (2 GPUs: either may be the slow one)`). With 1 GPU only
the per-model minimum applies, and the message says "no sibling comparison".

**A slow group the median hides.** When as many GPUs are slow as fast (4 of 8
at 15 % below the other 4, say, one half of the board behind one power shelf or
one PCIe switch pair), the node median sits between the two groups, about 7.5 %
from each, and no GPU is 25 % below it. The 2-GPU reasoning above applies:
GPUs of one model that far apart make a bad node whichever group is "normal".
So with 3 GPUs or more a GPU also **fails** when it is more than
`maxBelowMedianPercent` below the **faster half's median** (the median of the
upper half of the figures: the fast group's figure in a 4+4 split; one fast
outlier moves it by half a place only). It only fails, never warns, so it adds
no warning to a healthy node, and it does not apply where the sibling rule does
not fail (fp8 under `fp8SiblingsFail: false`). The threshold is the existing
one, not a new default: the rule compares with the fast GPUs what the median
rule compares with the middle. A healthy spread stays inside it: the trap
`h100-sxm-8gpu-throughput-spread.yaml` (GPUs within 4 %, the lowest 3.5 %
below its faster half's median) passes; the fault
`profiles/faults/gpu-compute-slow-half.yaml` (4 + 4, 30 % apart) fails
(`per_gpu_figures.faster_half_median`; table rows in
`tests/checks/test_gpu_compute.py`). A report condensed by an earlier probe
has no faster-half figure and is judged without this rule.

It also fails a GPU that `throttle_reasons` only warns about: a GPU held by a
sustained `sw_thermal_slowdown` (a warn reason by default) whose matmuls run
more than 25 % below its siblings fails here (between 8 and 25 % it warns). That is the point: a poorly
seated heatsink shows as a thermal reason the driver handles in software, and
the throughput it costs is what decides whether the GPU is acceptable.

**What the thresholds rest on.** Sinha et al., "Not All GPUs Are Created Equal"
(SC22, arXiv:2208.11035), measured performance variation between identical GPUs
across whole clusters (Summit, Vortex, Frontera, Longhorn, Corona): 8 % on
average, 22 % at most, power management and manufacturing spread included.
That is a fleet-wide figure: the spread *within one node* under a 700 W power
cap has not been measured, by them or here (no GPU was lent to this work). So:

* **warn above 8 %** rests on the fleet-wide *average*: a GPU further below its
  node's median than identical GPUs differ on average across a cluster is worth
  a look, not a quarantine;
* **fail above 25 %**, and only warn from 8 to 25 %. No within-node spread of
  healthy H100s has been measured (here or by them), so a threshold inside the
  measured fleet range would quarantine on a figure nothing supports. 25 % is
  beyond the 22 % *maximum* they measured between identical GPUs: a GPU that
  far below its node's median is outside anything measured on healthy GPUs.
  Earlier defaults failed above 12 % (1.5× the fleet average, a judgement with
  no measurement behind it); a GPU 15 % below its siblings now warns (trap
  `h100-sxm-8gpu-compute-15pct-below.yaml`), and the faults
  `gpu-compute-slow.yaml` and `gpu-compute-slow-half.yaml` model a GPU (or
  half the board) 30 % below and fail. When a `scripts/device-check.sh` run on
  a multi-GPU host records the within-node spread, a policy can tighten it;
  the trap `h100-sxm-8gpu-throughput-spread.yaml` (GPUs within 4 %) must pass
  either way;
* **fp8 only warns** (`fp8SiblingsFail: false`): its window is 2 s after a 1 s
  warm-up, against bf16's 15 s in the throttle load, and fp8 matmuls at 8192³
  draw more power than bf16, so how far healthy GPUs spread in that window is
  unknown. Until a `scripts/device-check.sh` run on a multi-GPU host records
  the fp8 spread, an fp8 outlier warns; a policy that trusts it sets
  `fp8SiblingsFail: true`.

Record the within-node spread (bf16 and fp8) from device runs on multi-GPU
hosts and adjust both thresholds.

**No per-model minimum by default.** The datasheet peaks (H100 SXM: 989.4 TFLOPS
bf16 dense, 1979 fp8) are not reached by any matmul. The highest published
measured figure found is the Maximum Achievable Matmul FLOPS table of Stas
Bekman's ml-engineering book (github.com/stas00/ml-engineering,
compute/accelerator): H100 SXM 794.5 TFLOPS bf16 (80.3 % of peak) and 1402.6
fp8, GH200 828.6 and 1535.0, each at its best shape. That is what a healthy GPU
reaches at best, not the lowest a healthy GPU shows at the fixed 8192³ shape
under a sustained 700 W load: a minimum set from it would quarantine healthy
nodes. Set `minBf16TflopsByModel` from the figures your own healthy nodes
report. The trap `h100-nvl-8gpu-throughput.yaml` (every GPU alike and about
19 % below an H100 SXM's figure) shows why a minimum must be keyed by model
class: the NVL part is never matched by `h100-sxm`.
"""  # noqa: E501, RUF001


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
# No per-model minimum (docs/policy.md: the published best-shape figures are not the
# lowest a healthy GPU shows at 8192^3 under load). The sibling rule needs no table:
warnBelowMedianPercent: 8   # a GPU > 8 % below the node's median GPU warns
maxBelowMedianPercent: 25   # > 25 % fails: past SC22's 22 % max (within-node unmeasured)
fp8SiblingsFail: false      # fp8's sibling rule only warns until its spread is measured
fp8: true                 # where the GPU can (compute capability >= 8.9)
fp8Seconds: 2
ownLoadSeconds: 5         # only when throttleReasons did not load the GPUs
"""


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why=(
            "not tied to GPUs yet: an outlier against the node's median is one GPU's, a whole"
            " node below the model minimum the node's; a candidate"
        ),
        source="the check's own rule (docs above)",
    ),
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
    shipped=SHIPPED,
    docs=DOCS,
    # throttle_reasons' timed bf16 matmuls: the GPUs loaded once for both
    needs=frozenset({"matmul_load"}),
    budget=budget,
    runbook=RunbookEntry(
        meaning="a GPU's matmul throughput below the model minimum or well below its siblings",
        fix="heatsink seating and cooling, clock caps (nvidia-smi -q -d CLOCK), GPU replacement",
    ),
)
