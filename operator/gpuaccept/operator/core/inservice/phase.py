"""An accepted node's in-service step (pure): its ledger brought up to date, and an
in-service verdict recorded through the one verdict path.

Called from ``core/phases/decided.py`` for a node in service under a policy with
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
from datetime import datetime, timedelta
from typing import Any

from gpuaccept.checks.attribution import Attribution
from gpuaccept.checks.fencing_policy import FencingMode
from gpuaccept.contracts.api import ACCEPTANCE_KIND
from gpuaccept.contracts.inservice import (
    InService,
    InServiceStatus,
    InServiceSuspect,
)
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase, Reason
from gpuaccept.contracts.reverify import ReverifyStatus, Suspicion
from gpuaccept.operator.core.capacity import HELD_ACCEPT, HELD_QUARANTINE, REASON_DRY_RUN
from gpuaccept.operator.core.creationintent import (
    POD,
    creation_nonce,
    intended,
    intended_create,
    with_nonce,
)
from gpuaccept.operator.core.inservice.correlation import Fleet
from gpuaccept.operator.core.inservice.dra import dra_seen, unmonitored
from gpuaccept.operator.core.inservice.evidence import REASON_COMMON_CAUSE, NodeSignals
from gpuaccept.operator.core.inservice.gpufence import (
    fenced_uuids,
    in_service_attribution,
    standing_fences,
)
from gpuaccept.operator.core.inservice.rules import Evaluation, Observed, evaluate
from gpuaccept.operator.core.inservice.watchreport import watch_evidence
from gpuaccept.operator.core.model import (
    IN_SERVICE_CHECK,
    CreateProbePod,
    PatchNAStatus,
    Plan,
    PodView,
    WatchEvidence,
)
from gpuaccept.operator.core.nodecontext import (
    REASON_QUARANTINE_LIMIT,
    NodeContext,
    PlanBuilder,
    cut,
)
from gpuaccept.operator.core.podspec import WatchPodRequest, watch_pod_manifest
from gpuaccept.operator.core.record import (
    Accept,
    Evidence,
    Hold,
    failing_verdict,
    judged,
    record,
)
from gpuaccept.operator.core.transitions import hold_lifted
from gpuaccept.operator.core.watchreservation import (
    intent_on_record,
    ledger_for,
    name_taken,
    reserved,
    watch_name,
)

HOLD_RETRY_SECONDS = 30.0  # a held in-service verdict looks again (the limit, the fleet)
EVENT_SUSPECT = "InServiceSuspect"
EVENT_UNREADABLE = "WatchReportUnreadable"
EVENT_BLIND = "WatchBlind"
# GPU feature discovery: none | single | mixed (MIG devices as nvidia.com/mig-*)
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
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


def accepted_gpus(ctx: NodeContext) -> int:
    """The GPUs the node's acceptance saw through NVML (0: unknown)."""
    report = ctx.status.report
    return report.summary.gpu_count if report is not None else 0


def node_signals(ctx: NodeContext) -> NodeSignals:
    node = ctx.node
    return NodeSignals(
        boot_id=node.boot_id,
        gpu_capacity=node.gpu_capacity,
        gpu_allocatable=node.gpus,
        conditions=node.conditions,
        accepted_gpus=accepted_gpus(ctx),
        partitioned=node.labels.get(MIG_STRATEGY_LABEL) == "mixed",
        dra=dra_seen(ctx.gpus),
    )


def _evaluation(ctx: NodeContext, reports: tuple[WatchEvidence, ...]) -> Evaluation:
    st, obs = ctx.status, ctx.obs
    fleet = Fleet(obs.in_service_fleet, obs.limit_counts.matched + 1)
    found = (*obs.watch_reports, *reports)
    fenced = fenced_uuids(st.gpu_verdicts)
    observed = Observed(node_signals(ctx), obs.now, found, ctx.node.name, fleet, fenced)
    ledger = ledger_for(st.in_service, ctx.node.boot_id, st.last_probe_time)
    return evaluate(ctx.spec.in_service, ledger, observed)


