"""Plain data for the reconcile core: what was observed, and the actions planned.

Everything here is immutable and free of I/O. The Kubernetes adapter builds
:class:`NodeSnapshot` from its cache and executes the :class:`Plan`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from gpuaccept.checks import fabric_allreduce
from gpuaccept.checks.fabric_allreduce import NoPartnerAction
from gpuaccept.checks.nccl_allreduce import BUSBW_FIGURE
from gpuaccept.checks.policy import NodeAcceptancePolicySpec, ProbePolicy
from gpuaccept.checks.verdict import Verdict
from gpuaccept.contracts.api import NODE_CONDITION_TYPE
from gpuaccept.contracts.inservice import XidClassName
from gpuaccept.contracts.nodeacceptance import CreationIntent, NodeAcceptanceStatus
from gpuaccept.contracts.policy_fields import OWNED_KEY_PREFIX
from gpuaccept.contracts.report import ProbeReport

# --------------------------------------------------------------------------- observed


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str | None = None
    # Kept as read, so that rewriting the taint list (a JSON patch of the whole
    # list) leaves another owner's NoExecute taint exactly as it was.
    time_added: str | None = field(default=None, compare=False)

    def to_wire(self) -> dict[str, str]:
        wire = {"key": self.key, "effect": self.effect}
        if self.value:
            wire["value"] = self.value
        if self.time_added:
            wire["timeAdded"] = self.time_added
        return wire

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> Taint:
        return cls(
            key=str(raw.get("key", "")),
            effect=str(raw.get("effect", "")),
            value=(str(raw["value"]) if raw.get("value") else None),
            time_added=(str(raw["timeAdded"]) if raw.get("timeAdded") else None),
        )


@dataclass(frozen=True)
class NodeCondition:
    """The node's ``GPUAcceptance`` condition as last seen."""

    status: str
    reason: str
    message: str = ""


@dataclass(frozen=True)
class NodeView:
    name: str
    resource_version: str = ""
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    boot_id: str = ""
    gpus: int = 0  # status.allocatable nvidia.com/gpu: what the probe pod requests
    gpu_capacity: int = 0  # status.capacity nvidia.com/gpu: healthy and unhealthy devices
    shared_gpus: int = 0  # status.allocatable nvidia.com/gpu.shared (sharing, renameByDefault)
    unschedulable: bool = False
    condition: NodeCondition | None = None
    remedy: NodeCondition | None = None  # its GPUAcceptanceRemedy condition as last seen
    created: datetime | None = None  # metadata.creationTimestamp (when it registered)
    # Its other conditions (type, status, lastTransitionTime): what other tools
    # (node-problem-detector, a cloud agent) say, for policy inService.
    conditions: tuple[ConditionSeen, ...] = ()


@dataclass(frozen=True)
class DeviceTaintView:
    """A taint a DRA driver put on its device (``spec.devices[].taints``, KEP-5055;
    ``resource.k8s.io/v1`` DeviceTaint: key, value, effect, timeAdded)."""

    key: str
    value: str = ""
    effect: str = ""  # None, NoSchedule, NoExecute (consumers treat unknown ones as None)
    added: datetime | None = None  # timeAdded (the API server sets it when absent)


@dataclass(frozen=True)
class DraDevice:
    """One device of a DRA driver's ResourceSlice (``spec.devices[]``), with the
    attributes NVIDIA's driver publishes for a GPU (docs/architecture.md)."""

    name: str  # e.g. gpu-0 (NVIDIA's driver: gpu-<minor>)
    uuid: str = ""  # attribute uuid (GPU-...)
    product_name: str = ""  # attribute productName
    index: int | None = None  # attribute index, where the driver publishes one
    kind: str = ""  # attribute type: gpu, mig, vfio (NVIDIA's driver); "" when absent
    taints: tuple[DeviceTaintView, ...] = ()  # the driver's own (its health monitor's)
    parent_uuid: str = ""  # attribute parentUUID of a MIG device: the GPU it is cut from


