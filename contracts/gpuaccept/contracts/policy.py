"""The acceptance policy.

:class:`ProbePolicy` holds the thresholds the checks are judged against; it is
what ``gpuaccept probe --policy FILE`` reads and what the ``NodeAcceptancePolicy``
CRD carries under ``spec.probe``. :class:`NodeAcceptancePolicySpec` adds what
the operator does with a verdict.

Deliberately absent: image, command, privileges, runtime class. Those come
from the operator's own configuration, never from a policy object, so a policy
author cannot run arbitrary code on every GPU node.
"""

import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from gpuaccept.contracts.api import GPU_PRESENT_LABEL, PENDING_TAINT_KEY, QUARANTINE_TAINT_KEY
from gpuaccept.contracts.base import ContractModel

# A dotted numeric version such as "550.54.15", "12.4" or "2.21.5".
Version = Annotated[str, StringConstraints(pattern=r"^\d+(\.\d+){0,3}$", max_length=32)]


def _prefix_fits(key: str) -> str:
    prefix, _, _ = key.rpartition("/")
    if len(prefix) > 253:
        raise ValueError(f"the prefix of {key[:40]}… is longer than 253 characters")
    return key


# A label or taint key as Kubernetes takes it: an optional DNS-subdomain prefix
# (labels of at most 63 characters, at most 253 in all), then a name of 1 to 63 characters.
QualifiedName = Annotated[
    str,
    StringConstraints(
        pattern=r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*/)?"
        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
        max_length=317,
    ),
    AfterValidator(_prefix_fits),
]
# Prefixes of keys the operator must never write or remove: Kubernetes' own, and
# the NVIDIA device plugin's (e.g. a cloud's ``nvidia.com/gpu`` NoSchedule taint).
RESERVED_KEY_PATTERN = r"^([^/]*\.)?(kubernetes\.io|k8s\.io|nvidia\.com)/"


def _not_reserved(key: str) -> str:
    if re.match(RESERVED_KEY_PATTERN, key):
        raise ValueError(
            f"{key}: keys under kubernetes.io, k8s.io and nvidia.com belong to other "
            "owners, and the operator writes and removes this one"
        )
    return key


# A taint or label key the operator owns: it sets it and removes it again.
OwnedKey = Annotated[QualifiedName, AfterValidator(_not_reserved)]
LabelValue = Annotated[
    str, StringConstraints(pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", max_length=63)
]
# An absolute count ("3" as int) or a percentage of the policy's nodes ("10%").
Percentage = Annotated[str, StringConstraints(pattern=r"^(100|[1-9]?[0-9])%$")]
NonNegativeCount = Annotated[int, Field(ge=0, le=100000)]


def version_tuple(version: str) -> tuple[int, ...]:
    """``"550.54.15"`` → ``(550, 54, 15)``; raises ValueError on anything else."""
    return tuple(int(part) for part in version.split("."))


def version_at_least(version: str, bound: str) -> bool:
    """``version >= bound``, a missing part counting as 0: "12.4" is at least "12.4.0"."""
    value, low = version_tuple(version), version_tuple(bound)
    width = max(len(value), len(low))
    return value + (0,) * (width - len(value)) >= low + (0,) * (width - len(low))


def version_at_most(version: str, bound: str) -> bool:
    """``version <= bound`` at the bound's precision: "2.21.5" is at most "2.21" (2.21.*)."""
    value, high = version_tuple(version), version_tuple(bound)
    return (value + (0,) * len(high))[: len(high)] <= high


class VersionRange(ContractModel):
    """Inclusive bounds; a missing bound is open. Compared component-wise as
    integers; ``max`` holds at its own precision ("2.21" admits 2.21.5) and a
    missing part counts as 0 for ``min`` ("12.4.0" admits 12.4)."""

    min: Version | None = None
    max: Version | None = None

    @model_validator(mode="after")
    def _min_not_above_max(self) -> "VersionRange":
        if (
            self.min is not None
            and self.max is not None
            and not version_at_most(self.min, self.max)
        ):
            raise ValueError(f"min {self.min} is above max {self.max}: no version is in this range")
        return self

    def contains(self, version: str) -> bool:
        if self.min is not None and not version_at_least(version, self.min):
            return False
        return self.max is None or version_at_most(version, self.max)

    def describe(self) -> str:
        return f"[{self.min or '*'}, {self.max or '*'}]"


class CheckSwitch(ContractModel):
    """Every check can be turned off; an enabled, required check that cannot
    produce a result (error or skip) quarantines the node."""

    enabled: bool = True
    required: bool = True


class PcieLinkPolicy(CheckSwitch):
    require_max: bool = Field(
        default=True,
        description="Under load, each GPU's link generation and width must equal its maximum.",
    )
    min_generation: int | None = Field(default=None, ge=1, le=7)
    min_width: int | None = Field(default=None, ge=1, le=32)
    min_h2d_gbps: float | None = Field(default=None, ge=0, alias="minH2DGBps")
    min_d2h_gbps: float | None = Field(default=None, ge=0, alias="minD2HGBps")


class CpuGovernorPolicy(CheckSwitch):
    required_governor: str = Field(default="performance", pattern=r"^[a-z_]{1,32}$")


class DriverLibrariesPolicy(CheckSwitch):
    driver_versions: VersionRange = VersionRange()
    nccl_versions: VersionRange = VersionRange()
    min_cuda_driver_version: Version | None = None


class NcclAllreducePolicy(CheckSwitch):
    min_busbw_gbps: float | None = Field(default=None, ge=0, alias="minBusbwGBps")
    min_busbw_gbps_by_model: dict[str, float] = Field(
        default_factory=dict,
        alias="minBusbwGBpsByModel",
        description="Per GPU model (as NVML names it); overrides minBusbwGBps for that model.",
    )
    max_message_bytes: int = Field(default=1 << 30, ge=1 << 10, le=1 << 34)
    iterations: int = Field(default=20, ge=1, le=1000)
    warmup_iterations: int = Field(default=5, ge=0, le=100)

    def min_busbw_for(self, gpu_model: str | None) -> float | None:
        if gpu_model is not None and gpu_model in self.min_busbw_gbps_by_model:
            return self.min_busbw_gbps_by_model[gpu_model]
        return self.min_busbw_gbps


class ThrottleReason(StrEnum):
    """NVML clock event reasons that matter (idle, application and display
    clock settings are never judged)."""

    HW_SLOWDOWN = "hw_slowdown"
    HW_THERMAL_SLOWDOWN = "hw_thermal_slowdown"
    HW_POWER_BRAKE = "hw_power_brake"
    SW_POWER_CAP = "sw_power_cap"
    SW_THERMAL_SLOWDOWN = "sw_thermal_slowdown"
    SYNC_BOOST = "sync_boost"


class ThrottleReasonsPolicy(CheckSwitch):
    fail_on: list[ThrottleReason] = Field(
        default_factory=lambda: [
            ThrottleReason.HW_SLOWDOWN,
            ThrottleReason.HW_THERMAL_SLOWDOWN,
            ThrottleReason.HW_POWER_BRAKE,
        ]
    )
    warn_on: list[ThrottleReason] = Field(
        default_factory=lambda: [ThrottleReason.SW_POWER_CAP, ThrottleReason.SW_THERMAL_SLOWDOWN]
    )
    sample_seconds: float = Field(default=5.0, gt=0, le=600)


class GpuCountPolicy(CheckSwitch):
    expected: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="GPUs that must be visible; unset means the node's advertised nvidia.com/gpu.",
    )


