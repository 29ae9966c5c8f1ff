"""Re-verification of accepted nodes (docs/policy.md "reverify"): the policy
sections and the status a NodeAcceptance keeps about it.

Policy: ``reverify`` (off by default) re-probes an accepted node once it has been
idle (no pod requesting GPUs) for ``idleSeconds``, at most once per
``periodSeconds``, within the policy's limit and rate; a suspect first, with only
the checks concerned. ``reverify.drift`` compares each figure of a new probe with
the node's own baseline (its figures at acceptance). ``repeatOffenders`` keeps a
node quarantined, for a person, once it was quarantined ``count`` times within
``windowSeconds`` without a person's release in between.

Status: ``status.baseline`` (the figures at acceptance; kept with the evidence),
``status.reverify`` (idle sampling, the round under way, the last outcome, the
drift found, and one plain input: the suspicions). A person's release is
``status.release`` (``kubectl gpuaccept release``).
"""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, model_validator

from gpuaccept.contracts.contract_model import ContractModel

CheckName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
GpuIndex = Annotated[int, Field(ge=0, le=63)]
DAY = 86400


class DriftPolicy(ContractModel):
    """How far a figure may fall below the node's own baseline."""

    enabled: bool = Field(
        default=True,
        description="Compare a new probe's figures with the node's baseline (its figures "
        "at acceptance), beside the policy's thresholds and the node's siblings.",
    )
    warn_percent: float = Field(
        default=5.0,
        gt=0,
        le=100,
        description="A figure more than this many percent below its baseline is recorded "
        "as drift (status.reverify.drift, gpuaccept_node_drift_percent), with an Event.",
    )
    fail_percent: float | None = Field(
        default=10.0,
        gt=0,
        le=100,
        description="A GPU figure (TFLOPS, memory bandwidth, peer copies, busbw, PCIe "
        "copies) more than this many percent below its baseline fails the node with "
        "BaselineDriftFailed. Unset: drift only warns. The fabric pair's busbw only "
        "warns (a pair's figure is also its partner's).",
    )

    @model_validator(mode="after")
    def _warn_before_fail(self) -> "DriftPolicy":
        if self.fail_percent is not None and self.warn_percent > self.fail_percent:
            raise ValueError("drift.warnPercent must not exceed drift.failPercent")
        return self


class Reverification(ContractModel):
    """Probe accepted nodes again while they are idle (off by default)."""

    enabled: bool = Field(
        default=False, description="Re-verify accepted nodes of this policy when idle."
    )
    idle_seconds: int = Field(
        default=3600,
        ge=0,
        le=7 * DAY,
        description="How long a node must have had no pod requesting nvidia.com/gpu, seen "
        "by two lists of its pods this far apart, before it is re-probed.",
    )
    period_seconds: int = Field(
        default=7 * DAY,
        ge=10,
        le=90 * DAY,
        description="A node is re-verified at most once per period (from its last probe "
        "or re-verification); a suspect does not wait for it.",
    )
    sample_seconds: int = Field(
        default=600,
        ge=1,
        le=DAY,
        description="How often a node due for re-verification has its pods listed (one "
        "list by spec.nodeName) while it waits for an idle window.",
    )
    suspects: bool = Field(
        default=True,
        description="Re-probe a suspect (status.reverify.suspicions) at its next idle "
        "window with only the checks the suspicion names.",
    )
    drift: DriftPolicy = Field(
        default_factory=DriftPolicy, description="Drift against the node's own baseline."
    )


class RepeatOffenders(ContractModel):
    """A node that keeps coming back from quarantine needs a person."""

    enabled: bool = Field(
        default=True,
        description="Keep a node quarantined (RepeatedQuarantine) once it was quarantined "
        "count times within windowSeconds, and quarantine it (RepeatedFence) instead of "
        "fencing one of its GPUs the count-th time within windowSeconds, until a person "
        "releases it.",
    )
    count: int = Field(
        default=3,
        ge=2,
        le=100,
        description="Quarantines of the node, or fences of one GPU, within the window that "
        "make it so.",
    )
    window_seconds: int = Field(
        default=7 * DAY, ge=60, le=90 * DAY, description="The sliding window, in seconds."
    )


