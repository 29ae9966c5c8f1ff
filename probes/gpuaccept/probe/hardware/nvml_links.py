"""NVML readers for NVLink, the NVSwitch fabric and the GPU's configuration.

Used by the real backend (:mod:`.real`) with the ``pynvml`` module and a device
handle. Every number below is NVML's, from ``nvml.h`` as nvidia-ml-py 13.615
ships it (a test compares them with the installed binding), kept here so that
the readers do not depend on the binding defining them:

* ``NVML_FI_DEV_NVLINK_LINK_COUNT`` is field 91 in every ``nvml.h`` from R450
  to R590 (the renumbering between R570 and R580 moved fields above 250 only);
  its answer is also bounded by ``NVML_NVLINK_MAX_LINKS`` (36), and a count
  outside 0-36 is not used.
* ``nvmlDeviceGetNvLinkErrorCounter`` counters: DL_REPLAY 0, DL_RECOVERY 1,
  DL_CRC_FLIT 2, DL_CRC_DATA 3 (CRC here = flit + data), DL_ECC_DATA 4 (the data
  ECC errors NVLink 4 corrects; in every ``nvml.h`` from R535 to R590).
* Blackwell answers those counters NotSupported; nvml.h says of the replay,
  recovery and CRC fields "unsupported for Blackwell+. Please use
  NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_*". Where DL_RECOVERY is NotSupported the
  recoveries are read from ``NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS`` (215,
  "times link went from Up to recovery, irrespective of the result"; R560 and
  later), the link in ``scopeId``. Replay and CRC have no Blackwell equivalent.
* ``nvmlGpuFabricState_t``: NOT_SUPPORTED 0, NOT_STARTED 1, IN_PROGRESS 2,
  COMPLETED 3; health mask fields ``(mask >> shift) & width`` with the
  ``NVML_GPU_FABRIC_HEALTH_MASK_*`` shifts and widths; summary (v3 only)
  HEALTHY 1, UNHEALTHY 2, LIMITED_CAPACITY 3.

NotSupported (NVML error 3) is never read as a healthy answer: a link count
NVML cannot give raises :class:`Unavailable` (the check skips), and a setting
it cannot give is ``None`` (listed, not judged).
"""

import contextlib
import ctypes
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gpuaccept.probe.hardware.base import (
    FabricInfo,
    GpuFailedError,
    GpuSettings,
    NvlinkLinks,
    Unavailable,
)
from gpuaccept.probe.hardware.nvml_errors import (
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_SUCCESS,
    nvml_error_code,
    nvml_failure,
)

NVML_FI_DEV_NVLINK_LINK_COUNT = 91
NVML_NVLINK_MAX_LINKS = 36
NVLINK_COUNTERS: dict[str, tuple[int, ...]] = {
    "replay": (0,),  # NVML_NVLINK_ERROR_DL_REPLAY
    "recovery": (1,),  # NVML_NVLINK_ERROR_DL_RECOVERY
    "crc": (2, 3),  # NVML_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_CRC_DATA
    "ecc": (4,),  # NVML_NVLINK_ERROR_DL_ECC_DATA
}
NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS = 215
FIELD_VALUE_MEMBERS = {1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}

FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
# (condition, shift, width, the values that flag it)
FABRIC_HEALTH_FIELDS: tuple[tuple[str, int, int, frozenset[int]], ...] = (
    ("degraded_bandwidth", 0, 0x3, frozenset({1})),  # DEGRADED_BW_TRUE
    ("route_recovery", 2, 0x3, frozenset({1})),  # ROUTE_RECOVERY_TRUE (in progress)
    ("route_unhealthy", 4, 0x3, frozenset({1})),  # ROUTE_UNHEALTHY_TRUE
    ("access_timeout_recovery", 6, 0x3, frozenset({1})),  # ..._RECOVERY_TRUE (in progress)
    # INCORRECT_CONFIGURATION: 0 not supported, 1 none, 2-8 the kinds of wrong
    ("incorrect_configuration", 8, 0xF, frozenset(range(2, 16))),
)
FABRIC_SUMMARY = {2: "unhealthy", 3: "limited_capacity"}
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}


def _field_int(value: Any) -> int:
    member = FIELD_VALUE_MEMBERS.get(int(getattr(value, "valueType", 1)), "uiVal")
    return int(getattr(value.value, member))


def nvlink_count(nvml: ModuleType, handle: Any, gpu: int) -> int:
    """``NVML_FI_DEV_NVLINK_LINK_COUNT``: the links this GPU has."""
    try:
        value = nvml.nvmlDeviceGetFieldValues(handle, [NVML_FI_DEV_NVLINK_LINK_COUNT])[0]
    except nvml.NVMLError as exc:
        raise nvml_failure(gpu, "the NVLink count", exc) from exc
    code = int(getattr(value, "nvmlReturn", NVML_SUCCESS))
    if code == NVML_ERROR_GPU_IS_LOST:
        raise GpuFailedError(gpu, "the NVLink count", "NVML: GPU is lost (GPU_IS_LOST)")
    if code == NVML_ERROR_NOT_SUPPORTED:
        # NVML's answer for "the device does not support this feature": a GPU without
        # NVLink (a PCIe card without a bridge). It has no links, which the judge
        # compares with what its model should have; it is not an unread count.
        return 0
    if code != NVML_SUCCESS:
        raise Unavailable(f"GPU {gpu}: NVML gives no NVLink count (NVML error {code})")
    count = _field_int(value)
    if not 0 <= count <= NVML_NVLINK_MAX_LINKS:
        raise Unavailable(f"GPU {gpu}: NVLink count {count} is not a link count")
    return count


