"""Health in service (docs/policy.md "inService"): the policy section and the
ledger a NodeAcceptance keeps about an accepted node's health while it takes work.

Policy: ``inService`` (off by default) judges an **accepted** node from its own
evidence: the device plugin's signal (GPU allocatable below capacity for longer
than ``allocatableGraceSeconds``), node conditions other tools write
(``unhealthyConditions``, debounced as NodeHealthCheck does), and the Xid events
and durable GPU state a token-less watch pod reports (``xid``, ``windowSeconds``).
The same signature on several nodes at once is a common cause (``correlation``):
those nodes are held, with an alert, none quarantined.

Status: ``status.inService``, a bounded ledger keyed by the node's bootID and
each GPU's UUID: the event history (the last :data:`MAX_EVENTS`), the Xid bursts
the rules count, the suspects, the signal timers (since when allocatable is short,
since when a condition holds), the watch reports already counted, and the last
in-service verdict with its evidence window.
"""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from gpuaccept.contracts.contract_model import ContractModel

DAY = 86400
MAX_EVENTS = 20
MAX_BURSTS = 64
MAX_SUSPECTS = 16
MAX_REPORTS = 16
MAX_CONDITION_RULES = 16
MAX_DRA_DEVICES = 64
MAX_DRIVER_TAINTS = 32

# A node condition type as Kubernetes writes it (NPD: KernelDeadlock, ReadonlyFilesystem;
# a cloud agent: AcceleratedHardwareReady).
ConditionType = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9._/-]{0,127}$")]
GpuUuid = Annotated[str, Field(max_length=64)]
XidCode = Annotated[int, Field(ge=1, le=65535)]

# What the rules know about an Xid (the classes of NVIDIA's catalogue the rules act on).
XidClassName = Literal["fatal", "repeated", "memory", "application", "other"]
# nvmlDeviceGpuRecoveryAction_t's values other than none (nvml.h, R570+), as the watch
# reports them (checks.xid_errors.RecoveryAction).
RecoveryActionName = Literal[
    "gpu_reset",
    "node_reboot",
    "drain_p2p",
    "drain_and_reset",
    "recover_imex_domain",
    "bus_reset",
    "system_reboot",
]
# All of nvmlDeviceGpuRecoveryAction_t, "none" (a healthy GPU) first: what NVML answers,
# as a hardware profile sets it for the simulated NVML.
NvmlRecoveryAction = Literal["none", RecoveryActionName]
# The NVLink error counters the watch reads.
WatchNvlinkCounter = Literal["replay", "recovery", "crc"]
# The NVSwitch fabric's health as the watch reports it (nvmlGpuFabricInfo_v2/v3 health
# mask and summary, as the acceptance check nvswitch_fabric names them), and a
# registration that completed with an error status.
WatchFabricCondition = Literal[
    "degraded_bandwidth",
    "route_recovery",
    "route_unhealthy",
    "access_timeout_recovery",
    "incorrect_configuration",
    "unhealthy",
    "limited_capacity",
    "registration_failed",
]
# What an event in the history is: an Xid's class, a node signal, or durable GPU state.
EventKind = Literal["fatal", "repeated", "memory", "application", "other", "signal", "state"]


class UnhealthyCondition(ContractModel):
    """A node condition that takes the node out of service once it has held,
    continuously, for ``durationSeconds`` (medik8s NodeHealthCheck's
    ``unhealthyConditions``: type, status, duration)."""

    type: ConditionType = Field(description="The condition type (e.g. KernelDeadlock).")
    status: Literal["True", "False", "Unknown"] = Field(
        description="The status that is unhealthy (NPD's problem conditions are True)."
    )
    duration_seconds: int = Field(
        default=300,
        ge=0,
        le=7 * DAY,
        description="How long the condition must hold without a break before it counts: "
        "a condition that flaps more often than this never takes the node out.",
    )


