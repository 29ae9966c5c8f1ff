"""From ``nvidia-smi -q`` (text or ``-x`` XML) to the readings the probe asks NVML for.

Which NVML answer each printed field is (nvidia-smi prints NVML's answers; the
names are nvidia-smi's, as its ``-q`` and ``-q -x`` print them from R418 to R580):

* PCIe ``Current``/``Max`` generation and width: ``nvmlDeviceGetCurrPcieLink*`` and
  ``nvmlDeviceGetMaxPcieLink*``; ``Device Max`` (R535+): ``nvmlDeviceGetGpuMaxPcieLinkGeneration``.
* ``Clocks Event Reasons`` (``Clocks Throttle Reasons`` before R535): the bits of
  ``nvmlDeviceGetCurrentClocksEventReasons`` (nvml.h ``nvmlClocksEventReason*``).
* ``Clocks``/``Max Clocks`` ``SM``: ``nvmlDeviceGetClockInfo``/``nvmlDeviceGetMaxClockInfo``.
* ``ECC Mode``, ``ECC Errors`` (uncorrectable: DRAM + SRAM, or the ``Double Bit``
  total before Ampere), ``Remapped Rows``, ``Retired Pages``: the memory-health calls.
* ``Current Power Limit`` (``Enforced Power Limit`` before R535) and ``Default Power
  Limit``; ``Persistence Mode``, ``MIG Mode``, ``Compute Mode``.
* ``Fabric``: ``nvmlDeviceGetGpuFabricInfoV`` (``Health`` from v2, ``Summary`` v3).
* ``GPU Reset Status``: fields 226/227.

A field printed ``N/A`` is NVML's NotSupported; one printed "Requested functionality has
been deprecated" (nvmlErrorString of ``NVML_ERROR_DEPRECATED``: R570 and later print the
GPU Reset Status fields so, having replaced them with the GPU Recovery Action) is NVML's
Deprecated; a field the capture lacks is absent.
A field that is present but unreadable is a :class:`CaptureError`.
"""

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import TypeVar

from gpuaccept.testsupport.captures.model import (
    ABSENT,
    DEPRECATED,
    NOT_AVAILABLE,
    CaptureError,
    FabricReading,
    GpuCapture,
    Missing,
    NodeCapture,
    Reading,
    RemappedRowsReading,
)
from gpuaccept.testsupport.captures.nvsmi_text import Entry, TextLog

T = TypeVar("T")
DEPRECATED_TEXT = "Requested functionality has been deprecated"  # NVML_ERROR_DEPRECATED's string

# nvml.h nvmlClocksEventReason* bits, by nvidia-smi's text label and XML tag suffix
REASON_BITS: dict[str, int] = {
    "Idle": 0x1,
    "Applications Clocks Setting": 0x2,
    "SW Power Cap": 0x4,
    "HW Slowdown": 0x8,
    "Sync Boost": 0x10,
    "SW Thermal Slowdown": 0x20,
    "HW Thermal Slowdown": 0x40,
    "HW Power Brake Slowdown": 0x80,
    "Display Clock Setting": 0x100,
}
XML_REASON_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}
COMPUTE_MODES = {"Default": 0, "Exclusive_Thread": 1, "Prohibited": 2, "Exclusive_Process": 3}
FABRIC_STATES = {"Not Supported": 0, "Not Started": 1, "In Progress": 2, "Completed": 3}
# nvmlReturn_t by the text nvmlErrorString gives it (the ones a fabric status shows)
FABRIC_STATUS = {
    "Success": 0,
    "Not Supported": 3,
    "Insufficient Resources": 23,
    "Unknown Error": 999,
}
FABRIC_SUMMARY = {"Not Supported": 0, "Healthy": 1, "Unhealthy": 2, "Limited Capacity": 3}
# NVML_GPU_FABRIC_HEALTH_MASK_*: (text label, shift, {value label: value})
FABRIC_HEALTH = (
    ("Bandwidth", 0, {"Not Supported": 0, "Degraded": 1, "Full": 2}),
    ("Route Recovery in progress", 2, {"Not Supported": 0, "True": 1, "False": 2}),
    ("Route Unhealthy", 4, {"Not Supported": 0, "True": 1, "False": 2}),
    ("Access Timeout Recovery", 6, {"Not Supported": 0, "True": 1, "False": 2}),
)