def _ended_reports(
    ctx: NodeContext, out: PlanBuilder
) -> tuple[tuple[WatchEvidence, ...], tuple[PodView, ...]]:
    """The reports of the node's ended watch pods, and those pods (deleted only after
    the status that counts their reports); an unreadable one is no evidence, and a
    Warning Event says why."""
    found: list[WatchEvidence] = []
    ended: list[PodView] = []
    accept_simulated = ctx.obs.config.accept_simulated_reports
    expected = accepted_gpus(ctx) or None
    for pod in ctx.obs.pods:
        if pod.watch is None or not pod.ended:
            continue
        evidence = watch_evidence(
            pod, ctx.node, accept_simulated=accept_simulated, expected_gpus=expected
        )
        if isinstance(evidence, WatchEvidence):
            found.append(evidence)
            _blind_event(out, pod, evidence)
        elif not pod.deleting:
            out.event(ACCEPTANCE_KIND, "Warning", EVENT_UNREADABLE, f"no evidence: {evidence}")
        if not pod.deleting:
            ended.append(pod)
    return tuple(found), tuple(ended)


def _blind_event(out: PlanBuilder, pod: PodView, evidence: WatchEvidence) -> None:
    """A Warning Event for a window that could not read part of what it watches: a
    blind window is never a quiet one (the ledger's ``notRead`` keeps the latest)."""
    if evidence.not_read and not pod.deleting:
        parts = "; ".join(f"{k}: {v}" for k, v in evidence.not_read)
        out.event(ACCEPTANCE_KIND, "Warning", EVENT_BLIND, cut(f"{pod.name}: {parts}", 512))


def _seen_ended(
    ledger: InServiceStatus, ended: tuple[PodView, ...], now: datetime
) -> InServiceStatus:
    """``ledger`` with the window's pod seen ended (the next may start early)."""
    if ledger.watch_pod is None or not any(p.name == ledger.watch_pod for p in ended):
        return ledger
    return ledger.model_copy(update={"watch_ended": now})


def _then_delete(out: PlanBuilder, pods: tuple[PodView, ...], plan: Plan) -> Plan:
    """``plan`` with the ended watch pods deleted after its status write: a pod goes
    only once its report is counted (a refused write keeps it for the next pass)."""
    if not pods:
        return plan
    for pod in pods:
        out.delete_pod(pod)
    return out.build(plan.note)


def keeps_watch_pod(ctx: NodeContext, pod: PodView) -> bool:
    """A live watch pod of a node still watched: not the decided phase's to delete."""
    section = ctx.spec.in_service
    return (
        pod.watch is not None
        and section.enabled
        and section.watch_pods
        and watched(ctx.status)
        and not pod.ended
    )


def _stop_watching(ctx: NodeContext, out: PlanBuilder) -> None:
    for pod in ctx.obs.pods:
        if pod.watch is not None and not pod.deleting and not pod.ended:
            out.delete_pod(pod)


def _due(ledger: InServiceStatus, section: InService) -> tuple[datetime | None, bool]:
    """When the next watch pod may start (None: now), and whether that is early: a
    window whose pod was seen ended before its time restarts after
    ``earlyRestartSeconds``, doubled for each early start in a row, at most a window
    (a pod that is evicted or fails again and again costs one pod per window)."""
    started = ledger.watch_started
    if started is None:
        return None, False
    window = timedelta(seconds=section.window_seconds)
    ended = ledger.watch_ended
    if ended is None or ended < started or ended >= started + window:
        return started + window, False
    backoff = section.early_restart_seconds * 2 ** min(ledger.early_starts, 16)
    return started + min(window, timedelta(seconds=backoff)), True


def _watch_request(ctx: NodeContext, name: str, serial: int) -> WatchPodRequest:
    obs = ctx.obs
    return WatchPodRequest(
        name=name,
        serial=serial,
        node=ctx.node,
        policy_name=ctx.policy.name,
        spec=ctx.spec,
        owner_uid=obs.na.uid if obs.na is not None else "",
    )


def _named(ctx: NodeContext, ledger: InServiceStatus) -> InServiceStatus:
    """``ledger`` naming the watch pod created under its reserved serial (created
    before the status write that names it and records its UID: one write a window)."""
    serial = ledger.watch_serial + 1
    name = watch_name(ctx, serial)
    if not any(p.name == name and p.watch is not None for p in ctx.obs.pods):
        return ledger
    _, early = _due(ledger, ctx.spec.in_service)
    update = {
        "watch_serial": serial,
        "watch_pod": name,
        "watch_started": ctx.obs.now,
        "watch_ended": None,
        "early_starts": ledger.early_starts + 1 if early else 0,
    }
    return ledger.model_copy(update=update)


