"""A tiny in-memory cluster that applies plans, for testing the pure core."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, OwnedPod
from gpuaccept.contracts.probe_invocation import ProbeExit
from gpuaccept.contracts.report import ProbeReport, encode_termination_message
from gpuaccept.operator.core import (
    CreateNodeAcceptance,
    CreateProbePod,
    DeleteNodeAcceptance,
    DeleteProbePod,
    EmitEvent,
    NAView,
    NodeCondition,
    NodeSnapshot,
    NodeView,
    OperatorConfig,
    PatchNAStatus,
    PatchNodeCondition,
    PatchNodeTaintsLabels,
    Plan,
    PodView,
    PolicyView,
    QuarantineLimitCounts,
    RemoveReprobeAnnotation,
    Taint,
    reconcile,
)
from gpuaccept.operator.core.draclaim import claim_is_intended
from gpuaccept.operator.core.interpret import ActionInterpreter, interpret
from gpuaccept.operator.core.judge import judge
from gpuaccept.operator.core.model import (
    CreatedPod,
    CreateResourceClaim,
    DeleteFenceRule,
    DeleteResourceClaim,
    DrainNode,
    DrainResult,
    FabricVerdict,
    GpuPodSample,
    Judge,
    NodePod,
    ResourceSliceView,
    SignatureSeen,
    WatchEvidence,
    WriteFenceRule,
)
from gpuaccept.operator.core.phases.drain import evictable
from gpuaccept.operator.core.podidentity import shape_digest
from gpuaccept.operator.views import fence_rule_view, pod_view

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BOOT = "boot-1"


REPO = Path(__file__).resolve().parents[2]
HEALTHY_PROFILE = REPO / "profiles" / "h100-sxm-8gpu-healthy.yaml"
# The fault profile whose report fails the given check (its simulated hardware).
FAULT_PROFILES = {
    "pcie_link": "pcie-x8",
    "cpu_governor": "governor-powersave",
    "gpu_count": "gpu-missing",
    "nccl_allreduce": "nccl-slow",
}


@functools.cache
def probed(profile: Path) -> ProbeReport:
    """The real probe's report on ``profile`` (simulated hardware), once per session:
    its termination message, as the operator reads it (fitted to 4096 bytes)."""
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "termination-log"
        proc = subprocess.run(
            [sys.executable, "-m", "gpuaccept.cli", "probe", "--profile", str(profile),
             "--termination-log", str(log), "--node-name", "gpu-0000"],
            capture_output=True, text=True, check=False, timeout=120,
            env={**os.environ, "GPUACCEPT_EXPECTED_GPUS": "8"},
        )  # fmt: skip
        assert proc.returncode in (0, 1), proc.stderr[-2000:]
        return ProbeReport.model_validate_json(log.read_text())


def make_report(
    node: str = "gpu-1",
    boot_id: str = BOOT,
    failing: Iterable[str] = (),
) -> ProbeReport:
    """A real probe report for ``node``: healthy, or from the fault profile that
    fails the one check named in ``failing``; judged by the real judge."""
    failing = list(failing)
    assert len(failing) <= 1, "one fault profile per report"
    profile = (
        REPO / "profiles" / "faults" / f"{FAULT_PROFILES[failing[0]]}.yaml"
        if failing
        else HEALTHY_PROFILE
    )
    return probed(profile).model_copy(
        update={"node_name": node, "boot_id": boot_id, "started_at": T0, "finished_at": T0}
    )


def spec(**kwargs: object) -> NodeAcceptancePolicySpec:
    base: dict[str, object] = {
        "probeRun": {"timeoutSeconds": 60, "retries": 2, "backoffSeconds": 10},
        "maxQuarantined": 5,
    }
    base.update(kwargs)
    return NodeAcceptancePolicySpec.model_validate(base)


class StatusRefusedError(Exception):
    """The world's API server refused a status write."""


class FenceRuleRefusedError(Exception):
    """The world's API server refused a DeviceTaintRule write (``World.refuse_fence_rule``)."""


