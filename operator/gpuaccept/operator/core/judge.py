"""The probe's pure ``evaluate`` as the core's :data:`Judge` (no torch, no NVML)."""

from __future__ import annotations

from gpuaccept.contracts.policy import ProbePolicy
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core.model import Judgement
from gpuaccept.probe.verdict import evaluate


def judge(report: ProbeReport, policy: ProbePolicy) -> Judgement:
    verdict = evaluate(report, policy)
    return Judgement(
        accepted=verdict.accepted,
        reasons=tuple(verdict.reasons),
        checks=tuple(verdict.checks),
        figures=verdict.figures,
    )
