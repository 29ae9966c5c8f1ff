"""Phase ``Fabric``: a node that passed the single-node checks waits for the verdict
of its two-node fabric test (docs/fabric.md).

The pairs themselves are planned for the whole policy at once
(:mod:`.policypass`, around :func:`.pairing.plan_fabric`); this node's
reconcile records the verdict that planning gives it (``NodeSnapshot.fabric_verdict``),
subject to dryRun and the quarantine limit like any verdict. Until then it keeps
the pending taint, and its fabric pods are left to the pair planning.
"""

from __future__ import annotations

from gpuaccept.checks import fabric_allreduce
from gpuaccept.checks.fabric_allreduce import NoPartnerAction
from gpuaccept.checks.verdict import Verdict
from gpuaccept.contracts.nodeacceptance import FabricStatus, KeyFigures, Reason
from gpuaccept.contracts.policy_fields import PolicyChangeAction
from gpuaccept.operator.core.fabric.membership import is_member
from gpuaccept.operator.core.model import (
    FabricNoPartner,
    FabricPassed,
    FabricQuarantined,
    FabricVerdict,
    PartnerFigure,
    Plan,
)
from gpuaccept.operator.core.nodecontext import NodeContext, PlanBuilder, cut
from gpuaccept.operator.core.phases.decided import (
    Remeasure,
    policy_changed,
    rejudged_verdict,
    reprobe_triggered,
)
from gpuaccept.operator.core.record import (
    ACCEPTED_MESSAGE,
    Evidence,
    Outcome,
    Wait,
    judged,
    record,
    record_verdict,
)
from gpuaccept.operator.core.transitions import new_round

FABRIC_CHECK = fabric_allreduce.CHECK
REASON_NO_PARTNER = "FabricNoPartner"
VERDICT_PASSED = "Passed"


def _busbw(value: float | None) -> str:
    return "no figure" if value is None else f"{value:.1f} GB/s"


def _tried(tried: tuple[PartnerFigure, ...]) -> str:
    if not tried:
        return "no partner tried"
    return "tried " + ", ".join(f"{f.partner} ({f.outcome}, {_busbw(f.busbw_gbps)})" for f in tried)


def fabric_summary(verdict: FabricVerdict) -> tuple[str, str, float | None, str]:
    """(verdict name, FABRIC column text, busbw, message) for a fabric verdict."""
    if isinstance(verdict, FabricPassed):
        text = f"passed {_busbw(verdict.busbw_gbps)}"
        return VERDICT_PASSED, text, verdict.busbw_gbps, f"fabric {text} with {verdict.partner}"
    if isinstance(verdict, FabricQuarantined):
        figures = [f.busbw_gbps for f in verdict.failed_with if f.busbw_gbps is not None]
        worst = min(figures) if figures else None
        text = f"failed {_busbw(worst)}" if worst is not None else "failed"
        return verdict.reason, text, worst, verdict.message
    text = f"no partner ({verdict.action.value})"
    message = (
        f"no fabric verdict within the deadline; fabric.onNoPartner: {verdict.action.value}"
        f" ({_tried(verdict.tried)})"
    )
    return REASON_NO_PARTNER, text, None, message


def _as_verdict(verdict: FabricVerdict, ctx: NodeContext, message: str) -> Verdict:
    st = ctx.status
    if isinstance(verdict, FabricQuarantined):
        reason = Reason(check=FABRIC_CHECK, reason=verdict.reason, message=cut(message, 500))
        reasons: tuple[Reason, ...] = (reason,)
        accepted = False
    else:
        reasons, accepted = (), True
    return Verdict(
        accepted=accepted,
        reasons=reasons,
        warnings=(),
        checks=tuple(st.checks),
        figures=st.figures or KeyFigures(),
        results=(),
    )


def plan_fabric_phase(ctx: NodeContext, out: PlanBuilder) -> Plan:
    st, obs, spec = ctx.status, ctx.obs, ctx.spec
    triggered = reprobe_triggered(ctx, out)
    if triggered is not None:
        return triggered
    # One probe per node: a probe pod that is not this node's fabric pod goes, and
    # so does a fabric pod once the node is no member of its policy's pass (fabric
    # turned off, relabelled to another policy): no pass would delete it.
    member = is_member(st, ctx.policy.name, spec, ctx.node.labels)
    for pod in obs.pods:
        if not pod.deleting and (pod.fabric is None or not member):
            out.delete_pod(pod)
    fabric = st.fabric or FabricStatus(waiting_since=obs.now, summary="waiting")
    if policy_changed(ctx):
        changed = _policy_changed(ctx, out, fabric)
        if changed is not None:
            return changed
    if not spec.fabric.enabled:  # the policy no longer runs fabric tests
        passed = FabricNoPartner(NoPartnerAction.ACCEPT, ())
        return record(ctx, out, fabric_outcome(ctx, passed, fabric, disabled=True))
    if obs.fabric_verdict is None:
        if st.fabric is None:
            out.write_status(st, ctx.stamped(st, fabric=fabric))
        out.ensure_node(ctx, st)
        return out.build("waiting for a fabric verdict")
    return record(ctx, out, fabric_outcome(ctx, obs.fabric_verdict, fabric))


def _policy_changed(ctx: NodeContext, out: PlanBuilder, fabric: FabricStatus) -> Plan | None:
    """A new round, the re-judged report's failing verdict, or (the report still
    passes) waiting on under the new policy; None: fabric tests are off now."""
    st, spec = ctx.status, ctx.spec
    if spec.reprobe.on_policy_change == PolicyChangeAction.REPROBE:
        message = f"policy {ctx.policy.name} changed (generation {ctx.policy.generation})"
        return new_round(ctx, out, reason="PolicyChanged", message=message)
    # Not decided yet, so never left judged under an old policy (Ignore included):
    # the single-node report is judged again under the new one.
    rejudged = rejudged_verdict(ctx)
    if isinstance(rejudged, Remeasure):
        return new_round(ctx, out, reason=rejudged.reason, message=rejudged.message)
    if not rejudged.accepted:
        return record_verdict(ctx, out, rejudged, Evidence(st.report, rejudged=True))
    if not spec.fabric.enabled:
        return None
    restamped = ctx.stamped(
        st, checks=list(rejudged.checks)[:32], figures=rejudged.figures, fabric=fabric
    )
    out.write_status(st, ctx.with_applied_keys(restamped))
    out.ensure_node(ctx, st)
    out.wake_in(1)
    return out.build("policy changed: the report still passes; waiting for a fabric verdict")


def fabric_outcome(
    ctx: NodeContext, verdict: FabricVerdict, fabric: FabricStatus, *, disabled: bool = False
) -> Outcome:
    """What the fabric verdict (or fabric tests turned off, ``disabled``) makes of the
    node: a verdict on its pair record, or (no partner, held) a wait."""
    name, text, busbw, message = fabric_summary(verdict)
    if disabled:
        name, text, message = "Disabled", "not tested", "fabric tests disabled by the policy"
    recorded = fabric.model_copy(
        update={
            "verdict": name,
            "summary": cut(text, 64),
            "busbw_gbps": busbw,
            "message": cut(message, 1000),
        }
    )
    if isinstance(verdict, FabricNoPartner) and verdict.action == NoPartnerAction.HOLD:
        return Wait(REASON_NO_PARTNER, message, recorded, "fabric: no partner, held")
    accept_message = cut(f"{ACCEPTED_MESSAGE}; {message}", 1000)
    return judged(
        ctx,
        _as_verdict(verdict, ctx, message),
        Evidence(fabric=recorded),
        accept_message=accept_message,
    )
