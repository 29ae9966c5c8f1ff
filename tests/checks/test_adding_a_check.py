"""Adding a check touches the files docs/architecture.md's walk-through lists, and no
list of checks anywhere else: a file that names every registered check (by its name,
its policy section or its reason) is the registry, a generated file (``make crds``,
or a ``make docs`` section), or one of the per-check files the walk-through names.
A new hand-written list of checks fails here: generate it from the registry instead."""

import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import Field
from pydantic.alias_generators import to_camel

from gpuaccept.checks import budget
from gpuaccept.checks.claims import Claims
from gpuaccept.checks.consistency import report_inconsistency
from gpuaccept.checks.gen import docs
from gpuaccept.checks.phase_estimate import fixed_phase
from gpuaccept.checks.policy import probe_policy_model
from gpuaccept.checks.registry import CHECKS
from gpuaccept.checks.spec import CheckJudgement, CheckSpec, ObservedModel, RunbookEntry
from gpuaccept.contracts.policy_fields import CheckSwitch
from gpuaccept.contracts.report import (
    CheckResult,
    CheckStatus,
    HardwareMode,
    HardwareSummary,
    ProbeReport,
)

REPO = Path(__file__).resolve().parents[2]
GENERATED_SECTION = re.compile(r"<!-- BEGIN GENERATED.*?<!-- END GENERATED[^>]*-->", re.S)
# Hand-written, one part per check, each held by a test (the walk-through names them).
PER_CHECK_FILES = {
    "checks/gpuaccept/checks/registry.py",  # the registry line
    "policies/default-h100-h200.yaml",  # thresholds (tests/checks/test_registry_coverage.py)
    "docs/policy.md",  # each threshold's source (tests/probe/test_probe_docs.py)
}
# Generated files that cannot carry a "# GENERATED" header (JSON): the chart's values
# schema takes defaultPolicy from the CRD (make chart-docs; tests/chart/test_chart_platform.py).
# The core's golden pod renders carry the whole probe policy in GPUACCEPT_POLICY
# (written by tests/operator/core/test_pod_manifests_rendered.py).
GENERATED_FILES = {
    "charts/gpuaccept/values.schema.json",
    "tests/operator/core/pod_manifests.golden.json",
}
# The capture replay's rule per check (which capture fields a check needs): a new
# check needs no line there, it is "not replayable" until it gets one
# (captures/replay.py missing_inputs; tests/probe/test_capture_replay.py).
REPLAY_RULES = {"testsupport/gpuaccept/testsupport/captures/replay.py"}
# The probe package's copy of the default policy is a link to policies/ (one file).
LINKS = {"probes/gpuaccept/probe/policies/default-h100-h200.yaml"}


def names_every_check(text: str) -> bool:
    body = GENERATED_SECTION.sub("", text)
    return all(
        any(re.search(rf"\b{re.escape(word)}\b", body) for word in forms)
        for forms in ((c.name, to_camel(c.name), c.reason) for c in CHECKS)
    )


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    paths = [REPO / p for p in listed.split("\0") if p]
    return [p for p in paths if p.is_file() and not p.is_symlink()]


def test_no_hand_written_list_of_every_check_outside_the_registry() -> None:
    found = []
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        name = path.relative_to(REPO).as_posix()
        if name in PER_CHECK_FILES | GENERATED_FILES | REPLAY_RULES or text.startswith(
            "# GENERATED"
        ):
            continue
        if names_every_check(text):
            found.append(name)
    assert not found, (
        f"these files list every check by hand: {found}; generate them from the registry "
        "(make docs / make crds) or make them per-check files the walk-through lists"
    )


def test_the_walk_through_names_every_per_check_file() -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    walk = text.split("## Adding a check", 1)[1].split("\n## ", 1)[0]
    tests = {
        "tests/checks/test_<check>.py",
        "tests/checks/test_registry_coverage.py",
        "tests/checks/test_adding_a_check.py",
        "tests/probe/test_report_size_every_check_failing.py",
        "tests/probe/test_probe_checks.py",
        "tests/probe/test_probe_docs.py",
        "tests/probe/test_probe_budget.py",
    }
    missing = {f for f in PER_CHECK_FILES | tests if f"`{f}`" not in walk}
    assert not missing, f"docs/architecture.md's 'Adding a check' does not name {missing}"
    for link in LINKS:
        assert (REPO / link).is_symlink(), link