@dataclass(frozen=True)
class ResourceSliceView:
    """A ``resource.k8s.io/v1`` ResourceSlice of a configured DRA driver, as the
    cache keeps it: its pool, the pool's generation and slice count, its devices."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int  # spec.pool.resourceSliceCount
    node_name: str = ""  # spec.nodeName ("" when the slice names none)
    devices: tuple[DraDevice, ...] = ()
    resource_version: str = ""


@dataclass(frozen=True)
class FenceRuleView:
    """A ``resource.k8s.io/v1`` DeviceTaintRule: one fenced GPU of a node
    (core/fencerules.py), wanted or as the watch shows one of gpuaccept's (its labels)."""

    name: str
    node: str  # the node it fences a GPU of (label gpuaccept.io/node's node)
    gpu_uuid: str  # the GPU it was resolved from (annotation gpuaccept.io/gpu-uuid)
    driver: str  # spec.deviceSelector.driver
    pool: str  # spec.deviceSelector.pool
    device: str  # spec.deviceSelector.device
    key: str  # spec.taint.key
    value: str  # spec.taint.value: the fence's reason
    effect: str  # spec.taint.effect: NoSchedule, NoExecute, None (dryRun)


@dataclass(frozen=True)
class NAView:
    """The node's NodeAcceptance object (status parsed with the contract)."""

    name: str
    status: NodeAcceptanceStatus = field(default_factory=NodeAcceptanceStatus)
    resource_version: str = ""
    uid: str = ""
    # Only gpuaccept's own (the release request of kubectl gpuaccept release).
    annotations: Mapping[str, str] = field(default_factory=dict)
    # The stored phase when this release does not know it (a newer release wrote it,
    # before a rollback): ``status`` is the rest, read with phase Pending in its place
    # (core/phases/unknown.py decides what happens to the node).
    unknown_phase: str | None = None
    # None: ``status`` is whole, as a decision reads it. Else this is the cache's slim
    # view: ``status`` lacks the fields the cache keeps packed (operator/views.py,
    # ``PACKED_FIELDS``), and this is what the readers of the slim view take of them.
    packed: PackedReadings | None = None


PUBLISHED_FIGURES = (BUSBW_FIGURE, "minPcieGeneration", "minPcieWidth")
"""The check figures (``status.figures``) the operator publishes per node (metrics.py):
the all-reduce bus bandwidth, the weakest PCIe link's generation and width."""


@dataclass(frozen=True)
class PackedReadings:
    """What the readers of a slim NodeAcceptance view (the cache's entry, whose
    ``status.figures``, ``status.inService`` and ``status.conditions`` stay packed with
    the evidence) read of those fields, taken when the entry is made: the figures of
    :data:`PUBLISHED_FIGURES` it has (name and value) for the metrics, and its
    in-service signatures (core/inservice/correlation.py) for the other nodes'
    correlation."""

    figures: tuple[tuple[str, object], ...] = ()
    signatures: tuple[SignatureSeen, ...] = ()


@dataclass(frozen=True)
class FabricPodLabels:
    """What a fabric pod says about its pair (its labels and annotations)."""

    pair: str
    rank: int  # 0: the pod on ``first``, created first
    first: str
    second: str


