"""Recording an outcome (pure): the one path from what a phase concluded about a
node to its NodeAcceptance status, the Node's desired state and the Events.

A phase builds an :data:`Outcome` and hands it to :func:`record`:

* :class:`Accept`, :class:`Quarantine`, :class:`Hold`: a verdict, after dryRun and
  the quarantine limit (:func:`judged` turns a :class:`~gpuaccept.checks.verdict.Verdict`
  into one of these; a phase with its own reason to hold builds a ``Hold``);
* :class:`EnterFabric`: the single-node checks passed, the fabric test comes next;
* :class:`Wait`: no verdict, and nothing against the node: it stays in its phase
  under a reason (a fabric test without a partner, held by the policy).

:func:`attempt_failed` is the one outcome of an attempt without a trustworthy
report: retry with backoff, and a ``ProbeError`` verdict once the retries are
spent. Nothing here ever accepts a node on an error.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Literal, assert_never

from gpuaccept.checks.remeasure import probed_sections
from gpuaccept.checks.verdict import Verdict
from gpuaccept.contracts.api import ACCEPTANCE_KIND
from gpuaccept.contracts.nodeacceptance import (
    MAX_NODE_GPUS,
    CheckSummary,
    FabricStatus,
    GpuVerdict,
    KeyFigures,
    NodeAcceptanceStatus,
    Phase,
    Reason,
)
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core.acceptance_gate import fabric_still_to_pass
from gpuaccept.operator.core.capacity import (
    HELD_ACCEPT,
    HELD_FABRIC,
    HELD_QUARANTINE,
    REASON_DRY_RUN,
    TakeOutDecision,
    in_service,
    node_gpu_count,
    out_of_service,
    take_out_allowed,
    window_gpus,
)
from gpuaccept.operator.core.fencerules import HELD_FENCE, fence_targets
from gpuaccept.operator.core.fencing import (
    REASON_FENCING_UNAVAILABLE,
    FencingDecision,
    fencing_decision,
    gpu_names,
    new_fences,
    with_standing_fences,
)
from gpuaccept.operator.core.history import (
    Recorded,
    against_history,
    history_events,
    history_fields,
    keeps_evidence,
    reverifying,
)
from gpuaccept.operator.core.model import IN_SERVICE_CHECK, Plan, PodView
from gpuaccept.operator.core.nodecontext import (
    REASON_PROBE_ERROR,
    REASON_QUARANTINE_LIMIT,
    NodeContext,
    PlanBuilder,
    cut,
    reasons_message,
)
from gpuaccept.operator.core.offenders import (
    REASON_REPEATED_FENCE,
    REPEAT_CHECK,
    last_release,
    repeat_fence,
)
from gpuaccept.operator.core.watchreservation import first_window

REASON_FABRIC_WAITING = "FabricPending"
ACCEPTED_MESSAGE = "all required checks passed"
MAX_REASONS = 32


@dataclass(frozen=True)
class Evidence:
    """What a judgement rests on."""

    report: ProbeReport | None = None  # the report judged; None for an error verdict
    rejudged: bool = False  # a stored report judged again (no new probe)
    pod: PodView | None = None  # the attempt's pod, deleted once the verdict is recorded
    fabric: FabricStatus | None = None  # a fabric verdict: the pair record it rests on

    @property
    def new_probe(self) -> bool:
        """A single-node run of this round is behind the verdict."""
        return not self.rejudged and self.fabric is None


@dataclass(frozen=True)
class Accept:
    verdict: Verdict
    evidence: Evidence
    message: str = ACCEPTED_MESSAGE
    # Accepted with these GPUs fenced (core/fencing.py, core/fencerules.py): the
    # verdict failed on them alone, and each is taken out by its DeviceTaintRule.
    fenced: tuple[GpuVerdict, ...] = ()


@dataclass(frozen=True)
class Quarantine:
    verdict: Verdict
    evidence: Evidence
    reason: str  # the first reason's word (the condition's and the column's)
    summary: str  # every reason, for the message and the Events
    # The UUIDs of the GPUs whose fence this quarantine takes the place of (a repeat
    # offender's, RepeatedFence): the fence history counts them.
    escalated: tuple[str, ...] = ()


@dataclass(frozen=True)
class Hold:
    """A verdict held back: recorded, its action (:data:`HELD_ACCEPT` or
    :data:`HELD_QUARANTINE`) not taken (dryRun, the quarantine limit)."""

    verdict: Verdict
    evidence: Evidence
    reason: str
    message: str
    action: str
    # Held in service: an accepted node the limit keeps as it is (phase Accepted, no
    # taint), its would-be action recorded; otherwise phase Held.
    in_service: bool = False


@dataclass(frozen=True)
class EnterFabric:
    verdict: Verdict
    evidence: Evidence


@dataclass(frozen=True)
class Wait:
    """No verdict and no conviction: the node keeps its phase under ``reason``."""

    reason: str
    message: str
    fabric: FabricStatus | None
    note: str


Outcome = Accept | Quarantine | Hold | EnterFabric | Wait
VerdictOutcome = Accept | Quarantine | Hold | EnterFabric


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


def judged(
    ctx: NodeContext,
    verdict: Verdict,
    evidence: Evidence,
    *,
    accept_message: str = ACCEPTED_MESSAGE,
) -> VerdictOutcome:
    """The outcome of ``verdict``: the fabric test next, or the verdict under dryRun
    and the limit (:func:`~gpuaccept.operator.core.capacity.take_out_allowed`)."""
    st = ctx.status
    verdict = against_history(ctx, verdict, evidence.report, new_evidence=not evidence.rejudged)
    if (
        verdict.accepted
        and evidence.fabric is None
        and fabric_still_to_pass(
            fabric_enabled=ctx.spec.fabric.enabled, new_probe=evidence.new_probe, fabric=st.fabric
        )
    ):
        return _enter_fabric(ctx, verdict, evidence)
    summary = reasons_message(list(verdict.reasons)[:MAX_REASONS])
    verdict = _with_untested_fences(ctx, verdict, evidence)
    fencing = fencing_decision(verdict, ctx.spec.fencing, ctx.gpus.mode)
    unavailable = _fence_unavailable(ctx, fencing)
    repeat = None if unavailable else _repeat_fence(ctx, fencing.fence)
    if fencing.fence and not unavailable and repeat is None:
        return _fence(ctx, verdict, evidence, fencing.fence, summary)
    escalated: tuple[str, ...] = ()
    if repeat is not None:  # a repeat offender's fence: the node is quarantined instead
        verdict, summary, escalated = _escalated(ctx, verdict, fencing.fence, repeat, summary)
    else:
        summary = _not_fenced(fencing, unavailable, summary)
    if ctx.spec.dry_run:
        if verdict.accepted:
            return Hold(verdict, evidence, REASON_DRY_RUN, "dry run: would accept", HELD_ACCEPT)
        message = f"dry run: would quarantine: {summary}"
        return Hold(verdict, evidence, REASON_DRY_RUN, message, HELD_QUARANTINE)
    if verdict.accepted:
        return Accept(verdict, evidence, accept_message)
    main = verdict.reasons[0].reason if verdict.reasons else REASON_PROBE_ERROR
    if unavailable:
        main = REASON_FENCING_UNAVAILABLE
    # Already quarantined under this policy: no new slot is taken. Under
    # another policy (the node was relabelled), it takes one here.
    decision = take_out_now(ctx)
    if decision.allowed:
        return Quarantine(verdict, evidence, main, summary, escalated)
    message = f"quarantine limit: {decision.why}; would quarantine: {summary}"
    return Hold(
        verdict, evidence, REASON_QUARANTINE_LIMIT, message, HELD_QUARANTINE, in_service(st)
    )


def _not_fenced(fencing: FencingDecision, unavailable: str, summary: str) -> str:
    """The summary of a verdict that fences nothing: why not, where it would have."""
    if unavailable:
        return f"would fence {gpu_names(fencing.fence)}, but {unavailable}: {summary}"
    if fencing.why_node:
        return f"{cut(summary, 700)}; not fenced: {fencing.why_node}"
    return summary


def _escalated(
    ctx: NodeContext, verdict: Verdict, fence: tuple[GpuVerdict, ...], repeat: str, summary: str
) -> tuple[Verdict, str, tuple[str, ...]]:
    """A repeat offender's fence (:func:`_repeat_fence`) as the node's verdict: reason
    ``RepeatedFence`` first, its summary, and the UUIDs of the GPUs it would have newly
    fenced (for the fence history)."""
    added = new_fences(ctx.status.gpu_verdicts, fence)
    why = Reason(check=REPEAT_CHECK, reason=REASON_REPEATED_FENCE, message=cut(repeat, 512))
    summary = f"{repeat}; would fence {gpu_names(fence)}: {cut(summary, 300)}"
    uuids = tuple(g.uuid for g in added if g.uuid)
    return replace(verdict, reasons=(why, *verdict.reasons)), summary, uuids


def _with_untested_fences(ctx: NodeContext, verdict: Verdict, evidence: Evidence) -> Verdict:
    """A failing verdict of a targeted re-verification (a new report of some checks
    only) with the fences that stand beside its own GPUs: the round did not re-test
    them, so they stay, and its decision counts them against ``maxFencedGpus`` (as an
    in-service verdict does: core/inservice/gpufence.py). A full probe, or a re-judge of
    the stored report, decides the fences on its own."""
    round_ = reverifying(ctx.status)
    if verdict.accepted or round_ is None or not round_.checks or not evidence.new_probe:
        return verdict
    joined = with_standing_fences(verdict.attribution, ctx.status.gpu_verdicts)
    return replace(verdict, attribution=joined)


def _repeat_fence(ctx: NodeContext, fence: tuple[GpuVerdict, ...]) -> str | None:
    """Why fencing ``fence`` quarantines the node instead (None: it does not): a GPU it
    newly fences is a repeat offender (core/offenders.py ``repeat_fence``)."""
    added = new_fences(ctx.status.gpu_verdicts, fence)
    if not added:
        return None
    st = ctx.status
    history = st.reverify.gpu_fences if st.reverify is not None else []
    uuids = [g.uuid for g in added if g.uuid]
    return repeat_fence(uuids, history, last_release(st), ctx.spec.repeat_offenders, ctx.obs.now)


def _fence_unavailable(ctx: NodeContext, fencing: FencingDecision) -> str:
    """Why a decision to fence cannot be carried out on this node now ("" when it can):
    the API server serves no DeviceTaintRules, or refused this node's last rule write
    (RBAC, an admission policy), or a GPU to fence is not a device of the node's
    complete pools (no UUID reported, or none published under it)."""
    if not fencing.fence:
        return ""
    if not ctx.obs.config.device_taint_rules:
        return (
            "this API server does not serve resource.k8s.io/v1 devicetaintrules "
            "(KEP-5055), so the node is quarantined"
        )
    if ctx.obs.fence_rule_write_error:
        return (
            f"the API server refused its DeviceTaintRule ({ctx.obs.fence_rule_write_error}), "
            "so the node is quarantined"
        )
    pools = ctx.gpus.pools
    lost = [g for g in fencing.fence if not g.uuid or not fence_targets(g.uuid, pools)]
    if lost:
        return (
            f"{gpu_names(tuple(lost))} is not one device of the node's ResourceSlices, "
            "so the node is quarantined"
        )
    return ""


def _fence(
    ctx: NodeContext,
    verdict: Verdict,
    evidence: Evidence,
    gpus: tuple[GpuVerdict, ...],
    summary: str,
) -> VerdictOutcome:
    """Accepted with ``gpus`` fenced, after dryRun (a rule of effect None, the fence
    held) and the limit (the fenced GPUs counted as GPUs out of service)."""
    st = ctx.status
    names = gpu_names(gpus)
    if ctx.spec.dry_run:
        message = f"dry run: would fence {names}: {summary}"
        return Hold(verdict, evidence, REASON_DRY_RUN, message, HELD_FENCE)
    decision = take_out_now(ctx, fence=gpus)
    if not decision.allowed:
        message = f"quarantine limit: {decision.why}; would fence {names}: {summary}"
        return Hold(verdict, evidence, REASON_QUARANTINE_LIMIT, message, HELD_FENCE, in_service(st))
    return Accept(verdict, evidence, f"fenced {names}: {summary}", fenced=gpus)


def fence_window_gpus(ctx: NodeContext, new: int) -> int:
    """This node's take-outs in the rate's window once a fence takes ``new`` more of its
    GPUs out: its earlier take-out within the window (capacity.window_gpus: the whole
    node, or its earlier fences) and these, never more than its GPUs."""
    st = ctx.status
    total = node_gpu_count(ctx.node) or ctx.gpus.physical_gpus or MAX_NODE_GPUS
    since = ctx.obs.now - timedelta(seconds=ctx.spec.quarantine_rate.window_seconds)
    recent = st.taken_out_time is not None and st.taken_out_time >= since
    earlier = window_gpus(st, total) if recent else 0
    return min(earlier + new, total)


def take_out_now(
    ctx: NodeContext, *, fence: tuple[GpuVerdict, ...] | None = None
) -> TakeOutDecision:
    """The limit's answer for taking this node out of service now (``fence``: only those
    GPUs, the node's fences after it). A node already counted out of service under this
    policy takes no new slot (quarantined, or taken out for this round; for a fence, no
    GPU that is not fenced already); under another policy (relabelled) it takes one
    here. A fence asks the rate for the GPUs it adds to the node's take-outs within the
    window (:func:`fence_window_gpus`), not for the fences that stand."""
    st = ctx.status
    counts = ctx.obs.limit_counts
    added = new_fences(st.gpu_verdicts, fence or ())
    if counts.matched_gpus is not None:  # lost capacity in GPUs: this node's, or the fence's
        node_gpus = node_gpu_count(ctx.node) or ctx.gpus.physical_gpus
        counts = replace(
            counts,
            asked_gpus=len(fence or ()) or node_gpus or None,
            asked_recent_gpus=fence_window_gpus(ctx, len(added)) if fence else None,
        )
    mine = st.policy == ctx.policy.name
    already = not added if fence is not None else out_of_service(st)
    return take_out_allowed(
        ctx.spec,
        counts,
        ceiling=ctx.obs.config.max_unavailable_ceiling,
        already_out=already and mine,
        new_take_out=in_service(st),
    )


def _enter_fabric(ctx: NodeContext, verdict: Verdict, evidence: Evidence) -> VerdictOutcome:
    """The fabric test next; for a node in service (a re-judge), only if the limit
    lets it go out of service for it, else it stays in service, the test deferred."""
    if not in_service(ctx.status) or ctx.spec.dry_run:
        return EnterFabric(verdict, evidence)
    decision = take_out_now(ctx)
    if decision.allowed:
        return EnterFabric(verdict, evidence)
    message = f"quarantine limit: {decision.why}; the fabric test waits"
    return Hold(verdict, evidence, REASON_QUARANTINE_LIMIT, message, HELD_FABRIC, True)


def record_verdict(
    ctx: NodeContext, out: PlanBuilder, verdict: Verdict, evidence: Evidence
) -> Plan:
    """Record ``verdict`` on ``evidence`` (its :func:`judged` outcome)."""
    return record(ctx, out, judged(ctx, verdict, evidence))


def record(ctx: NodeContext, out: PlanBuilder, outcome: Outcome) -> Plan:
    """The status, the Node's desired state and the Events for ``outcome``."""
    if isinstance(outcome, Wait):
        return _record_wait(ctx, out, outcome)
    st, evidence = ctx.status, outcome.evidence
    phase, reason, message, held_action = _phase_of(outcome)
    if (
        isinstance(outcome, Quarantine)
        or (isinstance(outcome, Hold) and outcome.reason == REASON_QUARANTINE_LIMIT)
        or (isinstance(outcome, EnterFabric) and in_service(st))
        or (isinstance(outcome, Accept) and outcome.fenced)  # its GPUs take a share
    ):
        out.needs_limit_lock = True  # takes (or is refused) a slot under the limit
    update = {
        "phase": phase,
        "reason": reason,
        "message": cut(message, 1000),
        "reasons": _reasons(outcome.verdict),
        "held_action": held_action,
        **_evidence_fields(ctx, outcome),
        **_service_fields(ctx, outcome),
        **history_fields(ctx, _recorded(st, outcome, phase, reason)),
    }
    # an acceptance into service starts the in-service ledger and reserves the first
    # watch pod's serial in this write (the pod's create needs none of its own)
    new = first_window(ctx, ctx.with_applied_keys(ctx.stamped(st, **update)))
    out.write_status(st, new)
    if (new.phase, new.reason) != (st.phase, st.reason):
        _events(out, new, outcome)
    history_events(out, st, new)
    out.ensure_node(ctx, new)
    pod = evidence.pod
    if pod is not None and not pod.deleting:
        out.delete_pod(pod)
    if evidence.fabric is not None:
        return out.build(f"fabric verdict {new.phase.value}")
    return out.build(f"verdict {new.phase.value}{' (rejudged)' if evidence.rejudged else ''}")


