"""The per-node context and the plan builder that every reconcile phase uses.

:class:`NodeContext` is what one node's reconcile looks at once it is governed
by exactly one valid policy (the node, the policy, its spec, the
NodeAcceptance status as read); :class:`PlanBuilder` collects the actions a
phase decides and turns them into an ordered :class:`Plan`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.checks.verdict import Verdict
from gpuaccept.contracts.api import REMEDY_CONDITION_TYPE
from gpuaccept.contracts.nodeacceptance import (
    NodeAcceptanceStatus,
    Phase,
    Reason,
)
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core import ladder, nodestate
from gpuaccept.operator.core.capacity import REASON_QUARANTINE_LIMIT
from gpuaccept.operator.core.conditions import with_accepted_condition
from gpuaccept.operator.core.gpupublishing import PublishedGpus, counted_node, node_gpus
from gpuaccept.operator.core.model import (
    Action,
    DeleteProbePod,
    EmitEvent,
    Judge,
    NodeSnapshot,
    NodeView,
    PatchNAStatus,
    PatchNodeCondition,
    PatchNodeTaintsLabels,
    Plan,
    PodView,
    PolicyView,
    RemoveReprobeAnnotation,
)
from gpuaccept.operator.core.podidentity import ForeignPod

__all__ = ["REASON_QUARANTINE_LIMIT", "NodeContext", "PlanBuilder", "cut", "reasons_message"]

REASON_PROBE_ERROR = "ProbeError"
REASON_WAITING_FOR_GPUS = "WaitingForGPUs"
WAIT_FOR_DELETION_SECONDS = 10.0


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def reasons_message(reasons: tuple[Reason, ...] | list[Reason]) -> str:
    parts = [f"{r.check}: {r.reason}" + (f" ({r.message})" if r.message else "") for r in reasons]
    return cut("; ".join(parts) or "no reason given", 1000)


@dataclass(frozen=True)
class NodeContext:
    """One governed node: what every phase of its reconcile reads."""

    obs: NodeSnapshot
    judge: Judge
    node: NodeView
    policy: PolicyView
    spec: NodeAcceptancePolicySpec
    status: NodeAcceptanceStatus  # as read; a phase writes a new one
    # Probe-labelled pods on the node that are not the operator's own
    # (core/podidentity.py): never read, never deleted; ``obs.pods`` holds the rest.
    foreign_pods: tuple[ForeignPod, ...] = ()

    @cached_property
    def gpus(self) -> PublishedGpus:
        """How the node publishes its GPUs, and its DRA pools (core/gpupublishing.py)."""
        return node_gpus(self.node, self.obs.resource_slices, self.obs.config.dra_drivers)

    @cached_property
    def counted_node(self) -> NodeView:
        """The node as a report is held to: on a DRA node its complete pools' GPUs
        play allocatable's and capacity's part (what its probe pod was passed,
        core/podspec.py), as ``nvidia.com/gpu`` does on a device-plugin node."""
        return counted_node(self.node, self.gpus)

    def judge_report(self, report: ProbeReport) -> Verdict | str:
        """The judge's verdict, or why it failed. A report can pass the contract and
        still break the judge (a value outside what the summary allows): that is a
        bad report, never a reason for reconcile to raise and the node to hang."""
        try:
            return self.judge(report, self.spec.probe)
        except Exception as error:  # untrusted input: any failure is the report's
            return cut(f"report cannot be judged: {type(error).__name__}: {error}", 500)

    def applied_taints(self, st: NodeAcceptanceStatus) -> list[str]:
        """Owned taint keys on the node once ``st`` is in place.

        A key recorded earlier (e.g. an old quarantine key) stays on record
        while the node still carries it, so a crash between the status write
        and the node patch cannot orphan it.
        """
        spec, node = self.spec, self.node
        if spec.dry_run:
            return list(st.applied_taints)
        # what this status makes the operator put on the node: the pending key, and
        # the quarantine key only when it quarantines (a foreign taint kept under
        # that key is not the operator's)
        quarantine = nodestate.quarantine_taint(spec)
        desired = {
            t.key
            for t in nodestate.desired_taints(node, spec, st)
            if t.key == spec.pending_taint_key
            or (st.phase == Phase.QUARANTINED and t == quarantine)
        }
        on_node = {t.key for t in node.taints}
        # recorded and still on the node: kept on record until the node patch that
        # this status leads to has removed it (a current key too: the quarantine
        # taint of an accepted node), so only keys it applied are ever removed. The
        # policy's pending key is the operator's whatever the record says
        # (nodestate.owned_keys): its record is kept too, as a status write of its
        # own after every verdict only to drop it would buy nothing (issue 41).
        pending = spec.pending_taint_key
        stale = {k for k in st.applied_taints if k in on_node or k == pending}
        return sorted(desired | stale)

    def applied_labels(self, st: NodeAcceptanceStatus) -> list[str]:
        """Quarantine label keys this operator set on the node, once ``st`` is in place.

        The policy's labels while ``st`` is Quarantined; a key recorded earlier
        stays on record while the node still carries it (the next node patch
        removes it where ``st`` says so; the pass after that drops the record).
        """
        if self.spec.dry_run:
            return list(st.applied_labels)
        desired = set(self.spec.quarantine.labels) if st.phase == Phase.QUARANTINED else set()
        kept = {key for key in st.applied_labels if key in self.node.labels}
        return sorted(desired | kept)

    def with_applied_keys(self, st: NodeAcceptanceStatus) -> NodeAcceptanceStatus:
        """``st`` recording the taint and label keys the operator owns on the node."""
        return st.model_copy(
            update={
                "applied_taints": self.applied_taints(st),
                "applied_labels": self.applied_labels(st),
                "node_uid": self.node.uid or st.node_uid,
            }
        )

    def stamped(self, st: NodeAcceptanceStatus, **update: object) -> NodeAcceptanceStatus:
        """``st`` with ``update`` and the policy it was decided under."""
        policy = self.policy
        return st.model_copy(
            update={
                **update,
                "policy": policy.name,
                "policy_generation": policy.generation,
                "policy_uid": policy.uid or None,
                "node_uid": self.node.uid or st.node_uid,
                "gpu_publishing": self.gpus.mode,
            }
        )


@dataclass
class PlanBuilder:
    """Collects one pass's actions; :meth:`build` orders them into a :class:`Plan`."""

    obs: NodeSnapshot
    actions: list[Action] = field(default_factory=list)
    requeue: float | None = None
    needs_limit_lock: bool = False
    remove_annotation: bool = False

    def wake_in(self, seconds: float) -> None:
        seconds = max(seconds, 0.5)
        self.requeue = seconds if self.requeue is None else min(self.requeue, seconds)

    def build(self, note: str) -> Plan:
        tail = (RemoveReprobeAnnotation(self.obs.node_name),) if self.remove_annotation else ()
        return Plan.ordered(
            (*self.actions, *tail),
            requeue_after=self.requeue,
            needs_limit_lock=self.needs_limit_lock,
            note=note,
        )

    def event(
        self,
        kind: Literal["Node", "NodeAcceptance"],
        etype: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None:
        target = self.obs.node if kind == "Node" else self.obs.na
        if target is not None:
            self.actions.append(
                EmitEvent(kind, target.name, target.uid, etype, reason, cut(message, 1000))
            )

    def write_status(self, old: NodeAcceptanceStatus, new: NodeAcceptanceStatus) -> None:
        """Write ``new`` (with its ``Accepted`` condition in line) when it differs."""
        na = self.obs.na
        new = with_accepted_condition(new, self.obs.now)
        if new.drain is not None and new.phase != Phase.QUARANTINED:
            new = new.model_copy(update={"drain": None})  # a drain is its quarantine's
        if new != old and na is not None:
            self.actions.append(PatchNAStatus(na.name, na.resource_version, new))

    def delete_pod(self, pod: PodView) -> None:
        """Delete ``pod`` at once if it already terminated, else with its grace period."""
        self.actions.append(DeleteProbePod(pod.name, force=pod.phase in ("Succeeded", "Failed")))

    def ensure_node(self, ctx: NodeContext, st: NodeAcceptanceStatus) -> None:
        """Bring taints, labels and the condition in line with ``st`` (not in dryRun)."""
        node, spec = ctx.node, ctx.spec
        if spec.dry_run:
            return
        taints = nodestate.desired_taints(node, spec, st)
        labels = nodestate.desired_labels(node, spec, st)
        if taints != node.taints or labels:
            self.actions.append(
                PatchNodeTaintsLabels(
                    node.name,
                    node.resource_version,
                    taints if taints != node.taints else None,
                    labels,
                )
            )
        want = _wanted_condition(node, st)
        cond = node.condition
        if want is not None and (cond is None or (cond.status, cond.reason) != want[:2]):
            self.actions.append(
                PatchNodeCondition(node.name, want[0], want[1], cut(want[2], 1000), self.obs.now)
            )
        remedy = _wanted_remedy(node, st)
        if remedy is not None:
            status, reason, message = remedy
            self.actions.append(
                PatchNodeCondition(
                    node.name, status, reason, message, self.obs.now, REMEDY_CONDITION_TYPE
                )
            )


def _wanted_remedy(
    node: NodeView, st: NodeAcceptanceStatus
) -> tuple[Literal["True", "False"], str, str] | None:
    """The node's GPUAcceptanceRemedy condition for ``st`` when it must change (None:
    in place). Written for a quarantined node, and set back to False once it is not;
    a node never quarantined never gets one (no request)."""
    rung = ladder.remedy(st)
    seen = node.remedy
    if rung == ladder.Rung.NONE:
        if seen is None or seen.status != "True":
            return None
        return ("False", ladder.REMEDY_REASON[rung], "the node is not quarantined")
    reason = ladder.REMEDY_REASON[rung]
    if seen is not None and (seen.status, seen.reason) == ("True", reason):
        return None
    return ("True", reason, cut(f"{reason}: {st.reason or ''}: {st.message or ''}", 1000))


def _wanted_condition(
    node: NodeView, st: NodeAcceptanceStatus
) -> tuple[Literal["True", "False", "Unknown"], str, str] | None:
    """The node's GPUAcceptance condition for ``st``; None: leave it as it is."""
    if st.phase == Phase.ACCEPTED:
        return ("True", "Accepted", "all required GPU acceptance checks passed")
    if st.phase in (Phase.QUARANTINED, Phase.RELEASED):
        return ("False", st.reason or REASON_PROBE_ERROR, st.message or "")
    cond = node.condition
    if cond is not None and cond.status == "True":
        # No longer accepted (a re-probe, or a failing one held): not "True".
        return ("Unknown", st.reason or st.phase.value, st.message or st.phase.value)
    return None
