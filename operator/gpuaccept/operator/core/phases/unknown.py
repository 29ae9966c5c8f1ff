"""A NodeAcceptance whose phase this release does not know (pure).

A newer release may add a phase; after a rollback its statuses carry a value this
release cannot act on. Starting every such node over (what an unreadable status
does) would put in-service nodes back under the pending taint, as many as the
limit lets out at a time: a rollback taking capacity out. The rest of the status is
read (views.py puts phase Pending in the unknown one's place), and the Node decides:

* **in service** (no taint the policy or the status names as gpuaccept's: the newer
  release had it in service): left exactly as it is, Node and status, and said
  (the ``gpuaccept_node_phase`` series carries the stored phase with reason
  ``UnknownPhase``, and a log line). Rolling forward again resumes it where it was;
  to have this release decide it, delete its NodeAcceptance (it is then adopted
  under the limit, as a node found in service);
* **out of service because of gpuaccept** (it carries the pending or quarantine
  taint, or a key the status applied): a new round at once. Nothing in service is
  taken out, so the limit is not asked; and the node is never left undecided out of
  service. The round keeps what the status records beyond one round (applied keys,
  owned pods, pod serial, release record, re-verification history).

A person's release request and the node's opt-out annotation still apply first.
"""

from __future__ import annotations

from gpuaccept.contracts.api import OPT_OUT_ANNOTATION
from gpuaccept.operator.core.model import Plan
from gpuaccept.operator.core.nodecontext import NodeContext, PlanBuilder
from gpuaccept.operator.core.phases.released import plan_release, unapplied_release
from gpuaccept.operator.core.transitions import new_round

REASON_UNKNOWN_PHASE = "UnknownPhase"


def held_out(ctx: NodeContext) -> bool:
    """The Node carries a taint that the policy or the status names as gpuaccept's."""
    spec, st = ctx.spec, ctx.status
    keys = {spec.pending_taint_key, spec.quarantine.taint_key, *st.applied_taints}
    return any(t.key in keys for t in ctx.node.taints)


def plan_unknown_phase(ctx: NodeContext, out: PlanBuilder, phase: str) -> Plan:
    """The plan for a node whose stored phase is ``phase``, unknown to this release."""
    request = unapplied_release(ctx)
    if request is not None:  # a person's word
        return plan_release(ctx, out, request)
    if OPT_OUT_ANNOTATION in ctx.node.annotations:
        return out.build(f"phase {phase} unknown to this release; opted out: left as it is")
    if not held_out(ctx):
        return out.build(
            f"phase {phase} unknown to this release (a newer one wrote it): in service, "
            "left as it is"
        )
    message = (
        f"the stored phase {phase} is unknown to this release (written by a newer one, "
        "before a rollback) and the node is out of service: a new round"
    )
    return new_round(ctx, out, reason=REASON_UNKNOWN_PHASE, message=message)