@dataclass
class World:
    node: NodeView | None = field(
        default_factory=lambda: NodeView(
            name="gpu-1",
            resource_version="1",
            uid="uid-node",
            labels={"nvidia.com/gpu.present": "true"},
            boot_id=BOOT,
            gpus=8,
            gpu_capacity=8,
            # registered under the pending taint, as docs/operator.md says to: a new
            # node, not in service (a node without it is one found in service)
            taints=(Taint("gpuaccept.io/pending", "NoSchedule"),),
        )
    )
    na: NAView | None = None
    pods: dict[str, PodView] = field(default_factory=dict)
    policies: list[PolicyView] = field(
        default_factory=lambda: [PolicyView(name="default", generation=1, spec=spec())]
    )
    limit_counts: QuarantineLimitCounts = field(
        default_factory=lambda: QuarantineLimitCounts(0, 10)
    )
    now: datetime = T0
    # The world's reports come from simulated hardware profiles.
    config: OperatorConfig = field(
        default_factory=lambda: OperatorConfig(accept_simulated_reports=True)
    )
    events: list[EmitEvent] = field(default_factory=list)
    log: list[Plan] = field(default_factory=list)
    rv: int = 10
    judge: Judge = judge
    # The API server's validation of a status write: why it refuses ``status``
    # (a 400/422), or None to accept it. Refused writes are remembered as the
    # executor remembers them, and the rest of the plan is dropped.
    refuse_status: Callable[[NodeAcceptanceStatus], str | None] | None = None
    status_write_error: str | None = None
    # Phase Fabric: the verdict the policy's pair planning gives this node.
    fabric_verdict: FabricVerdict | None = None
    # The re-verification loop's latest list of the node's pods.
    gpu_pod_sample: GpuPodSample | None = None
    # The executor refused to create the probe pod (e.g. "node busy: ...").
    pod_create_error: str | None = None
    # The executor's memory of its pod creates (core/podidentity.py).
    created: dict[str, CreatedPod] = field(default_factory=dict)
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)  # pods as created
    elsewhere: set[str] = field(default_factory=set)  # pod names taken on other nodes
    pod_name_taken: str | None = None
    # ResourceClaims in the operator's namespace, by name, as created (a DRA node's)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)

    # The node's other pods (a drain's), and those a PodDisruptionBudget protects now.
    node_pods: list[NodePod] = field(default_factory=list)
    protected: set[str] = field(default_factory=set)
    drain: DrainResult | None = None
    # Policy inService: the node's new watch reports, and the fleet's signatures.
    watch_reports: tuple[WatchEvidence, ...] = ()
    in_service_fleet: tuple[SignatureSeen, ...] = ()
    # The node's ResourceSlices (of any driver: the core keeps the configured ones).
    resource_slices: tuple[ResourceSliceView, ...] = ()
    # The DeviceTaintRules the world holds, by name (as created or patched).
    fence_rules: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The API server's answer to a DeviceTaintRule write: why it refuses it (a 403 or
    # 422: RBAC, an admission policy), or None to take it. A refusal is remembered as
    # the executor remembers it, and the rest of the plan is dropped.
    refuse_fence_rule: str | None = None
    fence_rule_write_error: str | None = None
    passes: int = 0
    restarts: int = 0
    # Pod names whose create this process sent without an answer (the executor's memory).
    unanswered: set[str] = field(default_factory=set)

    def restart(self) -> None:
        """A new operator process: what the executor remembered is gone, and its nonce
        seed is another."""
        self.restarts += 1
        self.created.clear()
        self.unanswered.clear()
        self.pod_name_taken = None
        self.drain = None

    def observe(self) -> NodeSnapshot:
        self.passes += 1
        return NodeSnapshot(
            nonce_seed=f"world-seed-{self.restarts}",  # one a process, as the controller's
            node_name="gpu-1",
            now=self.now,
            node=self.node,
            na=self.na,
            pods=tuple(self.pods.values()),
            policies=tuple(self.policies),
            limit_counts=self.limit_counts,
            config=self.config,
            status_write_error=self.status_write_error,
            fabric_verdict=self.fabric_verdict,
            gpu_pod_sample=self.gpu_pod_sample,
            pod_create_error=self.pod_create_error,
            created_pods=dict(self.created),
            pod_name_taken=self.pod_name_taken,
            pod_creates_unanswered=frozenset(self.unanswered),
            drain=self.drain,
            watch_reports=self.watch_reports,
            in_service_fleet=self.in_service_fleet,
            resource_slices=self.resource_slices,
            fence_rules=tuple(
                v for v in map(fence_rule_view, self.fence_rules.values()) if v is not None
            ),
            fence_rule_write_error=self.fence_rule_write_error,
        )

    def plan(self) -> Plan:
        return reconcile(self.observe(), self.judge)

    def _rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def apply(self, plan: Plan) -> None:
        self.log.append(plan)
        for action in plan.actions:
            try:
                interpret(self, action)
            except (StatusRefusedError, FenceRuleRefusedError):
                return  # as the controller does: drop the plan, re-plan

    # ---- the ActionInterpreter protocol, in memory
    def create_node_acceptance(self, action: CreateNodeAcceptance) -> None:
        assert self.na is None
        self.na = NAView(name=action.name, resource_version=self._rv(), uid="uid-na")

    def patch_na_status(self, action: PatchNAStatus) -> None:
        assert self.na is not None
        assert action.resource_version == self.na.resource_version
        refused = self.refuse_status(action.status) if self.refuse_status else None
        if refused is not None:
            self.status_write_error = refused
            raise StatusRefusedError(refused)
        self.status_write_error = None
        wire = action.status.to_wire()
        status = NodeAcceptanceStatus.model_validate(wire)  # valid on the wire
        # the API server's answer, read again: whatever phase it had, it has ours now
        self.na = dataclasses.replace(
            self.na, status=status, resource_version=self._rv(), unknown_phase=None
        )

    def patch_node_taints_labels(self, action: PatchNodeTaintsLabels) -> None:
        assert self.node is not None
        assert action.resource_version == self.node.resource_version
        labels = dict(self.node.labels)
        for key, value in action.labels.items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
        taints = self.node.taints if action.taints is None else action.taints
        self.node = dataclasses.replace(
            self.node, labels=labels, taints=taints, resource_version=self._rv()
        )

    def patch_node_condition(self, action: PatchNodeCondition) -> None:
        assert self.node is not None
        seen = NodeCondition(action.status, action.reason, action.message)
        field = "remedy" if action.condition_type == "GPUAcceptanceRemedy" else "condition"
        self.node = dataclasses.replace(self.node, **{field: seen})

    def create_probe_pod(self, action: CreateProbePod) -> None:
        if action.name in self.pods or action.name in self.elsewhere:
            self.pod_name_taken = action.name  # AlreadyExists, as the executor remembers it
            return
        self.pod_name_taken = None
        self.bodies[action.name] = pod_body(action.manifest, uid=f"uid-{action.name}")
        self.pods[action.name] = pod_view(self.bodies[action.name])
        self.created[action.name] = CreatedPod(
            uid=f"uid-{action.name}", shape=shape_digest(action.manifest)
        )

    def delete_probe_pod(self, action: DeleteProbePod) -> None:
        self.pods.pop(action.name, None)

    def create_resource_claim(self, action: CreateResourceClaim) -> None:
        """As the executor: a name taken by a claim whose nonce is not on record drops
        the plan (the pod is not created) and the node hears PodNameTaken."""
        found = self.claims.get(action.name)
        if found is None:
            self.claims[action.name] = dict(action.manifest)
            return
        if not claim_is_intended(found, action.intents):
            self.pod_name_taken = action.name
            raise StatusRefusedError("claim name taken")

    def delete_resource_claim(self, action: DeleteResourceClaim) -> None:
        found = self.claims.get(action.name)
        if found is not None and claim_is_intended(found, action.intents):
            del self.claims[action.name]

    def write_fence_rule(self, action: WriteFenceRule) -> None:
        if self.refuse_fence_rule is not None:
            self.fence_rule_write_error = self.refuse_fence_rule
            raise FenceRuleRefusedError(self.refuse_fence_rule)
        self.fence_rule_write_error = None
        self.fence_rules[action.name] = dict(action.manifest)

    def delete_fence_rule(self, action: DeleteFenceRule) -> None:
        self.fence_rules.pop(action.name, None)

    def emit_event(self, action: EmitEvent) -> None:
        self.events.append(action)

    def remove_reprobe_annotation(self, action: RemoveReprobeAnnotation) -> None:
        assert self.node is not None
        annotations = {
            k: v for k, v in self.node.annotations.items() if k != "gpuaccept.io/reprobe"
        }
        self.node = dataclasses.replace(
            self.node, annotations=annotations, resource_version=self._rv()
        )

    def drain_node(self, action: DrainNode) -> None:
        """The Eviction API: a pod whose budget allows no disruption stays (429)."""
        targets = evictable(self.node_pods, action.taint, namespace=action.namespace)
        evicted = [p for p in targets if p.name not in self.protected]
        blocked = [f"{p.namespace}/{p.name}: 429" for p in targets if p.name in self.protected]
        self.node_pods = [p for p in self.node_pods if p not in evicted]
        self.drain = DrainResult(
            action.started,
            self.now,
            tuple(f"{p.namespace}/{p.name}" for p in evicted),
            tuple(blocked),
        )

    def delete_node_acceptance(self, action: DeleteNodeAcceptance) -> None:
        self.na = None

    def place_pods(self, *pods: PodView) -> None:
        """Put ``pods`` on the node as pods the operator created: their identity as
        the API server gives it, their UIDs on record in the status."""
        assert self.na is not None
        assert self.node is not None
        owned = list(self.na.status.owned_pods)
        for pod in pods:
            placed = dataclasses.replace(
                pod,
                uid=f"uid-{pod.name}",
                node_name=self.node.name,
                owner_uid=self.na.uid,
                shape="shape-" + hashlib.sha256(pod.name.encode()).hexdigest()[:8],
            )
            self.pods[pod.name] = placed
            owned.append(OwnedPod(name=placed.name, uid=placed.uid, shape=placed.shape))
        status = self.na.status.model_copy(update={"owned_pods": owned})
        self.na = dataclasses.replace(self.na, status=status)

    def settle(self, rounds: int = 10, tick_s: float = 0.0) -> Plan:
        """Reconcile and apply until the plan has no writes; returns the last plan.
        The clock moves ``tick_s`` with each write (0: it stands still)."""
        for _ in range(rounds):
            plan = self.plan()
            if not plan.actions:
                return plan
            self.apply(plan)
            self.now += timedelta(seconds=tick_s)
        raise AssertionError(f"no fixed point after {rounds} rounds: {self.log[-1]}")

    def settle_ticking(self, rounds: int = 10, tick_s: float = 0.01) -> Plan:
        """:meth:`settle` on a clock that moves ``tick_s`` with each write, as on a real
        API server: a plan that writes the clock rather than a change into the status
        never reaches a fixed point here (each write wakes the next pass at once)."""
        return self.settle(rounds, tick_s)

    # ---- simulated kubelet
    def current_pod(self) -> PodView:
        assert len(self.pods) == 1, self.pods
        return next(iter(self.pods.values()))

    def finish_pod(
        self, message: str | None, *, exit_code: int = 0, phase: str = "Succeeded", reason: str = ""
    ) -> None:
        pod = self.current_pod()
        self.pods[pod.name] = dataclasses.replace(
            pod,
            phase=phase,
            terminated=True,
            exit_code=exit_code,
            message=message,
            reason=reason or ("Completed" if exit_code == 0 else "Error"),
        )

    def finish_with_report(self, report: ProbeReport | None = None) -> None:
        """The pod ends as the probe ends it: the report, exit 0/1 by its own verdict."""
        report = report or make_report()
        policy = self.policies[0].spec
        assert policy is not None
        accepted = judge(report, policy.probe).accepted  # the probe's own, real verdict
        self.finish_pod(
            encode_termination_message(report),
            exit_code=ProbeExit.ACCEPTED if accepted else ProbeExit.QUARANTINED,
            phase="Succeeded" if accepted else "Failed",
        )

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    @property
    def status(self) -> NodeAcceptanceStatus:
        assert self.na is not None
        return self.na.status

    def taint_keys(self) -> list[str]:
        assert self.node is not None
        return [t.key for t in self.node.taints]


PENDING = Taint("gpuaccept.io/pending", "NoSchedule")


def pod_body(manifest: Mapping[str, Any], *, uid: str) -> dict[str, Any]:
    """The pod the API server makes of ``manifest``."""
    return {**manifest, "metadata": {**manifest["metadata"], "uid": uid}}


_: type[ActionInterpreter] = World  # the world is checked against the protocol