def _phase_of(outcome: VerdictOutcome) -> tuple[Phase, str | None, str, str | None]:
    """(phase, reason, message, held action) that ``outcome`` records."""
    if isinstance(outcome, Accept):
        return Phase.ACCEPTED, None, outcome.message, None
    if isinstance(outcome, Quarantine):
        return Phase.QUARANTINED, outcome.reason, outcome.summary, None
    if isinstance(outcome, Hold):
        phase = Phase.ACCEPTED if outcome.in_service else Phase.HELD
        return phase, outcome.reason, outcome.message, outcome.action
    if isinstance(outcome, EnterFabric):  # passed the single-node checks
        message = "passed the single-node checks; waiting for a fabric pair"
        return Phase.FABRIC, REASON_FABRIC_WAITING, message, None
    assert_never(outcome)


def _recorded(
    st: NodeAcceptanceStatus, outcome: VerdictOutcome, phase: Phase, reason: str | None
) -> Recorded:
    evidence = outcome.evidence
    fabric = evidence.fabric.busbw_gbps if evidence.fabric is not None else None
    return Recorded(
        phase=phase,
        reason=reason,
        accepted=isinstance(outcome, Accept) and not outcome.fenced,
        report=evidence.report,
        fabric_busbw=fabric if isinstance(outcome, Accept) else None,
        compare=not evidence.rejudged,
        fenced=_fenced_now(st, outcome),
    )


