"""The watch report: what one in-service watch window saw on one node.

``gpuaccept probe watch`` runs in a short-lived, token-less watch pod on an
Accepted node (docs/probe.md, "gpuaccept probe watch"). It requests no GPU and
puts no load on them: it listens for NVML's critical-Xid events for a window
and, at the end of it, samples the durable state the acceptance checks read.
Its compact JSON travels in the pod's termination message, so it must fit in
:data:`~gpuaccept.contracts.api.TERMINATION_MESSAGE_MAX_BYTES`:
:func:`fit_watch_report` makes it fit, dropping the least important detail
first and counting what it dropped (docs/report-format.md, "The watch report").

Absence means "nothing to report": a GPU entry leaves out every field whose
value is the normal one (no increase, no pending remap, recovery action
``none``, no link down, fabric registered), and the interface a platform does
not have is named in ``notRead``; neither is a fault. The operator never reads
evidence from what the report says about who it is (node, bootID): it binds the
report to the pod it created.
"""

from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Any, Final, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from gpuaccept.contracts.api import TERMINATION_MESSAGE_MAX_BYTES
from gpuaccept.contracts.contract_model import ContractModel
from gpuaccept.contracts.report import REPORT_CONFIG, ReportTooLargeError, strict_json

WATCH_REPORT_KIND: Final = "WatchReport"
# Two events of the same Xid on the same GPU less than this apart are one burst when the
# operator names no gap (it passes its policy's inService.xid.burstMergeSeconds, whose
# default this is). NVSentinel's RepeatedXIDErrorOnSameGPU merges bursts under 180 s
# apart; docs/policy.md.
BURST_MERGE_S: Final = 180.0
# The watch window when the operator names none: 30 minutes (see
# docs/policy.md).
DEFAULT_WINDOW_S: Final = 1800.0
GPUS_MAX: Final = 64
EVENTS_MAX: Final = 64
IB_PORTS_MAX: Final = 32


class WatchEnd(StrEnum):
    """Why the watch stopped."""

    WINDOW = "window"  # the window ran out (the only end that is not early)
    FATAL_XID = "fatalXid"  # an Xid of the fatal-on-first class: reported at once
    GPU_LOST = "gpuLost"  # NVML answered GPU_IS_LOST while listening
    NO_DEVICE_ACCESS = "noDeviceAccess"  # no GPU visible: NVML absent or zero devices
    LISTENER_FAILED = "listenerFailed"  # the event wait failed: no evidence after it
    TERMINATED = "terminated"  # SIGTERM (the pod was deleted, the node drained)
    FAILED = "failed"  # the watch could not run (bad input, a crash): no evidence at all


class WatchXid(ContractModel):
    """One burst of one Xid on one GPU: every event of that Xid on that GPU less than
    the watch's gap (default :data:`BURST_MERGE_S`) after the previous one, merged (a
    duplicate is one more count)."""

    model_config = REPORT_CONFIG

    gpu: int = Field(ge=-1, lt=GPUS_MAX, description="NVML index; -1: NVML named no GPU we know")
    uuid: str | None = Field(default=None, max_length=64, description="The GPU's NVML UUID.")
    xid: int = Field(ge=0, le=65535)
    first_s: float = Field(ge=0, alias="firstS", description="Seconds into the window.")
    last_s: float = Field(ge=0, alias="lastS")
    count: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> "WatchXid":
        if self.last_s < self.first_s:
            raise ValueError("lastS is before firstS")
        return self