def _reserved(ctx: NodeContext, st: NodeAcceptanceStatus) -> NodeAcceptanceStatus:
    """``st`` with the next watch pod's serial reserved while a window is under way
    (core/watchreservation.py; the first window's is the verdict's)."""
    ledger = st.in_service
    if ledger is None or ledger.watch_pod is None:
        return st
    return reserved(ctx, st)


def _reserved_create(ctx: NodeContext, ledger: InServiceStatus) -> CreateProbePod | None:
    """The create of the next watch pod under its reserved serial, when this process
    recorded its intent (its nonce matches) and the name was never tried: no status
    write before it. Else None (the name is passed over: :func:`_free_serial`)."""
    serial = ledger.watch_serial + 1
    name = watch_name(ctx, serial)
    nonce = creation_nonce(ctx.obs.nonce_seed, POD, name)
    st = ctx.status
    if not intended(st.creation_intents, POD, name, nonce) or name_taken(ctx, name):
        return None
    manifest = watch_pod_manifest(_watch_request(ctx, name, serial), ctx.obs.config)
    return CreateProbePod(name, with_nonce(manifest, nonce))


def _free_serial(ctx: NodeContext, st: NodeAcceptanceStatus, serial: int) -> int:
    """The first serial from ``serial`` whose name no intent on record holds (an
    earlier process's reservation, a pod it may have made) and no pod or unanswered
    create took: a serial is never used twice."""
    while intent_on_record(st, watch_name(ctx, serial)) or name_taken(ctx, watch_name(ctx, serial)):
        serial += 1
    return serial


def _created_first(ctx: NodeContext, out: PlanBuilder, create: CreateProbePod) -> Plan:
    """The pod under its reserved serial, alone: the next pass writes the ledger
    (the ended pod's report), the new pod's UID and the next reservation in one
    status write, then deletes the ended pod. A restart in between finds the pod
    with the intent's nonce and no UID on record: deleted unread
    (core/creationintent.py)."""
    alone = PlanBuilder(ctx.obs)
    alone.remove_annotation = out.remove_annotation
    alone.actions.append(create)
    return alone.build("in service: watch pod created under its reserved serial")


def _next_watch(
    ctx: NodeContext, out: PlanBuilder, st: NodeAcceptanceStatus
) -> tuple[NodeAcceptanceStatus, CreateProbePod | None, CreateProbePod | None]:
    """``st`` with the next watch pod reserved, and its create when none is live and
    its window is due (:func:`_due`): third, when its intent was recorded with the
    last window's ledger under this process's nonce (it goes before any status
    write); second, after the status that names the pod and records its intent (the
    first window, and the first after a restart)."""
    section, obs, ledger = ctx.spec.in_service, ctx.obs, st.in_service
    if not section.watch_pods or ledger is None:
        _stop_watching(ctx, out)
        return st, None, None
    if any(p.watch is not None and not p.ended and not p.deleting for p in obs.pods):
        return _reserved(ctx, st), None, None
    due, early = _due(ledger, section)
    if due is not None and obs.now < due:
        out.wake_in((due - obs.now).total_seconds())
        return _reserved(ctx, st), None, None
    reserved = _reserved_create(ctx, ledger)
    if reserved is not None:
        return st, None, reserved
    serial = _free_serial(ctx, st, ledger.watch_serial + 1)
    name = watch_name(ctx, serial)
    update = {
        "watch_serial": serial,
        "watch_pod": name,
        "watch_started": obs.now,
        "early_starts": ledger.early_starts + 1 if early else 0,
    }
    watching = st.model_copy(update={"in_service": ledger.model_copy(update=update)})
    manifest = watch_pod_manifest(_watch_request(ctx, name, serial), obs.config)
    named, create = intended_create(watching, obs.nonce_seed, name, manifest)
    return named, create, None


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
    reports, ended = _ended_reports(ctx, out)
    result = _evaluation(ctx, reports)
    _unmonitored_event(out, st.in_service, result.ledger)
    if result.wake_in is not None:
        out.wake_in(result.wake_in)
    ledger = _seen_ended(_named(ctx, result.ledger), ended, ctx.obs.now)
    kept = st.model_copy(update={"in_service": ledger, **_suspicions(ctx, result.suspects)})
    # a pending verdict (evidence newer than correlation.settleSeconds) is recorded in
    # the ledger only: the node stays as it is until it settles (result.wake_in)
    pending = result.verdict is not None and result.verdict.pending
    if result.verdict is not None and not pending:
        plan = _verdict(ctx, replace(ctx, status=kept), out, result)
        return _then_delete(out, ended, plan)
    if not pending and ours(st) and st.reason in HELD_REASONS:
        return _then_delete(out, ended, hold_lifted(ctx, out, kept))
    kept, create, reserved = _next_watch(ctx, out, kept)
    if reserved is not None:
        return _created_first(ctx, out, reserved)
    if kept == st and not out.actions and not ended:
        return None
    out.write_status(st, kept)
    if create is not None:
        out.actions.append(create)
    _suspect_event(out, st, result.suspects)
    out.ensure_node(ctx, st)
    return _then_delete(out, ended, out.build("in service: ledger recorded"))