def _fenced_now(st: NodeAcceptanceStatus, outcome: VerdictOutcome) -> tuple[str, ...]:
    """The UUIDs of the GPUs ``outcome`` fences that were not fenced, or whose fence its
    quarantine takes the place of (a repeat offender's: the verdict's, or, for such a
    quarantine the limit held and applies now, the GPUs the held verdict would have
    fenced, unfenced in ``st``)."""
    if isinstance(outcome, Accept):
        return tuple(g.uuid for g in new_fences(st.gpu_verdicts, outcome.fenced) if g.uuid)
    if not isinstance(outcome, Quarantine) or outcome.reason != REASON_REPEATED_FENCE:
        return ()
    if outcome.escalated:
        return outcome.escalated
    if st.reason == REASON_QUARANTINE_LIMIT and st.held_action == HELD_QUARANTINE:
        return tuple(g.uuid for g in st.gpu_verdicts if g.uuid and not g.fenced)
    return ()


def _reasons(verdict: Verdict) -> list[Reason]:
    reasons = list(verdict.reasons)[:MAX_REASONS]
    if not reasons and not verdict.accepted:
        reasons = [Reason(check="probe", reason=REASON_PROBE_ERROR, message="no reason given")]
    return reasons


def _evidence_fields(ctx: NodeContext, outcome: VerdictOutcome) -> dict[str, Any]:
    """The status fields the evidence behind ``outcome`` sets."""
    verdict, evidence = outcome.verdict, outcome.evidence
    if evidence.fabric is not None:  # a fabric verdict: the round's probe stays on record
        return {"fabric": evidence.fabric}
    report, pod = evidence.report, evidence.pod
    update: dict[str, Any] = {
        "rejudged": evidence.rejudged,
        "probe_pod": None,
        "probe_started_time": None,
        "next_attempt_time": None,
    }
    if keeps_evidence(ctx.status, verdict.accepted):  # a targeted re-probe passed
        return update
    if not evidence.rejudged:
        update["last_probe_time"] = ctx.obs.now
        update["probed_boot_id"] = report.boot_id if report is not None else ctx.node.boot_id
        # The report this verdict came from; an error verdict has none. Keeping
        # an older one would let a later re-judge accept on stale evidence.
        update["report"] = report
        # The policy sections it was measured under, for a later re-judge.
        update["probed_sections"] = probed_sections(ctx.spec.probe) if report is not None else None
        # The kubelet's view of the probe's run (None for a pod that never ran).
        update["probe_pod_seconds"] = pod.run_seconds if pod is not None else None
        update["gpu_verdicts"] = []  # an error verdict names no GPU
        update["fenced"] = None
    if verdict.checks or report is not None:
        update["checks"] = list(verdict.checks)[:MAX_REASONS]
    if report is not None:  # the figures of the report judged (an error verdict has none)
        update["figures"] = verdict.figures
    if report is not None or isinstance(outcome, Hold):  # a held error keeps the fences
        update.update(_fence_fields(ctx, outcome))
    if isinstance(outcome, EnterFabric):
        update["fabric"] = FabricStatus(waiting_since=ctx.obs.now, summary="waiting")
    return update