class _Fields:
    """Strict conversions of one file's printed values."""

    def __init__(self, file: str) -> None:
        self.file = file

    def convert(self, where: str, text: str | None, parse: Callable[[str], T]) -> Reading[T]:
        if text is None:
            return ABSENT
        text = text.strip()
        if text in ("N/A", "[N/A]", "Not Supported", "[Not Supported]"):
            return NOT_AVAILABLE
        if text == DEPRECATED_TEXT:
            return DEPRECATED
        try:
            return parse(text)
        except (ValueError, KeyError) as exc:
            raise CaptureError(self.file, where, f"cannot read {text!r}: {exc}") from exc


def _int(text: str) -> int:
    return int(text, 0)


def _width(text: str) -> int:
    match = re.fullmatch(r"([0-9]+)x", text)
    if match is None:
        raise ValueError("not a link width like 16x")
    return int(match.group(1))


def _mhz(text: str) -> int:
    match = re.fullmatch(r"([0-9]+) MHz", text)
    if match is None:
        raise ValueError("not 'N MHz'")
    return int(match.group(1))


def _milliwatts(text: str) -> int:
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?) W", text)
    if match is None:
        raise ValueError("not 'N.NN W'")
    return round(float(match.group(1)) * 1000)


def _enabled(text: str) -> bool:
    return {"Enabled": True, "Disabled": False}[text]


def _yes(text: str) -> bool:
    return {"Yes": True, "No": False}[text]


def _active(text: str) -> bool:
    return {"Active": True, "Not Active": False}[text]


def _value(entry: Entry | None) -> str | None:
    return None if entry is None else entry.value


def _pair(first: Reading[bool], second: Reading[bool]) -> Reading[tuple[bool, bool]]:
    """(current, pending): NVML answers both in one call, so a missing half is the answer."""
    if isinstance(first, Missing):
        return first
    if isinstance(second, Missing):
        return second
    return (first, second)


def _sum(values: list[Reading[int]]) -> Reading[int]:
    """The total of the printed counters; absent when none is printed, N/A when all are."""
    present = [v for v in values if not isinstance(v, Missing)]
    if present:
        return sum(present)
    if any(v is NOT_AVAILABLE for v in values):
        return NOT_AVAILABLE
    return ABSENT


def _text_reasons(fields: _Fields, section: Entry | None) -> Reading[int]:
    if section is None:
        return ABSENT
    mask = 0
    seen = 0

    def walk(entries: list[Entry]) -> None:
        nonlocal mask, seen
        for entry in entries:
            bit = REASON_BITS.get(entry.key)
            if bit is not None:
                active = fields.convert(f"{section.key} > {entry.key}", entry.value, _active)
                if active is True:
                    mask |= bit
                if not isinstance(active, Missing):
                    seen += 1
            walk(entry.children)

    walk(section.children)
    return mask if seen else NOT_AVAILABLE


