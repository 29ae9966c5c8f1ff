"""``throttle_reasons``: sustained NVML clock event reasons while every GPU is busy.

The probe keeps every GPU busy (a bf16 matmul loop) and samples each GPU's
``nvmlDeviceGetCurrentClocksEventReasons`` bitmask every 0.25 s: first for
``throttleReasons.warmupSeconds`` (not judged: NVML documents that HW slowdown
"may be also reported during PState or clock change"), then for
``throttleReasons.sampleSeconds``. A reason counts on a GPU when it is active
in more than ``maxActiveFraction`` of that GPU's judged samples: a sustained
condition, not one sample. HW slowdown, HW thermal slowdown and HW power brake
fail by default; SW thermal slowdown warns, SW power cap (a GPU at its power
limit, as a healthy one under a dense matmul is) is recorded, not judged
(``failOn`` and ``warnOn`` decide). GPU idle, application clocks and display clock settings are
never recorded. The SM clock reached under load is recorded per GPU against
its maximum (not judged). A GPU that NVML lost while sampling
(``GPU_IS_LOST``) fails the check by name; the others are still sampled.

observed::

    {"samples": 60, "warmupSamples": 12,
     "activeFraction": {"sw_power_cap": [0.35, 0.2, 0, 0, 0, 0, 0, 0]},
     "smClockMHz": [1755, 1980, ...], "smClockMaxMHz": [1980, 1980, ...]}

(``activeFraction``: reason → per GPU, index order, the fraction of the judged
samples in which it was active; only reasons seen at least once). Condensed:
``worst``: reason → [the largest fraction, the GPU it was on], and
``minSmClockMHz`` / ``minSmClockGpu`` instead of the columns, without
``warmupSamples`` (never judged). Older probes' condensed reports carry
``maxActiveFraction`` and ``worstGpu`` instead of ``worst``, and
``smClockMaxMHzTop`` (the highest max SM clock): judged the same. Reports of
earlier probes carry ``reasons`` (reason → GPUs that showed it once); they are
judged as before (any sample counts).
"""

from enum import StrEnum

from pydantic import Field, JsonValue

from gpuaccept.checks.claims import SM_CLOCK_MAX_MHZ, Claims
from gpuaccept.checks.phase_estimate import LOAD_RAMP_S, PhaseEstimate
from gpuaccept.checks.spec import (
    CheckJudgement,
    CheckSpec,
    ObservedModel,
    RunbookEntry,
    clip,
    gpu_list,
)
from gpuaccept.contracts.policy_fields import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REASON = "ThrottleReasonsFailed"


class ThrottleReason(StrEnum):
    """NVML clock event reasons that matter (idle, application and display
    clock settings are never judged)."""

    HW_SLOWDOWN = "hw_slowdown"
    HW_THERMAL_SLOWDOWN = "hw_thermal_slowdown"
    HW_POWER_BRAKE = "hw_power_brake"
    SW_POWER_CAP = "sw_power_cap"
    SW_THERMAL_SLOWDOWN = "sw_thermal_slowdown"
    SYNC_BOOST = "sync_boost"


class ThrottleReasonsPolicy(CheckSwitch):
    fail_on: list[ThrottleReason] = Field(
        default_factory=lambda: [
            ThrottleReason.HW_SLOWDOWN,
            ThrottleReason.HW_THERMAL_SLOWDOWN,
            ThrottleReason.HW_POWER_BRAKE,
        ],
        description="Clock event reasons that fail the node when sustained on any GPU under load.",
    )
    warn_on: list[ThrottleReason] = Field(
        default_factory=lambda: [ThrottleReason.SW_THERMAL_SLOWDOWN],
        description="Reasons that only warn; a reason in both lists fails. SW power cap is "
        "not in it: a healthy GPU under a dense matmul runs at its power limit.",
    )
    warmup_seconds: float = Field(
        default=3.0,
        ge=0,
        le=600,
        description="Load before sampling counts (clock and P-state changes report HW slowdown).",
    )
    sample_seconds: float = Field(
        default=15.0,
        gt=0,
        le=1800,
        description="The judged window: how long the reasons are sampled after the warm-up.",
    )
    max_active_fraction: float = Field(
        default=0.1,
        ge=0,
        lt=1,
        description="A reason counts on a GPU when active in more than this fraction of its "
        "judged samples.",
    )


