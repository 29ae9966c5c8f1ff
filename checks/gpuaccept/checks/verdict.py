"""Policy evaluation: ``evaluate(report, policy) → Verdict``. Pure.

Every result is re-judged from its ``observed`` value with its check's
``judge``, so a stored report can be judged again after a policy threshold
changes, without probing again. Then the results are folded:

* a disabled check is ignored;
* an enabled check that failed → not accepted, reason ``<CheckName>Failed``
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
message) keeps the status the probe gave it when that status is ``fail``,
``error`` or ``skip``: it can only take acceptance away. A ``pass`` or ``warn``
without ``observed`` is the probe's word alone, which nothing can judge again:
it counts as an error, so no report accepts a node on results it does not show.
The one exception is a ``not applicable`` pass on a report of one GPU (no pair to
copy between, no all-reduce: nothing to measure, so nothing to show). A result
whose ``observed`` cannot be judged counts as an error.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import JsonValue

from gpuaccept.checks.attribution import Attribution, attribute
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS
from gpuaccept.checks.spec import AnyCheckSpec, clip
from gpuaccept.contracts.nodeacceptance import CheckSummary, KeyFigures, Reason
from gpuaccept.contracts.report import CheckResult, CheckStatus, ProbeReport

PROBE_ERROR = "ProbeError"
CHECK_SKIPPED = "CheckSkipped"


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    reasons: tuple[Reason, ...]  # why not accepted (empty when accepted)
    warnings: tuple[Reason, ...]  # accepted, but worth a look
    checks: tuple[CheckSummary, ...]  # one per enabled check, registry order
    figures: KeyFigures
    results: tuple[CheckResult, ...]  # the re-judged results, registry order
    # Whose each failure is: the GPUs that failed which checks (docs/policy.md,
    # "Per-GPU verdicts"); a verdict with no new report behind it has none.
    attribution: Attribution = field(default_factory=Attribution)

    @property
    def node_reasons(self) -> tuple[Reason, ...]:
        """The reasons that are the node's, not single GPUs' (all of them but the
        failures of a check that tied its failure to GPUs)."""
        return self.attribution.node_reasons(self.reasons)

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


NOT_APPLICABLE = "not applicable:"  # the probe's message when there was nothing to measure
UNSHOWN_PASS = "passed by the probe's word alone: no observed value to judge again"


def _unshown_pass(result: CheckResult, report: ProbeReport) -> CheckResult:
    """A pass or warn without ``observed``: an error, unless there was nothing to show."""
    if report.summary.gpu_count == 1 and result.message.startswith(NOT_APPLICABLE):
        return result
    return result.model_copy(update={"status": CheckStatus.ERROR, "message": UNSHOWN_PASS})


def rejudge(
    check: AnyCheckSpec, result: CheckResult, report: ProbeReport, policy: ProbePolicy
) -> CheckResult:
    """``result`` judged again from its ``observed`` value against ``policy``."""
    if result.status in (CheckStatus.ERROR, CheckStatus.SKIP):
        return result
    if result.observed is None:
        if result.status in (CheckStatus.PASS, CheckStatus.WARN):
            return _unshown_pass(result, report)
        return result
    try:
        observed = check.parse(result.observed)
        judgement = check.judge(observed, policy.section(check), report.summary)
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


def check_figures(check: AnyCheckSpec, observed: JsonValue) -> dict[str, JsonValue]:
    """The check's key figures by wire name (``busbwGBps``), unset ones left out."""
    if check.figures_model is None:  # most checks have none: no second parse
        return {}
    try:
        figures = check.key_figures(check.parse(observed))
    except ValueError:  # a bad observed value is the check's to judge, not the figures'
        return {}
    if figures is None:
        return {}
    wire: dict[str, JsonValue] = figures.model_dump(mode="json", by_alias=True, exclude_none=True)
    return wire


def key_figures(report: ProbeReport, checks: Sequence[AnyCheckSpec] = CHECKS) -> KeyFigures:
    """The numbers a person looks at first, from the summary and the results."""
    s = report.summary
    figures: dict[str, JsonValue] = {
        "gpuModel": s.gpu_model[:64] if s.gpu_model else None,
        "gpuCount": s.gpu_count,
        "driverVersion": s.driver_version,
        "probeWallS": report.wall_s,
    }
    for check in checks:
        result = report.result(check.name)
        if result is not None and result.observed is not None:
            figures.update(check_figures(check, result.observed))
    return KeyFigures.model_validate(figures)


def _probe_errors(
    report: ProbeReport, checks: Sequence[AnyCheckSpec], *, judged: int
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


def _reason_for(check: AnyCheckSpec, result: CheckResult) -> Reason | None:
    """The reason a judged result contributes (``None`` for a pass)."""
    message = clip(result.message, 512)
    match result.status:
        case CheckStatus.FAIL:
            return Reason(check=check.name, reason=check.reason, message=message)
        case CheckStatus.WARN:
            return Reason(check=check.name, reason=check.warning_reason, message=message)
        case CheckStatus.ERROR:
            return Reason(check=check.name, reason=PROBE_ERROR, message=message)
        case CheckStatus.SKIP:
            return Reason(check=check.name, reason=CHECK_SKIPPED, message=message)
        case CheckStatus.PASS:
            return None


def evaluate(
    report: ProbeReport, policy: ProbePolicy, checks: Sequence[AnyCheckSpec] = CHECKS
) -> Verdict:
    """Judge ``report`` against ``policy``. Pure: no I/O, no clock, no randomness."""
    by_check = {r.check: r for r in report.results}
    reasons: list[Reason] = []
    warnings: list[Reason] = []
    summaries: list[CheckSummary] = []
    results: list[CheckResult] = []
    for check in checks:
        switch = policy.switch(check.name)
        if switch is not None and not switch.enabled:
            continue
        required = switch.required if switch is not None else True
        stored = by_check.get(check.name)
        if stored is None:
            missing = "no result in the report"
            summaries.append(
                CheckSummary(check=check.name, status=CheckStatus.ERROR, message=missing)
            )
            item = Reason(check=check.name, reason=PROBE_ERROR, message=missing)
            (reasons if required else warnings).append(item)
            continue
        result = rejudge(check, stored, report, policy)
        results.append(result)
        summaries.append(
            CheckSummary(check=check.name, status=result.status, message=result.message)
        )
        reason = _reason_for(check, result)
        if reason is None:
            continue
        blocking = result.status is CheckStatus.FAIL or (
            required and result.status is not CheckStatus.WARN
        )
        (reasons if blocking else warnings).append(reason)
    reasons.extend(_probe_errors(report, checks, judged=len(summaries)))
    return Verdict(
        accepted=not reasons,
        reasons=tuple(reasons),
        warnings=tuple(warnings),
        checks=tuple(summaries),
        figures=key_figures(report, checks),
        results=tuple(results),
        attribution=attribute(results, report.summary, policy, checks),
    )