@dataclass(frozen=True)
class PodView:
    """A probe pod bound to the node (found by ``spec.nodeName``)."""

    name: str
    phase: str = "Pending"  # Pending | Running | Succeeded | Failed | Unknown
    deleting: bool = False
    serial: int | None = None  # the gpuaccept.io/attempt label
    terminated: bool = False  # the probe container terminated
    exit_code: int | None = None
    reason: str | None = None  # pod reason, else the container's terminated reason
    message: str | None = None  # the container's terminated message (the report)
    pod_message: str | None = None  # pod-level status message
    pod_reason: str | None = None  # pod-level status reason (OutOfnvidia.com/gpu, Evicted...)
    container_reason: str | None = None  # terminated reason (Completed, Error, StartError)
    waiting_reason: str | None = None
    waiting_message: str | None = None
    # the terminated container's startedAt -> finishedAt, whole seconds (kubelet timestamps)
    run_seconds: int | None = None
    pod_ip: str | None = None  # status.podIP
    fabric_nonce: str = ""  # a fabric pod's pair secret (env GPUACCEPT_FABRIC_NONCE)
    created: datetime | None = None  # metadata.creationTimestamp
    finished: datetime | None = None  # the terminated container's finishedAt
    fabric: FabricPodLabels | None = None  # a fabric pair's pod (docs/fabric.md)
    watch: int | None = None  # a watch pod's serial (policy inService), else None
    # Its identity (core/podidentity.py): only a pod whose UID and shape the status
    # records as the operator's own is read or deleted.
    uid: str = ""  # metadata.uid
    node_name: str = ""  # spec.nodeName
    owner_uid: str = ""  # the controller ownerReference's UID
    token: bool = False  # it gets API credentials (automount not false, a token volume)
    shape: str = ""  # podidentity.shape_digest of the pod
    nonce: str = ""  # its gpuaccept.io/creation-nonce annotation (core/creationintent.py)
    # The ResourceClaims it names (spec.resourceClaims[].resourceClaimName): a DRA
    # node's probe pod gets its GPUs through one (core/draclaim.py).
    claims: tuple[str, ...] = ()

    @property
    def ended(self) -> bool:
        return self.terminated or self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True)
class CreatedPod:
    """The API server's answer to one of the operator's pod creates, kept in memory
    until the status records it (core/podidentity.py): the pod's UID, and the shape
    digest of the manifest the operator sent. A UID of "" is a create still in flight:
    its pod is not read (no UID to match) and never taken for a crash window's."""

    uid: str
    shape: str


@dataclass(frozen=True)
class NodePod:
    """A pod bound to the node, as a drain reads it (core/phases/drain.py)."""

    namespace: str
    name: str
    phase: str = "Running"
    deleting: bool = False
    owner_kinds: tuple[str, ...] = ()  # the kinds of its ownerReferences
    mirror: bool = False  # a static pod's mirror (the kubelet's)
    managed_by: str = ""  # app.kubernetes.io/managed-by
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class DrainResult:
    """What one drain of the node did (the executor's memory, read by the next pass)."""

    started: datetime  # the drain (DrainStatus.started) this try belongs to
    at: datetime
    evicted: tuple[str, ...] = ()  # namespace/name
    blocked: tuple[str, ...] = ()  # "namespace/name: why": not evicted yet, tried again

    @property
    def done(self) -> bool:
        return not self.blocked


@dataclass(frozen=True)
class PolicyView:
    name: str
    generation: int = 1
    spec: NodeAcceptancePolicySpec | None = None  # None: the spec is invalid
    error: str | None = None
    uid: str = ""


