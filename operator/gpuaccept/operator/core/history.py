"""A node's own history in its verdict (pure): the verdict history below
:mod:`.record`, which records it.

* :func:`against_history` (from ``core/record.py`` ``judged``): a verdict that
  would accept is held to the node's baseline (``reverify.drift``: a figure too
  far below it fails, ``BaselineDriftFailed``) and to its quarantines and its GPUs'
  fences (``repeatOffenders``: ``RepeatedQuarantine``, ``RepeatedFence``).
* :func:`history_fields` records the baseline, the drift, the quarantines, the GPUs'
  fences and the end of a re-verification round; :func:`history_events` its Warning
  Event.
* :func:`reverifying` and :func:`keeps_evidence`: the round under way, and whether a
  targeted round that passed keeps the evidence the node was accepted on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpuaccept.checks.baseline import FABRIC_CHECK, FABRIC_FIGURE, drift, report_figures
from gpuaccept.checks.verdict import Verdict
from gpuaccept.contracts.api import ACCEPTANCE_KIND
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase, Reason
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.contracts.reverify import (
    MAX_DRIFT,
    Baseline,
    BaselineFigure,
    DriftFinding,
    ReverifyRound,
    ReverifyStatus,
)
from gpuaccept.operator.core.nodecontext import NodeContext, PlanBuilder
from gpuaccept.operator.core.offenders import (
    REASON_REPEATED_FENCE,
    REASON_REPEATED_QUARANTINE,
    REPEAT_CHECK,
    fence_offence,
    last_release,
    repeat_offence,
    with_fences,
    with_quarantine,
)

REASON_DRIFT = "BaselineDriftFailed"
EVENT_DRIFT = "BaselineDrift"


def reverifying(st: NodeAcceptanceStatus) -> ReverifyRound | None:
    """The re-verification under way (None: none)."""
    return st.reverify.round if st.reverify is not None else None


def keeps_evidence(st: NodeAcceptanceStatus, accepted: bool) -> bool:
    """A targeted round that passed: the node keeps the full evidence it was accepted
    on (the targeted report covers only its checks)."""
    round_ = reverifying(st)
    return accepted and round_ is not None and bool(round_.checks)


def _comparable(baseline: Baseline | None, report: ProbeReport) -> bool:
    return (
        baseline is not None
        and baseline.gpu_model == report.summary.gpu_model
        and baseline.gpu_count == report.summary.gpu_count
    )


def drift_findings(ctx: NodeContext, report: ProbeReport | None) -> list[DriftFinding] | None:
    """The drift of ``report`` against the node's baseline (None: not compared)."""
    policy = ctx.spec.reverify
    baseline = ctx.status.baseline
    if not (policy.enabled and policy.drift.enabled) or report is None:
        return None
    if baseline is None or not _comparable(baseline, report):
        return None
    return drift(
        baseline.figures,
        report_figures(report),
        warn_percent=policy.drift.warn_percent,
        fail_percent=policy.drift.fail_percent,
    )[:MAX_DRIFT]


def against_history(
    ctx: NodeContext, verdict: Verdict, report: ProbeReport | None, *, new_evidence: bool
) -> Verdict:
    """``verdict`` held to the node's own history: an accepting verdict on new
    evidence (a probe, a fabric pair; not a re-judge) fails on drift beyond the
    policy's ``failPercent`` and for a repeat offender."""
    if not verdict.accepted or not new_evidence:
        return verdict
    reasons = [
        Reason(check=f.check, reason=REASON_DRIFT, message=f.message)
        for f in drift_findings(ctx, report) or []
        if f.level == "fail"
    ]
    rv = ctx.status.reverify or ReverifyStatus()
    released, policy, now = last_release(ctx.status), ctx.spec.repeat_offenders, ctx.obs.now
    offence = repeat_offence(rv.quarantines, released, policy, now)
    if offence is not None:
        reasons.append(
            Reason(check=REPEAT_CHECK, reason=REASON_REPEATED_QUARANTINE, message=offence[:512])
        )
    fenced = fence_offence(rv.gpu_fences, released, policy, now)
    if fenced is not None:
        why = Reason(check=REPEAT_CHECK, reason=REASON_REPEATED_FENCE, message=fenced[:512])
        reasons.append(why)
    if not reasons:
        return verdict
    return replace(verdict, accepted=False, reasons=tuple(reasons))


