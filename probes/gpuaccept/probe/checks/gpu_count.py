"""``gpu_count``: the GPUs visible equal the GPUs expected.

The expected count is the policy's ``gpuCount.expected`` or, when unset, the
node's advertised ``nvidia.com/gpu`` (env ``GPUACCEPT_EXPECTED_GPUS``, set by
the operator). The count used is recorded in ``observed`` so judging is pure.

observed: ``{"visible": 7, "advertised": 8, "problem": "..."}``
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
    get_int,
    opt_int,
    opt_str,
)
from gpuaccept.probe.hardware.base import HardwareBackend


class GpuCount:
    name = "gpu_count"
    title = "GPU count"
    reason = "GpuCountFailed"

    def measure(
        self, hardware: HardwareBackend, policy: ProbePolicy, context: ProbeContext
    ) -> Observation:
        observed: dict[str, JsonValue] = {"visible": len(hardware.gpus())}
        if context.advertised_gpus is not None:
            observed["advertised"] = context.advertised_gpus
        problem = hardware.gpu_problem()
        if problem:
            observed["problem"] = clip(problem, 160)
        return Observation(observed)

    def judge(
        self, observed: JsonValue, policy: ProbePolicy, summary: HardwareSummary
    ) -> Judgement:
        obj = as_object(observed)
        visible = get_int(obj, "visible")
        advertised = opt_int(obj, "advertised")
        if policy.gpu_count.expected is not None:
            expected: int | None = policy.gpu_count.expected
            source = "policy"
        else:
            # 0 advertised means the device plugin has not reported yet: unknown.
            expected = advertised if advertised else None
            source = "node"
        expectation: JsonValue = {"count": expected, "from": source} if expected else None
        if visible == 0:
            problem = opt_str(obj, "problem")
            detail = f" ({problem})" if problem else ""
            return Judgement(CheckStatus.FAIL, expectation, clip(f"no GPU found{detail}"))
        if expected is None:
            return Judgement(
                CheckStatus.SKIP,
                None,
                f"{visible} GPUs visible, but no expected count: set gpuCount.expected in the "
                "policy or GPUACCEPT_EXPECTED_GPUS",
            )
        if visible != expected:
            return Judgement(
                CheckStatus.FAIL,
                expectation,
                f"{visible} of {expected} GPUs visible (expected from {source})",
            )
        return Judgement(CheckStatus.PASS, expectation, f"{visible} of {expected} GPUs visible")

    def condense(self, observed: JsonValue) -> JsonValue:
        return observed


CHECK = GpuCount()