def _fence_fields(ctx: NodeContext, outcome: VerdictOutcome) -> dict[str, Any]:
    """The per-GPU verdicts of the verdict, those fenced marked, and the FENCED column
    (fenced of the node's GPUs, e.g. 1/8; absent when none is). A GPU the verdict
    carries as fenced already (an in-service verdict keeps the fences that stand:
    core/inservice/gpufence.py) stays fenced, unless the node is quarantined. A held
    verdict (dryRun, the limit) changes no fence: every GPU fenced in the status stays
    fenced, whatever the verdict held would do."""
    fenced = outcome.fenced if isinstance(outcome, Accept) else ()
    found = list(outcome.verdict.attribution.gpus)
    standing = _kept_fences(ctx.status, outcome)
    seen = {g.index for g in found}
    found += [g for g in standing if g.index not in seen]
    indices = {g.index for g in (*fenced, *standing)}
    gpus = [
        g.model_copy(update={"fenced": g.index in indices or g.fenced})
        if not isinstance(outcome, Quarantine)
        else g.model_copy(update={"fenced": False})
        for g in sorted(found, key=lambda g: g.index)
    ]
    count = sum(g.fenced for g in gpus)
    total = node_gpu_count(ctx.node) or ctx.gpus.physical_gpus
    return {"gpu_verdicts": gpus, "fenced": f"{count}/{total}" if count else None}


