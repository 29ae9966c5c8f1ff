"""What every check module provides: a :class:`CheckSpec`.

A check module in :mod:`gpuaccept.checks` is pure (no torch, NVML, Kubernetes
or I/O). It defines

* its policy section, a :class:`~gpuaccept.contracts.policy.CheckSwitch`
  subclass (the ``ProbePolicy`` field named after the check);
* its ``Observed`` model: the one shape of its ``observed`` value in a report.
  Condensing (to fit the termination message) returns the same model with
  detail fields dropped, and ``judge`` accepts both;
* ``judge(observed, section, summary) -> CheckJudgement``, pure; the probe calls
  it once, and the operator again on stored reports when the policy changes;
* its key figures: a :class:`FiguresModel` (flat fields of ``status.figures``
  next to the summary fields of :class:`~gpuaccept.contracts.nodeacceptance.KeyFigures`;
  the CRD schema of ``status.figures`` is generated from these models) and the
  printer columns that show them;
* its reason code (``<CheckName>Failed``);

and registers all of it as one ``SPEC`` in :mod:`gpuaccept.checks.registry`.
The measuring half lives in the probe (``gpuaccept.probe.measure``).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import JsonValue

from gpuaccept.contracts.base import ContractModel
from gpuaccept.contracts.policy import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

MESSAGE_MAX = 240


class ObservedModel(ContractModel):
    """Base of every check's ``Observed`` model (camelCase on the wire)."""

    def to_observed(self) -> JsonValue:
        """The JSON value stored as ``observed`` in the report (no nulls)."""
        dumped: JsonValue = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        return dumped


@dataclass(frozen=True)
class CheckJudgement:
    """One check's result against one policy section."""

    status: CheckStatus
    expected: JsonValue
    message: str


class FiguresModel(ContractModel):
    """Base of a check's key figures: optional scalar fields that travel flat in
    ``status.figures`` (camelCase, e.g. ``busbwGBps``). Their names must not
    collide with another check's or with the summary fields."""


@dataclass(frozen=True)
class FigureColumn:
    """A ``kubectl get nodeacceptances`` printer column showing one key figure."""

    name: str  # column header, e.g. "PCIe"
    figure: str  # the figure's wire name (a field of the check's FiguresModel), e.g. "pcie"
    description: str
    # Left to right among the key-figure columns (they sit between REASON and
    # DRIVER); registry order would put PCIe before BusBW, the README shows BusBW first.
    position: int


PolicyT = TypeVar("PolicyT", bound=CheckSwitch)
ObservedT = TypeVar("ObservedT", bound=ObservedModel)


def _no_figures(_observed: Any) -> None:
    return None


def _unchanged(observed: ObservedT) -> ObservedT:
    return observed


@dataclass(frozen=True)
class CheckSpec(Generic[PolicyT, ObservedT]):
    """One check, as the registry lists it."""

    name: str  # snake_case; also the ProbePolicy field holding its section
    title: str  # for people
    summary: str  # one line for the CLI help and the docs' check table
    reason: str  # CamelCase reason when it fails, e.g. "PcieLinkFailed"
    policy_model: type[PolicyT]
    observed_model: type[ObservedT]
    judge: Callable[[ObservedT, PolicyT, HardwareSummary], CheckJudgement]
    condense: Callable[[ObservedT], ObservedT] = _unchanged
    # This check's key figures (None: the check has none), from its observed value.
    figures_model: type[FiguresModel] | None = None
    key_figures: Callable[[ObservedT], FiguresModel | None] = _no_figures
    columns: tuple[FigureColumn, ...] = ()

    @property
    def warning_reason(self) -> str:
        """The reason of a ``warn`` result, e.g. ``ThrottleReasonsWarning``."""
        return self.reason.removesuffix("Failed") + "Warning"

    def parse(self, observed: JsonValue) -> ObservedT:
        """``observed`` from a report as this check's model (raises ValueError)."""
        return self.observed_model.model_validate(observed)


AnyCheckSpec = CheckSpec[Any, Any]


def clip(message: str, limit: int = MESSAGE_MAX) -> str:
    return message if len(message) <= limit else message[: limit - 1] + "…"


def gpu_list(indices: list[int], limit: int = 8) -> str:
    """``[0, 3]`` → ``"GPU 0, 3"``; long lists end in ``"… (+n)"``."""
    shown = ", ".join(str(i) for i in indices[:limit])
    more = f" … (+{len(indices) - limit})" if len(indices) > limit else ""
    return f"GPU{'s' if len(indices) > 1 else ''} {shown}{more}"
