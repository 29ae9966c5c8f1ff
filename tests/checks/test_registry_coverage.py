"""What the registry does not generate is checked against it, naming what is missing:
every registered check has its judge table (``tests/checks/test_<check>.py``), and the
default policy file has a section per registered check (its shipped thresholds, each
with its source) and none of a check that is not registered. (The everything-wrong
fixture: ``tests/probe/test_report_size_every_check_failing.py`` names a registered
check that does not fail there.)"""

import importlib
import inspect
import re
from pathlib import Path

import pytest
import yaml
from judge_table import Case, assert_row

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS
from gpuaccept.checks.spec import AnyCheckSpec
from gpuaccept.contracts.report import CheckStatus

REPO = Path(__file__).resolve().parents[2]
DEFAULT_POLICY = REPO / "policies" / "default-h100-h200.yaml"


def section_key(check: str) -> str:
    alias = ProbePolicy.model_fields[check].alias
    assert alias is not None, check
    return alias


def test_the_default_policy_has_a_section_for_every_registered_check() -> None:
    sections = yaml.safe_load(DEFAULT_POLICY.read_text(encoding="utf-8"))
    missing = [section_key(c.name) for c in CHECKS if section_key(c.name) not in sections]
    assert not missing, f"add these checks' sections to {DEFAULT_POLICY.name}: {missing}"
    unknown = set(sections) - {section_key(c.name) for c in CHECKS}
    assert not unknown, f"{DEFAULT_POLICY.name} has sections of no registered check: {unknown}"


@pytest.mark.parametrize("check", [c.name for c in CHECKS])
def test_every_registered_check_has_its_judge_table(check: str) -> None:
    """``tests/checks/test_<check>.py`` holds ``CASES``, rows of this check (each judged
    as the registry's spec judges it), with a row for passing, for failing and for every
    other status the judge's module can return."""
    path = Path(__file__).with_name(f"test_{check}.py")
    assert path.exists(), f"add {path.relative_to(REPO)}: the judge table of {check}"
    cases = getattr(importlib.import_module(path.stem), "CASES", None)
    assert isinstance(cases, list), f"{path.name}: no CASES table"
    assert cases, f"{path.name}: CASES is empty"
    assert all(isinstance(c, Case) for c in cases), f"{path.name}: CASES holds non-Case rows"
    spec = next(c for c in CHECKS if c.name == check)
    for case in cases:
        assert_row(spec, case)
    source = inspect.getsource(importlib.import_module(spec.judge.__module__))
    returned = {s for s in CheckStatus if f"CheckStatus.{s.name}" in source}
    needed = {CheckStatus.PASS, CheckStatus.FAIL} | (returned - {CheckStatus.ERROR})
    missing = needed - {c.status for c in cases}
    assert not missing, f"{path.name}: no row for {sorted(s.value for s in missing)}"


def test_every_registered_check_has_a_fault_profile() -> None:
    """A profile in profiles/faults/ whose ``expect.check`` is the check (the demo, the
    operator tests and the benchmark pick it up from there)."""
    expected = {
        (yaml.safe_load(path.read_text(encoding="utf-8")).get("expect") or {}).get("check")
        for path in (REPO / "profiles" / "faults").glob("*.yaml")
    }
    missing = [c.name for c in CHECKS if c.name not in expected]
    assert not missing, f"add a fault profile to profiles/faults/ that fails: {missing}"


SWITCH_FIELDS = {"enabled", "required"}


@pytest.mark.parametrize("check", [c.name for c in CHECKS])
def test_every_section_field_is_declared_measuring_or_judging_once(check: str) -> None:
    """A field neither measuring nor judging could let a re-judge convict on a result
    measured under other settings; one in both is a contradiction."""
    spec = next(c for c in CHECKS if c.name == check)
    fields = set(spec.policy_model.model_fields) - SWITCH_FIELDS
    both = spec.measuring & spec.judging
    assert not both, f"{check}: declared both measuring and judging: {sorted(both)}"
    undeclared = fields - spec.measuring - spec.judging
    assert not undeclared, f"{check}: declare in its SPEC (measuring or judging): {undeclared}"
    unknown = (spec.measuring | spec.judging) - fields
    assert not unknown, f"{check}: SPEC names fields its section lacks: {sorted(unknown)}"


@pytest.mark.parametrize("check", [c.name for c in CHECKS])
def test_every_field_the_measuring_function_reads_is_declared_measuring(check: str) -> None:
    """What ``probe/measure/<check>.py`` reads of its section changes what it measures."""
    spec = next(c for c in CHECKS if c.name == check)
    source = (REPO / "probes" / "gpuaccept" / "probe" / "measure" / f"{check}.py").read_text(
        encoding="utf-8"
    )
    fields = set(spec.policy_model.model_fields) - SWITCH_FIELDS
    read = {f for f in fields if re.search(rf"\bpolicy\.{f}\b", source)}
    unread = read - spec.measuring
    assert not unread, f"{check}: read by its measuring function, so measuring: {unread}"


GPU_FIELD = re.compile(r"^gpus?$|Gpus?$")  # gpus, failedGpus, minSmClockGpu, worstGpu


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_every_registered_check_claims_the_gpu_fields_of_its_observed_model(
    check: AnyCheckSpec,
) -> None:
    """``SPEC.claims`` (required by ``CheckSpec``) names every field of the ``Observed``
    model that counts or names GPUs, so the operator holds it to the node."""
    source = inspect.getsource(check.claims)
    fields = [f.alias or name for name, f in check.observed_model.model_fields.items()]
    unclaimed = [f for f in fields if GPU_FIELD.search(f) and f'"{f}"' not in source]
    assert not unclaimed, f"{check.name}: claims() does not name {unclaimed}"
