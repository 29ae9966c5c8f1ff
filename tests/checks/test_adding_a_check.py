"""Adding a check takes the six hand-written parts docs/architecture.md's walk-through
lists, and ``make generate`` for the rest; nothing else in the repository lists checks.

The walk-through's worked example (``gpu_model_allowed``, tests/checks/new_check_example.py)
is written into a copy of the repository's layout in a temporary directory; with all
six parts :func:`missing_parts` finds nothing, and with each part taken away it names
that part. The same :func:`missing_parts` holds every registered check, so the guards
are the ones the shipped checks pass. A file that names every registered check (by its
name, its policy section or its reason) is the registry or generated; a new
hand-written list of checks fails here: generate it from the registry instead."""

import ast
import functools
import importlib
import importlib.util
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import MISSING, fields
from datetime import UTC, datetime
from pathlib import Path

import new_check_example as example
import pytest
import yaml
from judge_table import Case, assert_row
from pydantic.alias_generators import to_camel

import gpuaccept.checks
import gpuaccept.probe.measure
from gpuaccept.checks import budget
from gpuaccept.checks.consistency import report_inconsistency
from gpuaccept.checks.dataflow import in_data_order
from gpuaccept.checks.gen import default_policy, docs
from gpuaccept.checks.policy import ProbePolicySections, probe_policy_model
from gpuaccept.checks.registry import BY_NAME, CHECKS
from gpuaccept.checks.spec import AnyCheckSpec, CheckSpec
from gpuaccept.contracts.report import (
    CheckResult,
    CheckStatus,
    HardwareMode,
    HardwareSummary,
    ProbeReport,
)
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.measure import measurer
from gpuaccept.probe.measure.context import NodeGpuCounts, ProbeContext
from gpuaccept.probe.runner import RunSetup, run_probe

REPO = Path(__file__).resolve().parents[2]
# Sections a generator writes: make docs's, and make captures-table's corpus table (its rows
# name whichever checks each capture's replay gave, so the corpus can name them all)
GENERATED_SECTION = re.compile(
    r"<!-- BEGIN (GENERATED|CAPTURES TABLE).*?<!-- END (GENERATED|CAPTURES TABLE)[^>]*-->", re.S
)
# The six hand-written parts of a check, in the walk-through's order, each as the path
# the walk-through names (<check>: the check's name).
PARTS = {
    "judging module": "checks/gpuaccept/checks/<check>.py",
    "registry line": "checks/gpuaccept/checks/registry.py",
    "measuring function": "probes/gpuaccept/probe/measure/<check>.py",
    "judge table": "tests/checks/test_<check>.py",
    "fault profile": "profiles/faults/",
    "everything-wrong fixture": example.EVERYTHING_WRONG,
}
# Generated files that cannot carry a "# GENERATED" header (JSON): the chart's values
# schema takes defaultPolicy from the CRD; the core's golden pod renders carry the whole
# probe policy in GPUACCEPT_POLICY. Both are steps of `make generate`.
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


# --- the guards, one per part ------------------------------------------------------


def judging_spec(root: Path, name: str) -> AnyCheckSpec | None:
    """The module's SPEC, named after the module, with a shipped section that is its
    policy section's YAML and a docs section (None: no such module)."""
    if not (root / PARTS["judging module"].replace("<check>", name)).exists():
        return None
    spec: AnyCheckSpec = importlib.import_module(f"gpuaccept.checks.{name}").SPEC
    assert spec.name == name
    default_policy.section_text(spec)  # raises on a shipped section that is not its own
    assert spec.docs.strip(), f"{name}: an empty docs section"
    return spec


def registered(root: Path, name: str) -> bool:
    """The registry's CHECKS names ``<name>.SPEC``."""
    tree = ast.parse((root / PARTS["registry line"]).read_text(encoding="utf-8"))
    listed = {
        node.value.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "SPEC"
        and isinstance(node.value, ast.Name)
    }
    return name in listed


def measures(root: Path, spec: AnyCheckSpec) -> bool:
    path = root / PARTS["measuring function"].replace("<check>", spec.name)
    return path.exists() and callable(measurer(spec))


def judge_table_complete(root: Path, spec: AnyCheckSpec) -> bool:
    """Its CASES: rows that judge as they say, one passing and one failing at least."""
    path = root / PARTS["judge table"].replace("<check>", spec.name)
    if not path.exists():
        return False
    loader = importlib.util.spec_from_file_location(f"_table_of_{spec.name}", path)
    assert loader is not None
    assert loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    cases = getattr(module, "CASES", [])
    if not all(isinstance(c, Case) for c in cases):
        return False
    for case in cases:
        assert_row(spec, case)
    return {CheckStatus.PASS, CheckStatus.FAIL} <= {c.status for c in cases}


def shipped_policy(checks: Sequence[AnyCheckSpec]) -> ProbePolicySections:
    text = default_policy.render(checks)
    return probe_policy_model(checks).model_validate(yaml.safe_load(text))