@dataclass(frozen=True)
class QuarantineLimitCounts:
    """Per policy, from the operator's index; every count excludes this node."""

    quarantined: int = 0
    matched: int = 0
    # Other nodes out of service because of gpuaccept but not quarantined: nodes taken
    # out for a new round (Pending/Probing/Fabric/Stalled/Held, ``wasInService``).
    out_of_service: int = 0
    # Nodes gpuaccept newly took out of service within the policy's quarantineRate window.
    taken_out_recently: int = 0
    # The whole fleet, for the operator's ceiling (--max-unavailable-ceiling): the nodes
    # any policy matches, and every other node out of service because of gpuaccept
    # under any policy. None: this policy's nodes are the whole fleet.
    fleet_matched: int | None = None
    fleet_unavailable: int | None = None
    # The same in GPUs (issue 40: the limit means lost capacity whether a node or one GPU
    # is taken out): the GPUs of this policy's nodes, and every other GPU of them out of
    # service because of gpuaccept (a node out: all its GPUs; a fenced GPU: one) and those
    # taken out within the rate's window. None: not counted; the limit counts nodes.
    matched_gpus: int | None = None
    unavailable_gpus: int | None = None
    taken_out_recently_gpus: int | None = None
    # The GPUs the action on this node takes out: all of its own, or the GPUs to fence.
    asked_gpus: int | None = None
    # What the action asks of the rate in GPUs: this node's take-outs within the window
    # once it is done (a fence: its new GPUs and the node's earlier fences in the window).
    # None: ``asked_gpus``.
    asked_recent_gpus: int | None = None

    @property
    def unavailable(self) -> int:
        """Every other node of this policy out of service because of gpuaccept."""
        return self.quarantined + self.out_of_service

    @property
    def fleet_nodes(self) -> int:
        """The nodes the ceiling is a share of: every policy's."""
        return self.matched if self.fleet_matched is None else self.fleet_matched

    @property
    def fleet_out(self) -> int:
        """Every other node out of service because of gpuaccept, under any policy."""
        return self.unavailable if self.fleet_unavailable is None else self.fleet_unavailable


@dataclass(frozen=True)
class FabricPodConfig:
    """The fabric pods' RDMA settings: the chart's values (the platform team's), never
    the policy's (docs/fabric.md)."""

    resources: Mapping[str, str] = field(default_factory=dict)  # extra requests = limits
    annotations: Mapping[str, str] = field(default_factory=dict)  # e.g. Multus networks
    capabilities: tuple[str, ...] = ()  # added to the container's, e.g. IPC_LOCK
    env: tuple[tuple[str, str], ...] = ()  # e.g. NCCL_IB_HCA, NCCL_NET
    rendezvous_port: int = 29500
    rendezvous_timeout_seconds: int = 300
    timeout_seconds: int = 900  # the pods' activeDeadlineSeconds


