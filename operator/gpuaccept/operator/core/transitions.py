"""The transitions of a node's status that are not a verdict (pure), beside
:mod:`.record` (the verdicts) in the record layer: every change of a node's phase
goes through one of the two.

* :func:`new_round`: start over (Pending), or, for a node in service the limit
  will not let go, the round deferred (:func:`_deferred_round`);
* :func:`give_up`: a re-verification that cannot run for a reason that is not the
  node's goes back to service as it was accepted, its old evidence intact;
* :func:`released`: a person's release (phase Released);
* :func:`hold_lifted`: a held in-service verdict whose evidence is gone is lifted,
  the node stays in service as it was accepted;
* the moves between Pending, Probing, Waiting and Stalled: :func:`probe_started`
  (an attempt on record), :func:`blocked_waits` (not the node's fault),
  :func:`cordoned`, :func:`waiting_for_gpus`, :func:`stalled`, and :func:`opted_out`
  (a probe under way abandoned).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from gpuaccept.contracts.api import ACCEPTANCE_KIND, REPROBE_ANNOTATION
from gpuaccept.contracts.nodeacceptance import (
    Condition,
    GpuPublishing,
    NodeAcceptanceStatus,
    Phase,
    ReleaseRecord,
)
from gpuaccept.contracts.reverify import ReverifyStatus
from gpuaccept.operator.core.capacity import HELD_ACCEPT, REASON_QUARANTINE_LIMIT, in_service
from gpuaccept.operator.core.creationintent import POD, creation_nonce, intend
from gpuaccept.operator.core.draclaim import RESOURCE_CLAIM
from gpuaccept.operator.core.model import Plan
from gpuaccept.operator.core.nodecontext import NodeContext, PlanBuilder, cut
from gpuaccept.operator.core.record import ACCEPTED_MESSAGE, take_out_now

HELD_REPROBE = "Reprobe"  # a new round of an in-service node, deferred by the limit
DEFERRED_RETRY_SECONDS = 30
DECIDED = frozenset({Phase.ACCEPTED, Phase.QUARANTINED, Phase.HELD})
EVENT_GAVE_UP = "ReverifyGaveUp"
REASON_RELEASED = "Released"
EVENT_CLEARED = "InServiceCleared"


def _deferred_round(ctx: NodeContext, out: PlanBuilder, message: str, why: str) -> Plan:
    """A new round of a node in service that the limit holds back: the node stays
    as it is (in service, untouched), its trigger kept (the annotation stays, the
    policy is not stamped), and it tries again later."""
    st = ctx.status
    out.remove_annotation = False
    deferred = st.model_copy(
        update={
            "reason": REASON_QUARANTINE_LIMIT,
            "held_action": HELD_REPROBE,
            "message": cut(f"quarantine limit: {why}; the new round waits ({message})", 1000),
        }
    )
    if deferred != st:
        out.write_status(st, deferred)
        out.event(ACCEPTANCE_KIND, "Warning", REASON_QUARANTINE_LIMIT, deferred.message or "")
    out.ensure_node(ctx, st)
    out.wake_in(DEFERRED_RETRY_SECONDS)
    return out.build("new round deferred by the limit")


def new_round(
    ctx: NodeContext,
    out: PlanBuilder,
    *,
    reason: str,
    message: str,
    reverify: ReverifyStatus | None = None,
) -> Plan:
    """Start over: Pending, attempts reset, the old round's evidence dropped. A node
    in service goes out of service for it only as the limit allows. A re-verification
    (``reverify``: its round) keeps the evidence it was accepted on until its own
    verdict replaces it (it may give up and go back to service on it), and is never
    deferred: the caller asked the limit already, under its lock."""
    st = ctx.status
    taking_out = in_service(st)
    if taking_out and reverify is None:
        out.needs_limit_lock = True  # takes (or is refused) a slot: one worker at a time
        decision = take_out_now(ctx)
        if not decision.allowed:
            return _deferred_round(ctx, out, message, decision.why)
    evidence: dict[str, object] = {
        "report": None,  # the old round's evidence is not this round's
        "probed_sections": None,
        "fabric": None,  # nor its fabric pairs and verdict
        # a re-verification under way ends: this round is another's
        "reverify": st.reverify.model_copy(update={"round": None}) if st.reverify else None,
    }
    new = ctx.stamped(
        st,
        phase=Phase.PENDING,
        reason=reason,
        message=cut(message, 1000),
        attempts=0,
        held_action=None,
        rejudged=False,
        next_attempt_time=None,
        probe_pod=None,
        probe_started_time=None,
        # asked for by a person: the annotation goes when this round starts, and a
        # cordoned node is still probed for it (pending._waits_before_probing)
        reprobe_requested=REPROBE_ANNOTATION in ctx.node.annotations
        and ctx.spec.reprobe.on_annotation,
        **(evidence if reverify is None else {"reverify": reverify}),
        # Out of service because of gpuaccept from now until decided, unless it was
        # a new node that never was in service.
        was_in_service=st.was_in_service or st.phase in DECIDED or taking_out,
        taken_out_time=ctx.obs.now if taking_out else st.taken_out_time,
        taken_out_gpus=None if taking_out else st.taken_out_gpus,  # the whole node
    )
    new = ctx.with_applied_keys(new)
    out.write_status(st, new)
    out.event(ACCEPTANCE_KIND, "Normal", "Reprobe", message)
    out.ensure_node(ctx, new)
    out.wake_in(1)
    return out.build(f"new round: {reason}")


def give_up(ctx: NodeContext, out: PlanBuilder, *, reason: str, message: str) -> Plan:
    """Back to service as accepted: the re-verification could not run (``reason``,
    not the node's fault); it is tried again in a later idle window."""
    st, now = ctx.status, ctx.obs.now
    rv = st.reverify or ReverifyStatus()
    ended = (
        rv.round.model_copy(
            update={
                "outcome": "GaveUp",
                "finished": now,
                "message": cut(f"{reason}: {message}", 512),
            }
        )
        if rv.round is not None
        else None
    )
    back = ctx.stamped(
        st,
        phase=Phase.ACCEPTED,
        reason=None,
        message=cut(f"re-verification gave up ({reason}): {message}", 1000),
        attempts=0,
        next_attempt_time=None,
        probe_pod=None,
        probe_started_time=None,
        blocked_since=None,
        was_in_service=False,
        reverify=rv.model_copy(update={"round": None, "last": ended, "idle_since": None}),
    )
    back = ctx.with_applied_keys(back)
    out.write_status(st, back)
    out.event(ACCEPTANCE_KIND, "Normal", EVENT_GAVE_UP, back.message or "")
    out.ensure_node(ctx, back)
    for pod in ctx.obs.pods:
        if not pod.deleting:
            out.delete_pod(pod)
    return out.build(f"re-verification gave up: {reason}")


def released(ctx: NodeContext, out: PlanBuilder, *, by: str, at: str, reason: str) -> Plan:
    """Phase Released by ``by`` (asked at ``at``): the node's owned taints and labels
    off, its probe pods gone."""
    st, now = ctx.status, ctx.obs.now
    why = f": {reason}" if reason else ""
    was = f"{st.phase.value}" + (f" ({st.reason})" if st.reason else "")
    message = cut(f"released by {by} (asked at {at}), was {was}{why}", 1000)
    release = ReleaseRecord(
        by=by,
        requested_at=at,
        reason=reason,
        released_time=now,
        from_phase=st.phase,
        from_reason=st.reason,
    )
    update: dict[str, object] = {
        "phase": Phase.RELEASED,
        "reason": REASON_RELEASED,
        "message": message,
        "held_action": None,
        "probe_pod": None,
        "probe_started_time": None,
        "next_attempt_time": None,
        "was_in_service": False,
        "release": release,
    }
    if st.phase == Phase.PROBING:  # the attempt is abandoned, and given back
        update["attempts"] = max(st.attempts - 1, 0)
    new = ctx.with_applied_keys(ctx.stamped(st, **update))
    out.write_status(st, new)
    out.event("Node", "Normal", REASON_RELEASED, message)
    out.event(ACCEPTANCE_KIND, "Normal", REASON_RELEASED, message)
    for pod in ctx.obs.pods:
        if not pod.deleting:
            out.delete_pod(pod)
    out.ensure_node(ctx, new)
    return out.build(f"released by {by}")


def hold_lifted(ctx: NodeContext, out: PlanBuilder, kept: NodeAcceptanceStatus) -> Plan:
    """A held in-service verdict whose evidence is gone: the hold is lifted, the node
    stays in service as it was accepted (``kept``: its status with the in-service
    ledger brought up to date)."""
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


def probe_started(
    ctx: NodeContext, out: PlanBuilder, *, serial: int, name: str, wait_over: bool
) -> tuple[NodeAcceptanceStatus, str]:
    """Phase Probing: an attempt on record (pod ``name``, ``serial``) before its pod
    exists, so a restart in between recreates the same pod name, never a second pod;
    with the intent to create it (core/creationintent.py), and the nonce the pod
    carries. ``wait_over``: the reason the node waited under is not this attempt's.
    A DRA node's attempt has its ResourceClaim (named as the pod, created before it:
    core/draclaim.py) on record as intended too."""
    st = ctx.status
    new = ctx.stamped(
        st,
        reason=None if wait_over else st.reason,
        message=None if wait_over else st.message,
        phase=Phase.PROBING,
        attempts=st.attempts + 1,
        pod_serial=serial,
        probe_pod=name,
        probe_started_time=ctx.obs.now,
        next_attempt_time=None,
        held_action=None,
        waiting_since=None,
        # kept across the tries of one wait (its backoff grows with it), else cleared
        blocked_since=st.blocked_since if st.phase == Phase.WAITING else None,
        node_uid=ctx.node.uid or st.node_uid,
    )
    nonce = creation_nonce(ctx.obs.nonce_seed, POD, name)
    new = ctx.with_applied_keys(new)
    if ctx.gpus.mode == GpuPublishing.DRA:
        claim_nonce = creation_nonce(ctx.obs.nonce_seed, RESOURCE_CLAIM, name)
        new = intend(new, RESOURCE_CLAIM, name, claim_nonce)
    new = intend(new, POD, name, nonce)
    out.write_status(st, new)
    return new, nonce


def blocked_waits(
    ctx: NodeContext, out: PlanBuilder, *, reason: str, message: str, backoff: float
) -> NodeAcceptanceStatus:
    """Phase Waiting under ``reason`` (not the node's fault), the attempt given back,
    the next try in ``backoff`` seconds; a Warning Event when the reason is new."""
    st, now = ctx.status, ctx.obs.now
    in_probe = st.phase == Phase.PROBING
    new = ctx.stamped(
        st,
        phase=Phase.WAITING,
        reason=reason,
        message=cut(f"{message} (not the node's fault; retrying in {backoff:.0f}s)", 1000),
        attempts=max(st.attempts - 1, 0) if in_probe else st.attempts,
        next_attempt_time=now + timedelta(seconds=backoff),
        probe_pod=None,
        probe_started_time=None,
        blocked_since=st.blocked_since or now,
    )
    new = ctx.with_applied_keys(new)
    out.write_status(st, new)
    if (st.phase, st.reason) != (new.phase, new.reason):
        out.event(ACCEPTANCE_KIND, "Warning", reason, cut(message, 1000))
    return new


def cordoned(
    ctx: NodeContext, out: PlanBuilder, *, reason: str, message: str
) -> NodeAcceptanceStatus:
    """Phase Waiting under ``reason``, no attempt and no backoff (a person cordoned
    the node); a Normal Event when the reason is new."""
    st = ctx.status
    new = ctx.with_applied_keys(
        ctx.stamped(st, phase=Phase.WAITING, reason=reason, message=message)
    )
    out.write_status(st, new)
    if (st.phase, st.reason) != (new.phase, new.reason):
        out.event(ACCEPTANCE_KIND, "Normal", reason, message)
    return new


def waiting_for_gpus(
    ctx: NodeContext, out: PlanBuilder, *, reason: str, message: str, since: datetime
) -> None:
    """Phase Pending under ``reason``, waiting for GPUs since ``since`` (a Stalled
    node waits again under a longer deadline)."""
    st = ctx.status
    waiting = ctx.stamped(
        st, phase=Phase.PENDING, reason=reason, message=message, waiting_since=since
    )
    out.write_status(st, waiting)


def stalled(
    ctx: NodeContext, out: PlanBuilder, *, reason: str, message: str, since: datetime
) -> bool:
    """Phase Stalled under ``reason`` (no GPUs within the deadline), with a Warning
    Event; True when the node was not Stalled already (nothing written otherwise)."""
    st = ctx.status
    new = ctx.with_applied_keys(
        ctx.stamped(st, phase=Phase.STALLED, reason=reason, message=message, waiting_since=since)
    )
    if st.phase == Phase.STALLED:
        return False
    out.write_status(st, new)
    out.event(ACCEPTANCE_KIND, "Warning", new.reason or "", new.message or "")
    return True


EVENT_CRASH_WINDOW_POD = "CrashWindowPodDeleted"


def attempt_abandoned(ctx: NodeContext, out: PlanBuilder, *, message: str) -> None:
    """The attempt's pod was created just before an operator restart and is deleted
    unread (core/creationintent.py): phase Pending, the attempt given back, no
    backoff; the next attempt takes a new name. A Normal Event says so."""
    st = ctx.status
    new = ctx.stamped(
        st,
        phase=Phase.PENDING,
        message=cut(message, 1000),
        attempts=max(st.attempts - 1, 0),
        probe_pod=None,
        probe_started_time=None,
    )
    out.write_status(st, new)
    out.event(ACCEPTANCE_KIND, "Normal", EVENT_CRASH_WINDOW_POD, message)


def opted_out(ctx: NodeContext, out: PlanBuilder, conditions: list[Condition]) -> None:
    """The node's status under ``conditions`` (its opt-out recorded); a probe under
    way is abandoned and its attempt given back (phase Pending)."""
    st = ctx.status
    update: dict[str, object] = {"conditions": conditions}
    if st.phase == Phase.PROBING:  # the attempt is abandoned, and given back
        update.update(phase=Phase.PENDING, probe_pod=None, probe_started_time=None)
        update["attempts"] = max(st.attempts - 1, 0)
    out.write_status(st, st.model_copy(update=update))