class ProbePolicy(ContractModel):
    """Thresholds for every check. Empty means the defaults documented in docs/policy.md."""

    pcie_link: PcieLinkPolicy = PcieLinkPolicy()
    cpu_governor: CpuGovernorPolicy = CpuGovernorPolicy()
    driver_libraries: DriverLibrariesPolicy = DriverLibrariesPolicy()
    nccl_allreduce: NcclAllreducePolicy = NcclAllreducePolicy()
    throttle_reasons: ThrottleReasonsPolicy = ThrottleReasonsPolicy()
    gpu_count: GpuCountPolicy = GpuCountPolicy()

    @model_validator(mode="after")
    def _some_check_enabled(self) -> "ProbePolicy":
        switches = (getattr(self, name) for name in type(self).model_fields)
        if not any(isinstance(s, CheckSwitch) and s.enabled for s in switches):
            raise ValueError("every check is disabled: a node would be accepted on no evidence")
        return self

    def switch(self, check: str) -> CheckSwitch | None:
        """The sub-policy of the check named ``check`` (snake_case), if any."""
        value = getattr(self, check, None)
        return value if isinstance(value, CheckSwitch) else None


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"


class QuarantineAction(ContractModel):
    taint_key: OwnedKey = QUARANTINE_TAINT_KEY
    taint_value: LabelValue = "true"
    taint_effect: TaintEffect = TaintEffect.NO_SCHEDULE
    labels: dict[OwnedKey, LabelValue] = Field(
        default_factory=dict,
        description="Extra labels set on a quarantined node (and removed on acceptance).",
    )


class ProbeRun(ContractModel):
    timeout_seconds: int = Field(default=900, ge=30, le=7200)
    retries: int = Field(default=2, ge=0, le=10)
    backoff_seconds: int = Field(default=30, ge=1, le=3600)


class PolicyChangeAction(StrEnum):
    REJUDGE = "Rejudge"
    REPROBE = "Reprobe"
    IGNORE = "Ignore"


class ReprobeTriggers(ContractModel):
    on_boot_id_change: bool = Field(default=True, alias="onBootIDChange")
    on_annotation: bool = True
    on_policy_change: PolicyChangeAction = PolicyChangeAction.REJUDGE


def _default_selector() -> dict[str, str]:
    return {GPU_PRESENT_LABEL: "true"}


class NodeAcceptancePolicySpec(ContractModel):
    node_selector: dict[QualifiedName, LabelValue] = Field(
        default_factory=_default_selector,
        min_length=1,
        description="matchLabels for the nodes this policy governs (default: GPU nodes); "
        "at least one label, so that no policy governs every node by accident.",
    )
    probe: ProbePolicy = ProbePolicy()
    quarantine: QuarantineAction = QuarantineAction()
    pending_taint_key: OwnedKey = PENDING_TAINT_KEY
    probe_run: ProbeRun = ProbeRun()
    reprobe: ReprobeTriggers = ReprobeTriggers()
    max_quarantined: NonNegativeCount | Percentage = Field(
        default="10%",
        description="Circuit breaker: an absolute count or a percentage of matched nodes.",
    )
    dry_run: bool = False
    paused: bool = False

    @model_validator(mode="after")
    def _taints_differ(self) -> "NodeAcceptancePolicySpec":
        if self.pending_taint_key == self.quarantine.taint_key:
            raise ValueError("pendingTaintKey and quarantine.taintKey must differ")
        return self

    def max_quarantined_count(self, matched_nodes: int) -> int:
        """The breaker limit for a fleet of ``matched_nodes`` nodes."""
        if isinstance(self.max_quarantined, int):
            return max(self.max_quarantined, 0)
        percent = int(self.max_quarantined.rstrip("%"))
        return (matched_nodes * percent) // 100


PolicyKind = Literal["NodeAcceptancePolicy"]
