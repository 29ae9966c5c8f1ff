"""The parts of the acceptance policy that are not about one check.

Field types (versions, label and taint keys), :class:`CheckSwitch` (the base of
every check's policy section) and what the operator does with a verdict. The
whole policy, ``ProbePolicy`` and ``NodeAcceptancePolicySpec``, is assembled
from the check registry in :mod:`gpuaccept.checks.policy`.

Deliberately absent: image, command, privileges, runtime class. Those come
from the operator's own configuration, never from a policy object, so a policy
author cannot run arbitrary code on every GPU node.
"""

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from gpuaccept.contracts.api import GPU_PRESENT_LABEL, GROUP, QUARANTINE_TAINT_KEY
from gpuaccept.contracts.contract_model import ContractModel

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


# A taint or label key the operator owns: it sets it and removes it again. The
# model refuses the reserved prefixes above statically; the operator is the
# enforcement point and takes only keys under its owned prefixes (below).
OwnedKey = Annotated[QualifiedName, AfterValidator(_not_reserved)]

# The prefix every gpuaccept key is under. The operator may be started with more
# (``--owned-key-prefix``, the chart's ``ownedKeyPrefixes``, which the platform
# team owns); a policy naming a key under none of them is invalid.
OWNED_KEY_PREFIX = f"{GROUP}/"
# An owned prefix: a DNS subdomain and "/", optionally the start of a name
# ("gpuaccept.io/", "example.com/gpu-"); the "/" keeps "gpuaccept.io" from
# also owning "gpuaccept.io.evil.example/...".
OWNED_PREFIX_PATTERN = (
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*/"
    r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?$"
)


def key_owned(key: str, prefixes: Iterable[str]) -> bool:
    """Is ``key`` under one of the owned ``prefixes``?"""
    return any(key.startswith(prefix) for prefix in prefixes)


# The most keys a policy's label maps (nodeSelector, quarantine.labels) hold: the
# CRD's CEL rule on their keys needs a bound to fit the API server's cost budget.
MAX_MAP_KEYS = 64

# Role labels of control-plane nodes: a policy selecting such nodes would taint
# them; it must opt in (``includeControlPlane``).
CONTROL_PLANE_ROLE_LABELS = (
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
)
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

    min: Version | None = Field(
        default=None, description="Lowest version admitted (inclusive); unset: no lower bound."
    )
    max: Version | None = Field(
        default=None,
        description="Highest version admitted (inclusive, at its own precision: 2.21 admits "
        "2.21.5); unset: no upper bound.",
    )

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

    enabled: bool = Field(default=True, description="Run this check.")
    required: bool = Field(
        default=True,
        description="A result is needed: if the check errors or is skipped, the node is "
        "quarantined. Off: only a failing result quarantines.",
    )


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"


class QuarantineAction(ContractModel):
    """What the operator puts on a node that fails: a taint, and optional labels."""

    taint_key: OwnedKey = Field(
        default=QUARANTINE_TAINT_KEY,
        description="Key of the quarantine taint (under an owned prefix: gpuaccept.io/ or "
        "the operator's --owned-key-prefix).",
    )
    taint_value: LabelValue = Field(default="true", description="Value of the quarantine taint.")
    taint_effect: TaintEffect = Field(
        default=TaintEffect.NO_SCHEDULE,
        description="NoSchedule: running pods stay. NoExecute: the taint is still "
        "NoSchedule, and the pods that do not tolerate it are evicted through the Eviction "
        "API, as their PodDisruptionBudgets allow.",
    )
    labels: dict[OwnedKey, LabelValue] = Field(
        default_factory=dict,
        max_length=MAX_MAP_KEYS,
        description="Extra labels set on a quarantined node (and removed on acceptance).",
    )


class GPUWaitExpiry(StrEnum):
    """What happens to the pending taint when a node's wait for GPUs runs out."""

    KEEP_PENDING_TAINT = "KeepPendingTaint"
    REMOVE_PENDING_TAINT = "RemovePendingTaint"


class GPUWait(ContractModel):
    """How long a selected node may take to advertise ``nvidia.com/gpu``."""

    timeout_seconds: int = Field(
        default=1800,
        ge=30,
        le=604800,
        description="Seconds a selected node may advertise no allocatable nvidia.com/gpu "
        "before it goes to phase Stalled (reason NoGPUsAdvertised).",
    )
    on_timeout: GPUWaitExpiry = Field(
        default=GPUWaitExpiry.KEEP_PENDING_TAINT,
        description="KeepPendingTaint (default): the node stays out of service. "
        "RemovePendingTaint: the node takes pods again, unprobed (it is probed, under "
        "the pending taint again, once it advertises GPUs).",
    )


class ProbeRun(ContractModel):
    """How one probe pod runs, and how often a failed run is retried."""

    timeout_seconds: int = Field(
        default=900,
        ge=30,
        le=7200,
        description="Seconds a probe pod may run (its activeDeadlineSeconds). Unset: the "
        "operator's --probe-timeout (chart value probe.timeoutSeconds), else 900.",
    )
    retries: int = Field(
        default=2,
        ge=0,
        le=10,
        description="Probe runs retried after a probe error (pod failed, timed out, bad "
        "report) before the node is quarantined with ProbeError.",
    )
    backoff_seconds: int = Field(
        default=30,
        ge=1,
        le=3600,
        description="Seconds before the first retry; doubled for each further retry.",
    )


class PolicyChangeAction(StrEnum):
    REJUDGE = "Rejudge"
    REPROBE = "Reprobe"
    IGNORE = "Ignore"


class QuarantineRate(ContractModel):
    """How many nodes gpuaccept may newly take out of service per sliding window."""

    max_per_window: NonNegativeCount | Percentage = Field(
        default="10%",
        description="Nodes newly taken out of service (quarantined, or an in-service node "
        "re-probed) within the window: a count, or a percentage of the matched nodes "
        "(rounded down, at least 1 unless 0).",
    )
    window_seconds: int = Field(
        default=300, ge=1, le=86400, description="The sliding window, in seconds."
    )


def limit_count(limit: int | str, matched_nodes: int) -> int:
    """A count, or a percentage of ``matched_nodes`` rounded down but at least 1
    unless it is "0%"."""
    if isinstance(limit, int):
        return max(limit, 0)
    percent = int(limit.rstrip("%"))
    if percent == 0:
        return 0
    return max((matched_nodes * percent) // 100, 1)


class ReprobeTriggers(ContractModel):
    """When a decided node is probed (or judged) again."""

    on_boot_id_change: bool = Field(
        default=True,
        alias="onBootIDChange",
        description="Probe again when the node reboots (its bootID changes).",
    )
    on_annotation: bool = Field(
        default=True,
        description="Probe again when the node is annotated gpuaccept.io/reprobe.",
    )
    on_policy_change: PolicyChangeAction = Field(
        default=PolicyChangeAction.REJUDGE,
        description="When the policy's spec changes: Rejudge (judge the stored results "
        "again, no new probe), Reprobe (probe every node again) or Ignore.",
    )


def default_node_selector() -> dict[str, str]:
    """GPU nodes: the label the NVIDIA GPU feature discovery sets."""
    return {GPU_PRESENT_LABEL: "true"}


PolicyKind = Literal["NodeAcceptancePolicy"]