def status_on(profile: Path, spec: AnyCheckSpec, checks: Sequence[AnyCheckSpec]) -> CheckStatus:
    """The check's status in a whole probe run (every check, as a node runs them: some
    faults show only under the others' load) on a simulated node with that profile,
    under the shipped policy."""
    result = probe_run(profile, profile.read_text(encoding="utf-8"), tuple(checks)).result(
        spec.name
    )
    assert result is not None
    return result.status


@functools.lru_cache(maxsize=64)
def probe_run(profile: Path, _text: str, checks: tuple[AnyCheckSpec, ...]) -> ProbeReport:
    """One run per profile (its text in the key) and set of checks: the fixture is
    asked once for every registered check."""
    loaded = load_profile(profile)
    node = loaded.node
    counts = NodeGpuCounts(allocatable=node.allocatable, capacity=node.gpu_capacity,
                           labelled=node.gfd_gpu_count, replicas=node.gfd_gpu_replicas)  # fmt: skip
    run = RunSetup(
        node_name="gpu-1",
        context=ProbeContext(node_gpus=counts),
        checks=in_data_order(checks),
    )
    hardware = SimulatedBackend(loaded)
    try:
        return run_probe(hardware, shipped_policy(checks), run)  # type: ignore[arg-type]
    finally:
        hardware.close()


def fault_profiles(root: Path, name: str) -> list[Path]:
    return [
        path
        for path in sorted((root / PARTS["fault profile"]).glob("*.yaml"))
        if (yaml.safe_load(path.read_text(encoding="utf-8")).get("expect") or {}).get("check")
        == name
    ]


def missing_parts(root: Path, name: str) -> list[str]:
    """The parts of check ``name`` that ``root`` (a repository's layout) lacks. Without
    its judging module there is no check to ask the rest of; without its measuring
    function nothing can be measured on a profile."""
    spec = judging_spec(root, name)
    if spec is None:
        return ["judging module"]
    checks = (*[c for c in CHECKS if c.name != name], spec)
    missing = [] if registered(root, name) else ["registry line"]
    if not measures(root, spec):
        return [*missing, "measuring function"]
    if not judge_table_complete(root, spec):
        missing.append("judge table")
    faults = fault_profiles(root, name)
    if not faults or any(status_on(p, spec, checks) is not CheckStatus.FAIL for p in faults):
        missing.append("fault profile")
    if status_on(root / PARTS["everything-wrong fixture"], spec, checks) is not CheckStatus.FAIL:
        missing.append("everything-wrong fixture")
    return missing


# --- every registered check has its six parts ----------------------------------------


@pytest.mark.parametrize("check", [c.name for c in CHECKS])
def test_every_registered_check_has_every_part(check: str) -> None:
    assert missing_parts(REPO, check) == []


def test_every_check_module_is_in_the_registry() -> None:
    """A judging module (one that defines SPEC) left out of the registry is in none of
    the lists, tables or runs built from it."""
    modules = [m.name for m in pkgutil.iter_modules(gpuaccept.checks.__path__)]
    specs = {n for n in modules if hasattr(importlib.import_module(f"gpuaccept.checks.{n}"),
                                           "SPEC")}  # fmt: skip
    assert specs == set(BY_NAME), f"not in the registry: {sorted(specs - set(BY_NAME))}"


REQUIRED = [f.name for f in fields(CheckSpec) if MISSING is f.default is f.default_factory]


@pytest.mark.parametrize("field", REQUIRED)
def test_a_spec_without_a_required_part_is_refused(field: str) -> None:
    """Every required part of the judging module (the shipped section and the docs
    section included) is a CheckSpec field without a default."""
    spec = BY_NAME["cpu_governor"]
    given = {f.name: getattr(spec, f.name) for f in fields(CheckSpec) if f.name != field}
    with pytest.raises(TypeError, match=f"missing 1 required .*'{field}'"):
        CheckSpec(**given)


# --- the worked example, written and taken apart -----------------------------------------


def write_example(root: Path, leave_out: str | None = None) -> None:
    def write(relative: str, text: str) -> None:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    name = example.NAME
    parts = {
        "judging module": (PARTS["judging module"], example.JUDGING_MODULE),
        "measuring function": (PARTS["measuring function"], example.MEASURING_MODULE),
        "judge table": (PARTS["judge table"], example.JUDGE_TABLE),
    }
    for part, (pattern, text) in parts.items():
        if part != leave_out:
            write(pattern.replace("<check>", name), text)
    registry = (REPO / PARTS["registry line"]).read_text(encoding="utf-8")
    if leave_out != "registry line":
        registry = registry.replace(
            "    gpu_memory_bandwidth,\n", "    gpu_memory_bandwidth,\n" + example.REGISTRY_IMPORT
        )
        last = "        gpu_memory_bandwidth.SPEC,\n"
        registry = registry.replace(last, last + example.REGISTRY_LINE)
    write(PARTS["registry line"], registry)
    healthy = (REPO / "profiles/h100-sxm-8gpu-healthy.yaml").read_text(encoding="utf-8")
    fault = re.sub(r"^expect: .*\n", example.FAULT_EXPECT, healthy, flags=re.M)
    fault = fault.replace("  model: NVIDIA H100 80GB HBM3\n", example.FAULT_MODEL)
    write(example.FAULT_PROFILE, fault if leave_out != "fault profile" else healthy)
    worst = (REPO / example.EVERYTHING_WRONG).read_text(encoding="utf-8")
    if leave_out != "everything-wrong fixture":
        worst = worst.replace("  model: NVIDIA H200\n", example.EVERYTHING_WRONG_MODEL)
    write(example.EVERYTHING_WRONG, worst)


