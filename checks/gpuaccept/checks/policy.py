"""The whole acceptance policy, assembled from the check registry.

:data:`ProbePolicy` holds one section per registered check (the field is named
after the check: ``pcie_link`` → ``pcieLink`` on the wire); it is what
``gpuaccept probe --policy FILE`` reads and what the ``NodeAcceptancePolicy``
CRD carries under ``spec.probe``. :class:`NodeAcceptancePolicySpec` adds what
the operator does with a verdict.

Deliberately absent: image, command, privileges, runtime class. Those come
from the operator's own configuration, never from a policy object, so a policy
author cannot run arbitrary code on every GPU node.
"""

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import Field, create_model, model_validator

from gpuaccept.checks.fabric_allreduce import FabricPolicy
from gpuaccept.checks.fencing_policy import FencingPolicy
from gpuaccept.checks.registry import CHECKS
from gpuaccept.checks.spec import AnyCheckSpec, CheckSpec
from gpuaccept.contracts.api import PENDING_TAINT_KEY
from gpuaccept.contracts.contract_model import ContractModel
from gpuaccept.contracts.inservice import InService
from gpuaccept.contracts.policy_fields import (
    CONTROL_PLANE_ROLE_LABELS,
    MAX_MAP_KEYS,
    CheckSwitch,
    GPUWait,
    LabelValue,
    NonNegativeCount,
    OwnedKey,
    Percentage,
    ProbeRun,
    QualifiedName,
    QuarantineAction,
    QuarantineRate,
    ReprobeTriggers,
    default_node_selector,
    key_owned,
    limit_count,
)
from gpuaccept.contracts.reverify import RepeatOffenders, Reverification

SectionT = TypeVar("SectionT", bound=CheckSwitch)

PROBE_POLICY_DOC = (
    "Thresholds for every check. Empty means the defaults documented in docs/policy.md."
)


class ProbePolicySections(ContractModel):
    """What every ``ProbePolicy`` has, whatever checks are registered."""

    @model_validator(mode="after")
    def _some_check_enabled(self) -> "ProbePolicySections":
        switches = (getattr(self, name) for name in type(self).model_fields)
        if not any(isinstance(s, CheckSwitch) and s.enabled for s in switches):
            raise ValueError("every check is disabled: a node would be accepted on no evidence")
        return self

    def switch(self, check: str) -> CheckSwitch | None:
        """The section of the check named ``check`` (snake_case), if any."""
        value = getattr(self, check, None)
        return value if isinstance(value, CheckSwitch) else None

    def section(self, spec: CheckSpec[SectionT, Any]) -> SectionT:
        """The section of the check ``spec``, typed as that check's policy model."""
        value = getattr(self, spec.name)
        if not isinstance(value, spec.policy_model):
            raise TypeError(f"ProbePolicy.{spec.name} is not a {spec.policy_model.__name__}")
        return value


def probe_policy_model(checks: Iterable[AnyCheckSpec]) -> type[ProbePolicySections]:
    """The ``ProbePolicy`` model of these checks: one section per check, named after it."""
    sections: dict[str, Any] = {
        spec.name: (
            spec.policy_model,
            Field(default=spec.policy_model(), description=f"{spec.title}: {spec.summary}"),
        )
        for spec in checks
    }
    model: type[ProbePolicySections] = create_model(
        "ProbePolicy",
        __base__=ProbePolicySections,
        __module__=__name__,
        __doc__=PROBE_POLICY_DOC,
        **sections,
    )
    return model


if TYPE_CHECKING:

    class ProbePolicy(ProbePolicySections):
        """Thresholds for every check (one section per registered check)."""

else:
    ProbePolicy = probe_policy_model(CHECKS)


