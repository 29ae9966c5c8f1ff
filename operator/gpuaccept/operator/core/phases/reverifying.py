"""A re-verification round of an accepted node (pure).

* :func:`plan_reverify` (an accepted node, from ``core/phases/decided.py``): a fresh
  list of the node's pods (the re-verification loop's, ``NodeSnapshot.gpu_pod_sample``)
  is recorded; when it completes an idle window, a round starts under the pending
  taint if the limit and the rate allow (``take_out_now``, under the policy's lock),
  a suspect's with only the checks its suspicion names (``transitions.new_round``).
* :func:`targeted` (from ``core/reconcile.py``): while a suspect round runs, the
  node's policy with only those checks enabled, so that the probe pod measures
  them and the verdict judges them (a targeted probe that passes keeps the
  evidence the node was accepted on: ``history.keeps_evidence``).

A round that cannot run for a reason that is not the node's ends in
``transitions.give_up``; its verdict is held to the node's history in
``core/history.py``.
"""

from __future__ import annotations

from dataclasses import replace

from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.contracts.reverify import (
    ReverifyRound,
)
from gpuaccept.operator.core.history import reverifying
from gpuaccept.operator.core.model import Plan
from gpuaccept.operator.core.nodecontext import NodeContext, PlanBuilder
from gpuaccept.operator.core.record import take_out_now
from gpuaccept.operator.core.reverify_schedule import (
    CAUSE_IDLE,
    CAUSE_SUSPECT,
    after_sample,
    candidate,
    due_at,
    fresh,
    open_suspicion,
    reverifiable,
    targeted_checks,
)
from gpuaccept.operator.core.transitions import new_round

REASON_REVERIFY = "Reverify"


def _round(ctx: NodeContext) -> ReverifyRound:
    """The round an idle window starts now: a suspect's (its checks and GPUs) or a
    periodic one."""
    spec, now = ctx.spec, ctx.obs.now
    suspicion = open_suspicion(ctx.status.reverify, spec.reverify)
    if suspicion is None:
        return ReverifyRound(cause=CAUSE_IDLE, started=now)
    enabled = [name for name in type(spec.probe).model_fields if _enabled(ctx, name)]
    return ReverifyRound(
        cause=CAUSE_SUSPECT,
        started=now,
        checks=targeted_checks(suspicion, enabled),
        gpus=suspicion.gpus,
        suspicion=suspicion.cause,
    )


def _enabled(ctx: NodeContext, check: str) -> bool:
    switch = ctx.spec.probe.switch(check)
    return switch is not None and switch.enabled


def plan_reverify(ctx: NodeContext, out: PlanBuilder) -> Plan | None:
    """An accepted node's fresh list of its pods, recorded; the round started when
    it completes an idle window and the limit allows. None: nothing to do here."""
    st, spec, sample = ctx.status, ctx.spec, ctx.obs.gpu_pod_sample
    if sample is None or not reverifiable(st, spec) or not fresh(sample, st.reverify):
        return None
    due = due_at(candidate(ctx.node.name, st, spec.reverify), spec.reverify)
    if due is not None and due > sample.at:  # a list the loop made for another reason
        return None
    outcome = after_sample(st.reverify, sample, spec.reverify)
    if outcome.start and not ctx.node.unschedulable:
        out.needs_limit_lock = True  # takes (or is refused) a slot: one worker at a time
        if take_out_now(ctx).allowed:
            started = outcome.status.model_copy(update={"round": _round(ctx)})
            why = started.round
            assert why is not None
            message = f"re-verification ({why.cause}): idle since {started.idle_since}"
            if why.suspicion:
                message += f"; suspected: {why.suspicion}"
            return new_round(ctx, out, reason=REASON_REVERIFY, message=message, reverify=started)
    new = st.model_copy(update={"reverify": outcome.status})
    out.write_status(st, new)
    out.ensure_node(ctx, st)
    return out.build("re-verification: idle sample recorded")


def targeted(ctx: NodeContext) -> NodeContext:
    """During a suspect round, the node's context under its policy with only the
    round's checks enabled (and no fabric test); else ``ctx`` as it is."""
    st = ctx.status
    round_ = reverifying(st)
    if round_ is None or not round_.checks or st.phase not in (Phase.PENDING, Phase.PROBING):
        return ctx
    probe = ctx.spec.probe
    update = {
        name: switch.model_copy(update={"enabled": name in round_.checks})
        for name in type(probe).model_fields
        if (switch := probe.switch(name)) is not None
    }
    spec = ctx.spec.model_copy(
        update={
            "probe": probe.model_copy(update=update),
            "fabric": ctx.spec.fabric.model_copy(update={"enabled": False}),
        }
    )
    return replace(ctx, spec=spec)