class ThrottleReasonsObserved(ObservedModel):
    samples: int = Field(ge=0)  # judged samples per GPU (after the warm-up)
    warmup_samples: int | None = Field(default=None, ge=0)
    # reason -> per GPU (index order) the fraction of judged samples it was active in
    active_fraction: dict[str, list[float]] | None = None
    sm_clock_mhz: list[int] | None = Field(default=None, alias="smClockMHz")
    sm_clock_max_mhz: list[int] | None = Field(default=None, alias="smClockMaxMHz")
    # GPUs NVML lost (or that hung) while sampling: index -> what happened
    failed_gpus: dict[str, str] | None = None
    # GPU -> judged samples NVML did not answer (a transient error); fractions are over the
    # samples read
    missed_samples: dict[str, int] | None = None
    # condensed
    max_active_fraction: dict[str, float] | None = None
    worst_gpu: dict[str, int] | None = None
    worst: dict[str, tuple[float, int]] | None = None  # reason -> [largest fraction, its GPU]
    min_sm_clock_mhz: int | None = Field(default=None, alias="minSmClockMHz")
    min_sm_clock_gpu: int | None = None
    sm_clock_max_mhz_top: int | None = Field(default=None, alias="smClockMaxMHzTop")
    # reports of earlier probes: reason -> the GPUs that showed it in any sample
    reasons: dict[str, list[int] | int] | None = None


def _sustained(observed: ThrottleReasonsObserved, limit: float) -> dict[str, str]:
    """reason → where it was sustained (above ``limit``), from whichever form is present."""
    if observed.active_fraction is not None:
        out = _sustained_per_gpu(observed.active_fraction, limit)
    elif observed.worst is not None:
        out = {
            reason: f"{reason} {worst:.0%} of samples on GPU {gpu}"
            for reason, (worst, gpu) in observed.worst.items()
            if worst > limit
        }
    elif observed.max_active_fraction is not None:
        out = _sustained_at_most(observed.max_active_fraction, observed.worst_gpu or {}, limit)
    else:
        out = {}
    for reason, gpus in (observed.reasons or {}).items():
        where = gpu_list(gpus) if isinstance(gpus, list) else f"{gpus} GPUs"
        out.setdefault(reason, f"{reason} on {where}")
    return out


def _sustained_per_gpu(active_fraction: dict[str, list[float]], limit: float) -> dict[str, str]:
    """The full form: each reason above ``limit`` on the GPUs it was, and its worst."""
    out: dict[str, str] = {}
    for reason, fractions in active_fraction.items():
        over = [i for i, f in enumerate(fractions) if f > limit]
        if over:
            out[reason] = f"{reason} {max(fractions):.0%} of samples on {gpu_list(over)}"
    return out


def _sustained_at_most(
    max_active_fraction: dict[str, float], worst_gpu: dict[str, int], limit: float
) -> dict[str, str]:
    """An earlier condensed form: each reason's largest fraction, and its GPU if known."""
    out: dict[str, str] = {}
    for reason, worst in max_active_fraction.items():
        if worst > limit:
            where = f"GPU {worst_gpu[reason]}" if reason in worst_gpu else "a GPU"
            out[reason] = f"{reason} {worst:.0%} of samples on {where}"
    return out


def judge(
    observed: ThrottleReasonsObserved, policy: ThrottleReasonsPolicy, summary: HardwareSummary
) -> CheckJudgement:
    fail_on = [str(r) for r in policy.fail_on]
    warn_on = [str(r) for r in policy.warn_on if r not in policy.fail_on]
    limit = policy.max_active_fraction
    expected: JsonValue = {
        "failOn": list(fail_on),
        "warnOn": list(warn_on),
        "maxActiveFraction": limit,
    }
    sustained = _sustained(observed, limit)
    lost = [f"GPU {g} failed: {what}" for g, what in (observed.failed_gpus or {}).items()]
    failing = lost + [text for r, text in sustained.items() if r in fail_on]
    warning = [text for r, text in sustained.items() if r in warn_on]
    if failing:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(failing + warning)))
    if warning:
        return CheckJudgement(CheckStatus.WARN, expected, clip("; ".join(warning)))
    return CheckJudgement(
        CheckStatus.PASS,
        expected,
        clip(_pass_message(observed, sustained, fail_on + warn_on, limit)),
    )


def _pass_message(
    observed: ThrottleReasonsObserved, sustained: dict[str, str], judged: list[str], limit: float
) -> str:
    """No judged reason sustained; the reasons that were, but are not judged, named."""
    other = [r for r in sustained if r not in judged]
    note = f" (not judged: {', '.join(other)})" if other else ""
    return (
        f"no judged clock event reason sustained (> {limit:.0%}) under load "
        f"in {observed.samples} samples{note}"
    )


