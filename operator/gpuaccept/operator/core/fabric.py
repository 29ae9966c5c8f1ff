"""Phase ``Fabric``: a node that passed the single-node checks waits for the verdict
of its two-node fabric test (docs/fabric.md).

The pairs themselves are planned for the whole policy at once
(:mod:`.fabric_pairs`, around :func:`.fabric_pairing.plan_fabric`); this node's
reconcile records the verdict that planning gives it (``Observed.fabric_verdict``),
subject to dryRun and the quarantine limit like any verdict. Until then it keeps
the pending taint, and its fabric pods are left to the pair planning.
"""

from __future__ import annotations

from gpuaccept.checks import fabric_allreduce
from gpuaccept.checks.fabric_allreduce import NoPartnerAction
from gpuaccept.checks.verdict import Verdict
from gpuaccept.contracts.api import ACCEPTANCE_KIND, REPROBE_ANNOTATION
from gpuaccept.contracts.nodeacceptance import FabricStatus, KeyFigures, Phase, Reason
from gpuaccept.contracts.policy import PolicyChangeAction
from gpuaccept.operator.core.context import NodeContext, PlanBuilder, cut, reasons_message
from gpuaccept.operator.core.decided import new_round, policy_changed, rejudged_verdict
from gpuaccept.operator.core.fabric_pairing import (
    FabricNoPartner,
    FabricPassed,
    FabricQuarantined,
    FabricVerdict,
    PartnerFigure,
)
from gpuaccept.operator.core.fabric_pairs import takes_part_in_fabric
from gpuaccept.operator.core.model import Plan
from gpuaccept.operator.core.verdict import Evidence, record_verdict, verdict_outcome

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
    if (
        spec.reprobe.on_boot_id_change
        and st.probed_boot_id
        and st.probed_boot_id != ctx.node.boot_id
    ):
        message = f"bootID changed from {st.probed_boot_id} to {ctx.node.boot_id}"
        return new_round(ctx, out, reason="BootIDChanged", message=message)
    if REPROBE_ANNOTATION in ctx.node.annotations and spec.reprobe.on_annotation:
        out.remove_annotation = True
        message = f"annotation {REPROBE_ANNOTATION} was set"
        return new_round(ctx, out, reason="ReprobeRequested", message=message)
    # One probe per node: a probe pod that is not this node's fabric pod goes, and
    # so does a fabric pod once the node is no member of its policy's pass (fabric
    # turned off, relabelled to another policy): no pass would delete it.
    member = takes_part_in_fabric(st, ctx.policy.name, spec)
    for pod in obs.pods:
        if not pod.deleting and (pod.fabric is None or not member):
            out.delete_pod(pod)
    fabric = st.fabric or FabricStatus(waiting_since=obs.now, summary="waiting")
    if policy_changed(ctx):
        if spec.reprobe.on_policy_change == PolicyChangeAction.REPROBE:
            message = f"policy {ctx.policy.name} changed (generation {ctx.policy.generation})"
            return new_round(ctx, out, reason="PolicyChanged", message=message)
        # Not decided yet, so never left judged under an old policy (Ignore included):
        # the single-node report is judged again under the new one.
        rejudged = rejudged_verdict(ctx)
        if not rejudged.accepted:
            return record_verdict(ctx, out, rejudged, Evidence(st.report, rejudged=True))
        if spec.fabric.enabled:  # still passes: waits on, under the new policy
            restamped = ctx.stamped(
                st,
                checks=list(rejudged.checks)[:32],
                figures=rejudged.figures,
                fabric=fabric,
            )
            out.write_status(st, ctx.with_applied_keys(restamped))
            out.ensure_node(ctx, st)
            out.wake_in(1)
            return out.build(
                "policy changed: the report still passes; waiting for a fabric verdict"
            )
    verdict = obs.fabric_verdict
    if not spec.fabric.enabled:  # the policy no longer runs fabric tests
        passed = FabricNoPartner(NoPartnerAction.ACCEPT, ())
        return _record(ctx, out, passed, fabric, "fabric tests disabled by the policy")
    if verdict is None:
        if st.fabric is None:
            out.write_status(st, ctx.stamped(st, fabric=fabric))
        out.ensure_node(ctx, st)
        return out.build("waiting for a fabric verdict")
    return _record(ctx, out, verdict, fabric, None)


def _record(
    ctx: NodeContext,
    out: PlanBuilder,
    verdict: FabricVerdict,
    fabric: FabricStatus,
    why: str | None,
) -> Plan:
    st = ctx.status
    name, text, busbw, message = fabric_summary(verdict)
    if why is not None:
        name, text, message = "Disabled", "not tested", why
    recorded = fabric.model_copy(
        update={
            "verdict": name,
            "summary": cut(text, 64),
            "busbw_gbps": busbw,
            "message": cut(message, 1000),
        }
    )
    if isinstance(verdict, FabricNoPartner) and verdict.action == NoPartnerAction.HOLD:
        held = ctx.stamped(
            st, reason=REASON_NO_PARTNER, message=cut(message, 1000), fabric=recorded
        )
        if held != ctx.stamped(st):
            out.write_status(st, held)
            if st.reason != REASON_NO_PARTNER:
                out.event(ACCEPTANCE_KIND, "Warning", REASON_NO_PARTNER, message)
        out.ensure_node(ctx, st)
        return out.build("fabric: no partner, held")
    judged = _as_verdict(verdict, ctx, message)
    summary = reasons_message(list(judged.reasons)) if judged.reasons else message
    phase, reason, outcome_message, held_action = verdict_outcome(ctx, judged, summary)
    if judged.accepted and phase == Phase.ACCEPTED:
        outcome_message = cut(f"all required checks passed; {message}", 1000)
    if not ctx.spec.dry_run and not judged.accepted:
        out.needs_breaker = True
    new = ctx.with_applied_keys(
        ctx.stamped(
            st,
            phase=phase,
            reason=reason,
            message=cut(outcome_message, 1000),
            reasons=list(judged.reasons),
            held_action=held_action,
            fabric=recorded,
        )
    )
    out.write_status(st, new)
    _events(out, new.phase, reason, outcome_message)
    out.ensure_node(ctx, new)
    return out.build(f"fabric verdict {new.phase.value}")


def _events(out: PlanBuilder, phase: Phase, reason: str | None, message: str) -> None:
    if phase == Phase.ACCEPTED:
        out.event(ACCEPTANCE_KIND, "Normal", "Accepted", message)
    elif phase == Phase.QUARANTINED:
        out.event("Node", "Warning", "Quarantined", f"quarantined ({reason}): {message}")
        out.event(ACCEPTANCE_KIND, "Warning", "Quarantined", f"quarantined ({reason}): {message}")
    else:
        out.event(ACCEPTANCE_KIND, "Warning", reason or phase.value, message)