def _kept_fences(st: NodeAcceptanceStatus, outcome: VerdictOutcome) -> list[GpuVerdict]:
    """The GPUs fenced in ``st`` that stay fenced whatever ``outcome``'s verdict says
    (unless it quarantines the node): all of them under a held verdict, the in-service
    fences under a re-judge of the stored report, none under a new probe's verdict."""
    if isinstance(outcome, Hold):
        return [g for g in st.gpu_verdicts if g.fenced]
    if outcome.evidence.rejudged:  # the stored report knows no in-service fence
        return _in_service_fences(st)
    return []


def _in_service_fences(st: NodeAcceptanceStatus) -> list[GpuVerdict]:
    """The GPUs fenced in service (core/inservice/gpufence.py): a re-judge of the stored
    report keeps them; only a new probe (or the node's quarantine) ends them."""
    return [g for g in st.gpu_verdicts if g.fenced and IN_SERVICE_CHECK in g.checks]


def _service_fields(ctx: NodeContext, outcome: VerdictOutcome) -> dict[str, Any]:
    """Whether the node counts as out of service after ``outcome``, and when
    gpuaccept last took it out (the rate's window): a quarantine or a fabric test of a
    node in service as the whole node, a fence of GPUs in service as those GPUs."""
    st = ctx.status
    if isinstance(outcome, Accept):
        added = new_fences(st.gpu_verdicts, outcome.fenced)
        if not (added and in_service(st)):
            return {"was_in_service": False}
        # a fence of GPUs in service: counted in the rate's window as those GPUs
        gpus = fence_window_gpus(ctx, len(added))
        return {"was_in_service": False, "taken_out_time": ctx.obs.now, "taken_out_gpus": gpus}
    taken_out = isinstance(outcome, Quarantine | EnterFabric) and in_service(st)
    if not taken_out:
        return {}
    return {"taken_out_time": ctx.obs.now, "taken_out_gpus": None, "was_in_service": True}