def gpu_from_text(fields: _Fields, bus: str | None, gpu: Entry) -> GpuCapture:
    def get(*path: str) -> str | None:
        return _value(gpu.find(*path))

    conv = fields.convert
    link = ("PCI", "GPU Link Info")
    reasons = gpu.find("Clocks Event Reasons") or gpu.find("Clocks Throttle Reasons")
    if reasons is None:
        reasons = gpu.find("Performance", "Clocks Event Reasons")
    volatile = gpu.find("ECC Errors", "Volatile")
    aggregate = gpu.find("ECC Errors", "Aggregate")
    power = gpu.find("GPU Power Readings") or gpu.find("Power Readings")
    capture = GpuCapture(
        bus_id=bus if bus is not None else (get("PCI", "Bus Id") or ABSENT),
        name=get("Product Name") or ABSENT,
        uuid=get("GPU UUID") or ABSENT,
        pcie_gen=conv("PCIe Generation Current", get(*link, "PCIe Generation", "Current"), _int),
        pcie_gen_max=conv("PCIe Generation Max", get(*link, "PCIe Generation", "Max"), _int),
        pcie_gen_device_max=conv(
            "PCIe Generation Device Max", get(*link, "PCIe Generation", "Device Max"), _int
        ),
        pcie_width=conv("Link Width Current", get(*link, "Link Width", "Current"), _width),
        pcie_width_max=conv("Link Width Max", get(*link, "Link Width", "Max"), _width),
        clock_event_reasons=_text_reasons(fields, reasons),
        sm_clock_mhz=conv("Clocks SM", get("Clocks", "SM"), _mhz),
        sm_clock_max_mhz=conv("Max Clocks SM", get("Max Clocks", "SM"), _mhz),
        ecc_mode=_pair(
            conv("ECC Mode Current", get("ECC Mode", "Current"), _enabled),
            conv("ECC Mode Pending", get("ECC Mode", "Pending"), _enabled),
        ),
        volatile_uncorrected=_ecc_text(fields, "Volatile", volatile),
        aggregate_uncorrected=_ecc_text(fields, "Aggregate", aggregate),
        remapped_rows=_remapped_text(fields, gpu.find("Remapped Rows")),
        retired_single_bit=_retired_text(fields, gpu.find("Retired Pages", "Single Bit ECC")),
        retired_double_bit=_retired_text(fields, gpu.find("Retired Pages", "Double Bit ECC")),
        retired_pending=conv(
            "Retired Pages Pending", get("Retired Pages", "Pending Page Blacklist"), _yes
        ),
        power_limit_mw=ABSENT,
        default_power_limit_mw=ABSENT,
        persistence=conv("Persistence Mode", get("Persistence Mode"), _enabled),
        mig_mode=_pair(
            conv("MIG Mode Current", get("MIG Mode", "Current"), _enabled),
            conv("MIG Mode Pending", get("MIG Mode", "Pending"), _enabled),
        ),
        compute_mode=conv("Compute Mode", get("Compute Mode"), COMPUTE_MODES.__getitem__),
        fabric=_fabric_text(fields, gpu.find("Fabric")),
        reset_required=conv("Reset Required", get("GPU Reset Status", "Reset Required"), _yes),
        drain_and_reset=conv(
            "Drain and Reset Recommended",
            get("GPU Reset Status", "Drain and Reset Recommended"),
            _yes,
        ),
        virtualization=get("GPU Virtualization Mode", "Virtualization Mode") or ABSENT,
    )
    if power is not None:
        limit = _value(power.find("Current Power Limit")) or _value(
            power.find("Enforced Power Limit")
        )
        capture.power_limit_mw = conv("Power Limit", limit, _milliwatts)
        capture.default_power_limit_mw = conv(
            "Default Power Limit", _value(power.find("Default Power Limit")), _milliwatts
        )
    return capture


def _ecc_text(fields: _Fields, kind: str, section: Entry | None) -> Reading[int]:
    if section is None:
        return ABSENT
    values: list[Reading[int]] = []
    for entry in section.children:
        if "Uncorrectable" in entry.key and "Threshold" not in entry.key:
            values.append(fields.convert(f"ECC {kind} {entry.key}", entry.value, _int))
        if entry.key == "Double Bit":  # before Ampere: Double Bit > Total
            values.append(
                fields.convert(f"ECC {kind} Double Bit", _value(entry.find("Total")), _int)
            )
    return _sum(values)


def _remapped_text(fields: _Fields, section: Entry | None) -> Reading[RemappedRowsReading]:
    if section is None:
        return ABSENT
    if not section.children:
        value = fields.convert("Remapped Rows", section.value or None, str)
        return NOT_AVAILABLE if value is NOT_AVAILABLE else ABSENT

    def read(key: str, parse: Callable[[str], T]) -> Reading[T]:
        return fields.convert(f"Remapped Rows {key}", _value(section.find(key)), parse)

    return _rows(
        read("Correctable Error", _int),
        read("Uncorrectable Error", _int),
        read("Pending", _yes),
        read("Remapping Failure Occurred", _yes),
    )


def _rows(
    correctable: Reading[int],
    uncorrectable: Reading[int],
    pending: Reading[bool],
    failure: Reading[bool],
) -> Reading[RemappedRowsReading]:
    """The four remapped-row answers, or the first that is missing (one NVML call)."""
    if isinstance(correctable, Missing):
        return correctable
    if isinstance(uncorrectable, Missing):
        return uncorrectable
    if isinstance(pending, Missing):
        return pending
    if isinstance(failure, Missing):
        return failure
    return RemappedRowsReading(correctable, uncorrectable, pending, failure)


def _retired_text(fields: _Fields, entry: Entry | None) -> Reading[int]:
    if entry is None:
        return ABSENT
    if entry.value:  # "Single Bit ECC : N/A" or ": 0"
        return fields.convert(f"Retired Pages {entry.key}", entry.value, _int)
    return fields.convert(f"Retired Pages {entry.key}", _value(entry.find("Retired pages")), _int)


