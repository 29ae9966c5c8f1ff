"""Status of the ``NodeAcceptance`` (one per node) and ``NodeAcceptancePolicy`` objects."""

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StrictInt, model_validator

from gpuaccept.contracts.contract_model import ContractModel
from gpuaccept.contracts.inservice import InServiceStatus
from gpuaccept.contracts.report import CheckStatus, ProbeReport
from gpuaccept.contracts.reverify import Baseline, ReverifyStatus


class Phase(StrEnum):
    PENDING = "Pending"
    PROBING = "Probing"
    ACCEPTED = "Accepted"
    QUARANTINED = "Quarantined"
    HELD = "Held"
    # A selected node advertised no GPUs within the policy's waitForGPUs deadline.
    STALLED = "Stalled"
    # Passed the single-node checks; waits for its two-node fabric test (docs/fabric.md).
    FABRIC = "Fabric"
    # The probe could not run for a reason that is not the node's (an image that
    # cannot be pulled, a refused pod, GPU pods still on the node, an eviction):
    # retried with backoff for as long as it lasts, never an attempt, never a verdict.
    WAITING = "Waiting"
    # A person released the node (kubectl gpuaccept release): the operator took its own
    # taints and labels off and leaves the node alone until a re-probe is asked for.
    RELEASED = "Released"


class GpuPublishing(StrEnum):
    """How a node publishes its GPUs to the scheduler (docs/architecture.md)."""

    # The device plugin's extended resource nvidia.com/gpu in the Node's capacity.
    DEVICE_PLUGIN = "DevicePlugin"
    # ResourceSlices of a configured DRA driver (default gpu.nvidia.com) for the node.
    DRA = "DRA"
    # Both at once: the same GPUs could be handed out twice; the node is not probed.
    BOTH = "Both"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ContractModel):
    """A Kubernetes-style condition (metav1.Condition shape)."""

    type: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9]{0,62}$")
    status: ConditionStatus
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: datetime
    observed_generation: int | None = Field(default=None, ge=0)


class Reason(ContractModel):
    """Why a node is not accepted, naming the check responsible."""

    check: str = Field(max_length=32)
    reason: str = Field(pattern=r"^[A-Z][A-Za-z0-9]*$", max_length=64)
    message: str = Field(default="", max_length=512)


MAX_NODE_GPUS = 64  # a node's GPUs at most: NVML indices 0..63


class GpuVerdict(ContractModel):
    """One GPU's part of a verdict: the checks whose failure belongs to this GPU alone
    (docs/policy.md, "Per-GPU verdicts"), and whether it is fenced."""

    index: int = Field(ge=0, le=63, description="The GPU's NVML index in the probe.")
    uuid: str | None = Field(
        default=None, max_length=64, description="The GPU's NVML UUID (absent: not reported)."
    )
    checks: list[Annotated[str, Field(max_length=32)]] = Field(
        default_factory=list, max_length=32, description="The checks this GPU failed."
    )
    fenced: bool = Field(
        default=False,
        description="Taken out of service on its own (fencing.mode gpu on a DRA node); "
        "false: the node's verdict decides (device plugin, fencing.mode node).",
    )


class CheckSummary(ContractModel):
    check: str = Field(max_length=32)
    status: CheckStatus
    message: str = Field(default="", max_length=240)


CheckFigure = Annotated[str, Field(max_length=64)] | StrictInt | float | bool
"""One check's key figure: a scalar (a number, a flag or a short text such as ``Gen5x16``)."""

FIGURE_NAME_PATTERN = r"^[a-z][A-Za-z0-9]{0,62}$"
MAX_CHECK_FIGURES = 32


class KeyFigures(ContractModel):
    """The numbers a person looks at first (also shown as printer columns). The
    summary fields are fixed; each check adds its own figures as further flat
    fields, declared with the check in gpuaccept.checks."""

    # The check figures (``.status.figures.busbwGBps``) are extra fields: the check
    # registry declares them, and generates their CRD schema and printer columns.
    # Here they are bounded: at most MAX_CHECK_FIGURES scalars under camelCase names.
    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, CheckFigure] = Field(init=False)

    gpu_model: str | None = Field(default=None, max_length=64)
    gpu_count: int | None = Field(default=None, ge=0)
    driver_version: str | None = Field(default=None, max_length=32)
    probe_wall_s: float | None = Field(
        default=None,
        ge=0,
        alias="probeWallS",
        description="The probe's wall time, s: its process start to the end of its last "
        "check (the report's wallS).",
    )

    @model_validator(mode="after")
    def _bounded_check_figures(self) -> "KeyFigures":
        extra = self.model_extra or {}
        if len(extra) > MAX_CHECK_FIGURES:
            raise ValueError(f"at most {MAX_CHECK_FIGURES} check figures, got {len(extra)}")
        bad = sorted(name for name in extra if not re.fullmatch(FIGURE_NAME_PATTERN, name))
        if bad:
            raise ValueError(f"check figure names must be camelCase: {bad}")
        return self

    @property
    def check_figures(self) -> dict[str, CheckFigure]:
        """The figures the checks added, by wire name."""
        return dict(self.model_extra or {})

    def figure(self, name: str) -> CheckFigure | None:
        """One check figure by its wire name (``busbwGBps``), ``None`` when absent."""
        return self.check_figures.get(name)