class WatchGpu(ContractModel):
    """One GPU's durable state at the end of the window. A field at its normal value
    (the default) is left out on the wire; an interface the GPU does not have is named
    in the report's ``notRead`` and also left at its default: no evidence, no fault."""

    model_config = REPORT_CONFIG

    index: int = Field(ge=0, lt=GPUS_MAX)
    uuid: str | None = Field(default=None, max_length=64)
    lost: bool = Field(default=False, description="NVML answers GPU_IS_LOST for it.")
    ecc_uncorrected: int = Field(
        default=0, ge=0, description="Volatile uncorrected ECC errors: increase in the window."
    )
    ecc_corrected: int = Field(
        default=0, ge=0, description="Volatile corrected ECC errors: increase in the window."
    )
    remap_pending: bool = False
    remap_failed: bool = False
    recovery_action: str = Field(
        default="none",
        pattern=r"^[a-z_]{1,32}$",
        description="NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (R570+) as checks.xid_errors "
        "names it, or the R560-R565 reset-status fields' equivalent.",
    )
    nvlink_down: list[int] = Field(
        default_factory=list,
        max_length=32,
        description="NVLinks inactive at the end of the window (of the device's link count).",
    )
    nvlink_errors: dict[str, int] = Field(
        default_factory=dict,
        max_length=8,
        description="NVLink error counter (replay, recovery, crc) → increase in the window, "
        "summed over links; counters that did not increase are left out.",
    )
    fabric: str | None = Field(
        default=None,
        max_length=48,
        description="NVSwitch fabric state when not completed and healthy (in_progress, "
        "not_started, or completed:<condition>); absent: registered, or no NVSwitch.",
    )

    @model_serializer(mode="wrap")
    def _leave_out_normal(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key, normal in _GPU_NORMAL.items():
            if key in data and data[key] == normal:
                del data[key]
        return data

    def faulty(self) -> bool:
        """Any field away from its normal value."""
        return any(
            (
                self.lost,
                self.ecc_uncorrected,
                self.ecc_corrected,
                self.remap_pending,
                self.remap_failed,
                self.recovery_action != "none",
                self.nvlink_down,
                self.nvlink_errors,
                self.fabric,
            )
        )


_GPU_NORMAL: dict[str, object] = {
    "lost": False,
    "eccUncorrected": 0,
    "eccCorrected": 0,
    "remapPending": False,
    "remapFailed": False,
    "recoveryAction": "none",
    "nvlinkDown": [],
    "nvlinkErrors": {},
}


class WatchIbPort(ContractModel):
    """One InfiniBand port at the end of the window (sysfs ``state``, ``rate``)."""

    model_config = REPORT_CONFIG

    name: str = Field(max_length=40, description="<device>/<port>, e.g. mlx5_0/1")
    state: str = Field(max_length=16, description="ACTIVE, DOWN, INIT, ARMED, …")
    rate_gbps: float | None = Field(default=None, ge=0, alias="rateGbps")


class WatchReport(ContractModel):
    """One watch window on one node."""

    model_config = REPORT_CONFIG

    api_version: Literal["gpuaccept.io/v1alpha1"] = Field(
        default="gpuaccept.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["WatchReport"] = WATCH_REPORT_KIND
    node_name: str = Field(min_length=1, max_length=253)
    boot_id: str = Field(alias="bootID", max_length=64)
    probe_version: str = Field(max_length=32)
    simulated: bool
    started_at: datetime
    ended_at: datetime
    window_s: float = Field(ge=0, alias="windowS", description="The window asked for.")
    watched_s: float = Field(ge=0, alias="watchedS", description="Seconds actually watched.")
    end_reason: WatchEnd
    ended_early: bool
    gpus_expected: int | None = Field(
        default=None, ge=0, le=GPUS_MAX, description="The node's nvidia.com/gpu capacity."
    )
    gpus_seen: int = Field(ge=0, le=GPUS_MAX)
    xids: list[WatchXid] = Field(default_factory=list, max_length=EVENTS_MAX)
    xids_dropped: int = Field(
        default=0, ge=0, description="Bursts left out so that the report fits."
    )
    gpus: list[WatchGpu] = Field(default_factory=list, max_length=GPUS_MAX)
    gpus_left_out: int = Field(
        default=0, ge=0, description="GPU entries left out so that the report fits."
    )
    ib_ports: list[WatchIbPort] | None = Field(
        default=None, max_length=IB_PORTS_MAX, description="Absent: no InfiniBand read."
    )
    not_read: dict[str, str] = Field(
        default_factory=dict,
        max_length=12,
        description="Interface → why it was not read (absent from this platform, or failed).",
    )
    detail_dropped: list[str] = Field(
        default_factory=list,
        max_length=8,
        description="GPU fields left out of every entry so that the report fits.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> "WatchReport":
        if self.ended_early != (self.end_reason is not WatchEnd.WINDOW):
            raise ValueError("endedEarly must be true exactly when endReason is not window")
        if self.ended_at < self.started_at:
            raise ValueError("endedAt is before startedAt")
        indices = [g.index for g in self.gpus]
        if len(set(indices)) != len(indices):
            raise ValueError("a GPU is reported twice")
        for key, value in self.not_read.items():
            if len(key) > 32 or len(value) > 160:
                raise ValueError("notRead: keys ≤ 32, reasons ≤ 160 characters")
        return self

    @model_serializer(mode="wrap")
    def _leave_out_empty(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in ("xids", "gpus", "notRead", "detailDropped"):
            if key in data and not data[key]:
                del data[key]
        for key in ("xidsDropped", "gpusLeftOut"):
            if data.get(key) == 0:
                del data[key]
        return data

    def gpu(self, index: int) -> WatchGpu | None:
        return next((g for g in self.gpus if g.index == index), None)

    def gpus_lost(self) -> int | None:
        """GPUs expected and not seen, plus GPUs seen lost; None without evidence (no
        device access: the runtime hid the GPUs, which says nothing about them; or the
        watch failed)."""
        if self.end_reason in (WatchEnd.NO_DEVICE_ACCESS, WatchEnd.FAILED):
            return None
        lost = sum(1 for g in self.gpus if g.lost)
        missing = 0 if self.gpus_expected is None else max(0, self.gpus_expected - self.gpus_seen)
        return lost + missing

    def to_compact_json(self) -> str:
        """Compact JSON (no spaces, no nulls, no normal values), as written to the log."""
        return self.model_dump_json(by_alias=True, exclude_none=True)

    def compact_size(self) -> int:
        return len(self.to_compact_json().encode())


# The GPU fields the size guard may leave out, least important first (counters of
# what corrects itself before the state that decides a quarantine).
DROPPABLE_GPU_FIELDS: Final = ("ecc_corrected", "nvlink_errors", "fabric", "nvlink_down")


def _first_burst_first(xid: WatchXid, position: int, seen: set[tuple[int, int]]) -> tuple[int, int]:
    key = (xid.gpu, xid.xid)
    first = key not in seen
    seen.add(key)
    return (0 if first else 1, position)


def fit_watch_report(
    report: WatchReport,
    keep_first: Callable[[WatchXid], int] | None = None,
    limit: int = TERMINATION_MESSAGE_MAX_BYTES,
) -> WatchReport:
    """``report`` made to fit in ``limit`` bytes, one step at a time:

    1. as is;
    2. Xid bursts left out one at a time (``xidsDropped`` counts them): the last to go
       are those ``keep_first`` ranks lowest (the watch ranks the fatal class 0), then
       the first burst of each (GPU, Xid), then the earliest;
    3. GPU fields of :data:`DROPPABLE_GPU_FIELDS` left out of every entry, one field at
       a time (``detailDropped`` names them);
    4. the InfiniBand ports that are ACTIVE, then every port (``notRead`` says so);
    5. GPU entries with nothing to report, then the last entries (``gpusLeftOut``).

    Raises :class:`ReportTooLargeError` only if the envelope alone does not fit.
    """
    if report.compact_size() <= limit:
        return report
    current = _without_xids(report, keep_first, limit)
    current = _without_gpu_detail(current, limit)
    current = _without_ib_ports(current, limit)
    current = _without_gpus(current, limit)
    if current.compact_size() > limit:
        raise ReportTooLargeError(
            f"watch report envelope is {current.compact_size()} bytes, over {limit}"
        )
    return current


def _without_xids(
    report: WatchReport, keep_first: Callable[[WatchXid], int] | None, limit: int
) -> WatchReport:
    """Step 2: Xid bursts left out, lowest-ranked last, until the report fits."""
    seen: set[tuple[int, int]] = set()
    ranked = sorted(
        enumerate(report.xids),
        key=lambda item: (
            keep_first(item[1]) if keep_first else 0,
            *_first_burst_first(item[1], item[0], seen),
        ),
    )
    kept = [position for position, _ in ranked]
    current = report
    while kept and current.compact_size() > limit:
        kept.pop()
        current = report.model_copy(
            update={
                "xids": [report.xids[i] for i in sorted(kept)],
                "xids_dropped": report.xids_dropped + len(report.xids) - len(kept),
            }
        )
    return current


def _without_gpu_detail(current: WatchReport, limit: int) -> WatchReport:
    """Step 3: the droppable GPU fields left out of every entry, one at a time."""
    dropped = list(current.detail_dropped)
    for name in DROPPABLE_GPU_FIELDS:
        if current.compact_size() <= limit:
            return current
        normal = WatchGpu.model_fields[name].get_default(call_default_factory=True)
        dropped.append(name)
        current = current.model_copy(
            update={
                "gpus": [g.model_copy(update={name: normal}) for g in current.gpus],
                "detail_dropped": list(dropped),
            }
        )
    return current


def _without_ib_ports(current: WatchReport, limit: int) -> WatchReport:
    """Step 4: the ACTIVE InfiniBand ports left out, then every port."""
    if current.compact_size() > limit and current.ib_ports:
        current = current.model_copy(
            update={
                "ib_ports": [p for p in current.ib_ports if p.state != "ACTIVE"],
                "not_read": {**current.not_read, "ibActive": "left out: report size"},
            }
        )
    if current.compact_size() > limit and current.ib_ports is not None:
        current = current.model_copy(
            update={
                "ib_ports": None,
                "not_read": {**current.not_read, "ib": "left out: report size"},
            }
        )
    return current


def _without_gpus(current: WatchReport, limit: int) -> WatchReport:
    """Step 5: GPU entries with nothing to report left out, then the last entries."""
    gpus = sorted(current.gpus, key=lambda g: (not g.faulty(), g.index))
    left_out = current.gpus_left_out
    while gpus and current.compact_size() > limit:
        gpus.pop()
        current = current.model_copy(
            update={
                "gpus": sorted(gpus, key=lambda g: g.index),
                "gpus_left_out": left_out + len(current.gpus) - len(gpus),
            }
        )
        left_out = current.gpus_left_out
    return current


def encode_watch_message(report: WatchReport) -> str:
    """The report for the termination log, fitted; never cut."""
    return fit_watch_report(report).to_compact_json()


def decode_watch_message(message: str) -> WatchReport:
    """Parse and validate a watch pod's termination message (raises ValueError).

    Strict as :func:`~gpuaccept.contracts.report.decode_termination_message`: exact
    JSON types, no key twice, no NaN; a field this operator does not know is ignored."""
    if len(message.encode()) > TERMINATION_MESSAGE_MAX_BYTES:
        raise ReportTooLargeError(
            f"termination message is {len(message.encode())} bytes, over "
            f"{TERMINATION_MESSAGE_MAX_BYTES}"
        )
    value = strict_json(message)
    if not isinstance(value, dict) or value.get("kind") != WATCH_REPORT_KIND:
        raise ValueError(f"not a {WATCH_REPORT_KIND}")
    return WatchReport.model_validate_json(message, strict=True)