@dataclass(frozen=True)
class OperatorConfig:
    """The operator's own configuration (CLI flags / environment), never the policy's."""

    namespace: str = "gpuaccept-system"
    probe_image: str = "ghcr.io/gpuaccept/probe:0.1.0"
    probe_command: tuple[str, ...] = ("gpuaccept", "probe")
    image_pull_policy: str = "IfNotPresent"
    pod_prefix: str = "gpuaccept-probe"
    service_account: str = "gpuaccept-probe"
    runtime_class: str | None = None
    priority_class: str | None = None
    extra_tolerations: tuple[Mapping[str, Any], ...] = ()
    resources: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    shm_size: str | None = "16Gi"
    # Seconds past the policy timeout before the operator itself gives up on a
    # pod (the kubelet enforces activeDeadlineSeconds; this covers a dead kubelet).
    deadline_grace_seconds: int = 30
    # A Probing NA whose pod is gone: recreate it (same name) within this window,
    # after it count the attempt as failed.
    pod_missing_grace_seconds: int = 60
    max_backoff_seconds: int = 3600
    # Timeout for policies that leave probeRun.timeoutSeconds unset.
    default_timeout_seconds: int | None = None
    # The taint and label key prefixes a policy may name (--owned-key-prefix).
    owned_key_prefixes: tuple[str, ...] = (OWNED_KEY_PREFIX,)
    # Judge reports of ``hardware: simulated`` (the demo, the tests, the
    # benchmark). Off: such a report is an attempt error and never accepts.
    accept_simulated_reports: bool = False
    # Secrets (in the probe pods' namespace) to pull the probe image with
    # (--probe-image-pull-secret): a private registry.
    image_pull_secrets: tuple[str, ...] = ()
    fabric: FabricPodConfig = FabricPodConfig()
    # The most nodes gpuaccept may hold out of service at once, a count or a percentage
    # of the whole fleet (every policy's nodes) and of each policy's matched nodes
    # (--max-unavailable-ceiling; the chart sets 50%): no policy's maxQuarantined or
    # quarantineRate goes above it, nor do all policies together (capacity.fleet_limit).
    max_unavailable_ceiling: int | str = "100%"
    # Added to every probe and fabric pod (--probe-pod-labels, --probe-pod-annotations,
    # --probe-env; the chart's probe.podLabels, podAnnotations, env): a service mesh's
    # injection opt-out, labels an admission policy requires, a proxy. Never the
    # operator's own keys, never the probe's own variables (options.py refuses them).
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    probe_env: tuple[tuple[str, str], ...] = ()
    # The operator's base selector (--node-selector; the chart's
    # operator.watchNodeSelector), as (key, value) pairs, value None for "the label is
    # present": every pod the operator creates requires it as its node affinity
    # (core/podspec.py node_affinity), which the node's kubelet checks at admission.
    base_node_selector: tuple[tuple[str, str | None], ...] = ()
    # Control-plane nodes are outside the operator's reach unless this is on
    # (--allow-control-plane-nodes; chart operator.allowControlPlaneNodes): only then
    # does a policy's includeControlPlane reach them (their pods drop the
    # control-plane DoesNotExist requirements).
    allow_control_plane: bool = False
    # The DRA drivers whose ResourceSlices publish GPUs (--dra-driver; the chart's
    # operator.draDrivers): a node with a slice of one of them is DRA-published
    # (core/gpupublishing.py). Empty: only the device plugin's nvidia.com/gpu counts.
    dra_drivers: tuple[str, ...] = ("gpu.nvidia.com",)
    # In-service watch pods see the node's GPUs through NVIDIA_VISIBLE_DEVICES=all, which
    # a hardened container runtime refuses to unprivileged pods; off (--no-watch-pods;
    # chart operator.watchPods: false), every policy runs as with inService.watchPods
    # false (docs/security.md).
    watch_pods: bool = True
    # The DeviceClass a DRA node's probe claim asks for every device of
    # (--dra-device-class; the chart's operator.draDeviceClass): NVIDIA's chart installs
    # gpu.nvidia.com, its whole GPUs (core/draclaim.py).
    dra_device_class: str = "gpu.nvidia.com"
    # The API server serves resource.k8s.io/v1 devicetaintrules (the runtime asks its
    # discovery at start; KEP-5055, GA and on by default in 1.37): only then is a GPU
    # fenced (core/fencerules.py); otherwise a decision to fence quarantines the node
    # with reason FencingUnavailable.
    device_taint_rules: bool = False

    def timeout_for(self, spec: NodeAcceptancePolicySpec) -> int:
        run = spec.probe_run
        if self.default_timeout_seconds and "timeout_seconds" not in run.model_fields_set:
            return self.default_timeout_seconds
        return run.timeout_seconds


@dataclass(frozen=True)
class GpuPodSample:
    """One list of a node's pods (by ``spec.nodeName``) for re-verification: when,
    and the pods requesting GPUs it found (``namespace/name``, not gpuaccept's own)."""

    at: datetime
    gpu_pods: tuple[str, ...] = ()

    @property
    def idle(self) -> bool:
        return not self.gpu_pods


# How the core judges a report: :func:`gpuaccept.checks.verdict.evaluate`, or a
# stand-in in tests. Its :class:`~gpuaccept.checks.verdict.Verdict` is the verdict
# the core records; the core builds one itself only for an error verdict.
# ------------------------------------------------ what the fabric test and the watch saw

REASON_FABRIC_FAILED = fabric_allreduce.REASON


class PairOutcome(StrEnum):
    PASSED = "passed"
    """Both pods measured, and the pair's busbw met the threshold."""
    FAILED = "failed"
    """Both pods rendezvoused; the all-reduce was too slow or broke."""
    INCOMPLETE = "incomplete"
    """No measurement: a pod never started or never met its partner, or a node went away."""