def read_nvlink(nvml: ModuleType, handle: Any, gpu: int) -> NvlinkLinks:
    """Active links among the device's own, and each active link's error counters."""
    count = nvlink_count(nvml, handle, gpu)
    active = []
    for link in range(count):
        try:
            if int(nvml.nvmlDeviceGetNvLinkState(handle, link)) == 1:  # NVML_FEATURE_ENABLED
                active.append(link)
        except nvml.NVMLError as exc:
            if nvml_error_code(exc) != NVML_ERROR_NOT_SUPPORTED:
                raise nvml_failure(gpu, f"NVLink {link} state", exc) from exc
            # a link NVML says nothing about is not counted as active
    counters = _counters(nvml, handle, gpu, count, active)
    return NvlinkLinks(
        count=count,
        active=tuple(active),
        errors=counters.errors,
        not_supported=counters.not_supported,
        not_read=counters.not_read,
    )


NVLINK_COUNTER_PARTS = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data", 4: "ecc_data"}
NVML_NVLINK_ERROR_DL_RECOVERY = 1


@dataclass(frozen=True)
class _Counters:
    errors: dict[str, tuple[int, ...]] | None
    not_supported: tuple[str, ...]  # NVML counter parts answered NotSupported
    not_read: tuple[str, ...]  # NVML counter parts answered another error on some link


def _counters(nvml: ModuleType, handle: Any, gpu: int, count: int, active: list[int]) -> _Counters:
    """Each active link's counters (inactive links 0).

    Each NVML counter is read on its own: one answered NotSupported (on Hopper the
    per-link CRC data counter, NVIDIA/DCGM#173) is listed and the others are still read;
    one answered any other error on a link (but GPU_IS_LOST) is listed as not read and
    its counter is not judged on that GPU, the others still are. A judged counter
    (crc = flit + data) is kept while one of its parts is readable."""
    out, not_supported, not_read = _read_counters(nvml, handle, gpu, count, active)
    errors = _judged(out, not_supported, not_read)
    if NVML_NVLINK_ERROR_DL_RECOVERY in not_supported and active:
        recoveries = _link_recovery_events(nvml, handle, gpu, count, active)
        if recoveries is not None:
            errors["recovery"] = recoveries
            not_supported.discard(NVML_NVLINK_ERROR_DL_RECOVERY)  # read from the field
    if active and not errors:
        return _Counters(None, *_parts(not_supported, not_read))
    return _Counters(errors, *_parts(not_supported, not_read))


def _read_counters(
    nvml: ModuleType, handle: Any, gpu: int, count: int, active: list[int]
) -> tuple[dict[str, list[int]], set[int], set[int]]:
    """Per judged counter, each link's count (its parts summed); the NVML counters
    answered NotSupported, and those answered another error (GPU_IS_LOST raises)."""
    out: dict[str, list[int]] = {name: [0] * count for name in NVLINK_COUNTERS}
    not_supported: set[int] = set()
    not_read: set[int] = set()
    for link in active:
        for name, counters in NVLINK_COUNTERS.items():
            for counter in counters:
                if counter in not_supported or counter in not_read:
                    continue
                try:
                    out[name][link] += int(
                        nvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter)
                    )
                except nvml.NVMLError as exc:
                    code = nvml_error_code(exc)
                    if code == NVML_ERROR_GPU_IS_LOST:
                        raise nvml_failure(gpu, f"NVLink {link} error counters", exc) from exc
                    (not_supported if code == NVML_ERROR_NOT_SUPPORTED else not_read).add(counter)
    return out, not_supported, not_read


def _judged(
    out: dict[str, list[int]], not_supported: set[int], not_read: set[int]
) -> dict[str, tuple[int, ...]]:
    """The counters that are judged: a counter with a part not read on some link is not
    judged at all (a sum without that part would read low); one with a part
    NotSupported keeps the rest."""
    missing = not_supported | not_read
    dropped = {
        name
        for name, counters in NVLINK_COUNTERS.items()
        if set(counters) <= missing or set(counters) & not_read
    }
    return {n: tuple(v) for n, v in out.items() if n not in dropped}


