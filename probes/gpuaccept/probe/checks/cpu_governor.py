"""``cpu_governor``: every online CPU runs the required cpufreq governor.

Reads ``<sysfs>/devices/system/cpu/cpuN/cpufreq/scaling_governor`` through
the shared sysfs reader. No cpufreq (common in VMs) gives ``skip``.

observed: ``{"cpus": 64, "count": {"performance": 60, "powersave": 4},
"list": {"performance": "4-63", "powersave": "0-3"}}`` (``list`` is dropped
when condensed; cpulists longer than 96 characters are clipped).
"""

from pydantic import JsonValue

from gpuaccept.contracts.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.checks.base import (
    BadObservationError,
    Judgement,
    Observation,
    ProbeContext,
    as_object,
    clip,
    get_int,
)
from gpuaccept.probe.hardware.base import HardwareBackend, Unavailable
from gpuaccept.probe.hardware.sysfs import NoCpufreq, format_cpu_list, read_cpu_governors

CPULIST_MAX = 96


class CpuGovernor:
    name = "cpu_governor"
    title = "CPU governor"
    reason = "CpuGovernorFailed"

    def measure(
        self, hardware: HardwareBackend, policy: ProbePolicy, context: ProbeContext
    ) -> Observation:
        try:
            governors = read_cpu_governors(hardware.sysfs_root())
        except NoCpufreq as exc:
            raise Unavailable(f"no cpufreq: {exc}") from exc
        by_governor: dict[str, list[int]] = {}
        for cpu, governor in governors.items():
            by_governor.setdefault(governor, []).append(cpu)
        count: dict[str, JsonValue] = {g: len(c) for g, c in sorted(by_governor.items())}
        cpulists: dict[str, JsonValue] = {
            g: clip(format_cpu_list(c), CPULIST_MAX) for g, c in sorted(by_governor.items())
        }
        return Observation({"cpus": len(governors), "count": count, "list": cpulists})

    def judge(
        self, observed: JsonValue, policy: ProbePolicy, summary: HardwareSummary
    ) -> Judgement:
        obj = as_object(observed)
        cpus = get_int(obj, "cpus")
        count = obj.get("count")
        if not isinstance(count, dict):
            raise BadObservationError("observed.count must be an object")
        lists = obj.get("list")
        lists = lists if isinstance(lists, dict) else {}
        required = policy.cpu_governor.required_governor
        expected: JsonValue = {"governor": required}
        offending = {g: n for g, n in count.items() if g != required}
        for governor, n in offending.items():
            if isinstance(n, bool) or not isinstance(n, int):
                raise BadObservationError(f"observed.count.{governor} must be an integer")
        if not offending:
            return Judgement(CheckStatus.PASS, expected, f"all {cpus} CPUs on {required}")
        bad = sum(n for n in offending.values() if isinstance(n, int))
        details = "; ".join(
            f"{g} on CPU {lists[g]}" if isinstance(lists.get(g), str) else f"{g} on {n} CPUs"
            for g, n in offending.items()
        )
        return Judgement(
            CheckStatus.FAIL, expected, clip(f"{bad} of {cpus} CPUs not on {required}: {details}")
        )

    def condense(self, observed: JsonValue) -> JsonValue:
        obj = dict(as_object(observed))
        obj.pop("list", None)
        return obj


CHECK = CpuGovernor()
