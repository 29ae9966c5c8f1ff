"""Adding a check touches the files docs/architecture.md's walk-through lists, and no
list of checks anywhere else: a file that names every registered check (by its name,
its policy section or its reason) is the registry, a generated file (``make crds``,
or a ``make docs`` section), or one of the per-check files the walk-through names.
A new hand-written list of checks fails here: generate it from the registry instead."""

import re
import subprocess
from pathlib import Path

from pydantic.alias_generators import to_camel

from gpuaccept.checks.registry import CHECKS

REPO = Path(__file__).resolve().parents[2]
GENERATED_SECTION = re.compile(r"<!-- BEGIN GENERATED.*?<!-- END GENERATED[^>]*-->", re.S)
# Hand-written, one part per check, each held by a test (the walk-through names them).
PER_CHECK_FILES = {
    "checks/gpuaccept/checks/registry.py",  # the registry line
    "policies/default-h100-h200.yaml",  # thresholds (tests/checks/test_registry_coverage.py)
    "docs/policy.md",  # each threshold's source (tests/probe/test_probe_docs.py)
}
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
        if name in PER_CHECK_FILES or text.startswith("# GENERATED"):
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