def _parts(not_supported: set[int], not_read: set[int]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return (
        tuple(NVLINK_COUNTER_PARTS[c] for c in sorted(not_supported)),
        tuple(NVLINK_COUNTER_PARTS[c] for c in sorted(not_read)),
    )


def _link_recovery_events(
    nvml: ModuleType, handle: Any, gpu: int, count: int, active: list[int]
) -> tuple[int, ...] | None:
    """Per link, ``NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS`` (Blackwell's recovery
    counter; the link in ``scopeId``); None where a link does not answer it."""
    wanted = [(NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS, link) for link in active]
    try:
        values = nvml.nvmlDeviceGetFieldValues(handle, wanted)
    except nvml.NVMLError as exc:
        if nvml_error_code(exc) == NVML_ERROR_GPU_IS_LOST:
            raise nvml_failure(gpu, "NVLink recovery events", exc) from exc
        return None
    out = [0] * count
    for link, value in zip(active, values, strict=True):
        if int(getattr(value, "nvmlReturn", NVML_SUCCESS)) != NVML_SUCCESS:
            return None
        out[link] = _field_int(value)
    return tuple(out)


def _fabric_call(nvml: ModuleType, handle: Any) -> tuple[Any, int]:
    """(the filled structure, its version): v3, else v2, else the deprecated v1 call."""
    versioned = getattr(nvml, "nvmlDeviceGetGpuFabricInfoV", None)
    structs = [
        (getattr(nvml, name, None), version)
        for name, version in (("c_nvmlGpuFabricInfo_v3_t", 3), ("c_nvmlGpuFabricInfo_v2_t", 2))
    ]
    if versioned is not None:
        for struct, version in structs:
            if struct is None:
                continue
            info = struct()
            try:
                versioned(handle, ctypes.byref(info))
            except nvml.NVMLError as exc:
                code = nvml_error_code(exc)
                if code == NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
                    continue  # a driver older than this structure: try the previous one
                if code != NVML_ERROR_FUNCTION_NOT_FOUND:
                    raise
                break
            return info, version
    legacy = getattr(nvml, "nvmlDeviceGetGpuFabricInfo", None)
    struct_v1 = getattr(nvml, "c_nvmlGpuFabricInfo_t", None)
    if legacy is None or struct_v1 is None:
        raise Unavailable("the NVML binding has no GPU fabric call")
    info = struct_v1()
    legacy(handle, ctypes.byref(info))
    return info, 1


def read_fabric(nvml: ModuleType, handle: Any, gpu: int) -> FabricInfo:
    try:
        info, version = _fabric_call(nvml, handle)
    except nvml.NVMLError as exc:
        if nvml_error_code(exc) == NVML_ERROR_NOT_SUPPORTED:
            return FabricInfo(state="unsupported", struct_version=0)
        raise nvml_failure(gpu, "the fabric state", exc) from exc
    # nvml.h declares nvmlGpuFabricState_t as an unsigned char; pynvml's structure field
    # is a c_uint, whose upper bytes the driver does not set: only the low byte counts.
    raw_state = int(info.state) & 0xFF
    state = FABRIC_STATES.get(raw_state, f"state_{raw_state}")
    mask = int(getattr(info, "healthMask", 0)) if version >= 2 else 0
    conditions = [
        name
        for name, shift, width, flagged in FABRIC_HEALTH_FIELDS
        if (mask >> shift) & width in flagged
    ]
    summary = FABRIC_SUMMARY.get(int(getattr(info, "healthSummary", 0))) if version >= 3 else None
    if summary is not None:
        conditions.append(summary)
    return FabricInfo(
        state=state,
        status=int(info.status),
        conditions=tuple(conditions),
        struct_version=version,
    )


def _optional(nvml: ModuleType, gpu: int, step: str, call: Any, *args: Any) -> Any:
    """``call(*args)``; None where NVML answers NotSupported."""
    try:
        return call(*args)
    except nvml.NVMLError as exc:
        if nvml_error_code(exc) == NVML_ERROR_NOT_SUPPORTED:
            return None
        raise nvml_failure(gpu, step, exc) from exc


def read_settings(nvml: ModuleType, handle: Any, gpu: int) -> GpuSettings:
    enforced = _optional(nvml, gpu, "the power limit", nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    default = _optional(
        nvml, gpu, "the default power limit", nvml.nvmlDeviceGetPowerManagementDefaultLimit, handle
    )
    persistence = _optional(
        nvml, gpu, "persistence mode", nvml.nvmlDeviceGetPersistenceMode, handle
    )
    mig = _optional(nvml, gpu, "the MIG mode", nvml.nvmlDeviceGetMigMode, handle)
    compute = _optional(nvml, gpu, "the compute mode", nvml.nvmlDeviceGetComputeMode, handle)
    mig_current = mig_pending = None
    with contextlib.suppress(TypeError, ValueError):
        if mig is not None:
            mig_current, mig_pending = bool(int(mig[0])), bool(int(mig[1]))
    return GpuSettings(
        power_limit_mw=None if enforced is None else int(enforced),
        default_power_limit_mw=None if default is None else int(default),
        persistence=None if persistence is None else int(persistence) == 1,
        mig_current=mig_current,
        mig_pending=mig_pending,
        compute_mode=None
        if compute is None
        else COMPUTE_MODES.get(int(compute), f"mode_{compute}"),
    )
