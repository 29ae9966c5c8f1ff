"""The hardware profile: a YAML description of a simulated GPU node.

Documented field by field in ``docs/profile-format.md``. Validated strictly:
an unknown or misspelled field is an error naming the file and the field.
"""

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    create_model,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from gpuaccept.checks.budget import START_PHASE
from gpuaccept.checks.gpu_models import gpu_model_class
from gpuaccept.checks.registry import BY_NAME
from gpuaccept.contracts.inservice import NvmlRecoveryAction
from gpuaccept.probe.clocks import REASON_BITS
from gpuaccept.probe.hardware.sysfs import parse_cpu_list
from gpuaccept.probe.inputs import read_structured_file, shorten, validate

Version = Annotated[str, StringConstraints(pattern=r"^\d+(\.\d+){0,3}$", max_length=32)]
MAX_CPUS = 4096
"""The most CPUs a profile describes; every CPU number and range is bounded by it."""


def _bounded_cpu_list(text: str) -> str:
    """A cpulist whose CPU numbers are below :data:`MAX_CPUS` and whose ranges run
    upwards, so that expanding it can never take more than ``MAX_CPUS`` entries
    per part (``0-4000000000`` is refused, not expanded)."""
    for part in text.split(","):
        first, _, last = part.partition("-")
        for number in (first, last):
            if len(number) > len(str(MAX_CPUS)) or (number and int(number) >= MAX_CPUS):
                raise ValueError(f"CPU {shorten(number, 12)} is not below {MAX_CPUS}")
        if last and int(first) > int(last):
            raise ValueError(f"range {part} runs downwards")
    return text


CpuList = Annotated[
    str,
    StringConstraints(pattern=r"^\d+(-\d+)?(,\d+(-\d+)?)*$", max_length=4096),
    AfterValidator(_bounded_cpu_list),
]
Governor = Annotated[str, StringConstraints(pattern=r"^[a-z_]{1,32}$")]
ReasonName = Literal[
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake",
    "display_clock_setting",
]
assert set(ReasonName.__args__) == set(REASON_BITS)  # type: ignore[attr-defined]


class ProfileModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,  # a bandwidth of .inf is no measurement
    )


class Link(ProfileModel):
    generation: int = Field(ge=1, le=7)
    width: int = Field(ge=1, le=32)


def _idle_reasons() -> list[ReasonName]:
    return ["gpu_idle"]


Fraction = Annotated[float, Field(ge=0, le=1)]
Seconds = Annotated[float, Field(ge=0, le=3600)]


class ClockEventReasons(ProfileModel):
    idle: list[ReasonName] = Field(default_factory=_idle_reasons)
    load: list[ReasonName] = Field(
        default_factory=list, description="Active in every sample under load (sustained)."
    )
    load_brief: dict[ReasonName, Seconds] = Field(
        default_factory=dict,
        description="Active only for this many seconds after the load starts, as a real GPU "
        "reports HW slowdown during a P-state or clock change.",
    )
    load_fraction: dict[ReasonName, Fraction] = Field(
        default_factory=dict,
        description="Active in this fraction of the samples under load, spread evenly "
        "(intermittent: SW power cap at the power limit, power-brake pulses).",
    )


NvlinkCounterName = Literal["replay", "recovery", "crc", "ecc"]
NvlinkCounterPart = Literal["replay", "recovery", "crc_flit", "crc_data", "ecc_data"]
FabricState = Literal["completed", "in_progress", "not_started", "not_supported", "unsupported"]
FabricConditionName = Literal[
    "degraded_bandwidth",
    "route_unhealthy",
    "incorrect_configuration",
    "unhealthy",
    "route_recovery",
    "access_timeout_recovery",
    "limited_capacity",
]
ComputeModeName = Literal["default", "exclusive_process", "prohibited"]
UnsupportedItem = Literal[
    "powerLimit",
    "persistence",
    "mig",
    "computeMode",
    "nvlinkCount",
    "nvlinkCounters",
    "xidEvents",
]