def _events(out: PlanBuilder, new: NodeAcceptanceStatus, outcome: VerdictOutcome) -> None:
    """The Events of a newly recorded phase or reason."""
    message = new.message or ""
    if isinstance(outcome, EnterFabric):
        out.event(ACCEPTANCE_KIND, "Normal", REASON_FABRIC_WAITING, message)
    elif isinstance(outcome, Accept):
        out.event(ACCEPTANCE_KIND, "Normal", "Accepted", message)
    elif isinstance(outcome, Quarantine):
        text = f"quarantined ({outcome.reason}): {outcome.summary}"
        out.event("Node", "Warning", "Quarantined", text)
        out.event(ACCEPTANCE_KIND, "Warning", "Quarantined", text)
    elif isinstance(outcome, Hold) and outcome.reason == REASON_DRY_RUN:
        etype: Literal["Normal", "Warning"] = "Normal" if outcome.verdict.accepted else "Warning"
        out.event(ACCEPTANCE_KIND, etype, REASON_DRY_RUN, message)
    elif isinstance(outcome, Hold):
        out.event("Node", "Warning", outcome.reason, message)
        out.event(ACCEPTANCE_KIND, "Warning", outcome.reason, message)
    else:
        assert_never(outcome)


def _record_wait(ctx: NodeContext, out: PlanBuilder, wait: Wait) -> Plan:
    st = ctx.status
    update: dict[str, Any] = {"reason": wait.reason, "message": cut(wait.message, 1000)}
    if wait.fabric is not None:
        update["fabric"] = wait.fabric
    waiting = ctx.stamped(st, **update)
    if waiting != ctx.stamped(st):
        out.write_status(st, waiting)
        if st.reason != wait.reason:
            out.event(ACCEPTANCE_KIND, "Warning", wait.reason, wait.message)
    out.ensure_node(ctx, st)
    return out.build(wait.note)


def attempt_failed(
    ctx: NodeContext, out: PlanBuilder, *, reason: str, message: str, pod: PodView | None
) -> Plan:
    """An attempt failed without a trustworthy report: retry, then ProbeError."""
    st, spec = ctx.status, ctx.spec
    if st.attempts >= spec.probe_run.retries + 1:
        error = Reason(
            check="probe", reason=REASON_PROBE_ERROR, message=cut(f"{reason}: {message}", 500)
        )
        return record_verdict(ctx, out, failing_verdict((error,)), Evidence(pod=pod))
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
