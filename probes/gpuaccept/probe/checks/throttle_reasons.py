"""``throttle_reasons``: NVML clock event reasons while every GPU is busy.

The backend keeps the GPUs busy; the check samples each GPU's
``nvmlDeviceGetCurrentClocksEventReasons`` bitmask every
:data:`SAMPLE_INTERVAL_S` for ``throttleReasons.sampleSeconds`` and keeps the
union per GPU. HW slowdown, HW thermal slowdown and HW power brake fail by
default; SW power cap and SW thermal slowdown warn (the policy's ``failOn``
and ``warnOn`` lists decide). GPU idle, application clocks and display clock
settings are never recorded.

observed: ``{"samples": 10, "reasons": {"sw_power_cap": [0, 1]}}`` (reason →
GPUs that showed it at least once); condensed, the GPU lists become counts.
"""

from pydantic import JsonValue

from gpuaccept.contracts.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe import clocks
from gpuaccept.probe.checks.base import (
    BadObservationError,
    Judgement,
    Observation,
    ProbeContext,
    as_object,
    clip,
    get_int,
    gpu_list,
)
from gpuaccept.probe.hardware.base import HardwareBackend, Unavailable

SAMPLE_INTERVAL_S = 0.5


def _describe(reason: str, gpus: JsonValue) -> str:
    if isinstance(gpus, list):
        return f"{reason} on {gpu_list([g for g in gpus if isinstance(g, int)])}"
    return f"{reason} on {gpus} GPUs"


class ThrottleReasons:
    name = "throttle_reasons"
    title = "Clock throttle reasons"
    reason = "ThrottleReasonsFailed"

    def measure(
        self, hardware: HardwareBackend, policy: ProbePolicy, context: ProbeContext
    ) -> Observation:
        gpus = [g.index for g in hardware.gpus()]
        if not gpus:
            raise Unavailable("no GPU to sample")
        samples = max(1, round(policy.throttle_reasons.sample_seconds / SAMPLE_INTERVAL_S))
        seen = dict.fromkeys(gpus, 0)
        context.progress("loading GPUs")
        with hardware.gpu_load():
            for n in range(samples):
                context.progress(f"sample {n + 1}/{samples}")
                for gpu in gpus:
                    seen[gpu] |= hardware.clock_event_reasons(gpu)
                if n + 1 < samples:
                    hardware.sleep(SAMPLE_INTERVAL_S)
        reasons: dict[str, JsonValue] = {}
        for gpu, mask in seen.items():
            for name in clocks.decode(mask):
                if name not in clocks.IGNORED:
                    gpus_with = reasons.setdefault(name, [])
                    assert isinstance(gpus_with, list)
                    gpus_with.append(gpu)
        observed: dict[str, JsonValue] = {"samples": samples, "reasons": reasons}
        return Observation(observed)

    def judge(
        self, observed: JsonValue, policy: ProbePolicy, summary: HardwareSummary
    ) -> Judgement:
        obj = as_object(observed)
        samples = get_int(obj, "samples")
        reasons = obj.get("reasons")
        if not isinstance(reasons, dict):
            raise BadObservationError("observed.reasons must be an object")
        p = policy.throttle_reasons
        fail_on = [str(r) for r in p.fail_on]
        warn_on = [str(r) for r in p.warn_on if r not in p.fail_on]
        expected: JsonValue = {"failOn": list(fail_on), "warnOn": list(warn_on)}
        failing = [_describe(r, g) for r, g in reasons.items() if r in fail_on]
        warning = [_describe(r, g) for r, g in reasons.items() if r in warn_on]
        if failing:
            return Judgement(CheckStatus.FAIL, expected, clip("; ".join(failing + warning)))
        if warning:
            return Judgement(CheckStatus.WARN, expected, clip("; ".join(warning)))
        other = [r for r in reasons if r not in fail_on and r not in warn_on]
        note = f" (not judged: {', '.join(other)})" if other else ""
        return Judgement(
            CheckStatus.PASS,
            expected,
            clip(f"no judged clock event reason under load in {samples} samples{note}"),
        )

    def condense(self, observed: JsonValue) -> JsonValue:
        obj = dict(as_object(observed))
        reasons = obj.get("reasons")
        if isinstance(reasons, dict):
            obj["reasons"] = {r: (len(g) if isinstance(g, list) else g) for r, g in reasons.items()}
        return obj


CHECK = ThrottleReasons()