class NodeAcceptanceSpec(ContractModel):
    node_name: str = Field(min_length=1, max_length=253)


MAX_FABRIC_PAIRS = 32


class FabricPairRecord(ContractModel):
    """One fabric pair this node was in, as read when both pods had ended."""

    pair: str = Field(max_length=16, description="The pair's identity (its pods' label).")
    partner: str = Field(max_length=253)
    node_rank: int = Field(ge=0, le=1, description="0: this node's pod started first.")
    outcome: Literal["passed", "failed", "incomplete"]
    busbw_gbps: float | None = Field(
        default=None, alias="busbwGBps", description="The pair's busbw at the largest message."
    )
    finished_at: datetime
    message: str = Field(default="", max_length=240)


class FabricStatus(ContractModel):
    """The node's fabric test under a policy with ``fabric.enabled`` (docs/fabric.md).
    The pair results here are what the pairing reads: a restart loses none."""

    waiting_since: datetime | None = Field(
        default=None, description="When the node began waiting (the deadline counts from here)."
    )
    pairs: list[FabricPairRecord] = Field(default_factory=list, max_length=MAX_FABRIC_PAIRS)
    verdict: str | None = Field(
        default=None,
        max_length=64,
        description="Passed, FabricAllreduceFailed, or FabricNoPartner (with the action).",
    )
    busbw_gbps: float | None = Field(
        default=None, alias="busbwGBps", description="The busbw of the pair that decided."
    )
    summary: str | None = Field(
        default=None, max_length=64, description="One line for the FABRIC column."
    )
    message: str | None = Field(default=None, max_length=1024)


class ProbedSection(ContractModel):
    """Digests of one check's policy section as the stored report was measured under it."""

    measured: str = Field(
        max_length=32, description="Digest of the fields that change what the probe measures."
    )
    section: str = Field(max_length=32, description="Digest of the whole section.")


class ReleaseRecord(ContractModel):
    """A release a person asked for (``kubectl gpuaccept release``), as the operator
    applied it: who and when (the request's annotations), and what it released."""

    by: str = Field(max_length=253, description="The requester's username (SelfSubjectReview).")
    requested_at: str = Field(
        max_length=64, description="When it was asked for, as the request says (RFC 3339)."
    )
    reason: str = Field(default="", max_length=512, description="The requester's words.")
    released_time: datetime = Field(description="When the operator applied it.")
    from_phase: Phase = Field(description="The phase it released the node from.")
    from_reason: str | None = Field(default=None, max_length=64)


MAX_OWNED_PODS = 16


class OwnedPod(ContractModel):
    """A probe or fabric pod the operator created on this node, as the API server's
    answer to its create named it: only this pod's result is ever read as the node's
    evidence (docs/security.md, "Pod identity")."""

    name: str = Field(max_length=253)
    uid: str = Field(max_length=64, description="metadata.uid from the create's answer.")
    shape: str = Field(
        max_length=32,
        description="Digest of the pod's identity fields as created (node, images, "
        "commands, service account and token, volume kinds, host namespaces, owner).",
    )


MAX_CREATION_INTENTS = 8


class CreationIntent(ContractModel):
    """An object the operator is about to create for this node (a probe, fabric or
    watch pod), written before its create: the object carries a random nonce
    (annotation ``gpuaccept.io/creation-nonce``) whose digest only is here. After a
    restart between the create and the record of its UID (``ownedPods``), an object
    under this name whose nonce matches is the operator's own and is deleted unread;
    one whose nonce does not match is a squatter's (docs/security.md, "Pod identity")."""

    kind: str = Field(max_length=63, description="The object's kind (Pod).")
    name: str = Field(max_length=253)
    nonce_digest: str = Field(
        max_length=64, description="SHA-256 of the nonce the object carries (hex)."
    )


