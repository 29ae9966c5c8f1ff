"""Policy evaluation: ``evaluate(report, policy) → Verdict``. Pure.

Every result is re-judged from its ``observed`` value with its check's
``judge``, so a stored report can be judged again after a policy threshold
changes, without probing again. Then the results are folded:

* a disabled check is ignored;
* an enabled check that failed → quarantined, reason ``<CheckName>Failed``
  (e.g. ``PcieLinkFailed`` for ``pcie_link``);
* an enabled, required check that is missing or errored → ``ProbeError``,
  skipped → ``CheckSkipped`` (a non-required one only warns);
* a warning is accepted, and listed in ``warnings``;
* an error the probe itself recorded (the ``probe`` result of a probe that
  crashed), a report with no GPU in it, or a policy with no check enabled →
  ``ProbeError``, whatever the checks say;
* the node is accepted only when every enabled, required check passed or
  warned. Nothing passes by default.

A result without ``observed`` (the probe dropped it to fit the termination
message, see :mod:`gpuaccept.probe.compact`) keeps the status the probe gave
it. A result whose ``observed`` cannot be judged counts as an error.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpuaccept.contracts.nodeacceptance import CheckSummary, KeyFigures, Reason
from gpuaccept.contracts.policy import ProbePolicy
from gpuaccept.contracts.report import CheckResult, CheckStatus, ProbeReport
from gpuaccept.probe.checks import CHECKS, Check
from gpuaccept.probe.checks.base import clip
from gpuaccept.probe.checks.nccl_allreduce import busbw_of
from gpuaccept.probe.checks.pcie_link import min_link

PROBE_ERROR = "ProbeError"
CHECK_SKIPPED = "CheckSkipped"


class Decision(StrEnum):
    ACCEPTED = "accepted"
    QUARANTINED = "quarantined"


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reasons: tuple[Reason, ...]  # why not accepted (empty when accepted)
    warnings: tuple[Reason, ...]  # accepted, but worth a look
    checks: tuple[CheckSummary, ...]  # one per enabled check, registry order
    figures: KeyFigures
    results: tuple[CheckResult, ...]  # the re-judged results, registry order

    @property
    def accepted(self) -> bool:
        return self.decision is Decision.ACCEPTED

    @property
    def reason(self) -> str | None:
        """The main reason (the first), for a one-word status field."""
        return self.reasons[0].reason if self.reasons else None

    @property
    def message(self) -> str:
        items = self.reasons or self.warnings
        if not items:
            return "all checks passed"
        return clip("; ".join(f"{r.check}: {r.message}" for r in items), 1024)


def _rejudge(
    check: Check, result: CheckResult, report: ProbeReport, policy: ProbePolicy
) -> CheckResult:
    if result.status in (CheckStatus.ERROR, CheckStatus.SKIP) or result.observed is None:
        return result
    try:
        judgement = check.judge(result.observed, policy, report.summary)
    except Exception as exc:  # a malformed stored observation is an error, never a pass
        return result.model_copy(
            update={
                "status": CheckStatus.ERROR,
                "message": clip(f"cannot judge observed value: {exc}"),
            }
        )
    return result.model_copy(
        update={
            "status": judgement.status,
            "expected": judgement.expected,
            "message": clip(judgement.message),
        }
    )


def key_figures(report: ProbeReport) -> KeyFigures:
    """The numbers a person looks at first, from the summary and the results."""
    s = report.summary
    gen = width = None
    pcie = report.result("pcie_link")
    if pcie is not None and pcie.observed is not None:
        link = min_link(pcie.observed)
        # Only plausible figures: they are for display, and a bad observed value
        # is the check's to judge, not a reason for the whole verdict to fail.
        if link is not None and all(0 <= v < 100 for v in link):
            gen, width = link
    busbw = None
    nccl = report.result("nccl_allreduce")
    if nccl is not None and nccl.observed is not None:
        busbw = busbw_of(nccl.observed)
    return KeyFigures(
        gpu_model=s.gpu_model[:64] if s.gpu_model else None,
        gpu_count=s.gpu_count,
        min_pcie_generation=gen,
        min_pcie_width=width,
        pcie=f"Gen{gen}x{width}" if gen is not None and width is not None else None,
        busbw_gbps=busbw if busbw is None or busbw >= 0 else None,
        driver_version=s.driver_version,
    )


def _probe_errors(
    report: ProbeReport, policy: ProbePolicy, checks: Sequence[Check], *, judged: int
) -> list[Reason]:
    """What rules the node out whatever its checks say: nothing to accept it on."""
    known = {check.name for check in checks}
    out = [
        Reason(check=r.check, reason=PROBE_ERROR, message=clip(r.message, 512))
        for r in report.results
        if r.check not in known and r.status is CheckStatus.ERROR
    ]
    if report.summary.gpu_count == 0:
        out.append(Reason(check="probe", reason=PROBE_ERROR, message="no GPU seen by the probe"))
    if judged == 0:
        out.append(Reason(check="probe", reason=PROBE_ERROR, message="the policy enables no check"))
    return out


def evaluate(report: ProbeReport, policy: ProbePolicy, checks: Sequence[Check] = CHECKS) -> Verdict:
    """Judge ``report`` against ``policy``. Pure: no I/O, no clock, no randomness."""
    by_check = {r.check: r for r in report.results}
    reasons: list[Reason] = []
    warnings: list[Reason] = []
    summaries: list[CheckSummary] = []
    results: list[CheckResult] = []
    for check in checks:
        switch = policy.switch(check.name)
        enabled = switch.enabled if switch is not None else True
        required = switch.required if switch is not None else True
        if not enabled:
            continue
        stored = by_check.get(check.name)
        if stored is None:
            summaries.append(
                CheckSummary(
                    check=check.name, status=CheckStatus.ERROR, message="no result in the report"
                )
            )
            item = Reason(check=check.name, reason=PROBE_ERROR, message="no result in the report")
            (reasons if required else warnings).append(item)
            continue
        result = _rejudge(check, stored, report, policy)
        results.append(result)
        summaries.append(
            CheckSummary(check=check.name, status=result.status, message=result.message)
        )
        message = clip(result.message, 512)
        if result.status is CheckStatus.FAIL:
            reasons.append(Reason(check=check.name, reason=check.reason, message=message))
        elif result.status is CheckStatus.WARN:
            warnings.append(
                Reason(
                    check=check.name,
                    reason=check.reason.removesuffix("Failed") + "Warning",
                    message=message,
                )
            )
        elif result.status in (CheckStatus.ERROR, CheckStatus.SKIP):
            word = PROBE_ERROR if result.status is CheckStatus.ERROR else CHECK_SKIPPED
            (reasons if required else warnings).append(
                Reason(check=check.name, reason=word, message=message)
            )
    reasons.extend(_probe_errors(report, policy, checks, judged=len(summaries)))
    decision = Decision.QUARANTINED if reasons else Decision.ACCEPTED
    return Verdict(
        decision=decision,
        reasons=tuple(reasons),
        warnings=tuple(warnings),
        checks=tuple(summaries),
        figures=key_figures(report),
        results=tuple(results),
    )
