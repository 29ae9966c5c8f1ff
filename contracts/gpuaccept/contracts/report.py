"""The probe report: what one probe run observed on one node.

The compact JSON form travels in the probe pod's termination message, so it
must fit in :data:`~gpuaccept.contracts.api.TERMINATION_MESSAGE_MAX_BYTES`.
"""

import json
import math
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from gpuaccept.contracts.api import REPORT_KIND, TERMINATION_MESSAGE_MAX_BYTES
from gpuaccept.contracts.contract_model import ContractModel


class CheckStatus(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    ERROR = "error"
    SKIP = "skip"


class HardwareMode(StrEnum):
    REAL = "real"
    SIMULATED = "simulated"


# The report's envelope, read from a probe that may be one release newer: a field this
# operator does not know is ignored (never judged), a known one must have its exact JSON
# type (a number a number, a count an integer). Strictness applies where a report is read
# from the wire (decode_termination_message); the probe builds its models in Python.
REPORT_CONFIG = ConfigDict(extra="ignore")


class HardwareSummary(ContractModel):
    """What the node is, as far as the probe could tell."""

    model_config = REPORT_CONFIG

    gpu_model: str | None = Field(default=None, max_length=64)
    gpu_count: int = Field(ge=0, le=64)
    driver_version: str | None = Field(
        default=None,
        max_length=32,
        description="The node's driver: the kernel module's version, else NVML's.",
    )
    cuda_driver_version: str | None = Field(
        default=None, max_length=16, description="Highest CUDA version the driver supports."
    )
    cuda_runtime_version: str | None = Field(
        default=None,
        max_length=16,
        description="The probe image's CUDA runtime (cudaRuntimeGetVersion of the libcudart "
        "it loaded); an image fact, never judged.",
    )
    nccl_version: str | None = Field(
        default=None,
        max_length=16,
        description="The probe image's NCCL (ncclGetVersion of the libnccl it loaded); an "
        "image fact, never judged.",
    )
    gpu_uuids: list[Annotated[str, Field(max_length=64)]] | None = Field(
        default=None,
        max_length=64,
        description="Each GPU's NVML UUID, by NVML index (an empty string where NVML did "
        "not answer): what a per-GPU verdict names the failing GPUs by. null: not read.",
    )
    nvswitch_devices: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="NVSwitches on the host's PCI bus (sysfs, class 0x068000): whether the "
        "GPUs sit on an NVSwitch baseboard, which decides the NVSwitch fabric, the per-pair "
        "and the all-reduce expectations of the HGX model classes. null: not read (the "
        "model class alone decides, as before).",
    )


def _all_finite(value: JsonValue) -> bool:
    """No NaN or Infinity anywhere in a JSON value (no path built: every stored report
    is checked each time it is read, and nearly all are finite)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(map(_all_finite, value.values()))
    if isinstance(value, list):
        return all(map(_all_finite, value))
    return True


def first_non_finite(value: JsonValue, where: str = "") -> str | None:
    """The path of the first NaN or Infinity in a JSON value, or None."""
    return None if _all_finite(value) else _first_non_finite_path(value, where)


def _first_non_finite_path(value: JsonValue, where: str) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return where or "(value)"
    if isinstance(value, dict):
        for key, item in value.items():
            found = _first_non_finite_path(item, f"{where}.{key}" if where else key)
            if found is not None:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _first_non_finite_path(item, f"{where}[{i}]")
            if found is not None:
                return found
    return None


class CheckResult(ContractModel):
    """The outcome of one check.

    ``observed`` is the check's own compact measurement (its schema belongs to
    the check module); the operator re-judges it against the current policy, so
    a threshold change does not need a new probe run.
    """

    model_config = REPORT_CONFIG

    check: str = Field(pattern=r"^[a-z][a-z0-9_]{1,31}$")
    status: CheckStatus
    observed: JsonValue = None
    expected: JsonValue = None
    message: str = Field(default="", max_length=240)
    duration_s: float = Field(ge=0, alias="durationS")

    @field_validator("observed", "expected")
    @classmethod
    def _finite(cls, value: JsonValue) -> JsonValue:
        where = first_non_finite(value)
        if where is not None:
            raise ValueError(f"{where}: NaN or Infinity is not a measurement")
        return value

    @model_serializer(mode="wrap")
    def _no_empty_message(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No ``message`` key when there is no message (13 bytes per result in the
        termination message; read back, an absent message is the empty default)."""
        data: dict[str, Any] = handler(self)
        if data.get("message") == "":
            del data["message"]
        return data