# --- a throwaway check, in-process: its spec is all the derived lists need ----------


class FanSpeedPolicy(CheckSwitch):
    min_rpm: int = Field(default=1000, ge=0, description="Every fan at least this fast.")


class FanSpeedObserved(ObservedModel):
    rpm: list[int]


def judge_fan_speed(
    observed: FanSpeedObserved, section: FanSpeedPolicy, _summary: HardwareSummary
) -> CheckJudgement:
    slow = [i for i, rpm in enumerate(observed.rpm) if rpm < section.min_rpm]
    status = CheckStatus.FAIL if slow else CheckStatus.PASS
    return CheckJudgement(status, {"minRpm": section.min_rpm}, f"slow fans: {slow}")


def fan_speed_claims(observed: FanSpeedObserved, _summary: HardwareSummary) -> Claims:
    return Claims().per_gpu("rpm", observed.rpm)


FAN_SPEED = CheckSpec(
    name="fan_speed",
    title="Fan speed",
    summary="every fan at or above the minimum",
    reason="FanSpeedFailed",
    policy_model=FanSpeedPolicy,
    observed_model=FanSpeedObserved,
    judge=judge_fan_speed,
    runbook=RunbookEntry(meaning="a fan turns too slowly", fix="replace the fan"),
    budget=fixed_phase("fan tachometers", 0.1, "one NVML query per GPU"),
    measuring=frozenset(),
    judging=frozenset({"min_rpm"}),
    claims=fan_speed_claims,
)


def test_a_new_checks_claims_are_held_to_the_report_without_another_list() -> None:
    """The claims are a required part of the spec; the report-trust rules run them."""
    report = ProbeReport(
        node_name="gpu-1", boot_id="boot-1", probe_version="1", hardware=HardwareMode.REAL,
        started_at=datetime(2026, 1, 1, tzinfo=UTC), finished_at=datetime(2026, 1, 1, tzinfo=UTC),
        summary=HardwareSummary(gpu_count=8),
        results=[CheckResult(check="fan_speed", status=CheckStatus.PASS,
                             observed={"rpm": [2000] * 4}, durationS=0.1)],
    )  # fmt: skip
    problem = report_inconsistency(report, (*CHECKS, FAN_SPEED))
    assert problem == "fan_speed.rpm covers 4 GPUs; the report has 8"
    whole = report.model_copy(
        update={"results": [report.results[0].model_copy(update={"observed": {"rpm": [2000] * 8}})]}
    )
    assert report_inconsistency(whole, (*CHECKS, FAN_SPEED)) is None


def test_a_new_checks_spec_is_all_its_section_budget_and_docs_tables_need(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checks = (*CHECKS, FAN_SPEED)
    policy_model = probe_policy_model(checks)
    section = policy_model.model_fields["fan_speed"]
    assert (section.alias, section.annotation) == ("fanSpeed", FanSpeedPolicy)
    probe_policy = policy_model.model_validate({"fanSpeed": {"minRpm": 1500}})
    judgement = judge_fan_speed(
        FanSpeedObserved(rpm=[1200]), probe_policy.section(FAN_SPEED), HardwareSummary(gpu_count=1)
    )
    assert judgement.status is CheckStatus.FAIL
    # the time budget: its row between the registered checks' and the end
    monkeypatch.setattr(budget, "CHECKS", checks)
    rows = budget.suite_budget(probe_policy)  # type: ignore[arg-type]
    assert [r.check for r in rows][-2:] == ["fan_speed", budget.END_PHASE]
    assert rows[-2].seconds == 0.1
    # the docs' tables
    assert "`fan_speed`" in docs.checks_table(checks)
    assert "`FanSpeedFailed`" in docs.runbook_reasons(checks)
    assert "`fanSpeed.minRpm`" in docs.policy_fields(checks)
    assert "`rpm`" in docs.observed_shapes(checks)
    assert "`fan_speed`" in docs.probe_checks(checks)