class NvlinkSpec(ProfileModel):
    links: int = Field(
        default=18, ge=0, le=36, description="NVML_FI_DEV_NVLINK_LINK_COUNT (H100/H200: 18)."
    )

    @model_validator(mode="after")
    def _links_in_range(self) -> "NvlinkSpec":
        """A link the GPU does not have cannot be inactive or count errors (silently
        ignoring it would let a profile state a fault the probe never sees)."""
        named = [("inactive", link) for link in self.inactive] + [
            (f"{field}.{counter}", link)
            for field, table in (("errors", self.errors), ("errorsBefore", self.errors_before))
            for counter, by_link in table.items()
            for link in by_link
        ]
        for field, link in named:
            if link >= self.links:
                raise ValueError(f"{field}: link {link} is not below links {self.links}")
        return self

    inactive: list[Annotated[int, Field(ge=0, le=35)]] = Field(
        default_factory=list, description="Links nvmlDeviceGetNvLinkState reports inactive."
    )
    errors: dict[NvlinkCounterName, dict[Annotated[int, Field(ge=0, le=35)], int]] = Field(
        default_factory=dict,
        description="Errors the links count while the probe loads the GPUs: counter -> link -> "
        "count (crc = flit + data). The probe judges the increase over its own run.",
    )
    errors_before: dict[NvlinkCounterName, dict[Annotated[int, Field(ge=0, le=35)], int]] = Field(
        default_factory=dict,
        description="Counts already on the links when the probe starts (since the driver "
        "loaded: link training at boot, an earlier job); read as the probe's baseline.",
    )
    counters_not_supported: list[NvlinkCounterPart] = Field(
        default_factory=list,
        description="NVML counters nvmlDeviceGetNvLinkErrorCounter answers NotSupported for "
        "(H100: crc_data, NVIDIA/DCGM#173); the others are still read.",
    )


class FabricSpec(ProfileModel):
    state: FabricState = Field(
        default="completed",
        description="nvmlGpuFabricState_t; 'unsupported': the call answers NotSupported.",
    )
    status: int = Field(default=0, ge=0, le=999, description="nvmlReturn_t of the registration.")
    conditions: list[FabricConditionName] = Field(
        default_factory=list, description="Health mask / summary conditions flagged."
    )
    struct_version: Literal[1, 2, 3] = Field(
        default=3, description="The newest nvmlGpuFabricInfo structure the driver knows."
    )
    completes_after_s: float | None = Field(
        default=None,
        ge=0,
        le=3600,
        description="With state in_progress: the registration completes this many seconds "
        "after the probe first asks (the fabric manager still registering after boot). "
        "Default: never (stuck).",
    )


GpuLoss = Literal["before", "under_load", "hangs"]
Count = Annotated[int, Field(ge=0, le=1 << 40)]
XidCode = Annotated[int, Field(ge=1, le=65535)]


class RemappedRowsSpec(ProfileModel):
    """What ``nvmlDeviceGetRemappedRows`` answers (Ampere and later)."""

    correctable: Count = 0
    uncorrectable: Count = 0
    pending: bool = Field(default=False, description="A remap waits for the next GPU reset.")
    failed: bool = Field(default=False, description="A remap failed in the past.")


class GpuMemory(ProfileModel):
    """A GPU's memory error state as NVML reports it. Default: a healthy H100/H200."""

    ecc_supported: bool = Field(
        default=True,
        description="false: the GPU has no ECC (a GeForce or TITAN): NVML answers "
        "NotSupported for the ECC mode and counters (nvidia-smi: ECC Mode N/A); ecc and "
        "eccPending are then not used.",
    )
    ecc: bool = Field(default=True, description="Current ECC mode.")
    ecc_pending: bool | None = Field(
        default=None, description="ECC mode after the next reset. Default: ecc."
    )
    volatile_uncorrected: Count = Field(
        default=0, description="Uncorrected ECC errors since the driver loaded."
    )
    aggregate_uncorrected: Count = Field(
        default=0, description="Uncorrected ECC errors in the GPU's lifetime."
    )
    volatile_corrected: Count = Field(
        default=0,
        description="Corrected ECC errors since the driver loaded (read by the in-service "
        "watch only).",
    )
    remapped_rows: RemappedRowsSpec | None = Field(
        default_factory=RemappedRowsSpec,
        description="null: the GPU does not remap rows (before Ampere; NotSupported).",
    )
    retired_pages: Count | None = Field(
        default=None,
        description="Pages retired (a GPU before Ampere, which retires pages). Default null: "
        "NVML answers NotSupported, as on Ampere and later.",
    )
    retire_pending: bool = False