@dataclass(frozen=True)
class PartnerFigure:
    """One pair a node was in: the partner, how it ended, the pair's busbw."""

    partner: str
    outcome: PairOutcome
    busbw_gbps: float | None
    finished_at: datetime


@dataclass(frozen=True)
class FabricPassed:
    partner: str
    busbw_gbps: float | None
    at: datetime


@dataclass(frozen=True)
class FabricQuarantined:
    failed_with: tuple[PartnerFigure, ...]
    """The two partners that convicted the node, first first."""
    partners_passed_with: tuple[str, ...]
    """For each of them, the other node it passed with (its witness)."""
    at: datetime
    reason: str = REASON_FABRIC_FAILED

    @property
    def message(self) -> str:
        parts = [
            f"{f.partner} ({'no figure' if f.busbw_gbps is None else f'{f.busbw_gbps:.1f} GB/s'};"
            f" it passed with {witness})"
            for f, witness in zip(self.failed_with, self.partners_passed_with, strict=True)
        ]
        return "fabric all-reduce failed with " + ", ".join(parts)


@dataclass(frozen=True)
class FabricNoPartner:
    action: NoPartnerAction
    tried: tuple[PartnerFigure, ...]


FabricVerdict = FabricPassed | FabricQuarantined | FabricNoPartner


# The Reason.check every in-service verdict names.
IN_SERVICE_CHECK = "in_service"

# Durable GPU state a report found. EccContained: uncorrected ECC errors the same
# report explains by a contained Xid 94 on that GPU (its remap state decides);
# Fabric: the NVSwitch fabric away from registered-and-healthy (its detail: the state,
# or completed: and its conditions or error status).
StateWhat = Literal[
    "RowRemapFailure",
    "RowRemapPending",
    "RecoveryAction",
    "GPULost",
    "EccUncorrected",
    "EccContained",
    "NVLinkDown",
    "NVLinkErrors",
    "Fabric",
]


@dataclass(frozen=True)
class ConditionSeen:
    """One condition of the Node: its type, status and last transition."""

    type: str
    status: str
    since: datetime | None = None  # lastTransitionTime (None: not given)


@dataclass(frozen=True)
class XidSeen:
    """One Xid event on one GPU (its UUID), classed by the watch's table."""

    gpu: str
    xid: int
    kind: XidClassName
    at: datetime


@dataclass(frozen=True)
class GpuStateSeen:
    """Durable GPU state a report found at the end of its window."""

    gpu: str
    what: StateWhat
    detail: str = ""


@dataclass(frozen=True)
class WatchEvidence:
    """A trusted watch report: which pod and window, which boot, what it saw."""

    key: str  # the pod UID and window: a report seen again is not counted twice
    boot_id: str
    start: datetime
    end: datetime
    xids: tuple[XidSeen, ...] = ()
    state: tuple[GpuStateSeen, ...] = ()
    # what the window could not read (interface -> why): blind to it, not quiet
    not_read: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class SignatureSeen:
    """One node's in-service signature and its onset (from its status)."""

    node: str
    signature: str
    onset: datetime


Judge = Callable[[ProbeReport, ProbePolicy], Verdict]


