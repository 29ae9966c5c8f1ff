"""``gpu_count``: the GPUs visible equal the GPUs expected.

The expected count is the policy's ``gpuCount.expected`` or, when unset, the
node's advertised ``nvidia.com/gpu`` (env ``GPUACCEPT_EXPECTED_GPUS``, set by
the operator). The count used is recorded in ``observed`` so judging is pure.

observed: ``{"visible": 7, "advertised": 8, "problem": "..."}``
"""

from pydantic import Field, JsonValue

from gpuaccept.checks.spec import CheckJudgement, CheckSpec, ObservedModel, clip
from gpuaccept.contracts.policy import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REASON = "GpuCountFailed"


class GpuCountPolicy(CheckSwitch):
    expected: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="GPUs that must be visible; unset means the node's advertised nvidia.com/gpu.",
    )


class GpuCountObserved(ObservedModel):
    visible: int = Field(ge=0)
    advertised: int | None = Field(default=None, ge=0)
    problem: str | None = None  # why no GPU could be seen, when none was


def judge(
    observed: GpuCountObserved, policy: GpuCountPolicy, summary: HardwareSummary
) -> CheckJudgement:
    visible = observed.visible
    if policy.expected is not None:
        expected: int | None = policy.expected
        source = "policy"
    else:
        # 0 advertised means the device plugin has not reported yet: unknown.
        expected = observed.advertised if observed.advertised else None
        source = "node"
    expectation: JsonValue = {"count": expected, "from": source} if expected else None
    if visible == 0:
        detail = f" ({observed.problem})" if observed.problem else ""
        return CheckJudgement(CheckStatus.FAIL, expectation, clip(f"no GPU found{detail}"))
    if expected is None:
        return CheckJudgement(
            CheckStatus.SKIP,
            None,
            f"{visible} GPUs visible, but no expected count: set gpuCount.expected in the "
            "policy or GPUACCEPT_EXPECTED_GPUS",
        )
    if visible != expected:
        return CheckJudgement(
            CheckStatus.FAIL,
            expectation,
            f"{visible} of {expected} GPUs visible (expected from {source})",
        )
    return CheckJudgement(CheckStatus.PASS, expectation, f"{visible} of {expected} GPUs visible")


SPEC = CheckSpec(
    name="gpu_count",
    title="GPU count",
    summary="the GPUs visible equal the policy's count, else the node's advertised nvidia.com/gpu",
    reason=REASON,
    policy_model=GpuCountPolicy,
    observed_model=GpuCountObserved,
    judge=judge,
)