class Gpu(ProfileModel):
    """One GPU, fully resolved."""

    pcie_max_generation: int = Field(
        default=5, ge=1, le=7, description="The GPU's own (LNKCAP; sysfs max_link_speed)."
    )
    pcie_max_width: int = Field(
        default=16, ge=1, le=32, description="The GPU's own (LNKCAP; sysfs max_link_width)."
    )
    pcie_system_max_generation: int | None = Field(
        default=None,
        ge=1,
        le=7,
        description="The platform's cap (the root port's or switch's generation): NVML's "
        "max generation reports the lower of this and the GPU's. Default: no cap.",
    )
    pcie_idle: Link | None = Field(default=None, description="Default: the maximum.")
    pcie_load: Link | None = Field(default=None, description="Default: the maximum.")
    h2d_gbps: float = Field(ge=0, alias="h2dGBps")
    d2h_gbps: float = Field(ge=0, alias="d2hGBps")
    h2d_remote_gbps: float | None = Field(
        default=None,
        ge=0,
        alias="h2dRemoteGBps",
        description="H2D when the copy runs from CPUs on another NUMA node (across the "
        "socket link). Default: h2dGBps.",
    )
    d2h_remote_gbps: float | None = Field(
        default=None, ge=0, alias="d2hRemoteGBps", description="Same, D2H. Default: d2hGBps."
    )
    numa_node: int = Field(
        default=0,
        ge=-1,
        le=63,
        description="The GPU's NUMA node (-1: the firmware gives none; then its "
        "local_cpulist is every CPU).",
    )
    clock_event_reasons: ClockEventReasons = ClockEventReasons()
    sm_clock_max_mhz: int = Field(default=1980, ge=1, le=10000, alias="smClockMaxMHz")
    sm_clock_load_mhz: int | None = Field(
        default=None, ge=1, le=10000, alias="smClockLoadMHz", description="Default: the max."
    )
    lost: GpuLoss | None = Field(
        default=None,
        description="NVML answers GPU_IS_LOST for this GPU: from the start ('before', its "
        "handle cannot be had) or once it is loaded ('under_load'); or 'hangs': NVML still "
        "answers, but work on the GPU never completes (each wait hits its deadline).",
    )
    nvlink: NvlinkSpec = NvlinkSpec()
    fabric: FabricSpec | None = Field(
        default=None,
        description="Default: completed for the NVSwitch (SXM) model classes, the call "
        "NotSupported for the others.",
    )
    power_limit_w: float | None = Field(
        default=None,
        ge=0,
        le=5000,
        alias="powerLimitW",
        description="nvmlDeviceGetEnforcedPowerLimit, W. Default: the default limit.",
    )
    default_power_limit_w: float = Field(
        default=700,
        ge=0,
        le=5000,
        alias="defaultPowerLimitW",
        description="nvmlDeviceGetPowerManagementDefaultLimit, W (H100/H200 SXM: 700).",
    )
    persistence: bool = Field(default=True, description="Persistence mode.")
    mig_enabled: bool = Field(default=False, description="Current MIG mode.")
    mig_pending: bool | None = Field(
        default=None, description="Pending MIG mode (after a reset). Default: the current."
    )
    compute_mode: ComputeModeName = "default"
    unsupported: list[UnsupportedItem] = Field(
        default_factory=list,
        description="What NVML answers with NotSupported on this GPU (xidEvents: its supported "
        "event types lack nvmlEventTypeXidCriticalError, so no Xid listener can register it).",
    )
    xids: list[XidCode] = Field(
        default_factory=list,
        max_length=64,
        description="Critical Xids NVML's event set delivers for this GPU when the probe "
        "first loads it (a copy, the matmul load or the all-reduce).",
    )
    recovery_action: NvmlRecoveryAction = Field(
        default="none",
        description="What NVML_FI_DEV_GET_GPU_RECOVERY_ACTION answers on R570+ drivers; "
        "on R560-R565 the older reset-status fields answer none, gpu_reset or "
        "drain_and_reset (another action is not read there); before R560: not read.",
    )
    memory: GpuMemory = Field(default_factory=GpuMemory)
    bf16_tflops: float | None = Field(
        default=None,
        ge=0,
        le=100000,
        description="Dense bf16 matmul TFLOPS under the load (8192³, CUDA events). "
        "Default: the model's figure (docs/profile-format.md); 0: the GPU completes no "
        "timed matmul.",
    )
    fp8_tflops: float | None = Field(
        default=None,
        ge=0,
        le=100000,
        description="fp8 (e4m3, torch._scaled_mm) TFLOPS. Default: the model's figure; "
        "a model without one has no fp8 (compute capability < 8.9).",
    )
    memory_gbps: float | None = Field(
        default=None,
        ge=0,
        le=100000,
        alias="memoryGBps",
        description="STREAM triad bandwidth, GB/s (3 arrays counted). Default: the model's figure.",
    )

    @property
    def best_link(self) -> Link:
        """The best link in this system: the GPU's width, the lower generation."""
        cap = self.pcie_system_max_generation
        generation = min(self.pcie_max_generation, cap or self.pcie_max_generation)
        return Link(generation=generation, width=self.pcie_max_width)

    @property
    def idle(self) -> Link:
        return self.pcie_idle or self.best_link

    @property
    def load(self) -> Link:
        return self.pcie_load or self.best_link