def _unmonitored_event(
    out: PlanBuilder, before: InServiceStatus | None, after: InServiceStatus
) -> None:
    """A Warning Event for the GPUs the DRA driver newly says it does not watch (its
    taint ``<driver>/unmonitored``): their Xids are evidence not read, never quiet."""
    known = {(r.gpu, r.key, r.since) for r in (before.driver_taints if before else ())}
    new = [r for r in after.driver_taints if (r.gpu, r.key, r.since) not in known]
    gpus = unmonitored(new)
    if gpus:
        message = (
            f"the DRA driver does not watch the health of GPU(s) {', '.join(gpus)} "
            "(taint unmonitored): their Xids are not read"
        )
        out.event(ACCEPTANCE_KIND, "Warning", EVENT_BLIND, cut(message, 512))


def _suspect_event(
    out: PlanBuilder, st: NodeAcceptanceStatus, found: tuple[InServiceSuspect, ...]
) -> None:
    before = {(s.gpu, s.xid) for s in (st.in_service.suspects if st.in_service else ())}
    new = [s for s in found if (s.gpu, s.xid) not in before]
    if new:
        names = ", ".join(f"Xid {s.xid} x{s.count} on GPU {s.gpu}" for s in new)
        out.event(ACCEPTANCE_KIND, "Warning", EVENT_SUSPECT, f"suspected in service: {names}")


def _attribution(ctx: NodeContext, result: Evaluation) -> Attribution:
    """Whose the verdict's findings are under ``fencing.mode: gpu`` (the GPUs to fence,
    those fenced already kept: core/inservice/gpufence.py); the node's otherwise, the
    fences that stand carried (a hold leaves them, a quarantine ends them)."""
    report, found = ctx.status.report, result.verdict
    common = found is not None and found.common_cause
    if ctx.spec.fencing.mode is not FencingMode.GPU or report is None or common:
        return standing_fences(ctx.status.gpu_verdicts)
    uuids = report.summary.gpu_uuids or []
    return in_service_attribution(result.findings, ctx.status.gpu_verdicts, uuids)


def _verdict(ctx: NodeContext, inner: NodeContext, out: PlanBuilder, result: Evaluation) -> Plan:
    """The verdict of ``result`` through the one verdict path (dryRun, the limit, a
    fence of single GPUs under ``fencing.mode: gpu``), or held in service as a common
    cause. The watch stops unless the node stays in service with GPUs fenced (the
    watch goes on for its other GPUs)."""
    st = inner.status
    found = result.verdict
    assert found is not None
    reason = Reason(check=IN_SERVICE_CHECK, reason=found.reason, message=cut(found.message, 512))
    verdict = replace(
        failing_verdict((reason,), checks=tuple(st.checks), figures=st.figures),
        attribution=_attribution(inner, result),
    )
    evidence = Evidence(st.report, rejudged=True)
    if found.common_cause:
        message = f"held, not quarantined: {found.message}"
        outcome: Any = Hold(
            verdict, evidence, REASON_COMMON_CAUSE, message, HELD_QUARANTINE, in_service=True
        )
    else:
        outcome = judged(inner, verdict, evidence)
    if not (isinstance(outcome, Accept) and outcome.fenced):
        _stop_watching(ctx, out)
    if isinstance(outcome, Hold):
        out.wake_in(HOLD_RETRY_SECONDS)
    plan = record(inner, out, outcome)
    if inner.status != ctx.status and not any(isinstance(a, PatchNAStatus) for a in out.actions):
        out.write_status(ctx.status, inner.status)  # the ledger, when nothing else changed
        return out.build(plan.note)
    return plan