@dataclass(frozen=True)
class NodeSnapshot:
    node_name: str
    now: datetime
    node: NodeView | None
    na: NAView | None = None
    pods: tuple[PodView, ...] = ()
    policies: tuple[PolicyView, ...] = ()
    limit_counts: QuarantineLimitCounts = QuarantineLimitCounts()
    config: OperatorConfig = OperatorConfig()
    # The API server refused to create this node's probe pod (e.g. a missing
    # ServiceAccount or a quota): the attempt failed, with this message.
    pod_create_error: str | None = None
    # The API server refused this node's last status write (a 400/422, not a
    # conflict or an outage): writing it again would fail the same way.
    status_write_error: str | None = None
    # Phase Fabric: the verdict the fabric pairing gives this node now (None: none yet).
    fabric_verdict: FabricVerdict | None = None
    # The latest list of the node's pods the re-verification loop made (None: none).
    gpu_pod_sample: GpuPodSample | None = None
    # The probe pods this process created on the node whose UID the status may not
    # record yet, by name (the create's answer; core/podidentity.py).
    created_pods: Mapping[str, CreatedPod] = field(default_factory=dict)
    # A random value the runtime draws once per process: the seed of the nonces of
    # the objects it creates (core/creationintent.py). Never stored: an intent on
    # record from an earlier process cannot be matched by this one.
    nonce_seed: str = ""
    # Pod names whose create this process sent without an answer (a timeout, a
    # refusal): never created again under the same name (a pod made all the same is
    # the crash window's; core/inservice/phase.py).
    pod_creates_unanswered: frozenset[str] = frozenset()
    # The last probe pod create for this node was answered AlreadyExists: that name.
    pod_name_taken: str | None = None
    # The last drain of the node through the Eviction API (core/phases/drain.py).
    drain: DrainResult | None = None
    # Watch reports of the node's ended watch pods, trusted and not yet counted
    # (core/inservice; a report already in the ledger is not counted again).
    watch_reports: tuple[WatchEvidence, ...] = ()
    # The in-service signatures of the other nodes of the node's policy
    # (core/inservice/correlation.py).
    in_service_fleet: tuple[SignatureSeen, ...] = ()
    # The node's ResourceSlices of the configured DRA drivers (``spec.nodeName`` or,
    # for a slice that names no node, its pool is the node; core/gpupublishing.py).
    resource_slices: tuple[ResourceSliceView, ...] = ()
    # gpuaccept's DeviceTaintRules fencing GPUs of this node (core/fencerules.py).
    fence_rules: tuple[FenceRuleView, ...] = ()
    # The API server refused this node's last DeviceTaintRule write (a 400/403/422:
    # RBAC, an admission policy), not a conflict or an outage: fencing is unavailable
    # on the node (core/record.py quarantines it, FencingUnavailable) until the runtime
    # forgets the refusal (core/fencing.py FENCE_RULE_REFUSED_RETRY_SECONDS).
    fence_rule_write_error: str | None = None


# --------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class CreateNodeAcceptance:
    name: str
    policy: str


@dataclass(frozen=True)
class PatchNodeTaintsLabels:
    """Replace ``spec.taints`` and set/remove labels, guarded by resourceVersion."""

    node: str
    resource_version: str
    taints: tuple[Taint, ...] | None  # None: leave taints alone
    labels: Mapping[str, str | None] = field(default_factory=dict)  # None removes


@dataclass(frozen=True)
class PatchNodeCondition:
    node: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    now: datetime
    condition_type: str = NODE_CONDITION_TYPE  # or REMEDY_CONDITION_TYPE (core/ladder.py)


@dataclass(frozen=True)
class CreateProbePod:
    name: str
    manifest: Mapping[str, Any]


@dataclass(frozen=True)
class CreateResourceClaim:
    """The ResourceClaim a DRA node's probe pod gets its GPUs through, created before
    the pod (core/draclaim.py). ``intents``: the node's creation intents, so that an
    AlreadyExists answer is told apart: the operator's own claim of an earlier
    create (its nonce on record, kept) or another creator's (the pod is not created)."""

    name: str
    manifest: Mapping[str, Any]
    intents: tuple[CreationIntent, ...] = ()


@dataclass(frozen=True)
class DeleteResourceClaim:
    """Delete the probe claim ``name`` when it is the operator's own: its nonce
    matches one of ``intents`` (a claim another creator made under the name is left)."""

    name: str
    intents: tuple[CreationIntent, ...] = ()