def _all_optional(model: type[ProfileModel], name: str, doc: str) -> type[ProfileModel]:
    """``model``'s fields, each optional (default ``None``), with the same types, aliases
    and bounds, so a bad value reads the same error in either model."""
    fields: dict[str, Any] = {}
    for field_name, field in model.model_fields.items():
        annotation: Any = field.annotation
        optional = FieldInfo.merge_field_infos(field, default=None, default_factory=None)
        fields[field_name] = (annotation | None, optional)
    derived: type[ProfileModel] = create_model(
        name, __base__=ProfileModel, __module__=__name__, __doc__=doc, **fields
    )
    return derived


if TYPE_CHECKING:

    class GpuOverride(ProfileModel):
        """Per-GPU differences from the ``gpus`` defaults: any field of :class:`Gpu`."""

else:
    GpuOverride = _all_optional(
        Gpu,
        "GpuOverride",
        "Per-GPU differences from the ``gpus`` defaults: any field of :class:`Gpu`.",
    )


class Gpus(Gpu):
    model: str = Field(min_length=1, max_length=64)
    count: int = Field(ge=0, le=64, description="The GPUs NVML sees in the probe pod.")
    pci_devices: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="NVIDIA display/3D controllers on the host's PCI bus (a GPU that fell "
        "off the bus or that the driver cannot bring up stays enumerated). Default: count.",
    )
    nvswitches: int | None = Field(
        default=None,
        ge=0,
        le=16,
        description="NVSwitches on the host's PCI bus (class 0x068000). Default: 4 for the "
        "HGX model classes (h100-sxm, h200-sxm: an 8-GPU baseboard has 4 third-generation "
        "NVSwitches), 2 for b200, else 0. An HGX H100 4-GPU board (GPUs linked directly) "
        "has 0; a pod given a slice of an 8-GPU board still sees its 4.",
    )
    overrides: dict[int, GpuOverride] = Field(
        default_factory=dict, description="GPU index → what differs on that GPU."
    )

    @property
    def pci_count(self) -> int:
        return self.count if self.pci_devices is None else self.pci_devices

    @property
    def nvswitch_count(self) -> int:
        if self.nvswitches is not None:
            return self.nvswitches
        return {"h100-sxm": 4, "h200-sxm": 4, "b200": 2}.get(gpu_model_class(self.model) or "", 0)

    @model_validator(mode="after")
    def _overrides_in_range(self) -> "Gpus":
        for index in self.overrides:
            if not 0 <= index < self.count:
                raise ValueError(f"overrides: GPU index {index} is not below count {self.count}")
        return self

    def gpu(self, index: int) -> Gpu:
        base = {name: getattr(self, name) for name in Gpu.model_fields}
        override = self.overrides.get(index)
        if override is not None:
            base.update({k: v for k, v in override if v is not None})
        return Gpu.model_validate(base)


class Driver(ProfileModel):
    version: Version
    conf_compute: Literal["off", "on", "devtools"] = Field(
        default="off",
        description="Confidential computing mode, as nvmlSystemGetConfComputeState reports "
        "it (ccFeature, devToolsMode). On: pinned host copies go through encrypted bounce "
        "buffers.",
    )
    kernel_module: Version | None = Field(default=None, description="Default: version.")
    nvml_library: Version | None = Field(
        default=None,
        description="The user-space driver (libnvidia-ml, libcuda). Default: version. When "
        "it differs from kernelModule, NVML answers LIB_RM_VERSION_MISMATCH.",
    )
    cuda_driver_version: Version = Field(description="The CUDA version the driver supports.")
    cuda_runtime_version: Version | None = Field(
        default=None, description="The probe image's libcudart (reported, never judged)."
    )
    nccl_version: Version | None = Field(
        default=None, description="The probe image's libnccl (reported, never judged)."
    )


