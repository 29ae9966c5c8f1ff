"""Phases ``Accepted``, ``Quarantined`` and ``Held``: re-probe, re-judge, release, keep.

A decided node starts a new round on a reboot, a re-probe request or (by the
policy's choice) a policy change; a policy change can instead re-judge the
stored report; a verdict the quarantine limit held back goes through once
there is room. Otherwise the node is kept as decided.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuaccept.checks.fabric_allreduce import CHECK as FABRIC_CHECK
from gpuaccept.checks.remeasure import remeasure_reason
from gpuaccept.checks.verdict import Verdict
from gpuaccept.contracts.api import REPROBE_ANNOTATION
from gpuaccept.contracts.nodeacceptance import Phase, Reason
from gpuaccept.contracts.policy_fields import PolicyChangeAction
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core.acceptance_gate import acceptance_problem
from gpuaccept.operator.core.capacity import (
    HELD_FABRIC,
    HELD_QUARANTINE,
)
from gpuaccept.operator.core.fabric.membership import is_member
from gpuaccept.operator.core.fencerules import HELD_FENCE
from gpuaccept.operator.core.inservice.phase import keeps_watch_pod, plan_in_service
from gpuaccept.operator.core.model import Plan
from gpuaccept.operator.core.nodecontext import (
    REASON_PROBE_ERROR,
    REASON_QUARANTINE_LIMIT,
    NodeContext,
    PlanBuilder,
)
from gpuaccept.operator.core.phases.drain import drain_status
from gpuaccept.operator.core.phases.reverifying import plan_reverify
from gpuaccept.operator.core.record import Evidence, failing_verdict, record_verdict, take_out_now
from gpuaccept.operator.core.report_trust import trusted_report
from gpuaccept.operator.core.transitions import new_round

REASON_REMEASURE = "PolicyNotMeasured"


def reprobe_triggered(ctx: NodeContext, out: PlanBuilder) -> Plan | None:
    """A new round when the node rebooted or a re-probe was asked for (the request
    then comes off the node); None when neither (the policy's ``reprobe`` says which
    count)."""
    node, spec, st = ctx.node, ctx.spec, ctx.status
    annotated = REPROBE_ANNOTATION in node.annotations and spec.reprobe.on_annotation
    if annotated:
        out.remove_annotation = True
    if spec.reprobe.on_boot_id_change and st.probed_boot_id and st.probed_boot_id != node.boot_id:
        message = f"bootID changed from {st.probed_boot_id} to {node.boot_id}"
        return new_round(ctx, out, reason="BootIDChanged", message=message)
    if annotated:
        message = f"annotation {REPROBE_ANNOTATION} was set"
        return new_round(ctx, out, reason="ReprobeRequested", message=message)
    return None


def plan_decided(ctx: NodeContext, out: PlanBuilder) -> Plan:
    spec, st, policy = ctx.spec, ctx.status, ctx.policy
    triggered = reprobe_triggered(ctx, out)
    if triggered is not None:
        return triggered
    if policy_changed(ctx):
        action = spec.reprobe.on_policy_change
        if st.phase == Phase.HELD:
            action = PolicyChangeAction.REJUDGE  # a held action is never left stale
        if action == PolicyChangeAction.REPROBE:
            message = f"policy {policy.name} changed (generation {policy.generation})"
            return new_round(ctx, out, reason="PolicyChanged", message=message)
        if action == PolicyChangeAction.REJUDGE:
            rejudged = rejudged_verdict(ctx)
            if isinstance(rejudged, Remeasure):
                return new_round(ctx, out, reason=rejudged.reason, message=rejudged.message)
            return record_verdict(ctx, out, rejudged, Evidence(st.report, rejudged=True))
    # policy inService: an accepted node's health; then a verdict the limit held back
    planned = plan_in_service(ctx, out)
    planned = planned if planned is not None else _held_by_limit(ctx, out)
    if planned is not None:
        return planned
    reverify = plan_reverify(ctx, out)  # an idle window of an accepted node
    if reverify is not None:
        return reverify
    return _keep(ctx, out)


def _held_by_limit(ctx: NodeContext, out: PlanBuilder) -> Plan | None:
    """A verdict, a fence or a fabric test the limit held back, once there is room."""
    st = ctx.status
    held_by_limit = st.reason == REASON_QUARANTINE_LIMIT and not ctx.spec.dry_run
    if held_by_limit and st.held_action == HELD_FABRIC:  # a fabric test the limit deferred
        rejudged = rejudged_verdict(ctx)
        if isinstance(rejudged, Remeasure):
            return new_round(ctx, out, reason=rejudged.reason, message=rejudged.message)
        return record_verdict(ctx, out, rejudged, Evidence(st.report, rejudged=True))
    if held_by_limit and st.held_action == HELD_FENCE:  # a fence: once its GPUs fit
        if not take_out_now(ctx, fence=tuple(st.gpu_verdicts)).allowed:
            return None
        rejudged = rejudged_verdict(ctx)
        if isinstance(rejudged, Remeasure):
            return new_round(ctx, out, reason=rejudged.reason, message=rejudged.message)
        return record_verdict(ctx, out, rejudged, Evidence(st.report, rejudged=True))
    if held_by_limit and st.held_action == HELD_QUARANTINE and take_out_now(ctx).allowed:
        held = failing_verdict(tuple(st.reasons), checks=tuple(st.checks), figures=st.figures)
        return record_verdict(ctx, out, held, Evidence(st.report, rejudged=st.rejudged))
    return None


def policy_changed(ctx: NodeContext) -> bool:
    st, policy = ctx.status, ctx.policy
    return (
        st.policy != policy.name
        or st.policy_generation != policy.generation
        # recreated under the same name: generation 1 again, but a new object
        or (bool(st.policy_uid) and bool(policy.uid) and st.policy_uid != policy.uid)
    )


@dataclass(frozen=True)
class Remeasure:
    """The stored report cannot be judged for the node now: a new round decides."""

    reason: str  # the new round's reason word
    message: str


def rejudged_verdict(ctx: NodeContext) -> Verdict | Remeasure:
    """The stored report judged under the current policy, or why it must be measured
    again: what the policy now asks for was not measured (a check turned on, a
    measuring setting, a compacted result under a changed section), or the report no
    longer passes the acceptance gate for the node as it is (counts, trust). Neither
    ever convicts the node."""
    st = ctx.status
    if st.report is None:  # an error verdict has no results to re-judge: it stands
        return failing_verdict(
            tuple(st.reasons)
            or (Reason(check="probe", reason=REASON_PROBE_ERROR, message=st.message or ""),),
        )
    remeasure = remeasure_reason(st.report, st.probed_sections, ctx.spec.probe)
    if remeasure is not None:
        return Remeasure(REASON_REMEASURE, f"the stored report cannot be judged: {remeasure}")
    accept_simulated = ctx.obs.config.accept_simulated_reports
    report = trusted_report(st.report, ctx.counted_node, accept_simulated=accept_simulated)
    if not isinstance(report, ProbeReport):  # e.g. the node's GPU count changed since
        return Remeasure(report.reason, f"the stored report is not trusted now: {report.message}")
    stored = ctx.judge_report(report)
    if isinstance(stored, str):  # the stored report cannot be judged
        return Remeasure(REASON_REMEASURE, f"the stored report cannot be judged: {stored}")
    problem = acceptance_problem(
        stored, report, ctx.counted_node, accept_simulated=accept_simulated
    )
    if problem is not None:  # e.g. 7 of 8 GPUs, with gpuCount off
        return Remeasure(problem.reason, f"the stored report cannot accept: {problem.message}")
    # A fabric conviction rests on pair results, not on this report: re-judging the
    # report does not lift it while the policy still runs the fabric test.
    convicted = tuple(r for r in st.reasons if r.check == FABRIC_CHECK)
    if stored.accepted and convicted and ctx.spec.fabric.enabled:
        return failing_verdict(convicted, checks=stored.checks, figures=stored.figures)
    return stored


def _keep(ctx: NodeContext, out: PlanBuilder) -> Plan:
    st = ctx.status
    # Leftover probe pods (e.g. a pod whose deletion was lost in a restart). A
    # fabric pod is left to the pair planning (core.fabric.policypass) only while the
    # node is a member of its policy's pass; otherwise no pass sees it, and it goes.
    member = is_member(st, ctx.policy.name, ctx.spec, ctx.node.labels)
    for pod in ctx.obs.pods:
        if keeps_watch_pod(ctx, pod):  # the window under way of a node watched in service
            continue
        if not pod.deleting and (pod.fabric is None or not member):
            out.delete_pod(pod)
    # Under taintEffect NoExecute: the drain through the Eviction API (core/phases/drain.py),
    # once the node carries the quarantine taint (status, node patch, then the drain).
    new, drain = drain_status(ctx, out, ctx.with_applied_keys(st))
    out.write_status(st, new)
    out.ensure_node(ctx, st)
    if drain is not None:
        out.actions.append(drain)
    return out.build("decided")