# ---------------------------------------------------------------------- status


class Suspicion(ContractModel):
    """Why a node is suspected while in service (the in-service rules write these;
    a person or another tool may too): the checks that would confirm it, the
    GPUs concerned, the cause, and since when."""

    checks: list[CheckName] = Field(min_length=1, max_length=16)
    gpus: list[GpuIndex] = Field(default_factory=list, max_length=64)
    cause: str = Field(max_length=240)
    since: datetime


class ReverifyRound(ContractModel):
    """The re-verification under way (or the last one, in ``last``)."""

    cause: Literal["Idle", "Suspect"]
    started: datetime
    checks: list[CheckName] = Field(
        default_factory=list, max_length=32, description="Only these checks ran (empty: all)."
    )
    gpus: list[GpuIndex] = Field(default_factory=list, max_length=64)
    suspicion: str | None = Field(default=None, max_length=240)
    outcome: Literal["Passed", "Failed", "GaveUp"] | None = None
    finished: datetime | None = None
    message: str | None = Field(default=None, max_length=512)


class DriftFinding(ContractModel):
    """One figure below the node's baseline."""

    check: CheckName
    figure: str = Field(max_length=64)
    gpu: int | None = Field(default=None, ge=0, le=63)
    baseline: float = Field(ge=0)
    value: float = Field(ge=0)
    percent: float = Field(description="How far below the baseline, percent.")
    level: Literal["warn", "fail"]
    message: str = Field(default="", max_length=240)


MAX_DRIFT = 16
MAX_HISTORY = 16
MAX_FENCE_HISTORY = 32


class GpuFence(ContractModel):
    """One GPU's fence: when gpuaccept fenced it, or escalated its fence to
    the node's quarantine (``repeatOffenders``)."""

    uuid: str = Field(max_length=64, description="The GPU's NVML UUID.")
    time: datetime


class ReverifyStatus(ContractModel):
    """What the operator keeps about re-verifying this node."""

    sampled_time: datetime | None = Field(
        default=None, description="When the node's pods were last listed for idleness."
    )
    idle_since: datetime | None = Field(
        default=None,
        description="The first of the lists in a row that found no pod requesting GPUs.",
    )
    busy_pods: list[str] = Field(
        default_factory=list, max_length=5, description="GPU pods the last list found."
    )
    round: ReverifyRound | None = Field(default=None, description="The round under way.")
    last: ReverifyRound | None = Field(default=None, description="The last round, ended.")
    drift: list[DriftFinding] = Field(default_factory=list, max_length=MAX_DRIFT)
    drift_time: datetime | None = None
    suspicions: list[Suspicion] = Field(
        default_factory=list,
        max_length=8,
        description="Input: the node is suspected (in-service rules, a person).",
    )
    quarantines: list[datetime] = Field(
        default_factory=list,
        max_length=MAX_HISTORY,
        description="When the node was quarantined (the latest ones): the repeat-offender "
        "rule counts them.",
    )
    gpu_fences: list[GpuFence] = Field(
        default_factory=list,
        max_length=MAX_FENCE_HISTORY,
        description="When each GPU was fenced, or its fence escalated to the node's "
        "quarantine (the latest ones): the repeat-offender rule counts them per GPU.",
    )


class BaselineFigure(ContractModel):
    """One figure of the node at acceptance."""

    check: CheckName
    figure: str = Field(max_length=64)
    value: float = Field(ge=0)
    gpu: int | None = Field(default=None, ge=0, le=63)
    where: str | None = Field(default=None, max_length=32)


class Baseline(ContractModel):
    """The node's figures at acceptance: what a later probe is compared with."""

    taken_time: datetime
    gpu_model: str | None = Field(default=None, max_length=64)
    gpu_count: int | None = Field(default=None, ge=0)
    figures: list[BaselineFigure] = Field(default_factory=list, max_length=64)