def _fabric_text(fields: _Fields, section: Entry | None) -> Reading[FabricReading]:
    if section is None:
        return ABSENT
    state = fields.convert("Fabric State", _value(section.find("State")), FABRIC_STATES.__getitem__)
    if isinstance(state, Missing):
        return state
    status = fields.convert(
        "Fabric Status", _value(section.find("Status")), FABRIC_STATUS.__getitem__
    )
    health = section.find("Health")
    mask: Reading[int] = ABSENT
    summary: Reading[int] = ABSENT
    if health is not None:
        summary = fields.convert(
            "Fabric Health Summary", _value(health.find("Summary")), FABRIC_SUMMARY.__getitem__
        )
        bits = 0
        for label, shift, values in FABRIC_HEALTH:
            value = fields.convert(
                f"Fabric Health {label}", _value(health.find(label)), values.__getitem__
            )
            if isinstance(value, int):
                bits |= value << shift
        mask = bits
    return FabricReading(
        state=state,
        status=0 if isinstance(status, Missing) else status,
        health_mask=mask,
        health_summary=summary,
    )


def node_from_text(capture: NodeCapture, log: TextLog, file: str, *, complete: bool) -> None:
    fields = _Fields(file)

    def top(key: str) -> str | None:
        return _value(log.top.find(key))

    driver = top("Driver Version")
    if driver is not None:
        capture.driver = driver
    cuda = top("CUDA Version")
    if cuda == "Not Found":  # nvidia-smi's words where NVML has no CUDA version (a vGPU host)
        capture.cuda = NOT_AVAILABLE
    elif cuda is not None:
        capture.cuda = cuda
    attached = fields.convert("Attached GPUs", top("Attached GPUs"), _int)
    if complete:
        if not isinstance(attached, int) or attached != len(log.gpus):
            raise CaptureError(
                file, "Attached GPUs", f"{attached} but {len(log.gpus)} GPU sections"
            )
        capture.attached_gpus = attached
        capture.complete_gpu_list = True
    for bus, gpu in log.gpus:
        reading = gpu_from_text(fields, bus, gpu)
        merge(capture, reading)


def merge(capture: NodeCapture, reading: GpuCapture) -> None:
    """Adds ``reading`` to the GPU of the same bus id (fragments of one GPU fill each
    other's gaps), else as a new GPU."""
    for existing in capture.gpus:
        same = existing.bus_id == reading.bus_id or ABSENT in (existing.bus_id, reading.bus_id)
        if same:
            for name, value in vars(reading).items():
                if value is not ABSENT:
                    old = getattr(existing, name)
                    if old is not ABSENT and old != value:
                        raise CaptureError(capture.name, name, f"{old!r} and {value!r} disagree")
                    setattr(existing, name, value)
            return
    capture.gpus.append(reading)


# --- XML (nvidia-smi -q -x) ---------------------------------------------------------


def _xtext(gpu: ET.Element, path: str) -> str | None:
    found = gpu.find(path)
    if found is None:
        return None
    return " ".join((found.text or "").split())


def _xml_reasons(fields: _Fields, gpu: ET.Element) -> Reading[int]:
    section = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if section is None:
        section = gpu.find("clocks_throttle_reasons")
        prefix = "clocks_throttle_reason_"
    if section is None:
        return ABSENT
    mask, seen = 0, 0
    for child in section:
        if not child.tag.startswith(prefix):
            raise CaptureError(fields.file, child.tag, f"not a {prefix}* element")
        bit = XML_REASON_BITS.get(child.tag.removeprefix(prefix))
        if bit is None:
            continue
        active = fields.convert(child.tag, " ".join((child.text or "").split()), _active)
        if active is True:
            mask |= bit
        if not isinstance(active, Missing):
            seen += 1
    return mask if seen else NOT_AVAILABLE