class Allreduce(ProfileModel):
    busbw_gbps: float = Field(
        ge=0, alias="busbwGBps", description="The plateau busbw (nccl-tests at 8-16 GiB)."
    )
    half_bandwidth_bytes: int = Field(
        default=48 << 20,
        ge=1,
        le=1 << 40,
        description="Message size at which busbw is half the plateau: busbw(s) = "
        "plateau x s / (s + this). 48 MiB puts 1 GiB at 95.6 % of the plateau, as the "
        "published H100 tables show (446 of 465 GB/s).",
    )

    def busbw_at(self, size: int) -> float:
        return self.busbw_gbps * size / (size + self.half_bandwidth_bytes)


class InterNode(ProfileModel):
    """The node's inter-node path (NICs, cables, switch ports) as a two-node
    all-reduce sees it: what ``gpuaccept probe fabric`` measures (docs/fabric.md)."""

    busbw_gbps: float = Field(
        gt=0,
        le=10_000,
        alias="busbwGBps",
        description="The plateau busbw of a two-node all-reduce that this node's NICs "
        "sustain, GB/s; a pair measures the lower of its two nodes'.",
    )


class Cpus(ProfileModel):
    count: int = Field(ge=1, le=MAX_CPUS)
    cpufreq: bool = True
    governor: Governor = "performance"
    overrides: dict[CpuList, Governor] = Field(
        default_factory=dict, description="cpulist (e.g. '0-3,8') → governor"
    )
    numa_nodes: dict[int, CpuList] = Field(
        default_factory=dict,
        description="NUMA node → its CPUs (a GPU's local_cpulist). Default: one node, every CPU.",
    )

    sockets: dict[int, CpuList] = Field(
        default_factory=dict,
        description="CPU socket (physical_package_id) → its CPUs. Default: one socket per "
        "NUMA node, or one socket.",
    )

    def node_cpus(self, node: int) -> list[int]:
        if not self.numa_nodes or node < 0:
            return list(range(self.count))
        return [c for c in parse_cpu_list(self.numa_nodes.get(node, "")) if c < self.count]


class Node(ProfileModel):
    gpu_capacity: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="The node's status.capacity nvidia.com/gpu: every device the device "
        "plugin registered, healthy or not.",
    )
    gpu_allocatable: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="status.allocatable nvidia.com/gpu: the healthy devices (what the probe "
        "pod requests). Default: gpuCapacity.",
    )
    gfd_gpu_count: int | None = Field(
        default=None,
        ge=0,
        le=64,
        alias="gfdGpuCount",
        description="The GPU feature discovery label nvidia.com/gpu.count. Default: unset.",
    )
    gfd_gpu_replicas: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        alias="gfdGpuReplicas",
        description="The GPU feature discovery label nvidia.com/gpu.replicas (time-slicing or "
        "MPS sharing: gpuCapacity is then GPUs x replicas). Default: unset.",
    )
    boot_id: str | None = Field(default=None, alias="bootID", max_length=64)
    persistenced_socket: bool = Field(
        default=True,
        description="nvidia-persistenced's socket (/var/run/nvidia-persistenced/socket) is "
        "reachable in the probe pod. false: NVML there reads persistence mode as Off on every "
        "GPU (NVIDIA/dgx-selinux pull request 3), whatever the host's mode.",
    )
    pod_cpus: CpuList | None = Field(
        default=None,
        description="The probe pod's cpuset (its sched_getaffinity). Default: every CPU.",
    )

    @property
    def allocatable(self) -> int | None:
        return self.gpu_capacity if self.gpu_allocatable is None else self.gpu_allocatable


class ExpectedVerdict(ProfileModel):
    """The verdict this profile must produce under ``policies/default-h100-h200.yaml``.

    A healthy (or trap) profile says ``accepted: true``; a fault profile names the
    check that fails and its reason. The demo, the operator tests and the
    benchmark read this instead of keeping their own tables.
    """

    accepted: bool
    check: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_]{1,31}$")
    reason: str | None = Field(default=None, pattern=r"^[A-Z][A-Za-z0-9]*$")
    warnings: list[Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{1,31}$")]] | None = (
        Field(
            default=None,
            max_length=32,
            description="An accepted profile's checks that warn, in registry order ([]: "
            "none; a trap against warning noise). Unset: not asserted.",
        )
    )

    @model_validator(mode="after")
    def _fault_names_its_reason(self) -> "ExpectedVerdict":
        if self.accepted and (self.check or self.reason):
            raise ValueError("an accepted profile names no failing check or reason")
        if not self.accepted and self.warnings is not None:
            raise ValueError("only an accepted profile states its warnings")
        if not self.accepted and not (self.check and self.reason):
            raise ValueError("a fault profile names the check that fails and its reason")
        return self


