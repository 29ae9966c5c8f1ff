"""The check registry: one line per check, in the order the probe runs them.

Importing this module imports no torch and no NVML (the operator uses it to
re-judge stored reports).
"""

from gpuaccept.probe.checks import (
    cpu_governor,
    driver_libraries,
    gpu_count,
    nccl_allreduce,
    pcie_link,
    throttle_reasons,
)
from gpuaccept.probe.checks.base import Check, Judgement, Observation, ProbeContext

CHECKS: tuple[Check, ...] = (
    gpu_count.CHECK,
    driver_libraries.CHECK,
    cpu_governor.CHECK,
    pcie_link.CHECK,
    throttle_reasons.CHECK,
    nccl_allreduce.CHECK,
)

BY_NAME: dict[str, Check] = {check.name: check for check in CHECKS}


def get_check(name: str) -> Check | None:
    return BY_NAME.get(name)


__all__ = ["BY_NAME", "CHECKS", "Check", "Judgement", "Observation", "ProbeContext", "get_check"]
