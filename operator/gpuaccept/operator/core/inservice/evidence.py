"""The plain inputs of the in-service rules, and their reasons (pure data).

The rules never read a Kubernetes object or a watch pod: the reconcile turns the
Node into :class:`NodeSignals` and a trusted watch report into :class:`WatchEvidence`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gpuaccept.operator.core.model import ConditionSeen, DeviceTaintView

REASON_UNALLOCATABLE = "GPUsUnallocatable"
REASON_CONDITION = "UnhealthyCondition"
REASON_XID_FATAL = "XidFatal"
REASON_XID_REPEATED = "XidRepeated"
REASON_REMAP_FAILURE = "RowRemapFailure"
REASON_REMAP_PENDING = "RowRemapPending"
REASON_RECOVERY_ACTION = "GPURecoveryAction"
REASON_GPU_LOST = "GPULost"
REASON_ECC_UNCORRECTED = "EccUncorrected"
REASON_NVLINK_DOWN = "NVLinkDown"
REASON_NVLINK_ERRORS = "NVLinkErrors"
REASON_FABRIC = "FabricDegraded"
REASON_COMMON_CAUSE = "CommonCause"

# Every reason an in-service verdict may carry, strongest first: when several hold
# at once, the verdict names the first (the others are in its message).
REASONS = (
    REASON_XID_FATAL,
    REASON_GPU_LOST,
    REASON_REMAP_FAILURE,
    REASON_ECC_UNCORRECTED,
    REASON_RECOVERY_ACTION,
    REASON_NVLINK_DOWN,
    REASON_NVLINK_ERRORS,
    REASON_FABRIC,
    REASON_REMAP_PENDING,
    REASON_XID_REPEATED,
    REASON_UNALLOCATABLE,
    REASON_CONDITION,
)
# Reasons that rest on a watch report: what happened stays true until a new boot
# or a new acceptance (the node's signals are read again at every pass).
REPORTED = frozenset(REASONS[:10])


@dataclass(frozen=True)
class DeviceSeen:
    """One device of the node's DRA pools now: who it is and the driver's taints."""

    gpu: str  # its uuid attribute (its device name without one)
    driver: str
    taints: tuple[DeviceTaintView, ...] = ()


@dataclass(frozen=True)
class DraSeen:
    """What a DRA node's pools of the configured drivers say now."""

    complete: bool  # every pool complete (all slices of its latest generation seen)
    gpus: tuple[str, ...]  # the whole GPUs (uuid) of the complete pools
    devices: tuple[DeviceSeen, ...] = ()  # every device of the pools' latest generation
    # MIG or VFIO devices in the pools: a GPU repartitioned is published under another
    # uuid (a MIG device names its GPU in attribute parentUUID, which a fence follows:
    # core/fencerules.py fence_targets; this ledger does not judge such a pool)
    repartitioned: bool = False
    describe: str = ""  # what the pools say, for a message


@dataclass(frozen=True)
class NodeSignals:
    """What the Node object says about its GPUs' health now."""

    boot_id: str
    gpu_capacity: int
    gpu_allocatable: int
    conditions: tuple[ConditionSeen, ...] = ()
    accepted_gpus: int = 0  # the GPUs the acceptance report covered (0: unknown)
    # MIG mixed (GFD label nvidia.com/mig.strategy=mixed): nvidia.com/gpu counts only
    # the GPUs not partitioned, the others are nvidia.com/mig-* devices
    partitioned: bool = False
    # DRA: the node's pools (None: the node publishes no GPU through a DRA driver)
    dra: DraSeen | None = None


@dataclass(frozen=True)
class Finding:
    """A reason the node fails in service, with its evidence window and signature."""

    reason: str
    message: str
    signature: str  # what correlation compares across nodes
    start: datetime  # the onset: the first evidence
    gpu: str | None = None

    @property
    def rank(self) -> tuple[int, datetime, str, str]:
        return (REASONS.index(self.reason), self.start, self.gpu or "", self.signature)