IbState = Literal["DOWN", "INIT", "ARMED", "ACTIVE"]
IbPhysState = Literal["Sleep", "Polling", "Disabled", "LinkUp", "LinkErrorRecovery"]
IbRate = Annotated[
    str, StringConstraints(pattern=r"^[0-9]+(\.5)? Gb/sec \([0-9]+X [A-Z0-9]+\)$", max_length=32)
]


class IbPortSpec(ProfileModel):
    """One HCA port as sysfs shows it (defaults: a healthy NDR port)."""

    state: IbState = "ACTIVE"
    phys_state: IbPhysState = "LinkUp"
    rate: IbRate = Field(default="400 Gb/sec (4X NDR)", description="The rate file, verbatim.")
    link_layer: Literal["InfiniBand", "Ethernet"] = "InfiniBand"
    link_downed: int = Field(default=0, ge=0, le=255)
    symbol_error: int = Field(default=0, ge=0, le=65535)
    active_after_s: float | None = Field(
        default=None,
        ge=0,
        le=3600,
        description="LinkUp but INIT until this many seconds after the probe first reads "
        "the ports, then `state` (the subnet manager's sweep after boot activates it).",
    )
    unreadable: list[Literal["state", "phys_state", "rate", "link_layer"]] = Field(
        default_factory=list,
        max_length=4,
        description="Port files whose read fails (sysfs.c's show functions return "
        "ib_query_port's error, e.g. EIO when the HCA's firmware command times out); "
        "the simulator leaves them out.",
    )


class IbHcaGroup(ProfileModel):
    """``count`` HCA cards alike. As mlx5 registers them, each port of a card is a PCI
    function of the card and its own single-port IB device with the card's board_id
    (named mlx5_<n> in order over the groups: card 0's ports, card 1's, ..., then the
    SR-IOV virtual functions)."""

    count: int = Field(default=1, ge=1, le=32)
    fw_ver: str = Field(default="28.39.1002", pattern=r"^[0-9][0-9.]{0,31}$")
    board_id: str = Field(default="MT_0000000838", pattern=r"^[A-Za-z0-9_]{1,32}$")
    ports: list[IbPortSpec] = Field(
        default_factory=lambda: [IbPortSpec()],
        min_length=1,
        max_length=4,
        description="The card's ports: port n is PCI function n-1, a device of its own.",
    )
    pcie: Literal["gpuSwitch", "rootPort"] = Field(
        default="gpuSwitch",
        description="gpuSwitch: behind a GPU's PCIe switch (a compute HCA); rootPort: on a "
        "root port of its own (a storage or management HCA).",
    )
    virtual_functions: int = Field(
        default=0, ge=0, le=16, description="SR-IOV virtual functions of the card's first port."
    )
    virtual_function_state: IbState = Field(
        default="DOWN", description="The VFs' port state (their physical state is LinkUp)."
    )
    in_pod_netns: bool = Field(
        default=False,
        description="Exclusive netns mode: this HCA was moved into the probe pod's namespace.",
    )


class Infiniband(ProfileModel):
    """The node's InfiniBand/RoCE HCAs (no section: the node has none)."""

    netns_mode: Literal["shared", "exclusive"] | None = Field(
        default="shared",
        description="ib_core netns_mode (`rdma system`); null: the file is absent.",
    )
    hcas: list[IbHcaGroup] = Field(default_factory=list, max_length=16)


PhaseDuration = Annotated[float, Field(ge=0, le=7200)]


def _known_phases(durations: dict[str, float]) -> dict[str, float]:
    unknown = sorted(set(durations) - {START_PHASE, *BY_NAME})
    if unknown:
        raise ValueError(
            f"unknown phase {shorten(unknown[0], 40)}: `{START_PHASE}` or a check "
            f"({', '.join(BY_NAME)})"
        )
    return durations