def condense(observed: ThrottleReasonsObserved) -> ThrottleReasonsObserved:
    update: dict[str, object] = {"warmup_samples": None}  # never judged
    if observed.active_fraction is not None:
        update["active_fraction"] = None
        update["worst"] = {
            r: (max(f), f.index(max(f))) for r, f in observed.active_fraction.items()
        }
    clocks = observed.sm_clock_mhz
    if clocks:
        update.update(
            sm_clock_mhz=None,
            sm_clock_max_mhz=None,
            min_sm_clock_mhz=min(clocks),
            min_sm_clock_gpu=clocks.index(min(clocks)),
        )
    if observed.reasons is not None:
        update["reasons"] = {
            r: (len(g) if isinstance(g, list) else g) for r, g in observed.reasons.items()
        }
    return observed.model_copy(update=update)


# What the time budget assumes of the probe's sampling (a test ties each to the probe's).
THROTTLE_SAMPLE_INTERVAL_S = 0.25  # measure/throttle_reasons.py
NVML_SAMPLE_S = 0.0005  # one NVML query (reasons, or SM clock): an estimate
LOAD_STOP_S = 0.5  # to stop the load and free its memory: an estimate


def budget(section: ThrottleReasonsPolicy, gpus: int) -> PhaseEstimate:
    """The load: its ramp, the warm-up and the judged window."""
    # each judged sample queries every GPU twice (reasons, SM clock), then sleeps
    per_sample = THROTTLE_SAMPLE_INTERVAL_S + 2 * gpus * NVML_SAMPLE_S
    window = section.sample_seconds * per_sample / THROTTLE_SAMPLE_INTERVAL_S
    return PhaseEstimate(
        "load: bf16 matmul on every GPU, clock event reasons sampled",
        LOAD_RAMP_S + section.warmup_seconds + window + LOAD_STOP_S,
        f"{LOAD_RAMP_S:g} s ramp + {section.warmup_seconds:g} s warm-up "
        f"(`warmupSeconds`) + {section.sample_seconds:g} s window (`sampleSeconds`) "
        f"x {per_sample / THROTTLE_SAMPLE_INTERVAL_S:.3f} ({2 * gpus} NVML queries of "
        f"{NVML_SAMPLE_S * 1000:g} ms per {THROTTLE_SAMPLE_INTERVAL_S:g} s sample) + "
        f"{LOAD_STOP_S:g} s to stop the load and free its memory",
        "the policy; the NVML query time is an estimate, not measured on a GPU",
    )


def claims(o: ThrottleReasonsObserved, _summary: HardwareSummary) -> Claims:
    """One fraction and clock per GPU, fractions of samples in 0..1."""
    out = Claims()
    for reason, fractions in (o.active_fraction or {}).items():
        out.per_gpu(f"activeFraction.{reason[:32]}", fractions)
        out.each(f"activeFraction.{reason[:32]}", fractions, 1.0)
    out.per_gpu("smClockMHz", o.sm_clock_mhz).per_gpu("smClockMaxMHz", o.sm_clock_max_mhz)
    out.each("smClockMHz", o.sm_clock_mhz, SM_CLOCK_MAX_MHZ)
    out.each("smClockMaxMHz", o.sm_clock_max_mhz, SM_CLOCK_MAX_MHZ)
    out.keys("failedGpus", o.failed_gpus).keys("missedSamples", o.missed_samples)
    out.indices("worstGpu", (o.worst_gpu or {}).values())
    out.each("maxActiveFraction", (o.max_active_fraction or {}).values(), 1.0)
    for reason, (fraction, gpu) in (o.worst or {}).items():
        out.figure(f"worst.{reason[:32]}", fraction, 1.0).gpu(f"worst.{reason[:32]}", gpu)
    out.gpu("minSmClockGpu", o.min_sm_clock_gpu)
    out.figure("minSmClockMHz", o.min_sm_clock_mhz, SM_CLOCK_MAX_MHZ)
    out.figure("smClockMaxMHzTop", o.sm_clock_max_mhz_top, SM_CLOCK_MAX_MHZ)
    for reason, gpus in (o.reasons or {}).items():
        out.indices(f"reasons.{reason[:32]}", gpus if isinstance(gpus, list) else [gpus])
    return out


SPEC = CheckSpec(
    measuring=frozenset({"warmup_seconds", "sample_seconds", "max_active_fraction"}),
    judging=frozenset({"fail_on", "warn_on"}),
    name="throttle_reasons",
    title="Clock throttle reasons",
    summary="no sustained HW slowdown, thermal or power-brake clock event reason under load "
    "(SW thermal warns; SW power cap, a GPU at its power limit, is not judged)",
    reason=REASON,
    policy_model=ThrottleReasonsPolicy,
    observed_model=ThrottleReasonsObserved,
    judge=judge,
    condense=condense,
    claims=claims,
    budget=budget,
    runbook=RunbookEntry(
        meaning="HW slowdown, thermal or power brake under load",
        fix="cooling, power, GPU replacement",
    ),
)
