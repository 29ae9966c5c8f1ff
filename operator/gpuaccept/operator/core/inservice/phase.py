"""An accepted node's in-service step (pure): its ledger brought up to date, and an
in-service verdict recorded through the one verdict path.

Called from ``core/decided.py`` for a node in service under a policy with
``inService.enabled`` (phase ``Accepted``, or ``Held`` by a dry run that would
accept). :func:`~.rules.evaluate` reads the Node's signals, the new watch reports
and the policy's fleet; a verdict becomes a failing ``Verdict`` (check
``in_service``, its reason) that :func:`~gpuaccept.operator.core.record.judged`
turns into a quarantine, or a ``Hold`` under dryRun or the quarantine limit
(``BreakerOpen``); a common cause is held in service (``CommonCause``), never
quarantined. A hold whose evidence is gone (allocatable back, a condition cleared)
is lifted: the node stays accepted. Nothing latches: a quarantined node returns only
through a new acceptance probe (a new bootID, a re-probe), which starts a new ledger.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuaccept.contracts.api import ACCEPTANCE_KIND
from gpuaccept.contracts.inservice import InServiceSuspect, InServiceVerdict
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase, Reason
from gpuaccept.contracts.reverify import ReverifyStatus, Suspicion
from gpuaccept.operator.core.inservice.correlation import Fleet
from gpuaccept.operator.core.inservice.evidence import (
    IN_SERVICE_CHECK,
    REASON_COMMON_CAUSE,
    NodeSignals,
)
from gpuaccept.operator.core.inservice.rules import Evaluation, Observed, evaluate, ledger_for
from gpuaccept.operator.core.model import PatchNAStatus, Plan
from gpuaccept.operator.core.nodecontext import (
    REASON_DRY_RUN,
    REASON_QUARANTINE_LIMIT,
    NodeContext,
    PlanBuilder,
    cut,
)
from gpuaccept.operator.core.record import (
    ACCEPTED_MESSAGE,
    HELD_ACCEPT,
    HELD_QUARANTINE,
    Evidence,
    Hold,
    failing_verdict,
    judged,
    record,
)

HOLD_RETRY_SECONDS = 30.0  # a held in-service verdict looks again (the limit, the fleet)
EVENT_CLEARED = "InServiceCleared"
EVENT_SUSPECT = "InServiceSuspect"
# The checks a suspect's targeted re-verification runs (reverify.suspects): the Xid
# listener under load, and the load itself.
SUSPECT_CHECKS = ("xid_errors", "gpu_compute")
MAX_SUSPICIONS = 8
HELD_REASONS = frozenset({REASON_QUARANTINE_LIMIT, REASON_COMMON_CAUSE, REASON_DRY_RUN})


def ours(st: NodeAcceptanceStatus) -> bool:
    """The node's recorded reasons are an in-service verdict's."""
    return bool(st.reasons) and st.reasons[0].check == IN_SERVICE_CHECK


def watched(st: NodeAcceptanceStatus) -> bool:
    """A node in service whose health in service is judged: accepted, or held by a
    dry run that would accept it (or that holds an in-service verdict)."""
    if st.phase == Phase.ACCEPTED:
        return True
    return (
        st.phase == Phase.HELD
        and st.reason == REASON_DRY_RUN
        and (st.held_action == HELD_ACCEPT or ours(st))
    )


def node_signals(ctx: NodeContext) -> NodeSignals:
    node, report = ctx.node, ctx.status.report
    return NodeSignals(
        boot_id=node.boot_id,
        gpu_capacity=node.gpu_capacity,
        gpu_allocatable=node.gpus,
        conditions=node.conditions,
        accepted_gpus=report.summary.gpu_count if report is not None else 0,
    )


def _evaluation(ctx: NodeContext) -> Evaluation:
    st, obs = ctx.status, ctx.obs
    fleet = Fleet(obs.in_service_fleet, obs.limit_counts.matched + 1)
    observed = Observed(node_signals(ctx), obs.now, obs.watch_reports, ctx.node.name, fleet)
    ledger = ledger_for(st.in_service, ctx.node.boot_id, st.last_probe_time)
    return evaluate(ctx.spec.in_service, ledger, observed)


def _suspicion(suspect: InServiceSuspect) -> Suspicion:
    cause = f"in service: Xid {suspect.xid} x{suspect.count} on GPU {suspect.gpu}"
    return Suspicion(checks=list(SUSPECT_CHECKS), cause=cut(cause, 240), since=suspect.since)


def _suspicions(ctx: NodeContext, found: tuple[InServiceSuspect, ...]) -> dict[str, Any]:
    """The suspects the re-verification should confirm (``reverify.suspects``), as
    suspicions; a common cause is not the node's, and raises none."""
    spec, st = ctx.spec, ctx.status
    if not (spec.reverify.enabled and spec.reverify.suspects):
        return {}
    rv = st.reverify or ReverifyStatus()
    known = {(s.cause.split(" x", 1)[0], s.since) for s in rv.suspicions}
    new = [
        _suspicion(s)
        for s in found
        if not s.common_cause and (f"in service: Xid {s.xid}", s.since) not in known
    ]
    if not new:
        return {}
    suspicions = [*rv.suspicions, *new][-MAX_SUSPICIONS:]
    return {"reverify": rv.model_copy(update={"suspicions": suspicions})}