class Correlation(ContractModel):
    """The same signature on several nodes at once is a common cause, not each node's."""

    enabled: bool = Field(
        default=True,
        description="Hold nodes whose in-service signature many nodes share (CommonCause), "
        "with an alert, instead of quarantining each.",
    )
    min_nodes: int = Field(
        default=3,
        ge=2,
        le=100000,
        description="Nodes with the same signature, its onset within windowSeconds of each "
        "other, that make it a common cause.",
    )
    fraction: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="On a large fleet, the share of the policy's matched nodes that makes "
        "it one: the bar is the larger of minNodes and this share (rounded up).",
    )
    window_seconds: int = Field(
        default=600, ge=10, le=DAY, description="How close in time the onsets must be."
    )
    settle_seconds: int = Field(
        default=15,
        ge=0,
        le=600,
        description="How long a verdict waits after the onset of its evidence before it is "
        "applied, so that the other nodes' reports of a simultaneous event arrive first: "
        "until then it is recorded as pending and the node stays in service; then it is "
        "quarantined, or held as a common cause. 0: no wait.",
    )


class XidRules(ContractModel):
    """How the watch's Xid events are counted (NVSentinel's analyzer rules)."""

    repeated_bursts: int = Field(
        default=5,
        ge=1,
        le=1000,
        description="Bursts of the same repeated-hardware Xid on the same GPU within "
        "repeatedWindowSeconds that take the node out (XidRepeated).",
    )
    repeated_window_seconds: int = Field(
        default=DAY, ge=60, le=30 * DAY, description="The sliding window of those bursts."
    )
    burst_merge_seconds: int = Field(
        default=180,
        ge=0,
        le=DAY,
        description="Events of one Xid on one GPU less than this far apart are one burst.",
    )
    application_suspect_count: int = Field(
        default=2,
        ge=1,
        le=1000,
        description="Events of the same application-class Xid on the same GPU within "
        "applicationWindowSeconds that make the node a suspect (never a quarantine).",
    )
    application_window_seconds: int = Field(
        default=DAY, ge=60, le=30 * DAY, description="The sliding window of those events."
    )


def _recovery_actions_that_quarantine() -> list[RecoveryActionName]:
    return ["gpu_reset", "node_reboot", "drain_and_reset", "bus_reset", "system_reboot"]


def _nvlink_fail_above() -> dict[WatchNvlinkCounter, int]:
    return {"recovery": 0}


def _fabric_fail_on() -> list[WatchFabricCondition]:
    return [
        "degraded_bandwidth",
        "route_unhealthy",
        "incorrect_configuration",
        "unhealthy",
        "registration_failed",
    ]


class GpuStateRules(ContractModel):
    """Which durable GPU state a watch report reads takes the node out. The defaults
    are DCGM's health watch grades (DcgmHealthWatch.cpp, docs/policy.md): what it
    fails quarantines, what it only warns about is recorded."""

    ecc_uncorrected: bool = Field(
        default=True,
        description="Volatile uncorrected ECC errors counted in a window quarantine "
        "(EccUncorrected), unless the same report names a contained Xid 94 on that GPU "
        "(then its remap state decides). DCGM fails on any volatile DBE.",
    )
    nvlink_down: bool = Field(
        default=True,
        description="An NVLink active at the window's start and inactive at its end "
        "quarantines (NVLinkDown). DCGM fails on a link Down (not in MIG mode, whose "
        "links NVML reports down).",
    )
    nvlink_errors_fail_above: dict[WatchNvlinkCounter, int] = Field(
        default_factory=_nvlink_fail_above,
        max_length=3,
        description="NVLink error counter -> more errors than this in one window, summed "
        "over the GPU's links, quarantine (NVLinkErrors); a counter not listed is "
        "recorded only. Default: any recovery (a link that went down and retrained), as "
        "the acceptance check's failAbove.",
    )
    fabric_fail_on: list[WatchFabricCondition] = Field(
        default_factory=_fabric_fail_on,
        max_length=8,
        description="NVSwitch fabric conditions at a window's end that quarantine "
        "(FabricDegraded), as the acceptance check nvswitchFabric's failOn, and a "
        "registration that completed with an error status (registration_failed). "
        "Recoveries in progress, limited_capacity, and a fabric in_progress or "
        "not_started are recorded.",
    )
    remap_pending: bool = Field(
        default=False,
        description="A row remap pending (a reset completes it) quarantines "
        "(RowRemapPending). Off: recorded only; DCGM fails a remap failure, not a "
        "pending one. A remap failure always quarantines (RowRemapFailure).",
    )
    recovery_actions: list[RecoveryActionName] = Field(
        default_factory=_recovery_actions_that_quarantine,
        max_length=7,
        description="GPU recovery actions (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) that "
        "quarantine (GPURecoveryAction); the others are recorded. DCGM fails gpu_reset, "
        "node_reboot and drain_and_reset and only warns on drain_p2p.",
    )