# --- GPU-to-GPU peer copies (peer_bandwidth) ---------------------------------------------
# NVML's word on a pair: "nvlink" (NVLink P2P OK), else nvmlDeviceGetP2PStatus for the
# read capability ("ok": P2P over PCIe) -- see gpuaccept.probe.hardware.base.PeerAccess.
P2pWord = Literal[
    "nvlink",
    "ok",
    "chipset_not_supported",
    "gpu_not_supported",
    "ioh_topology_not_supported",
    "disabled_by_regkey",
    "not_supported",
    "unknown",
]
# "2>5" one direction, "2<>5" both, "3<>*" GPU 3 with every other GPU, "*" every pair
PairKey = Annotated[str, StringConstraints(pattern=r"^(\*|\d{1,2}(<>|>)(\d{1,2}|\*))$")]
NVLINK4_PAIR_GBPS = 380.0


class P2pPair(ProfileModel):
    gbps: float | None = Field(default=None, ge=0, le=10000, description="Unidirectional GB/s.")
    nvml: P2pWord | None = None
    peer_access: bool | None = None


class P2p(ProfileModel):
    nvml: P2pWord | None = Field(
        default=None,
        description="NVML's word on every pair. Default: nvlink on the NVSwitch (HGX) models, "
        "ok (P2P over PCIe) on the others.",
    )
    peer_access: bool | None = Field(
        default=None,
        description="Whether CUDA grants peer access. Default: where NVML says nvlink or ok.",
    )
    nvlink_gbps: float = Field(
        default=NVLINK4_PAIR_GBPS,
        ge=0,
        le=10000,
        alias="nvlinkGBps",
        description="One pair's copy over NVLink: HGX H100 measures 376-380 GB/s one way "
        "(peerBandwidthLatencyTest, NVIDIA/nccl issue 1264).",
    )
    gbps: float | None = Field(
        default=None,
        ge=0,
        le=10000,
        description="Every pair's unidirectional GB/s. Default by path: nvlinkGBps over NVLink, "
        "the slower GPU's h2dGBps over PCIe, half of it staged through host memory.",
    )
    bidirectional_factor: float = Field(
        default=1.95,
        ge=0,
        le=2,
        description="Both directions at once / one direction: 742 / 380 on HGX H100 (same source).",
    )
    pairs: dict[PairKey, P2pPair] = Field(
        default_factory=dict, description="Per pair ('2>5', '2<>5', '3<>*', '*'): overrides."
    )


InServiceCounter = Literal[
    "eccUncorrected", "eccCorrected", "nvlinkReplay", "nvlinkRecovery", "nvlinkCrc"
]
GpuIndex = Annotated[int, Field(ge=0, le=63)]
TimelineSeconds = Annotated[float, Field(ge=0, le=86400)]


class InServiceXid(ProfileModel):
    """An Xid NVML's event set delivers during a watch window (``count`` of them,
    ``everyS`` apart). An Xid 79 also takes the GPU off the bus, as in acceptance."""

    at_s: TimelineSeconds = Field(alias="atS")
    gpu: GpuIndex
    xid: XidCode
    count: int = Field(default=1, ge=1, le=10000)
    every_s: float = Field(default=1.0, gt=0, le=3600, alias="everyS")


class InServiceRamp(ProfileModel):
    """A counter that grows by ``add`` from ``fromS`` to ``toS`` (linearly)."""

    gpu: GpuIndex
    counter: InServiceCounter
    add: Count
    from_s: TimelineSeconds = Field(default=0, alias="fromS")
    to_s: TimelineSeconds = Field(alias="toS")
    link: int = Field(default=0, ge=0, le=35, description="NVLink counters: the link.")

    @model_validator(mode="after")
    def _forwards(self) -> "InServiceRamp":
        if self.to_s < self.from_s:
            raise ValueError("toS is before fromS")
        return self


class InServiceAt(ProfileModel):
    """From ``atS`` on, the GPU is in the state the list names."""

    gpu: GpuIndex
    at_s: TimelineSeconds = Field(alias="atS")


class InServiceLinkDown(InServiceAt):
    link: int = Field(ge=0, le=35)


class InServiceRecovery(InServiceAt):
    action: NvmlRecoveryAction


