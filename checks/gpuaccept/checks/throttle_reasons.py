"""``throttle_reasons``: NVML clock event reasons while every GPU is busy.

The probe keeps the GPUs busy and samples each GPU's
``nvmlDeviceGetCurrentClocksEventReasons`` bitmask every 0.5 s for
``throttleReasons.sampleSeconds``, keeping the union per GPU. HW slowdown, HW
thermal slowdown and HW power brake fail by default; SW power cap and SW
thermal slowdown warn (the policy's ``failOn`` and ``warnOn`` lists decide).
GPU idle, application clocks and display clock settings are never recorded.

observed: ``{"samples": 10, "reasons": {"sw_power_cap": [0, 1]}}`` (reason →
GPUs that showed it at least once); condensed, the GPU lists become counts.
"""

from enum import StrEnum

from pydantic import Field, JsonValue

from gpuaccept.checks.spec import CheckJudgement, CheckSpec, ObservedModel, clip, gpu_list
from gpuaccept.contracts.policy import CheckSwitch
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
        description="Clock event reasons that fail the node when any GPU shows them under load.",
    )
    warn_on: list[ThrottleReason] = Field(
        default_factory=lambda: [ThrottleReason.SW_POWER_CAP, ThrottleReason.SW_THERMAL_SLOWDOWN],
        description="Reasons that only warn; a reason in both lists fails.",
    )
    sample_seconds: float = Field(
        default=5.0,
        gt=0,
        le=600,
        description="How long every GPU is kept busy while the reasons are sampled.",
    )


class ThrottleReasonsObserved(ObservedModel):
    samples: int = Field(ge=0)
    # reason -> the GPUs that showed it (condensed: how many GPUs)
    reasons: dict[str, list[int] | int]


def _describe(reason: str, gpus: list[int] | int) -> str:
    if isinstance(gpus, list):
        return f"{reason} on {gpu_list(gpus)}"
    return f"{reason} on {gpus} GPUs"


def judge(
    observed: ThrottleReasonsObserved, policy: ThrottleReasonsPolicy, summary: HardwareSummary
) -> CheckJudgement:
    reasons = observed.reasons
    fail_on = [str(r) for r in policy.fail_on]
    warn_on = [str(r) for r in policy.warn_on if r not in policy.fail_on]
    expected: JsonValue = {"failOn": list(fail_on), "warnOn": list(warn_on)}
    failing = [_describe(r, g) for r, g in reasons.items() if r in fail_on]
    warning = [_describe(r, g) for r, g in reasons.items() if r in warn_on]
    if failing:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(failing + warning)))
    if warning:
        return CheckJudgement(CheckStatus.WARN, expected, clip("; ".join(warning)))
    other = [r for r in reasons if r not in fail_on and r not in warn_on]
    note = f" (not judged: {', '.join(other)})" if other else ""
    return CheckJudgement(
        CheckStatus.PASS,
        expected,
        clip(f"no judged clock event reason under load in {observed.samples} samples{note}"),
    )


def condense(observed: ThrottleReasonsObserved) -> ThrottleReasonsObserved:
    counts: dict[str, list[int] | int] = {
        r: (len(g) if isinstance(g, list) else g) for r, g in observed.reasons.items()
    }
    return observed.model_copy(update={"reasons": counts})


SPEC = CheckSpec(
    name="throttle_reasons",
    title="Clock throttle reasons",
    summary="no HW slowdown, thermal or power-brake clock event reason under load "
    "(SW power cap and SW thermal warn)",
    reason=REASON,
    policy_model=ThrottleReasonsPolicy,
    observed_model=ThrottleReasonsObserved,
    judge=judge,
    condense=condense,
)