class InService(ContractModel):
    """Judge accepted nodes from their own evidence while they take work (off by default)."""

    enabled: bool = Field(
        default=False, description="Watch this policy's accepted nodes in service."
    )
    allocatable_grace_seconds: int = Field(
        default=300,
        ge=1,
        le=DAY,
        description="How long the node's allocatable nvidia.com/gpu may stay below its "
        "capacity (the device plugin marked a GPU unhealthy, or lost it) before the node "
        "is taken out (GPUsUnallocatable). Rides out a device-plugin restart.",
    )
    unhealthy_conditions: list[UnhealthyCondition] = Field(
        default_factory=list,
        max_length=MAX_CONDITION_RULES,
        description="Node conditions other tools write (node-problem-detector, a cloud "
        "agent) that take the node out once held for their duration (UnhealthyCondition).",
    )
    correlation: Correlation = Field(
        default_factory=Correlation, description="Common causes across the policy's nodes."
    )
    xid: XidRules = Field(default_factory=XidRules, description="How Xid events are counted.")
    watch_pods: bool = Field(
        default=True,
        description="Run a token-less watch pod (no GPU requested) on each accepted node, "
        "one window after another, for Xid events and durable GPU state. Off: the Node's "
        "own signals only.",
    )
    window_seconds: int = Field(
        default=1800,
        ge=10,
        le=DAY,
        description="How long one watch pod watches its node before it reports. A "
        "window that ends early starts the next after earlyRestartSeconds.",
    )
    early_restart_seconds: int = Field(
        default=60,
        ge=10,
        le=DAY,
        description="After a watch pod that ended before its window (an eviction, a "
        "drain, a failed listener), the next starts this long after it started; each "
        "further early end in a row doubles the wait, up to windowSeconds.",
    )
    gpu_state: GpuStateRules = Field(
        default_factory=GpuStateRules,
        description="Which durable GPU state from a watch report takes the node out.",
    )


# ---------------------------------------------------------------------- status


class InServiceEvent(ContractModel):
    """One thing seen on the node in service (the history ``kubectl describe`` shows)."""

    what: str = Field(max_length=96, description="e.g. Xid 79, GPUsUnallocatable.")
    kind: EventKind = Field(
        description="An Xid's class, a node signal, or durable GPU state from a report."
    )
    time: datetime
    gpu: GpuUuid | None = None
    xid: XidCode | None = None


class XidBurst(ContractModel):
    """Events of one Xid on one GPU, merged while under burstMergeSeconds apart."""

    gpu: GpuUuid
    xid: XidCode
    kind: XidClassName
    first: datetime
    last: datetime
    events: int = Field(default=1, ge=1)


class InServiceSuspect(ContractModel):
    """An application-class Xid repeated on one GPU: recorded, never a quarantine."""

    gpu: GpuUuid
    xid: XidCode
    count: int = Field(ge=1)
    since: datetime
    common_cause: bool = Field(
        default=False, description="Many nodes share it (correlation): not the node's."
    )


class ConditionTimer(ContractModel):
    """Since when an unhealthy condition has held without a break."""

    type: ConditionType
    status: Literal["True", "False", "Unknown"]
    since: datetime