MAX_DRAIN_BLOCKED = 10


class DrainStatus(ContractModel):
    """The Eviction-API drain of a node quarantined under ``quarantine.taintEffect:
    NoExecute`` (docs/operator.md, "Quarantine and drain"): every pod that does not
    tolerate the quarantine taint is evicted as its PodDisruptionBudgets allow."""

    started: datetime = Field(description="When the drain began (the quarantine).")
    done: datetime | None = Field(
        default=None, description="When no pod was left to evict; the drain is over."
    )
    blocked: list[Annotated[str, Field(max_length=300)]] = Field(
        default_factory=list,
        max_length=MAX_DRAIN_BLOCKED,
        description="Pods the API server would not evict yet (namespace/name: why), e.g. "
        "their PodDisruptionBudget allows no disruption now; tried again later.",
    )


class NodeAcceptanceStatus(ContractModel):
    phase: Phase = Phase.PENDING
    reason: str | None = Field(default=None, max_length=64, description="Main reason, one word.")
    message: str | None = Field(default=None, max_length=1024)
    reasons: list[Reason] = Field(default_factory=list, max_length=32)
    checks: list[CheckSummary] = Field(default_factory=list, max_length=32)
    figures: KeyFigures | None = None
    policy: str | None = Field(default=None, max_length=253)
    policy_generation: int | None = Field(
        default=None, ge=0, description="Generation of the policy the verdict was judged against."
    )
    policy_uid: str | None = Field(
        default=None,
        alias="policyUID",
        max_length=64,
        description="UID of that policy: a policy deleted and created again starts at "
        "generation 1 again, and is still a change.",
    )
    attempts: int = Field(default=0, ge=0, description="Probe attempts in the current round.")
    pod_serial: int = Field(
        default=0,
        ge=0,
        description="Probe pods started for this node in all rounds; numbers the pod names.",
    )
    probe_pod: str | None = Field(default=None, max_length=253)
    probe_started_time: datetime | None = None
    probe_pod_seconds: int | None = Field(
        default=None,
        ge=0,
        description="The last probe container's run as the kubelet saw it: startedAt to "
        "finishedAt, whole seconds (the probe's own wallS leaves out the runtime's exec "
        "and the report's writing and exit).",
    )
    next_attempt_time: datetime | None = None
    last_probe_time: datetime | None = None
    probed_boot_id: str | None = Field(default=None, alias="probedBootID", max_length=64)
    rejudged: bool = Field(
        default=False,
        description="The verdict was recomputed from stored results after a policy change.",
    )
    held_action: str | None = Field(
        default=None,
        max_length=32,
        description="The action held back by the breaker or dryRun (e.g. Quarantine).",
    )
    applied_taints: list[str] = Field(
        default_factory=list,
        description="Taint keys this operator applied to the node and may remove; the "
        "policy's pending key stays on record after a verdict removed its taint (one status "
        "write fewer per node; the key is the operator's whatever the record says).",
    )
    applied_labels: list[str] = Field(
        default_factory=list,
        description="Quarantine label keys this operator set on the node; only these are "
        "ever removed.",
    )
    waiting_since: datetime | None = Field(
        default=None,
        description="When the node started waiting to advertise GPUs (the waitForGPUs "
        "deadline counts from here).",
    )
    gpu_publishing: GpuPublishing | None = Field(
        default=None,
        description="How the node publishes its GPUs, as last seen when this status was "
        "written: DevicePlugin (nvidia.com/gpu), DRA (ResourceSlices of a configured DRA "
        "driver) or Both; absent while it publishes none.",
    )
    gpu_verdicts: list[GpuVerdict] = Field(
        default_factory=list,
        max_length=64,
        description="The GPUs whose own failures the verdict names (docs/policy.md, "
        '"Per-GPU verdicts"), by NVML index and UUID: recorded in every fencing mode, so a '
        "device-plugin node quarantined as a whole still shows which GPU is bad.",
    )
    fenced: str | None = Field(
        default=None,
        max_length=8,
        description="Fenced GPUs of the node's, e.g. 1/8 (the FENCED column); absent when "
        "none is fenced.",
    )
    report: ProbeReport | None = Field(default=None, description="The last valid probe report.")
    fabric: FabricStatus | None = Field(
        default=None, description="The fabric test (only under a policy that enables it)."
    )
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = Field(default=None, ge=0)
    probed_sections: dict[str, ProbedSection] | None = Field(
        default=None,
        max_length=64,
        description="Per check enabled when the stored report was measured: digests of its "
        "policy section then. A re-judge measures again, rather than judges, a check whose "
        "measuring fields changed, that was off then, or whose result was compacted under a "
        "section that changed since. Absent on reports recorded before this field.",
    )
    reprobe_requested: bool = Field(
        default=False,
        description="This round was asked for with the re-probe annotation (taken off the "
        "Node when the round starts): a cordoned node is probed for it.",
    )
    was_in_service: bool = Field(
        default=False,
        description="The node was in service (schedulable, no gpuaccept taint) when "
        "gpuaccept took it out for this round: it counts against maxQuarantined until decided.",
    )
    taken_out_time: datetime | None = Field(
        default=None,
        description="When gpuaccept last took this node out of service (a quarantine, or a "
        "new round of an in-service node, a fence of a GPU in service): the quarantine "
        "rate's window counts these.",
    )
    taken_out_gpus: int | None = Field(
        default=None,
        ge=1,
        le=MAX_NODE_GPUS,
        description="The GPUs gpuaccept took out of this node at takenOutTime and before it "
        "within the quarantine rate's window, where only fences took them out (each GPU "
        "fenced in service counts as one); absent: the whole node was taken out.",
    )
    blocked_since: datetime | None = Field(
        default=None,
        description="When the probe first could not run for a reason that is not the "
        "node's (phase Waiting); the retry backoff grows with the time since.",
    )
    node_uid: str | None = Field(
        default=None,
        alias="nodeUID",
        max_length=64,
        description="UID of the Node this status is about: a node deleted and created "
        "again under the same name is a new node and starts a new round.",
    )
    baseline: Baseline | None = Field(
        default=None,
        description="The node's figures at acceptance, which a later probe is compared "
        "with (policy reverify.drift).",
    )
    reverify: ReverifyStatus | None = Field(
        default=None,
        description="Re-verification of the accepted node (policy reverify): idle "
        "sampling, the round under way and the last, drift, suspicions, and "
        "its quarantines (repeatOffenders).",
    )
    in_service: InServiceStatus | None = Field(
        default=None,
        description="Health in service (policy inService): the ledger of the accepted "
        "node's events by bootID and GPU, its suspects, the signal timers, and the last "
        "in-service verdict with its evidence window.",
    )
    release: ReleaseRecord | None = Field(
        default=None,
        description="The last release a person asked for (kubectl gpuaccept release): kept "
        "through later rounds as the record of who released the node and when.",
    )
    drain: DrainStatus | None = Field(
        default=None,
        description="The Eviction-API drain of a quarantined node (quarantine.taintEffect "
        "NoExecute); absent otherwise.",
    )
    owned_pods: list[OwnedPod] = Field(
        default_factory=list,
        max_length=MAX_OWNED_PODS,
        description="The probe and fabric pods the operator created on this node and has "
        "not seen gone: a pod is read or deleted only if its UID and shape are here.",
    )
    creation_intents: list[CreationIntent] = Field(
        default_factory=list,
        max_length=MAX_CREATION_INTENTS,
        description="Objects the operator is about to create for this node, written "
        "before each create and dropped once the object's UID is in ownedPods: a pod "
        "found after a restart under one of these names, with the recorded nonce and "
        "no UID on record, is the operator's own and is deleted unread.",
    )


class PhaseCounts(ContractModel):
    pending: int = 0
    probing: int = 0
    accepted: int = 0
    quarantined: int = 0
    held: int = 0
    stalled: int = 0
    fabric: int = 0
    waiting: int = 0
    released: int = 0


class NodeAcceptancePolicyStatus(ContractModel):
    counts: PhaseCounts = PhaseCounts()
    matched_nodes: int = 0
    breaker_open: bool = False
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = Field(default=None, ge=0)
    out_of_service: int = Field(
        default=0,
        ge=0,
        description="Matched nodes out of service because of gpuaccept (what maxQuarantined "
        "counts): quarantined, held by the limit, and nodes taken out for a new round.",
    )
    held_back: int = Field(
        default=0,
        ge=0,
        description="Nodes whose verdict, new round, fabric test or adoption the limit holds "
        "back (reason BreakerOpen), those kept in service included.",
    )
    would_accept: int = Field(
        default=0,
        ge=0,
        description="Nodes whose held action is Accept (dryRun): what the dry run would accept.",
    )
    would_quarantine: int = Field(
        default=0,
        ge=0,
        description="Nodes whose held action is Quarantine (dryRun or the quarantine limit): "
        "what would be quarantined were it not held back.",
    )
