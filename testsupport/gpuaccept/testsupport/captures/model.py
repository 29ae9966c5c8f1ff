"""What a capture says about a node, parsed: the readings the probe asks for, each one
either a value, :data:`NOT_AVAILABLE` (the driver printed ``N/A``: NVML answered
NotSupported), :data:`DEPRECATED` (the driver printed NVML's error string for
``NVML_ERROR_DEPRECATED``, "Requested functionality has been deprecated", as R570 and
later print the GPU Reset Status fields) or :data:`ABSENT` (the capture does not hold
it: nothing is known).

The replay (:mod:`.replay`) answers a value with it, ``NOT_AVAILABLE`` with NVML's
NotSupported, ``DEPRECATED`` with NVML's Deprecated and ``ABSENT`` with NVML's NoData,
and a check that needs an absent reading is not replayed at all.
"""

import enum
from dataclasses import dataclass, field
from typing import TypeAlias, TypeVar


class Missing(enum.Enum):
    NOT_AVAILABLE = "N/A"  # printed by nvidia-smi as N/A: NVML's NotSupported
    ABSENT = "absent"  # not in the capture
    # printed as "Requested functionality has been deprecated": NVML_ERROR_DEPRECATED (26,
    # nvml.h: "The requested functionality has been deprecated")
    DEPRECATED = "deprecated"


NOT_AVAILABLE = Missing.NOT_AVAILABLE
ABSENT = Missing.ABSENT
DEPRECATED = Missing.DEPRECATED

_T = TypeVar("_T")
Reading: TypeAlias = _T | Missing


class CaptureError(ValueError):
    """A capture file the parsers cannot read: names the file, the line or field, and why."""

    def __init__(self, file: str, where: str, reason: str) -> None:
        super().__init__(f"{file}: {where}: {reason}")
        self.file, self.where, self.reason = file, where, reason


@dataclass(frozen=True)
class RemappedRowsReading:
    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


@dataclass(frozen=True)
class FabricReading:
    state: int  # nvmlGpuFabricState_t
    status: int  # nvmlReturn_t
    health_mask: Reading[int] = ABSENT  # v2 and later
    health_summary: Reading[int] = ABSENT  # v3 and later


@dataclass
class GpuCapture:
    """One GPU as the capture shows it."""

    bus_id: Reading[str] = ABSENT  # NVML's form: 00000000:19:00.0
    name: Reading[str] = ABSENT
    uuid: Reading[str] = ABSENT
    pcie_gen: Reading[int] = ABSENT
    pcie_gen_max: Reading[int] = ABSENT  # "Max": this GPU with this system
    pcie_gen_device_max: Reading[int] = ABSENT  # "Device Max": the GPU's own
    pcie_width: Reading[int] = ABSENT
    pcie_width_max: Reading[int] = ABSENT
    clock_event_reasons: Reading[int] = ABSENT  # the nvml.h bit mask
    sm_clock_mhz: Reading[int] = ABSENT
    sm_clock_max_mhz: Reading[int] = ABSENT
    ecc_mode: Reading[tuple[bool, bool]] = ABSENT  # (current, pending)
    volatile_uncorrected: Reading[int] = ABSENT
    aggregate_uncorrected: Reading[int] = ABSENT
    remapped_rows: Reading[RemappedRowsReading] = ABSENT
    retired_single_bit: Reading[int] = ABSENT
    retired_double_bit: Reading[int] = ABSENT
    retired_pending: Reading[bool] = ABSENT
    power_limit_mw: Reading[int] = ABSENT
    default_power_limit_mw: Reading[int] = ABSENT
    persistence: Reading[bool] = ABSENT
    mig_mode: Reading[tuple[bool, bool]] = ABSENT
    compute_mode: Reading[int] = ABSENT  # nvmlComputeMode_t
    fabric: Reading[FabricReading] = ABSENT
    reset_required: Reading[bool] = ABSENT
    drain_and_reset: Reading[bool] = ABSENT
    nvlink_active: Reading[tuple[bool, ...]] = ABSENT  # per link: active?
    virtualization: Reading[str] = ABSENT


@dataclass(frozen=True)
class IbPortCapture:
    hca: str
    port: int
    state: str  # ibstat's words: Active, Down, Initializing, Armed
    phys_state: str  # LinkUp, Polling, Disabled, ...
    rate_gbps: float
    rate_text: Reading[str]  # ibstatus's "200 Gb/sec (4X HDR)"; ABSENT from ibstat
    link_layer: str


@dataclass(frozen=True)
class IbHcaCapture:
    name: str
    ca_type: Reading[str]
    fw_ver: Reading[str]
    ports: tuple[IbPortCapture, ...]
    # the PSID: sysfs board_id, as scripts/capture-node.sh lists it (ibstat has none)
    board_id: Reading[str] = ABSENT


@dataclass(frozen=True)
class XidLine:
    pci: str
    xid: int
    text: str


@dataclass(frozen=True)
class PcieLinkStatus:
    """lspci's LnkCap / LnkSta of one device."""

    cap_gts: float
    cap_width: int
    sta_gts: float
    sta_width: int


@dataclass
class NodeCapture:
    """Everything one capture folder holds."""

    name: str
    driver: Reading[str] = ABSENT
    cuda: Reading[str] = ABSENT
    attached_gpus: Reading[int] = ABSENT
    # True when the capture lists every GPU NVML enumerates (a complete -q or -q -x)
    complete_gpu_list: bool = False
    gpus: list[GpuCapture] = field(default_factory=list)
    infiniband: Reading[tuple[IbHcaCapture, ...]] = ABSENT
    xids: Reading[tuple[XidLine, ...]] = ABSENT
    pcie_status: Reading[tuple[PcieLinkStatus, ...]] = ABSENT