def _baseline(
    ctx: NodeContext, report: ProbeReport | None, fabric_busbw: float | None
) -> Baseline | None:
    """The baseline after an accepting verdict: kept when there is one that fits the
    node (and no person released it since); else taken from this report."""
    st, now = ctx.status, ctx.obs.now
    old = st.baseline
    if not ctx.spec.reverify.enabled or report is None:
        return old
    released = last_release(st)
    if _comparable(old, report) and (released is None or old is None or released <= old.taken_time):
        return _with_fabric(old, fabric_busbw)
    if reverifying(st) is not None and reverifying(st).checks:  # type: ignore[union-attr]
        return old  # a targeted report is no baseline
    new = Baseline(
        taken_time=now,
        gpu_model=report.summary.gpu_model,
        gpu_count=report.summary.gpu_count,
        figures=report_figures(report),
    )
    return _with_fabric(new, fabric_busbw)


def _with_fabric(baseline: Baseline | None, busbw: float | None) -> Baseline | None:
    if baseline is None or busbw is None or busbw <= 0:
        return baseline
    if any(f.check == FABRIC_CHECK for f in baseline.figures):
        return baseline
    figure = BaselineFigure(check=FABRIC_CHECK, figure=FABRIC_FIGURE, value=busbw)
    return baseline.model_copy(update={"figures": [*baseline.figures, figure][:64]})


def _fabric_drift(ctx: NodeContext, busbw: float | None) -> list[DriftFinding] | None:
    baseline, policy = ctx.status.baseline, ctx.spec.reverify
    if busbw is None or baseline is None or not (policy.enabled and policy.drift.enabled):
        return None
    before = [f for f in baseline.figures if f.check == FABRIC_CHECK]
    if not before:
        return None
    now = [BaselineFigure(check=FABRIC_CHECK, figure=FABRIC_FIGURE, value=busbw)]
    return drift(before, now, warn_percent=policy.drift.warn_percent, fail_percent=None)


def _ended(round_: ReverifyRound | None, accepted: bool, ctx: NodeContext) -> ReverifyRound | None:
    if round_ is None:
        return None
    outcome = "Passed" if accepted else "Failed"
    return round_.model_copy(update={"outcome": outcome, "finished": ctx.obs.now})


@dataclass(frozen=True)
class Recorded:
    """What :mod:`.record` is recording: the new phase and reason, whether it
    accepts, the report behind it, and a fabric verdict's busbw."""

    phase: Phase
    reason: str | None
    accepted: bool
    report: ProbeReport | None
    fabric_busbw: float | None = None
    compare: bool = True  # new evidence (not a re-judge): compared with the baseline
    # The UUIDs of the GPUs newly fenced, or whose fence is escalated to the node's
    # quarantine (repeatOffenders per GPU): the fence history counts them.
    fenced: tuple[str, ...] = ()


def history_fields(ctx: NodeContext, rec: Recorded) -> dict[str, Any]:
    """The status fields a verdict changes in the node's history: its quarantines,
    the drift found, the end of a re-verification (not at the fabric test: the round
    goes on through it), and its baseline (after an acceptance)."""
    st, now = ctx.status, ctx.obs.now
    rv = st.reverify or ReverifyStatus()
    changes: dict[str, Any] = {}
    quarantined = rec.phase == Phase.QUARANTINED and st.phase != Phase.QUARANTINED
    repeated = (REASON_REPEATED_QUARANTINE, REASON_REPEATED_FENCE)
    if quarantined and rec.reason not in repeated:
        changes["quarantines"] = with_quarantine(rv.quarantines, now)
    if rec.fenced:
        changes["gpu_fences"] = with_fences(rv.gpu_fences, rec.fenced, now)
    found = None
    if rec.fabric_busbw is not None:
        found = _fabric_drift(ctx, rec.fabric_busbw)
    elif rec.compare:
        found = drift_findings(ctx, rec.report)
    if found is not None:
        changes.update(drift=found, drift_time=now)
    if rv.round is not None and rec.phase in (Phase.ACCEPTED, Phase.QUARANTINED, Phase.HELD):
        changes.update(round=None, last=_ended(rv.round, rec.accepted, ctx), idle_since=None)
    update: dict[str, Any] = {}
    if changes:
        update["reverify"] = rv.model_copy(update=changes)
    if rec.accepted:
        baseline = _baseline(ctx, rec.report or st.report, rec.fabric_busbw)
        if baseline != st.baseline:
            update["baseline"] = baseline
    return update


def history_events(out: PlanBuilder, old: NodeAcceptanceStatus, new: NodeAcceptanceStatus) -> None:
    """A Warning Event when a comparison found drift."""
    before = old.reverify.drift_time if old.reverify else None
    rv = new.reverify
    if rv is None or not rv.drift or rv.drift_time == before:
        return
    worst = rv.drift[0]
    text = f"{len(rv.drift)} figure(s) below the node's baseline; worst: {worst.message}"
    out.event(ACCEPTANCE_KIND, "Warning", EVENT_DRIFT, text)
