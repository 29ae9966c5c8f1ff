"""The interface every check implements.

A check has two halves:

* :meth:`Check.measure` is impure: it asks the :class:`HardwareBackend` (and
  nothing else) and returns an :class:`Observation` whose ``observed`` value is
  compact JSON. Raising :class:`~gpuaccept.probe.hardware.Unavailable` makes
  the result ``skip``; any other exception makes it ``error``.
* :meth:`Check.judge` is pure: ``(observed, policy, summary) → Judgement``.
  The probe calls it once when it writes the report, and the operator calls it
  again on stored reports when the policy changes (through
  :func:`gpuaccept.probe.verdict.evaluate`), so it must depend on nothing but
  its arguments. It must accept both the full ``observed`` form and the
  :meth:`Check.condense`-d one.

Check modules import neither torch nor NVML.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import JsonValue

from gpuaccept.contracts.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.hardware.base import HardwareBackend

MESSAGE_MAX = 240


@dataclass(frozen=True)
class Observation:
    """What a check measured: its ``observed`` value in the report."""

    observed: JsonValue


@dataclass(frozen=True)
class Judgement:
    status: CheckStatus
    expected: JsonValue
    message: str


@dataclass
class ProbeContext:
    """Facts from outside the hardware that a measurement may need."""

    # The node's advertised nvidia.com/gpu (GPUACCEPT_EXPECTED_GPUS), if known.
    advertised_gpus: int | None = None
    # Called with a short progress note while a long measurement runs.
    progress: Callable[[str], None] = field(default=lambda _note: None)


class Check(Protocol):
    """One acceptance check. Register it in :mod:`gpuaccept.probe.checks`."""

    name: str  # snake_case; also the ProbePolicy field holding its thresholds
    title: str  # for people
    reason: str  # CamelCase reason when it fails, e.g. "PcieLinkFailed"

    def measure(
        self, hardware: HardwareBackend, policy: ProbePolicy, context: ProbeContext
    ) -> Observation: ...

    def judge(
        self, observed: JsonValue, policy: ProbePolicy, summary: HardwareSummary
    ) -> Judgement: ...

    def condense(self, observed: JsonValue) -> JsonValue:
        """A smaller form of ``observed`` that :meth:`judge` still accepts."""


class BadObservationError(ValueError):
    """``observed`` does not have the shape this check writes."""


def as_object(observed: JsonValue) -> Mapping[str, JsonValue]:
    if not isinstance(observed, dict):
        raise BadObservationError(f"observed must be an object, got {type(observed).__name__}")
    return observed


def get_int(obj: Mapping[str, JsonValue], key: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadObservationError(f"observed.{key} must be an integer")
    return value


def opt_int(obj: Mapping[str, JsonValue], key: str) -> int | None:
    return None if obj.get(key) is None else get_int(obj, key)


def get_float(obj: Mapping[str, JsonValue], key: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadObservationError(f"observed.{key} must be a number")
    return float(value)


def opt_float(obj: Mapping[str, JsonValue], key: str) -> float | None:
    return None if obj.get(key) is None else get_float(obj, key)


def opt_str(obj: Mapping[str, JsonValue], key: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadObservationError(f"observed.{key} must be a string")
    return value


def get_numbers(obj: Mapping[str, JsonValue], key: str) -> list[float]:
    value = obj.get(key)
    if not isinstance(value, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        raise BadObservationError(f"observed.{key} must be a list of numbers")
    return [float(v) for v in value]  # type: ignore[arg-type]


def get_ints(obj: Mapping[str, JsonValue], key: str) -> list[int]:
    value = obj.get(key)
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise BadObservationError(f"observed.{key} must be a list of integers")
    return [v for v in value if isinstance(v, int)]


def clip(message: str, limit: int = MESSAGE_MAX) -> str:
    return message if len(message) <= limit else message[: limit - 1] + "…"


def gpu_list(indices: list[int], limit: int = 8) -> str:
    """``[0, 3]`` → ``"GPU 0, 3"``; long lists end in ``"… (+n)"``."""
    shown = ", ".join(str(i) for i in indices[:limit])
    more = f" … (+{len(indices) - limit})" if len(indices) > limit else ""
    return f"GPU{'s' if len(indices) > 1 else ''} {shown}{more}"


def round1(value: float) -> float:
    return round(value, 1)


def round_figure(value: float) -> float:
    """One decimal for large figures, three significant digits for small ones
    (so a slow but non-zero bandwidth never rounds to 0)."""
    if value == 0 or abs(value) >= 100:
        return round(value, 1)
    return float(f"{value:.3g}")
