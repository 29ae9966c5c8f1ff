"""Measures :mod:`gpuaccept.checks.cpu_governor`: the cpufreq governor of every online CPU."""

from gpuaccept.checks.cpu_governor import CPULIST_MAX, CpuGovernorObserved, CpuGovernorPolicy
from gpuaccept.checks.spec import clip
from gpuaccept.probe.hardware.base import HardwareBackend, NoSuchInterface
from gpuaccept.probe.hardware.sysfs import format_cpu_list
from gpuaccept.probe.measure.context import ProbeContext


def measure(
    hardware: HardwareBackend, policy: CpuGovernorPolicy, context: ProbeContext
) -> CpuGovernorObserved:
    try:
        governors = hardware.cpu_governors()
    except NoSuchInterface as exc:  # a platform fact, judged; a failed read stays an error
        return CpuGovernorObserved(cpus=0, count={}, no_cpufreq=clip(str(exc), 200))
    by_governor: dict[str, list[int]] = {}
    for cpu, governor in governors.items():
        by_governor.setdefault(governor, []).append(cpu)
    return CpuGovernorObserved(
        cpus=len(governors),
        count={g: len(c) for g, c in sorted(by_governor.items())},
        cpu_lists={
            g: clip(format_cpu_list(c), CPULIST_MAX) for g, c in sorted(by_governor.items())
        },
    )
