"""Recording a verdict, and an attempt that failed without one (pure).

``record_verdict`` applies a :class:`~gpuaccept.checks.verdict.Verdict` (the
judge's, or :func:`failing_verdict`) subject to dryRun and the
quarantine limit (:func:`gpuaccept.operator.core.fleet.quarantine_allowed`);
``attempt_failed`` retries with backoff and, once the retries are spent,
records a ``ProbeError`` verdict. Neither ever accepts a node on an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from gpuaccept.checks.verdict import Verdict
from gpuaccept.contracts.api import ACCEPTANCE_KIND
from gpuaccept.contracts.nodeacceptance import (
    CheckSummary,
    FabricStatus,
    KeyFigures,
    NodeAcceptanceStatus,
    Phase,
    Reason,
)
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core.context import (
    REASON_BREAKER,
    REASON_DRY_RUN,
    REASON_PROBE_ERROR,
    NodeContext,
    PlanBuilder,
    cut,
    reasons_message,
)
from gpuaccept.operator.core.fleet import quarantine_allowed
from gpuaccept.operator.core.model import Plan, PodView

HELD_QUARANTINE = "Quarantine"
HELD_ACCEPT = "Accept"
REASON_FABRIC_WAITING = "FabricPending"


def failing_verdict(
    reasons: tuple[Reason, ...],
    *,
    checks: tuple[CheckSummary, ...] = (),
    figures: KeyFigures | None = None,
) -> Verdict:
    """A verdict that does not accept, on ``reasons``: an error, or a failing verdict
    replayed from status. It carries no re-judged results: no new report is behind it."""
    return Verdict(
        accepted=False,
        reasons=reasons,
        warnings=(),
        checks=checks,
        figures=figures or KeyFigures(),
        results=(),
    )


def attempt_failed(
    ctx: NodeContext, out: PlanBuilder, *, reason: str, message: str, pod: PodView | None
) -> Plan:
    """An attempt failed without a trustworthy report: retry, then ProbeError."""
    st, spec = ctx.status, ctx.spec
    if st.attempts < spec.probe_run.retries + 1:
        backoff = min(
            spec.probe_run.backoff_seconds * 2 ** max(st.attempts - 1, 0),
            ctx.obs.config.max_backoff_seconds,
        )
        new = st.model_copy(
            update={
                "phase": Phase.PENDING,
                "reason": reason,
                "message": cut(f"attempt {st.attempts} failed: {message}", 1000),
                "next_attempt_time": ctx.obs.now + timedelta(seconds=backoff),
                "probe_pod": None,
                "probe_started_time": None,
            }
        )
        out.write_status(st, new)
        out.event(
            ACCEPTANCE_KIND,
            "Warning",
            reason,
            f"probe attempt {st.attempts} failed, retrying in {backoff}s: {message}",
        )
        if pod is not None and not pod.deleting:
            out.delete_pod(pod)
        out.wake_in(backoff)
        return out.build(f"retry after {reason}")
    error = Reason(
        check="probe", reason=REASON_PROBE_ERROR, message=cut(f"{reason}: {message}", 500)
    )
    return record_verdict(ctx, out, failing_verdict((error,)), Evidence(pod=pod))


def verdict_outcome(
    ctx: NodeContext, verdict: Verdict, summary: str
) -> tuple[Phase, str | None, str, str | None]:
    """(phase, reason, message, held action) for a verdict, under dryRun and the breaker."""
    if ctx.spec.dry_run:
        return (
            Phase.HELD,
            REASON_DRY_RUN,
            "dry run: would accept"
            if verdict.accepted
            else f"dry run: would quarantine: {summary}",
            HELD_ACCEPT if verdict.accepted else HELD_QUARANTINE,
        )
    if verdict.accepted:
        return Phase.ACCEPTED, None, "all required checks passed", None
    st, breaker, spec = ctx.status, ctx.obs.breaker, ctx.spec
    main = verdict.reasons[0].reason if verdict.reasons else REASON_PROBE_ERROR
    # Already quarantined under this policy: no new slot is taken. Under
    # another policy (the node was relabelled), it takes one here.
    already = st.phase == Phase.QUARANTINED and st.policy == ctx.policy.name
    if quarantine_allowed(spec, breaker, already_quarantined=already):
        return Phase.QUARANTINED, main, summary, None
    limit = spec.max_quarantined_count(breaker.matched)
    message = (
        f"breaker: quarantining would exceed maxQuarantined={spec.max_quarantined}"
        f" ({breaker.quarantined} of limit {limit} in use); would"
        f" quarantine: {summary}"
    )
    return Phase.HELD, REASON_BREAKER, message, HELD_QUARANTINE


@dataclass(frozen=True)
class Evidence:
    """What a judgement rests on."""

    report: ProbeReport | None = None  # the report judged; None for an error verdict
    rejudged: bool = False  # a stored report judged again (no new probe)
    pod: PodView | None = None  # the attempt's pod, deleted once the verdict is recorded


def record_verdict(
    ctx: NodeContext, out: PlanBuilder, verdict: Verdict, evidence: Evidence
) -> Plan:
    """Record a verdict (subject to dryRun and the breaker) and act on the node."""
    st = ctx.status
    report, rejudged, pod = evidence.report, evidence.rejudged, evidence.pod
    reasons = list(verdict.reasons)[:32]
    summary = reasons_message(reasons)
    enters_fabric = ctx.spec.fabric.enabled and verdict.accepted and not rejudged
    reason: str | None
    if enters_fabric:  # passed the single-node checks: the fabric test comes next
        phase, reason, held_action = Phase.FABRIC, REASON_FABRIC_WAITING, None
        message = "passed the single-node checks; waiting for a fabric pair"
    else:
        phase, reason, message, held_action = verdict_outcome(ctx, verdict, summary)
    if not ctx.spec.dry_run and not verdict.accepted:
        out.needs_breaker = True
    if not reasons and not verdict.accepted:
        reasons = [Reason(check="probe", reason=REASON_PROBE_ERROR, message="no reason given")]
    update: dict[str, Any] = {
        "phase": phase,
        "reason": reason,
        "message": cut(message, 1000),
        "reasons": reasons,
        "held_action": held_action,
        "rejudged": rejudged,
        "probe_pod": None,
        "probe_started_time": None,
        "next_attempt_time": None,
    }
    if not rejudged:
        update["last_probe_time"] = ctx.obs.now
        update["probed_boot_id"] = report.boot_id if report is not None else ctx.node.boot_id
        # The report this verdict came from; an error verdict has none. Keeping
        # an older one would let a later re-judge accept on stale evidence.
        update["report"] = report
        # The kubelet's view of the probe's run (None for a pod that never ran).
        update["probe_pod_seconds"] = pod.run_seconds if pod is not None else None
    if verdict.checks or report is not None:
        update["checks"] = list(verdict.checks)[:32]
    if report is not None:  # the figures of the report judged (an error verdict has none)
        update["figures"] = verdict.figures
    if enters_fabric:
        update["fabric"] = FabricStatus(waiting_since=ctx.obs.now, summary="waiting")
    new = ctx.with_applied_keys(ctx.stamped(st, **update))
    out.write_status(st, new)
    if (new.phase, new.reason) != (st.phase, st.reason):
        _verdict_events(out, new, summary, verdict.accepted)
    out.ensure_node(ctx, new)
    if pod is not None and not pod.deleting:
        out.delete_pod(pod)
    return out.build(f"verdict {new.phase.value}{' (rejudged)' if rejudged else ''}")


def _verdict_events(
    out: PlanBuilder, new: NodeAcceptanceStatus, summary: str, accepted: bool
) -> None:
    if new.phase == Phase.FABRIC:
        out.event(ACCEPTANCE_KIND, "Normal", REASON_FABRIC_WAITING, new.message or "")
    elif new.phase == Phase.ACCEPTED:
        out.event(ACCEPTANCE_KIND, "Normal", "Accepted", "all required GPU checks passed")
    elif new.phase == Phase.QUARANTINED:
        text = f"quarantined ({new.reason}): {summary}"
        out.event("Node", "Warning", "Quarantined", text)
        out.event(ACCEPTANCE_KIND, "Warning", "Quarantined", text)
    elif new.reason == REASON_BREAKER:
        text = new.message or "breaker open"
        out.event("Node", "Warning", REASON_BREAKER, text)
        out.event(ACCEPTANCE_KIND, "Warning", REASON_BREAKER, text)
    elif new.reason == REASON_DRY_RUN:
        etype: Literal["Normal", "Warning"] = "Normal" if accepted else "Warning"
        out.event(ACCEPTANCE_KIND, etype, REASON_DRY_RUN, new.message or "dry run")
