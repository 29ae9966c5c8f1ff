"""The checks' pure ``evaluate`` as the core's :data:`Judge` (no torch, no NVML, no probe)."""

from __future__ import annotations

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core.model import Judgement


def judge(report: ProbeReport, policy: ProbePolicy) -> Judgement:
    verdict = evaluate(report, policy)
    return Judgement(
        accepted=verdict.accepted,
        reasons=tuple(verdict.reasons),
        checks=tuple(verdict.checks),
        figures=verdict.figures,
    )