@dataclass(frozen=True)
class WriteFenceRule:
    """Create the DeviceTaintRule ``manifest`` (``exists`` False), or patch its spec
    to ``manifest``'s (the pool republished under other device names, the effect
    changed): core/fencerules.py."""

    name: str
    manifest: Mapping[str, Any]
    exists: bool = False


@dataclass(frozen=True)
class DeleteFenceRule:
    """Delete gpuaccept's DeviceTaintRule ``name`` (its reason is gone)."""

    name: str


@dataclass(frozen=True)
class DeleteProbePod:
    name: str
    force: bool = False  # grace period 0 (only for pods that already terminated)


@dataclass(frozen=True)
class PatchNAStatus:
    name: str
    resource_version: str
    status: NodeAcceptanceStatus


@dataclass(frozen=True)
class EmitEvent:
    kind: Literal["Node", "NodeAcceptance"]
    name: str
    uid: str
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class RemoveReprobeAnnotation:
    node: str


@dataclass(frozen=True)
class DeleteNodeAcceptance:
    name: str


@dataclass(frozen=True)
class DrainNode:
    """Evict, through the Eviction API (which respects PodDisruptionBudgets), every pod
    on ``node`` that :func:`~gpuaccept.operator.core.phases.drain.evictable` names."""

    node: str
    taint: Taint  # the quarantine taint: a pod that tolerates it (NoExecute) stays
    namespace: str  # gpuaccept's own pods there are not evicted
    started: datetime  # the drain this try belongs to (DrainStatus.started)


Action = (
    CreateNodeAcceptance
    | PatchNodeTaintsLabels
    | PatchNodeCondition
    | CreateProbePod
    | DeleteProbePod
    | CreateResourceClaim
    | DeleteResourceClaim
    | WriteFenceRule
    | DeleteFenceRule
    | PatchNAStatus
    | EmitEvent
    | RemoveReprobeAnnotation
    | DeleteNodeAcceptance
    | DrainNode
)


# The ordering of a plan's actions. The planner appends actions in the order it
# decides them (status before pod, node patch before events, ...), and that
# order is kept, with one rule made explicit here: an action that bumps the
# Node's resourceVersion without being guarded by it must come after every
# action guarded by the resourceVersion the plan was made from (the taint and
# label patch). ``RemoveReprobeAnnotation`` is such an action: it runs last.
LAST_ACTIONS: tuple[type[Action], ...] = (RemoveReprobeAnnotation,)


def order_rank(action: Action) -> int:
    """0 for an action that keeps its planned place; 1 for one that must run last."""
    return 1 if isinstance(action, LAST_ACTIONS) else 0


@dataclass(frozen=True)
class Plan:
    """The writes for one node, in execution order (see :func:`order_rank`).

    Build it with :meth:`ordered`, which moves the must-run-last actions to the
    end; the constructor refuses a plan that breaks the ordering rule.
    """

    actions: tuple[Action, ...] = ()
    requeue_after: float | None = None  # seconds; a time-based wake-up
    # The plan quarantines a node: the executor must re-plan under the policy's
    # quarantine limit's lock so that two workers cannot both take the last slot.
    needs_limit_lock: bool = False
    note: str = ""  # why (for logs)

    def __post_init__(self) -> None:
        ranks = [order_rank(a) for a in self.actions]
        if ranks != sorted(ranks):
            names = [type(a).__name__ for a in self.actions]
            raise ValueError(f"plan actions out of order: {names}")

    @classmethod
    def ordered(
        cls,
        actions: Iterable[Action],
        *,
        requeue_after: float | None = None,
        needs_limit_lock: bool = False,
        note: str = "",
    ) -> Plan:
        """A plan of ``actions`` in planned order, must-run-last actions moved to the end."""
        return cls(
            actions=tuple(sorted(actions, key=order_rank)),  # stable: planned order kept
            requeue_after=requeue_after,
            needs_limit_lock=needs_limit_lock,
            note=note,
        )

    @property
    def writes(self) -> int:
        return len(self.actions)
