"""``reconcile(observed, judge) -> Plan``: the operator's whole decision logic.

Level-triggered, in the style of controller-runtime: whatever woke the
operator up (a node event, a pod event, a policy change, a restart), this
looks at what *is* and plans what *should be*. Applying a plan and reconciling
again yields a plan without writes, which is what makes duplicate events and
restarts harmless.

Fail safe: every unsure path (error, timeout, breaker, paused, invalid or
mismatched report) leaves the node out of service, under the pending taint or
quarantined. An error never accepts a node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.api import ACCEPTANCE_KIND, REPROBE_ANNOTATION
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase, Reason
from gpuaccept.contracts.policy import PolicyChangeAction
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core import nodestate
from gpuaccept.operator.core.model import (
    Action,
    CreateNodeAcceptance,
    CreateProbePod,
    DeleteNodeAcceptance,
    DeleteProbePod,
    EmitEvent,
    Judge,
    Judgement,
    NodeView,
    Observed,
    PatchNAStatus,
    PatchNodeCondition,
    PatchNodeTaintsLabels,
    Plan,
    PodView,
    PolicyView,
    RemoveReprobeAnnotation,
)
from gpuaccept.operator.core.podspec import probe_pod_manifest, probe_pod_name
from gpuaccept.operator.core.report import validate_report

DECIDED = frozenset({Phase.ACCEPTED, Phase.QUARANTINED, Phase.HELD})
HELD_QUARANTINE = "Quarantine"
HELD_ACCEPT = "Accept"
REASON_PROBE_ERROR = "ProbeError"
REASON_BREAKER = "BreakerOpen"
REASON_DRY_RUN = "DryRun"
# Container states that will not resolve by waiting.
STUCK_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
WAIT_FOR_DELETION_SECONDS = 10.0
REASON_WAITING_FOR_GPUS = "WaitingForGPUs"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _reasons_message(reasons: tuple[Reason, ...] | list[Reason]) -> str:
    parts = [f"{r.check}: {r.reason}" + (f" ({r.message})" if r.message else "") for r in reasons]
    return _cut("; ".join(parts) or "no reason given", 1000)


@dataclass
class _Planner:
    obs: Observed
    judge: Judge
    actions: list[Action] = field(default_factory=list)
    requeue: float | None = None
    needs_breaker: bool = False
    note: str = ""
    remove_annotation: bool = False

    # ----------------------------------------------------------------- helpers

    def wake_in(self, seconds: float) -> None:
        seconds = max(seconds, 0.5)
        self.requeue = seconds if self.requeue is None else min(self.requeue, seconds)

    def plan(self, note: str = "") -> Plan:
        # Last: it bumps the node's resourceVersion, which guards the taint patch.
        tail = (RemoveReprobeAnnotation(self.obs.node_name),) if self.remove_annotation else ()
        return Plan(
            actions=(*self.actions, *tail),
            requeue_after=self.requeue,
            needs_breaker=self.needs_breaker,
            note=note or self.note,
        )

    def event(
        self,
        kind: Literal["Node", "NodeAcceptance"],
        etype: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None:
        obs = self.obs
        target = obs.node if kind == "Node" else obs.na
        if target is not None:
            self.actions.append(
                EmitEvent(kind, target.name, target.uid, etype, reason, _cut(message, 1000))
            )

    def write_status(self, old: NodeAcceptanceStatus, new: NodeAcceptanceStatus) -> None:
        if new != old and self.obs.na is not None:
            self.actions.append(PatchNAStatus(self.obs.na.name, self.obs.na.resource_version, new))

    def ensure_node(
        self, node: NodeView, spec: NodeAcceptancePolicySpec, st: NodeAcceptanceStatus
    ) -> None:
        """Bring taints, labels and the condition in line with ``st`` (not in dryRun)."""
        if spec.dry_run:
            return
        taints = nodestate.desired_taints(node, spec, st)
        labels = nodestate.desired_labels(node, spec, st.phase)
        if taints != node.taints or labels:
            self.actions.append(
                PatchNodeTaintsLabels(
                    node.name,
                    node.resource_version,
                    taints if taints != node.taints else None,
                    labels,
                )
            )
        cond = node.condition
        if st.phase == Phase.ACCEPTED:
            want = ("True", "Accepted", "all required GPU acceptance checks passed")
        elif st.phase == Phase.QUARANTINED:
            want = ("False", st.reason or REASON_PROBE_ERROR, st.message or "")
        elif cond is not None and cond.status == "True":
            # No longer accepted (a re-probe, or a failing one held): not "True".
            want = ("Unknown", st.reason or st.phase.value, st.message or st.phase.value)
        else:
            return
        if cond is None or (cond.status, cond.reason) != want[:2]:
            self.actions.append(
                PatchNodeCondition(node.name, want[0], want[1], _cut(want[2], 1000), self.obs.now)  # type: ignore[arg-type]
            )

    def _judge(self, report: ProbeReport, spec: NodeAcceptancePolicySpec) -> Judgement | str:
        """The judge's verdict, or why it failed. A report can pass the contract and
        still break the judge (a value outside what the summary allows): that is a
        bad report, never a reason for reconcile to raise and the node to hang."""
        try:
            return self.judge(report, spec.probe)
        except Exception as error:  # untrusted input: any failure is the report's
            return _cut(f"report cannot be judged: {type(error).__name__}: {error}", 500)

    # ----------------------------------------------------------------- main

    def run(self) -> Plan:
        obs = self.obs
        node = obs.node
        if node is None:
            # Node deleted: its NodeAcceptance and probe pods go too.
            if obs.na is not None:
                self.actions.append(DeleteNodeAcceptance(obs.na.name))
            for pod in obs.pods:
                if not pod.deleting:
                    self.actions.append(DeleteProbePod(pod.name, force=True))
            return self.plan("node deleted")
        if len(obs.policies) != 1:
            # 0: not governed. >= 2: a conflict, reported on the policies. No action.
            return self.plan("no policy" if not obs.policies else "policy conflict")
        policy = obs.policies[0]
        spec = policy.spec
        if spec is None:
            return self.plan(f"policy {policy.name} invalid: {policy.error}")
        if obs.na is None:
            self.actions.append(CreateNodeAcceptance(node.name, policy.name))
            self.ensure_node(node, spec, NodeAcceptanceStatus())
            return self.plan("new node")
        st = obs.na.status
        if spec.paused:
            return self.paused(node, spec, st)
        if st.phase in DECIDED:
            return self.decided(node, policy, spec, st)
        if REPROBE_ANNOTATION in node.annotations and spec.reprobe.on_annotation:
            # A probe is already underway; the request is satisfied by it.
            self.remove_annotation = True
        if st.phase == Phase.PROBING:
            return self.probing(node, policy, spec, st)
        return self.pending(node, policy, spec, st)

    def paused(
        self, node: NodeView, spec: NodeAcceptancePolicySpec, st: NodeAcceptanceStatus
    ) -> Plan:
        """No new probes, nothing decided changes; undecided nodes stay out."""
        if st.phase in (Phase.PENDING, Phase.PROBING):
            self.ensure_node(node, spec, st)
        return self.plan("paused")

    # ----------------------------------------------------------------- decided

    def decided(
        self,
        node: NodeView,
        policy: PolicyView,
        spec: NodeAcceptancePolicySpec,
        st: NodeAcceptanceStatus,
    ) -> Plan:
        annotated = REPROBE_ANNOTATION in node.annotations and spec.reprobe.on_annotation
        if annotated:
            self.remove_annotation = True
        if (
            spec.reprobe.on_boot_id_change
            and st.probed_boot_id
            and st.probed_boot_id != node.boot_id
        ):
            return self.new_round(
                node,
                policy,
                spec,
                st,
                reason="BootIDChanged",
                message=f"bootID changed from {st.probed_boot_id} to {node.boot_id}",
            )
        if annotated:
            return self.new_round(
                node,
                policy,
                spec,
                st,
                reason="ReprobeRequested",
                message=f"annotation {REPROBE_ANNOTATION} was set",
            )
        changed = (
            st.policy != policy.name
            or st.policy_generation != policy.generation
            # recreated under the same name: generation 1 again, but a new object
            or (bool(st.policy_uid) and bool(policy.uid) and st.policy_uid != policy.uid)
        )
        if changed:
            action = spec.reprobe.on_policy_change
            if st.phase == Phase.HELD:
                action = PolicyChangeAction.REJUDGE  # a held action is never left stale
            if action == PolicyChangeAction.REPROBE:
                return self.new_round(
                    node,
                    policy,
                    spec,
                    st,
                    reason="PolicyChanged",
                    message=f"policy {policy.name} changed (generation {policy.generation})",
                )
            if action == PolicyChangeAction.REJUDGE:
                stored = self._judge(st.report, spec) if st.report is not None else None
                if isinstance(stored, Judgement):
                    judgement = stored
                elif isinstance(stored, str):  # the stored report cannot be judged
                    judgement = Judgement(
                        accepted=False,
                        reasons=(Reason(check="probe", reason=REASON_PROBE_ERROR, message=stored),),
                    )
                else:  # an error verdict has no results to re-judge: it stands
                    judgement = Judgement(
                        accepted=False,
                        reasons=tuple(st.reasons)
                        or (
                            Reason(
                                check="probe", reason=REASON_PROBE_ERROR, message=st.message or ""
                            ),
                        ),
                    )
                return self.apply(
                    node, policy, spec, st, judgement, report=st.report, rejudged=True, pod=None
                )
        if st.phase == Phase.HELD and st.reason == REASON_BREAKER and not spec.dry_run:
            limit = spec.max_quarantined_count(self.obs.breaker.matched)
            if self.obs.breaker.quarantined + 1 <= limit:
                judgement = Judgement(
                    accepted=False,
                    reasons=tuple(st.reasons),
                    checks=tuple(st.checks),
                    figures=st.figures,
                )
                return self.apply(
                    node,
                    policy,
                    spec,
                    st,
                    judgement,
                    report=st.report,
                    rejudged=st.rejudged,
                    pod=None,
                )
        # Leftover probe pods (e.g. a pod whose deletion was lost in a restart).
        for pod in self.obs.pods:
            if not pod.deleting:
                self.actions.append(
                    DeleteProbePod(pod.name, force=pod.phase in ("Succeeded", "Failed"))
                )
        applied = self._applied(node, spec, st)
        if applied != st.applied_taints:
            self.write_status(st, st.model_copy(update={"applied_taints": applied}))
        self.ensure_node(node, spec, st)
        return self.plan("decided")

    def new_round(
        self,
        node: NodeView,
        policy: PolicyView,
        spec: NodeAcceptancePolicySpec,
        st: NodeAcceptanceStatus,
        *,
        reason: str,
        message: str,
    ) -> Plan:
        new = st.model_copy(
            update={
                "phase": Phase.PENDING,
                "reason": reason,
                "message": _cut(message, 1000),
                "attempts": 0,
                "held_action": None,
                "rejudged": False,
                "next_attempt_time": None,
                "probe_pod": None,
                "probe_started_time": None,
                "policy": policy.name,
                "policy_generation": policy.generation,
                "policy_uid": policy.uid or None,
                "report": None,  # the old round's evidence is not this round's
            }
        )
        new = new.model_copy(update={"applied_taints": self._applied(node, spec, new)})
        self.write_status(st, new)
        self.event(ACCEPTANCE_KIND, "Normal", "Reprobe", message)
        self.ensure_node(node, spec, new)
        self.wake_in(1)
        return self.plan(f"new round: {reason}")

    def _applied(
        self, node: NodeView, spec: NodeAcceptancePolicySpec, st: NodeAcceptanceStatus
    ) -> list[str]:
        """Owned taint keys on the node once ``st`` is in place.

        A key recorded earlier (e.g. an old quarantine key) stays on record
        while the node still carries it, so a crash between the status write
        and the node patch cannot orphan it.
        """
        if spec.dry_run:
            return list(st.applied_taints)
        current = {spec.pending_taint_key, spec.quarantine.taint_key}
        desired = {t.key for t in nodestate.desired_taints(node, spec, st)} & current
        on_node = {t.key for t in node.taints}
        stale = {k for k in st.applied_taints if k not in current and k in on_node}
        return sorted(desired | stale)

    # ----------------------------------------------------------------- pending

    def pending(
        self,
        node: NodeView,
        policy: PolicyView,
        spec: NodeAcceptancePolicySpec,
        st: NodeAcceptanceStatus,
    ) -> Plan:
        self.ensure_node(node, spec, st)
        # One pod at a time: clear out any earlier pod first.
        live = [p for p in self.obs.pods if not p.deleting]
        for pod in live:
            self.actions.append(
                DeleteProbePod(pod.name, force=pod.phase in ("Succeeded", "Failed"))
            )
        if self.obs.pods:
            self.wake_in(WAIT_FOR_DELETION_SECONDS)
            return self.plan("waiting for an earlier probe pod to go")
        if st.attempts >= spec.probe_run.retries + 1:  # inconsistent; fail safe
            return self.error(
                node,
                policy,
                spec,
                st,
                reason=REASON_PROBE_ERROR,
                message="attempts exhausted",
                pod=None,
            )
        now = self.obs.now
        if st.next_attempt_time is not None and now < st.next_attempt_time:
            self.wake_in((st.next_attempt_time - now).total_seconds())
            return self.plan("backing off")
        if node.gpus <= 0:
            # The device plugin has not advertised nvidia.com/gpu yet (a node that
            # just joined): a probe now would request no GPU. The Node update that
            # adds them wakes this node again; it stays out meanwhile.
            self.write_status(
                st,
                st.model_copy(
                    update={
                        "reason": REASON_WAITING_FOR_GPUS,
                        "message": "the node advertises no allocatable nvidia.com/gpu yet",
                    }
                ),
            )
            return self.plan("waiting for allocatable GPUs")
        serial = st.pod_serial + 1
        name = probe_pod_name(self.obs.config.pod_prefix, node.name, serial)
        waited = st.reason == REASON_WAITING_FOR_GPUS  # over now: not this attempt's reason
        new = st.model_copy(
            update={
                "reason": None if waited else st.reason,
                "message": None if waited else st.message,
                "phase": Phase.PROBING,
                "attempts": st.attempts + 1,
                "pod_serial": serial,
                "probe_pod": name,
                "probe_started_time": now,
                "next_attempt_time": None,
                "policy": policy.name,
                "policy_generation": policy.generation,
                "policy_uid": policy.uid or None,
                "held_action": None,
            }
        )
        new = new.model_copy(update={"applied_taints": self._applied(node, spec, new)})
        # Status first: the attempt is on record before its pod exists, so a
        # restart in between recreates the same pod name, never a second pod.
        self.write_status(st, new)
        self.actions.append(CreateProbePod(name, self._manifest(node, policy, spec, new)))
        self.wake_in(self.obs.config.timeout_for(spec) + self.obs.config.deadline_grace_seconds)
        return self.plan(f"probe attempt {new.attempts}")

    def _manifest(
        self,
        node: NodeView,
        policy: PolicyView,
        spec: NodeAcceptancePolicySpec,
        st: NodeAcceptanceStatus,
    ) -> dict[str, Any]:
        """The pod of the attempt recorded in ``st`` (its name and serial)."""
        return probe_pod_manifest(
            name=st.probe_pod or "",
            serial=st.pod_serial,
            node=node,
            policy_name=policy.name,
            spec=spec,
            config=self.obs.config,
            applied_taints=st.applied_taints,
        )

    # ----------------------------------------------------------------- probing

    def probing(
        self,
        node: NodeView,
        policy: PolicyView,
        spec: NodeAcceptancePolicySpec,
        st: NodeAcceptanceStatus,
    ) -> Plan:
        self.ensure_node(node, spec, st)
        now = self.obs.now
        pod: PodView | None = None
        for candidate in self.obs.pods:
            if candidate.name == st.probe_pod:
                pod = candidate
            elif not candidate.deleting:  # stale pod of an earlier attempt
                self.actions.append(
                    DeleteProbePod(candidate.name, force=candidate.phase in ("Succeeded", "Failed"))
                )
        started = st.probe_started_time or now
        deadline = started + timedelta(
            seconds=self.obs.config.timeout_for(spec) + self.obs.config.deadline_grace_seconds
        )
        if pod is None and self.obs.pod_create_error:
            return self.error(
                node,
                policy,
                spec,
                st,
                reason="ProbePodError",
                message=f"the probe pod could not be created: {self.obs.pod_create_error}",
                pod=None,
            )
        if pod is None:
            if (
                now - started < timedelta(seconds=self.obs.config.pod_missing_grace_seconds)
                and st.probe_pod
            ):
                # Status was written, the pod not (yet): create it; AlreadyExists is fine.
                self.actions.append(
                    CreateProbePod(
                        st.probe_pod,
                        self._manifest(node, policy, spec, st),
                    )
                )
                self.wake_in((deadline - now).total_seconds())
                return self.plan("probe pod (re)created")
            return self.error(
                node,
                policy,
                spec,
                st,
                reason="ProbePodLost",
                message="the probe pod disappeared before it reported",
                pod=None,
            )
        if pod.terminated or pod.phase in ("Succeeded", "Failed"):
            return self.finished(node, policy, spec, st, pod)
        if pod.deleting and now < deadline:
            self.wake_in(min(WAIT_FOR_DELETION_SECONDS, (deadline - now).total_seconds()))
            return self.plan("probe pod is being deleted")
        if not pod.deleting and pod.waiting_reason in STUCK_WAITING:
            return self.error(
                node,
                policy,
                spec,
                st,
                reason="ProbePodError",
                message=f"{pod.waiting_reason}: {pod.waiting_message or ''}".strip(),
                pod=pod,
            )
        if now >= deadline:
            # A pod still terminating past it was e.g. evicted from a dead kubelet.
            stuck = "; the probe pod is stuck terminating" if pod.deleting else ""
            return self.error(
                node,
                policy,
                spec,
                st,
                reason="ProbeTimeout",
                message=f"no result within {self.obs.config.timeout_for(spec)}s{stuck}",
                pod=pod,
            )
        self.wake_in((deadline - now).total_seconds())
        return self.plan("probing")

    def finished(
        self,
        node: NodeView,
        policy: PolicyView,
        spec: NodeAcceptancePolicySpec,
        st: NodeAcceptanceStatus,
        pod: PodView,
    ) -> Plan:
        if pod.message:
            result = validate_report(pod.message, node_name=node.name, boot_id=node.boot_id)
            if isinstance(result, ProbeReport):
                judgement = self._judge(result, spec)
                if isinstance(judgement, str):  # valid JSON the judge cannot use
                    return self.error(
                        node, policy, spec, st, reason="InvalidReport", message=judgement, pod=pod
                    )
                return self.apply(
                    node, policy, spec, st, judgement, report=result, rejudged=False, pod=pod
                )
            return self.error(
                node, policy, spec, st, reason=result.reason, message=result.message, pod=pod
            )
        why = pod.reason or pod.phase
        detail = pod.pod_message or ""
        if pod.exit_code is not None:
            detail = f"exit code {pod.exit_code}. {detail}".strip()
        if pod.reason == "DeadlineExceeded":
            return self.error(
                node, policy, spec, st, reason="ProbeTimeout", message=f"{why}: {detail}", pod=pod
            )
        return self.error(
            node,
            policy,
            spec,
            st,
            reason="ProbeFailed",
            message=f"{why}: {detail or 'no report'}",
            pod=pod,
        )

    def error(
        self,
        node: NodeView,
        policy: PolicyView,
        spec: NodeAcceptancePolicySpec,
        st: NodeAcceptanceStatus,
        *,
        reason: str,
        message: str,
        pod: PodView | None,
    ) -> Plan:
        """An attempt failed without a trustworthy report: retry, then ProbeError."""
        now = self.obs.now
        if st.attempts < spec.probe_run.retries + 1:
            backoff = min(
                spec.probe_run.backoff_seconds * 2 ** max(st.attempts - 1, 0),
                self.obs.config.max_backoff_seconds,
            )
            new = st.model_copy(
                update={
                    "phase": Phase.PENDING,
                    "reason": reason,
                    "message": _cut(f"attempt {st.attempts} failed: {message}", 1000),
                    "next_attempt_time": now + timedelta(seconds=backoff),
                    "probe_pod": None,
                    "probe_started_time": None,
                }
            )
            self.write_status(st, new)
            self.event(
                ACCEPTANCE_KIND,
                "Warning",
                reason,
                f"probe attempt {st.attempts} failed, retrying in {backoff}s: {message}",
            )
            if pod is not None and not pod.deleting:
                self.actions.append(
                    DeleteProbePod(pod.name, force=pod.phase in ("Succeeded", "Failed"))
                )
            self.wake_in(backoff)
            return self.plan(f"retry after {reason}")
        judgement = Judgement(
            accepted=False,
            reasons=(
                Reason(
                    check="probe",
                    reason=REASON_PROBE_ERROR,
                    message=_cut(f"{reason}: {message}", 500),
                ),
            ),
        )
        return self.apply(node, policy, spec, st, judgement, report=None, rejudged=False, pod=pod)

    # ----------------------------------------------------------------- verdict

    def apply(
        self,
        node: NodeView,
        policy: PolicyView,
        spec: NodeAcceptancePolicySpec,
        st: NodeAcceptanceStatus,
        judgement: Judgement,
        *,
        report: ProbeReport | None,
        rejudged: bool,
        pod: PodView | None,
    ) -> Plan:
        """Record a verdict (subject to dryRun and the breaker) and act on the node."""
        now = self.obs.now
        reasons = list(judgement.reasons)[:32]
        summary = _reasons_message(reasons)
        held_action: str | None = None
        if spec.dry_run:
            phase = Phase.HELD
            held_action = HELD_ACCEPT if judgement.accepted else HELD_QUARANTINE
            reason: str | None = REASON_DRY_RUN
            message = (
                "dry run: would accept"
                if judgement.accepted
                else f"dry run: would quarantine: {summary}"
            )
        elif judgement.accepted:
            phase, reason, message = Phase.ACCEPTED, None, "all required checks passed"
        else:
            main = reasons[0].reason if reasons else REASON_PROBE_ERROR
            limit = spec.max_quarantined_count(self.obs.breaker.matched)
            # Already quarantined under this policy: no new slot is taken. Under
            # another policy (the node was relabelled), it takes one here.
            already = st.phase == Phase.QUARANTINED and st.policy == policy.name
            if not already and self.obs.breaker.quarantined + 1 > limit:
                phase, held_action, reason = Phase.HELD, HELD_QUARANTINE, REASON_BREAKER
                message = (
                    f"breaker: quarantining would exceed maxQuarantined={spec.max_quarantined}"
                    f" ({self.obs.breaker.quarantined} of limit {limit} in use); would"
                    f" quarantine: {summary}"
                )
            else:
                phase, reason, message = Phase.QUARANTINED, main, summary
            self.needs_breaker = True
        if not reasons and not judgement.accepted:
            reasons = [Reason(check="probe", reason=REASON_PROBE_ERROR, message="no reason given")]
        update: dict[str, Any] = {
            "phase": phase,
            "reason": reason,
            "message": _cut(message, 1000),
            "reasons": reasons,
            "held_action": held_action,
            "policy": policy.name,
            "policy_generation": policy.generation,
            "policy_uid": policy.uid or None,
            "rejudged": rejudged,
            "probe_pod": None,
            "probe_started_time": None,
            "next_attempt_time": None,
        }
        if not rejudged:
            update["last_probe_time"] = now
            update["probed_boot_id"] = report.boot_id if report is not None else node.boot_id
            # The report this verdict came from; an error verdict has none. Keeping
            # an older one would let a later re-judge accept on stale evidence.
            update["report"] = report
        if judgement.checks or report is not None:
            update["checks"] = list(judgement.checks)[:32]
        if judgement.figures is not None:
            update["figures"] = judgement.figures
        new = st.model_copy(update=update)
        new = new.model_copy(update={"applied_taints": self._applied(node, spec, new)})
        self.write_status(st, new)
        if (new.phase, new.reason) != (st.phase, st.reason):
            self._verdict_events(new, summary, judgement.accepted)
        self.ensure_node(node, spec, new)
        if pod is not None and not pod.deleting:
            self.actions.append(
                DeleteProbePod(pod.name, force=pod.phase in ("Succeeded", "Failed"))
            )
        return self.plan(f"verdict {new.phase.value}{' (rejudged)' if rejudged else ''}")

    def _verdict_events(self, new: NodeAcceptanceStatus, summary: str, accepted: bool) -> None:
        if new.phase == Phase.ACCEPTED:
            self.event(ACCEPTANCE_KIND, "Normal", "Accepted", "all required GPU checks passed")
        elif new.phase == Phase.QUARANTINED:
            text = f"quarantined ({new.reason}): {summary}"
            self.event("Node", "Warning", "Quarantined", text)
            self.event(ACCEPTANCE_KIND, "Warning", "Quarantined", text)
        elif new.reason == REASON_BREAKER:
            text = new.message or "breaker open"
            self.event("Node", "Warning", REASON_BREAKER, text)
            self.event(ACCEPTANCE_KIND, "Warning", REASON_BREAKER, text)
        elif new.reason == REASON_DRY_RUN:
            etype: Literal["Normal", "Warning"] = "Normal" if accepted else "Warning"
            self.event(ACCEPTANCE_KIND, etype, REASON_DRY_RUN, new.message or "dry run")


def reconcile(observed: Observed, judge: Judge) -> Plan:
    """Plan the writes that bring the cluster in line for one node."""
    return _Planner(observed, judge).run()