class NodeAcceptancePolicySpec(ContractModel):
    node_selector: dict[QualifiedName, LabelValue] = Field(
        default_factory=default_node_selector,
        min_length=1,
        max_length=MAX_MAP_KEYS,
        description="matchLabels for the nodes this policy governs (default: GPU nodes); "
        "at least one label, so that no policy governs every node by accident.",
    )
    probe: ProbePolicy = Field(default=ProbePolicy(), description=PROBE_POLICY_DOC)
    quarantine: QuarantineAction = Field(
        default=QuarantineAction(),
        description="What the operator puts on a node that fails: a taint, and optional labels.",
    )
    include_control_plane: bool = Field(
        default=False,
        description="Govern control-plane nodes (node-role.kubernetes.io/control-plane or "
        "master) too; only under an operator that allows them (--allow-control-plane-nodes, "
        "chart operator.allowControlPlaneNodes), else they stay outside its reach. Off: "
        "they are never selected, and a nodeSelector naming those labels is refused.",
    )
    pending_taint_key: OwnedKey = Field(
        default=PENDING_TAINT_KEY,
        description="The taint new GPU nodes join with (kubelet --register-with-taints); the "
        "operator removes it from an accepted node. Under an owned prefix.",
    )
    wait_for_gpus: GPUWait = Field(
        default_factory=GPUWait,
        alias="waitForGPUs",
        description="How long a selected node may advertise no GPUs, and what then.",
    )
    probe_run: ProbeRun = Field(
        default=ProbeRun(), description="How one probe pod runs, and how often it is retried."
    )
    reprobe: ReprobeTriggers = Field(
        default=ReprobeTriggers(), description="When a decided node is probed again."
    )
    max_quarantined: NonNegativeCount | Percentage = Field(
        default="10%",
        description="Circuit breaker: how many matched nodes may be out of service because "
        "of gpuaccept at once (Quarantined, and nodes taken out of "
        "service for a new probe), an absolute count or a percentage of matched nodes.",
    )
    quarantine_rate: QuarantineRate = Field(
        default=QuarantineRate(),
        description="Beside maxQuarantined: how many nodes may newly be taken out of "
        "service per sliding window.",
    )
    dry_run: bool = Field(
        default=False,
        description="Probe and record verdicts, but touch no node: decided nodes are Held, "
        "status.heldAction says what would happen.",
    )
    paused: bool = Field(
        default=False,
        description="No new probes and no decisions; new nodes still get the pending taint.",
    )
    fabric: FabricPolicy = Field(
        default=FabricPolicy(),
        description="The two-node fabric test after the single-node checks (off by default).",
    )
    reverify: Reverification = Field(
        default_factory=Reverification,
        description="Re-probe accepted nodes when idle, suspects first, and compare each "
        "figure with the node's baseline (off by default).",
    )
    repeat_offenders: RepeatOffenders = Field(
        default_factory=RepeatOffenders,
        description="A node quarantined count times within the window stays quarantined "
        "until a person releases it.",
    )
    fencing: FencingPolicy = Field(
        default_factory=FencingPolicy,
        description="Whether a failure that belongs to single GPUs fences those GPUs "
        "(mode gpu, on a DRA node) or quarantines the node (mode node, the default).",
    )
    in_service: InService = Field(
        default_factory=InService,
        description="Judge accepted nodes in service from their own evidence: GPUs the "
        "device plugin stops advertising, other tools' node conditions, Xid events and "
        "GPU state from a token-less watch pod (off by default).",
    )

    @model_validator(mode="after")
    def _taints_differ(self) -> "NodeAcceptancePolicySpec":
        if self.pending_taint_key == self.quarantine.taint_key:
            raise ValueError("pendingTaintKey and quarantine.taintKey must differ")
        return self

    @model_validator(mode="after")
    def _control_plane_opt_in(self) -> "NodeAcceptancePolicySpec":
        named = sorted(set(self.node_selector) & set(CONTROL_PLANE_ROLE_LABELS))
        if named and not self.include_control_plane:
            raise ValueError(
                f"nodeSelector names {', '.join(named)}: the pending taint would go on "
                "control-plane nodes; set includeControlPlane: true if that is meant"
            )
        return self

    def governs_role(self, labels: Mapping[str, str]) -> bool:
        """False for a control-plane node, unless the policy opts in."""
        return self.include_control_plane or not any(
            key in labels for key in CONTROL_PLANE_ROLE_LABELS
        )

    def keys_named(self) -> list[str]:
        """Every taint and label key this policy has the operator write and remove."""
        return [self.pending_taint_key, self.quarantine.taint_key, *self.quarantine.labels]

    def keys_not_owned(self, prefixes: Iterable[str]) -> list[str]:
        """The keys this policy names that are under none of the owned ``prefixes``."""
        owned = tuple(prefixes)
        return [key for key in self.keys_named() if not key_owned(key, owned)]

    def max_quarantined_count(self, matched_nodes: int) -> int:
        """The breaker limit for a fleet of ``matched_nodes`` nodes.

        A percentage rounds down, but to at least 1 unless it is "0%": "10%" of
        4 nodes is 1, not 0. Unlike cluster-api's ``maxUnhealthy`` (which rounds
        down, because remediation deletes machines), a quarantine only taints one
        node, and a limit of 0 on a small fleet would turn its first bad node
        into a held verdict and a critical alert. An absolute count is as given.
        """
        return limit_count(self.max_quarantined, matched_nodes)

    def rate_count(self, matched_nodes: int) -> int:
        """``quarantineRate.maxPerWindow`` for a fleet of ``matched_nodes`` nodes."""
        return limit_count(self.quarantine_rate.max_per_window, matched_nodes)