class DriverTaint(ContractModel):
    """A taint a DRA driver put on one of the node's devices (ResourceSlice
    ``spec.devices[].taints``, KEP-5055), as first seen: recorded once, kept for the
    ledger's life (the driver replaces its Xid taint on the next Xid, and drops every
    taint when it restarts)."""

    gpu: GpuUuid = Field(description="The device's uuid attribute (its name without one).")
    key: str = Field(max_length=128, description="e.g. gpu.nvidia.com/xid.")
    value: str = Field(default="", max_length=63, description="e.g. the Xid code.")
    effect: str = Field(default="", max_length=32, description="None, NoSchedule, NoExecute.")
    since: datetime = Field(description="The taint's timeAdded (when first seen without).")


class InServiceVerdict(ContractModel):
    """The in-service verdict and the evidence window it rests on."""

    reason: str = Field(pattern=r"^[A-Z][A-Za-z0-9]*$", max_length=64)
    message: str = Field(default="", max_length=512)
    signature: str = Field(max_length=96, description="What correlation compares.")
    window_start: datetime = Field(description="The first evidence the verdict rests on.")
    window_end: datetime = Field(description="When the verdict was reached.")
    gpu: GpuUuid | None = None
    common_cause: bool = False
    pending: bool = Field(
        default=False,
        description="Its evidence is newer than correlation.settleSeconds: recorded (other "
        "nodes' correlation sees it), not applied yet; the node stays in service.",
    )


class InServiceStatus(ContractModel):
    """The ledger of an accepted node in service (policy inService)."""

    boot_id: str | None = Field(
        default=None,
        alias="bootID",
        max_length=64,
        description="The boot this ledger is about: a new boot is a repair, and starts a "
        "new ledger (the node is probed again before it returns).",
    )
    accepted_time: datetime | None = Field(
        default=None,
        description="The acceptance (status.lastProbeTime) this ledger is about: a new "
        "acceptance starts new evidence.",
    )
    events: list[InServiceEvent] = Field(
        default_factory=list, max_length=MAX_EVENTS, description="The latest events."
    )
    bursts: list[XidBurst] = Field(default_factory=list, max_length=MAX_BURSTS)
    suspects: list[InServiceSuspect] = Field(default_factory=list, max_length=MAX_SUSPECTS)
    unallocatable_since: datetime | None = Field(
        default=None,
        description="Since when allocatable nvidia.com/gpu is below capacity, or (DRA) a "
        "GPU of draDevices is missing from the node's pool or the pool is incomplete.",
    )
    dra_devices: list[GpuUuid] = Field(
        default_factory=list,
        max_length=MAX_DRA_DEVICES,
        description="DRA: the GPUs (uuid attribute) of the node's complete pool when this "
        "ledger began; a GPU missing from the pool later is a loss past the grace.",
    )
    driver_taints: list[DriverTaint] = Field(
        default_factory=list,
        max_length=MAX_DRIVER_TAINTS,
        description="DRA: the taints the driver put on the node's devices, each once.",
    )
    conditions: list[ConditionTimer] = Field(
        default_factory=list,
        max_length=MAX_CONDITION_RULES,
        description="The policy's unhealthy conditions that hold now, and since when.",
    )
    reports: list[str] = Field(
        default_factory=list,
        max_length=MAX_REPORTS,
        description="The watch reports already counted (pod UID and window): a report "
        "seen again is not counted twice.",
    )
    verdict: InServiceVerdict | None = Field(default=None, description="The last verdict.")
    watch_serial: int = Field(
        default=0, ge=0, description="The serial of the node's latest watch pod."
    )
    watch_pod: str | None = Field(
        default=None, max_length=253, description="The watch pod of the window under way."
    )
    watch_started: datetime | None = Field(
        default=None, description="When the latest watch pod was created."
    )
    watch_ended: datetime | None = Field(
        default=None,
        description="When the latest watch pod was seen ended (its report read or not).",
    )
    early_starts: int = Field(
        default=0,
        ge=0,
        description="Watch pods started in a row after one that ended before its window "
        "(the wait before the next doubles with each).",
    )
    reported_until: datetime | None = Field(
        default=None,
        description="The end of the latest watch window counted: evidence up to then "
        "has been read.",
    )
    not_read: dict[str, str] = Field(
        default_factory=dict,
        max_length=12,
        description="What the latest watch report could not read (interface -> why): a "
        "window blind to it, never a quiet one. Empty: everything was read.",
    )