def forget_example() -> None:
    for module in (f"gpuaccept.checks.{example.NAME}", f"gpuaccept.probe.measure.{example.NAME}"):
        sys.modules.pop(module, None)
    importlib.invalidate_caches()


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary repository layout whose checks and measuring packages Python finds
    beside the real ones (as the real ones are found: by the check's name)."""
    packages = (
        (gpuaccept.checks, "checks/gpuaccept/checks"),
        (gpuaccept.probe.measure, "probes/gpuaccept/probe/measure"),
    )
    for package, folder in packages:
        monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path / folder)])
    forget_example()
    yield tmp_path
    forget_example()


def test_the_worked_example_has_its_six_parts(layout: Path) -> None:
    write_example(layout)
    assert missing_parts(layout, example.NAME) == []


@pytest.mark.parametrize("part", list(PARTS))
def test_each_part_the_worked_example_lacks_is_named(layout: Path, part: str) -> None:
    write_example(layout, leave_out=part)
    assert missing_parts(layout, example.NAME) == [part]


def test_the_walk_through_names_every_part_and_make_generate() -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    walk = text.split("## Adding a check", 1)[1].split("\n## ", 1)[0]
    named = [*PARTS.values(), "tests/checks/test_adding_a_check.py",
             "tests/checks/new_check_example.py", "tests/test_generated.py"]  # fmt: skip
    missing = [f for f in named if f"`{f}" not in walk]
    assert not missing, f"docs/architecture.md's 'Adding a check' does not name {missing}"
    assert "`make generate`" in walk
    assert "gpu_model_allowed" in walk
    for link in LINKS:
        assert (REPO / link).is_symlink(), link


# --- what the spec alone gives: the section, the budget, the docs, the claims --------


def test_the_worked_examples_spec_is_all_its_section_budget_and_docs_need(
    layout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_example(layout)
    spec = importlib.import_module(f"gpuaccept.checks.{example.NAME}").SPEC
    checks = (*CHECKS, spec)
    policy = shipped_policy(checks)
    section = type(policy).model_fields[example.NAME]
    assert section.alias == "gpuModelAllowed"
    assert policy.section(spec).allowed_models == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    monkeypatch.setattr(budget, "CHECKS", checks)
    rows = budget.suite_budget(policy)  # type: ignore[arg-type]
    assert [r.check for r in rows][-2:] == [example.NAME, budget.END_PHASE]
    assert "`gpu_model_allowed`" in docs.checks_table(checks)
    assert "`GpuModelAllowedFailed`" in docs.runbook_reasons(checks)
    assert "`gpuModelAllowed.allowedModels`" in docs.policy_fields(checks)
    assert "`models`" in docs.observed_shapes(checks)
    assert "### `gpuModelAllowed`\n\nThe shipped list" in docs.check_sections(checks)
    assert "gpuModelAllowed:\n  allowedModels: [NVIDIA H100" in default_policy.render(checks)
    # its claims are held to the report's GPU count without another list
    report = ProbeReport(
        node_name="gpu-1", boot_id="boot-1", probe_version="1", hardware=HardwareMode.REAL,
        started_at=datetime(2026, 1, 1, tzinfo=UTC), finished_at=datetime(2026, 1, 1, tzinfo=UTC),
        summary=HardwareSummary(gpu_count=8),
        results=[CheckResult(check=example.NAME, status=CheckStatus.PASS,
                             observed={"models": ["NVIDIA H200"] * 4}, durationS=0.1)],
    )  # fmt: skip
    assert (
        report_inconsistency(report, checks)
        == "gpu_model_allowed.models covers 4 GPUs; the report has 8"
    )


# --- no other list of checks ---------------------------------------------------------


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
        if name in {PARTS["registry line"]} | GENERATED_FILES | REPLAY_RULES or text.startswith(
            "# GENERATED"
        ):
            continue
        if names_every_check(text):
            found.append(name)
    assert not found, (
        f"these files list every check by hand: {found}; generate them from the registry "
        "(make generate) or make them per-check parts the walk-through lists"
    )