def plan_in_service(ctx: NodeContext, out: PlanBuilder) -> Plan | None:
    """The node's in-service step; None when it stays as it is (the rest of its
    decided phase goes on: re-verification, keeping it)."""
    st = ctx.status
    if not ctx.spec.in_service.enabled or not watched(st):
        return None
    result = _evaluation(ctx)
    if result.wake_in is not None:
        out.wake_in(result.wake_in)
    kept = st.model_copy(update={"in_service": result.ledger, **_suspicions(ctx, result.suspects)})
    inner = replace(ctx, status=kept)
    if result.verdict is not None:
        return _verdict(ctx, inner, out, result.verdict)
    if ours(st) and st.reason in HELD_REASONS:
        return _cleared(ctx, out, kept)
    if kept == st:
        return None
    out.write_status(st, kept)
    new_suspects = {s.gpu + str(s.xid) for s in result.suspects} - {
        s.gpu + str(s.xid) for s in (st.in_service.suspects if st.in_service else ())
    }
    if new_suspects:
        names = ", ".join(f"Xid {s.xid} on GPU {s.gpu}" for s in result.suspects)
        out.event(ACCEPTANCE_KIND, "Warning", EVENT_SUSPECT, f"suspected in service: {names}")
    out.ensure_node(ctx, st)
    return out.build("in service: ledger recorded")


def _verdict(
    ctx: NodeContext, inner: NodeContext, out: PlanBuilder, found: InServiceVerdict
) -> Plan:
    """``found`` through the one verdict path (dryRun, the limit), or held in service
    as a common cause."""
    st = inner.status
    reason = Reason(check=IN_SERVICE_CHECK, reason=found.reason, message=cut(found.message, 512))
    verdict = failing_verdict((reason,), checks=tuple(st.checks), figures=st.figures)
    evidence = Evidence(st.report, rejudged=True)
    if found.common_cause:
        message = f"held, not quarantined: {found.message}"
        outcome: Any = Hold(
            verdict, evidence, REASON_COMMON_CAUSE, message, HELD_QUARANTINE, in_service=True
        )
    else:
        outcome = judged(inner, verdict, evidence)
    if isinstance(outcome, Hold):
        out.wake_in(HOLD_RETRY_SECONDS)
    plan = record(inner, out, outcome)
    if inner.status != ctx.status and not any(isinstance(a, PatchNAStatus) for a in out.actions):
        out.write_status(ctx.status, inner.status)  # the ledger, when nothing else changed
        return out.build(plan.note)
    return plan


def _cleared(ctx: NodeContext, out: PlanBuilder, kept: NodeAcceptanceStatus) -> Plan:
    """A held in-service verdict whose evidence is gone: the hold is lifted, the node
    stays in service as it was accepted."""
    update: dict[str, Any] = {"reasons": [], "held_action": None, "message": ACCEPTED_MESSAGE}
    if kept.phase == Phase.ACCEPTED:
        update["reason"] = None
    else:  # held by a dry run: back to "would accept"
        update.update(held_action=HELD_ACCEPT, message="dry run: would accept")
    new = kept.model_copy(update=update)
    out.write_status(ctx.status, new)
    out.event(
        ACCEPTANCE_KIND,
        "Normal",
        EVENT_CLEARED,
        f"in-service hold lifted ({ctx.status.reason}): the evidence is gone",
    )
    out.ensure_node(ctx, new)
    return out.build("in service: hold lifted")