class InServiceTimeline(ProfileModel):
    """The node's life in service, for ``gpuaccept probe watch`` (docs/profile-format.md,
    "In-service timeline"). Times are seconds from the start of each watch window."""

    events: list[InServiceXid] = Field(default_factory=list, max_length=256)
    ramps: list[InServiceRamp] = Field(default_factory=list, max_length=64)
    remap_pending: list[InServiceAt] = Field(default_factory=list, max_length=64)
    remap_failed: list[InServiceAt] = Field(default_factory=list, max_length=64)
    gpus_lost: list[InServiceAt] = Field(default_factory=list, max_length=64)
    nvlink_down: list[InServiceLinkDown] = Field(default_factory=list, max_length=64)
    recovery_action: list[InServiceRecovery] = Field(default_factory=list, max_length=64)
    no_device_access: bool = Field(
        default=False,
        description="A hardened container runtime: the watch pod, which requests no GPU, "
        "sees none (NVIDIA_VISIBLE_DEVICES refused).",
    )

    def gpus_named(self) -> set[int]:
        timed: list[InServiceAt] = [
            *self.remap_pending,
            *self.remap_failed,
            *self.gpus_lost,
            *self.nvlink_down,
            *self.recovery_action,
        ]
        return {e.gpu for e in self.events} | {r.gpu for r in self.ramps} | {t.gpu for t in timed}


class HardwareProfile(ProfileModel):
    description: str = Field(default="", max_length=4096)
    expect: ExpectedVerdict | None = Field(
        default=None, description="The verdict under the default policy (shipped profiles)."
    )
    expect_fabric: ExpectedVerdict | None = Field(
        default=None,
        description="The fabric test's verdict when paired with healthy nodes, under a "
        "policy whose fabric.minBusbwGBps is 200 (the demo's; docs/fabric.md).",
    )
    node: Node = Node()
    gpus: Gpus
    driver: Driver
    allreduce: Allreduce
    cpus: Cpus
    infiniband: Infiniband | None = None
    inter_node: InterNode | None = Field(
        default=None,
        description="The inter-node path for the fabric test (absent: the node has none "
        "to simulate; `gpuaccept probe fabric` refuses the profile).",
    )
    durations: Annotated[dict[str, PhaseDuration], AfterValidator(_known_phases)] = Field(
        default_factory=dict,
        description="Seconds the node takes per phase: `start` (process start to the first "
        "check) or a check's name. The report states them (durationS, wallS). Default: "
        "docs/probe.md's budget table under the policy used.",
    )
    p2p: P2p = Field(default=P2p(), alias="p2p")  # GPU-to-GPU peer copies (peer_bandwidth)
    in_service: InServiceTimeline | None = Field(
        default=None,
        description="What an in-service watch window sees (absent: a quiet window).",
    )

    @model_validator(mode="after")
    def _pairs_in_range(self) -> "HardwareProfile":
        """A peer pair naming a GPU beyond the count is refused, as a GPU override is."""
        count = self.gpus.count
        for key in self.p2p.pairs:
            gpus = [int(part) for part in re.split(r"<>|>", key) if part.isdigit()]
            beyond = [gpu for gpu in gpus if gpu >= count]
            if beyond:
                raise ValueError(
                    f"p2p.pairs: {key!r} names GPU {beyond[0]}, not below count {count}"
                )
            if len(gpus) == 2 and gpus[0] == gpus[1]:
                raise ValueError(f"p2p.pairs: {key!r} pairs a GPU with itself")
        beyond = sorted(
            g for g in (self.in_service.gpus_named() if self.in_service else ()) if g >= count
        )
        if beyond:
            raise ValueError(f"inService: names GPU {beyond[0]}, not below count {count}")
        return self


def load_profile(path: Path) -> HardwareProfile:
    return validate(HardwareProfile, read_structured_file(path), str(path))


def expected_fabric_reasons(directory: Path) -> dict[str, str]:
    """``{profile stem: reason}`` for the profiles in ``directory`` whose fabric test
    fails (``expectFabric``), for the demo's fabric batch and the benchmark."""
    out: dict[str, str] = {}
    for path in sorted(directory.glob("*.yaml")):
        expect = load_profile(path).expect_fabric
        if expect is not None and expect.reason is not None:
            out[path.stem] = expect.reason
    return out


def expected_fault_reasons(directory: Path) -> dict[str, str]:
    """``{profile stem: reason}`` for the fault profiles in ``directory``, from their
    ``expect`` fields (for the demo, the operator tests and the benchmark)."""
    out: dict[str, str] = {}
    for path in sorted(directory.glob("*.yaml")):
        expect = load_profile(path).expect
        if expect is None or expect.reason is None:
            raise ValueError(f"{path}: a fault profile states its reason (expect.reason)")
        out[path.stem] = expect.reason
    return out