class ProbeReport(ContractModel):
    """One probe run on one node."""

    model_config = REPORT_CONFIG

    api_version: Literal["gpuaccept.io/v1alpha1"] = Field(
        default="gpuaccept.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["ProbeReport"] = REPORT_KIND
    node_name: str = Field(min_length=1, max_length=253)
    boot_id: str = Field(alias="bootID", max_length=64)
    probe_version: str = Field(max_length=32)
    started_at: datetime
    finished_at: datetime
    hardware: HardwareMode
    summary: HardwareSummary
    results: list[CheckResult] = Field(max_length=32)
    wall_s: float | None = Field(
        default=None,
        ge=0,
        description="Seconds from the probe process's start (its starttime in /proc/self/stat "
        "against CLOCK_BOOTTIME: interpreter, imports, NVML and CUDA initialisation "
        "included) to the end of the last check; a simulated node reports its profile's "
        "durations. Absent when the process start could not be read.",
    )

    @model_validator(mode="after")
    def _one_result_per_check(self) -> "ProbeReport":
        seen: set[str] = set()
        for result in self.results:
            if result.check in seen:
                raise ValueError(f"check {result.check} is reported twice")
            seen.add(result.check)
        return self

    def result(self, check: str) -> CheckResult | None:
        return next((r for r in self.results if r.check == check), None)

    def to_compact_json(self) -> str:
        """Compact JSON (no spaces, no nulls), as written to the termination log."""
        return self.model_dump_json(by_alias=True, exclude_none=True)

    def compact_size(self) -> int:
        return len(self.to_compact_json().encode())


class ReportTooLargeError(ValueError):
    """The compact report does not fit in a termination message."""


def encode_termination_message(report: ProbeReport) -> str:
    """The report for ``/dev/termination-log``; never truncated.

    Raises :class:`ReportTooLargeError` instead of emitting JSON that the kubelet
    would cut.
    """
    text = report.to_compact_json()
    size = len(text.encode())
    if size > TERMINATION_MESSAGE_MAX_BYTES:
        raise ReportTooLargeError(
            f"compact report is {size} bytes, over the {TERMINATION_MESSAGE_MAX_BYTES}-byte "
            "termination message limit"
        )
    return text


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice (which value counts would be the parser's whim)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(f"key {key[:40]!r} appears twice in one object")
        out[key] = value
    return out


def strict_json(text: str) -> JsonValue:
    """``text`` as JSON, refusing a key twice in one object (raises ValueError). NaN
    and Infinity are left to the models, which refuse them naming the field."""
    try:
        value: JsonValue = json.loads(text, object_pairs_hook=_unique_keys)
    except RecursionError as error:  # pragma: no cover - nesting beyond the 4 KiB message
        raise ValueError("JSON nested too deep") from error
    return value


def decode_termination_message(message: str) -> ProbeReport:
    """Parse and validate a termination message (raises ValueError on bad input).

    Strict: a number must be a JSON number (not ``"468"``, ``"1_000"`` or ``true``),
    a count a JSON integer, a boolean ``true``/``false``; a key twice in one object, NaN
    and Infinity are refused. A field this operator does not know is ignored."""
    if len(message.encode()) > TERMINATION_MESSAGE_MAX_BYTES:
        raise ReportTooLargeError(
            f"termination message is {len(message.encode())} bytes, over "
            f"{TERMINATION_MESSAGE_MAX_BYTES}"
        )
    strict_json(message)
    return ProbeReport.model_validate_json(message, strict=True)