def gpu_from_xml(fields: _Fields, gpu: ET.Element) -> GpuCapture:
    def get(path: str, parse: Callable[[str], T]) -> Reading[T]:
        return fields.convert(path, _xtext(gpu, path), parse)

    link = "pci/pci_gpu_link_info/"
    volatile: list[Reading[int]] = []
    aggregate: list[Reading[int]] = []
    for kind, out in (("volatile", volatile), ("aggregate", aggregate)):
        for tag in ("dram_uncorrectable", "sram_uncorrectable", "double_bit/total"):
            out.append(get(f"ecc_errors/{kind}/{tag}", _int))
    rows = gpu.find("remapped_rows")
    remapped: Reading[RemappedRowsReading] = ABSENT
    if rows is not None and len(rows) == 0:
        remapped = NOT_AVAILABLE if (rows.text or "").strip() == "N/A" else ABSENT
    elif rows is not None:
        remapped = _rows(
            get("remapped_rows/remapped_row_corr", _int),
            get("remapped_rows/remapped_row_unc", _int),
            get("remapped_rows/remapped_row_pending", _yes),
            get("remapped_rows/remapped_row_failure", _yes),
        )
    power = "gpu_power_readings" if gpu.find("gpu_power_readings") is not None else "power_readings"
    limit_tag = (
        "current_power_limit"
        if gpu.find(f"{power}/current_power_limit") is not None
        else "enforced_power_limit"
    )
    fabric: Reading[FabricReading] = ABSENT
    state = get("fabric/state", FABRIC_STATES.__getitem__)
    if isinstance(state, int):
        status = get("fabric/status", FABRIC_STATUS.__getitem__)
        fabric = FabricReading(state=state, status=status if isinstance(status, int) else 0)
    elif state is NOT_AVAILABLE:
        fabric = NOT_AVAILABLE
    return GpuCapture(
        bus_id=gpu.get("id") or ABSENT,
        name=_xtext(gpu, "product_name") or ABSENT,
        uuid=_xtext(gpu, "uuid") or ABSENT,
        pcie_gen=get(link + "pcie_gen/current_link_gen", _int),
        pcie_gen_max=get(link + "pcie_gen/max_link_gen", _int),
        pcie_gen_device_max=get(link + "pcie_gen/max_device_link_gen", _int),
        pcie_width=get(link + "link_widths/current_link_width", _width),
        pcie_width_max=get(link + "link_widths/max_link_width", _width),
        clock_event_reasons=_xml_reasons(fields, gpu),
        sm_clock_mhz=get("clocks/sm_clock", _mhz),
        sm_clock_max_mhz=get("max_clocks/sm_clock", _mhz),
        ecc_mode=_pair(
            get("ecc_mode/current_ecc", _enabled), get("ecc_mode/pending_ecc", _enabled)
        ),
        volatile_uncorrected=_sum(volatile),
        aggregate_uncorrected=_sum(aggregate),
        remapped_rows=remapped,
        retired_single_bit=get("retired_pages/multiple_single_bit_retirement/retired_count", _int),
        retired_double_bit=get("retired_pages/double_bit_retirement/retired_count", _int),
        retired_pending=get("retired_pages/pending_retirement", _yes),
        power_limit_mw=get(f"{power}/{limit_tag}", _milliwatts),
        default_power_limit_mw=get(f"{power}/default_power_limit", _milliwatts),
        persistence=get("persistence_mode", _enabled),
        mig_mode=_pair(
            get("mig_mode/current_mig", _enabled), get("mig_mode/pending_mig", _enabled)
        ),
        compute_mode=get("compute_mode", COMPUTE_MODES.__getitem__),
        fabric=fabric,
        reset_required=get("gpu_reset_status/reset_required", _yes),
        drain_and_reset=get("gpu_reset_status/drain_and_reset_recommended", _yes),
        virtualization=_xtext(gpu, "gpu_virtualization_mode/virtualization_mode") or ABSENT,
    )


def node_from_xml(capture: NodeCapture, text: str, file: str) -> None:
    fields = _Fields(file)
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        raise CaptureError(file, "XML", str(exc)) from exc
    if root.tag != "nvidia_smi_log":
        raise CaptureError(file, "root", f"<{root.tag}>, not <nvidia_smi_log>")
    gpus = root.findall("gpu")
    attached = fields.convert("attached_gpus", _xtext(root, "attached_gpus"), _int)
    if not isinstance(attached, int) or attached != len(gpus):
        raise CaptureError(file, "attached_gpus", f"{attached} but {len(gpus)} <gpu> elements")
    for gpu in gpus:
        if not gpu.get("id"):
            raise CaptureError(file, "<gpu>", "no id attribute (the bus id)")
    driver = _xtext(root, "driver_version")
    if driver is None:
        raise CaptureError(file, "driver_version", "missing")
    capture.driver = driver
    capture.cuda = _xtext(root, "cuda_version") or ABSENT
    capture.attached_gpus = attached
    capture.complete_gpu_list = True
    for gpu in gpus:
        merge(capture, gpu_from_xml(fields, gpu))
