"""The judge tables' shared pieces: one :class:`Case` per row (an ``observed`` value
as a report carries it, the policy section in its wire form, the summary), judged
the way the verdict judges a stored report: parse, then judge."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import JsonValue

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.spec import AnyCheckSpec, CheckJudgement, ObservedModel
from gpuaccept.contracts.policy_fields import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REPO = Path(__file__).resolve().parents[2]
DEFAULT_POLICY_FILE = REPO / "policies" / "default-h100-h200.yaml"
SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


def default_policy() -> ProbePolicy:
    """The shipped policy file (what the probe reads by default)."""
    return ProbePolicy.model_validate(yaml.safe_load(DEFAULT_POLICY_FILE.read_text("utf-8")))


def policy(**sections: Mapping[str, object]) -> ProbePolicy:
    """The defaults of every section but those given (wire form, camelCase)."""
    return ProbePolicy.model_validate(sections)


def judge_json(
    check: AnyCheckSpec, observed: JsonValue, policy: ProbePolicy, summary: HardwareSummary
) -> CheckJudgement:
    """Judge a report's ``observed`` value as the verdict does: parse, then judge."""
    return check.judge(check.parse(observed), policy.section(check), summary)


def condense_json(check: AnyCheckSpec, observed: JsonValue) -> JsonValue:
    """The condensed ``observed`` value as the compact report writes it."""
    return check.condense(check.parse(observed)).to_observed()


def status_and_message(
    check: AnyCheckSpec,
    observed: JsonValue,
    summary: HardwareSummary = SUMMARY,
    policy: ProbePolicy | None = None,
) -> tuple[CheckStatus, str]:
    """(status, message) of ``observed`` as measured and condensed (the shipped policy
    unless ``policy`` is given): both forms must agree."""
    section = (policy or default_policy()).section(check)
    full = check.judge(check.parse(observed), section, summary)
    condensed = check.judge(check.condense(check.parse(observed)), section, summary)
    assert condensed.status is full.status, (full.message, condensed.message)
    return full.status, full.message


@dataclass(frozen=True)
class Case:
    """One row of a check's table: ``observed`` judged under the model defaults with
    ``section`` (the check's section, wire form) for a node ``summary`` gives
    ``status``, with ``message`` in its message."""

    id: str
    observed: JsonValue | ObservedModel
    status: CheckStatus
    message: str = ""
    section: Mapping[str, object] = field(default_factory=dict)
    summary: HardwareSummary = SUMMARY
    # the shipped policy file's section instead of the model defaults
    shipped: bool = False


def shipped_section(check: AnyCheckSpec) -> CheckSwitch:
    """The check's section of the shipped default policy (its ``CheckSpec.shipped``,
    from which policies/default-h100-h200.yaml is generated)."""
    section: CheckSwitch = check.policy_model.model_validate(yaml.safe_load(check.shipped) or {})
    return section


def judged(check: AnyCheckSpec, case: Case) -> CheckJudgement:
    """``case`` judged as the verdict judges it: parse, then judge."""
    base = shipped_section(check) if case.shipped else check.policy_model()
    section = check.policy_model.model_validate({**base.model_dump(by_alias=True), **case.section})
    observed = case.observed
    if isinstance(observed, ObservedModel):
        observed = observed.to_observed()
    return check.judge(check.parse(observed), section, case.summary)


def assert_row(check: AnyCheckSpec, case: Case) -> None:
    """The row's status and message; the condensed form keeps the status."""
    full = judged(check, case)
    assert full.status is case.status, full.message
    assert case.message in full.message, full.message
    observed = case.observed
    if isinstance(observed, ObservedModel):
        observed = observed.to_observed()
    condensed = Case(**{**case.__dict__, "observed": condense_json(check, observed)})
    assert judged(check, condensed).status is case.status, "condensed"


def ids(cases: list[Case]) -> list[str]:
    """The rows' ids, unique (pytest shows them)."""
    names = [c.id for c in cases]
    assert len(set(names)) == len(names), names
    return names
