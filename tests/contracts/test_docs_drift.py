"""The docs' generated sections are exactly what the check registry generates
(``make docs``), as tests/contracts/test_crd_drift.py does for the CRDs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuaccept.checks.gen import docs as docgen
from gpuaccept.checks.registry import CHECKS

ROOT = Path(__file__).resolve().parents[2]


def test_docs_match_the_registry() -> None:
    stale = docgen.stale_docs(ROOT)
    assert not stale, f"stale generated sections in {sorted(stale)}: run `make docs`"


@pytest.mark.parametrize("doc", docgen.DOCS)
def test_every_doc_has_generated_sections(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert "<!-- BEGIN GENERATED: " in text
    assert text.count("<!-- BEGIN GENERATED: ") == text.count("<!-- END GENERATED: ")


@pytest.mark.parametrize("name", sorted(docgen.GENERATORS))
def test_every_generated_table_has_a_row_per_check(name: str) -> None:
    table = docgen.GENERATORS[name](ROOT)
    forms = [
        (f"`{c.name}`", f"`{docgen.section_name(c)}.", f"`{c.reason}`",
         f"### `{docgen.section_name(c)}`\n")  # the last: check-sections' heading each
        for c in CHECKS
    ]  # fmt: skip
    assert all(any(form in table for form in named) for named in forms)


def test_a_stale_section_is_rewritten() -> None:
    text = (
        "intro\n<!-- BEGIN GENERATED: probe-checks (make docs) -->\n| old |\n"
        "<!-- END GENERATED: probe-checks -->\nend\n"
    )
    fresh = docgen.regenerate(text, ROOT)
    assert fresh != text
    assert fresh.startswith("intro\n<!-- BEGIN GENERATED: probe-checks (make docs) -->\n")
    assert fresh.endswith("<!-- END GENERATED: probe-checks -->\nend\n")
    assert docgen.regenerate(fresh, ROOT) == fresh
    assert "| old |" not in fresh


def test_an_unknown_section_is_an_error() -> None:
    text = "<!-- BEGIN GENERATED: nonsense -->\n<!-- END GENERATED: nonsense -->\n"
    with pytest.raises(docgen.UnknownSectionError):
        docgen.regenerate(text)


def test_cli_check_reports_stale_docs(tmp_path: Path) -> None:
    for doc in docgen.DOCS:
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / doc).write_text((ROOT / doc).read_text(encoding="utf-8"), encoding="utf-8")
    shutil.copytree(ROOT / "profiles", tmp_path / "profiles")
    shutil.copytree(ROOT / "policies", tmp_path / "policies")  # the budget table's policy
    assert docgen.main(["--root", str(tmp_path), "--check"]) == 0
    policy = tmp_path / "docs/policy.md"
    policy.write_text(policy.read_text().replace("`PcieLinkFailed`", "`Nope`", 1))
    assert docgen.main(["--root", str(tmp_path), "--check"]) == 1
    assert docgen.main(["--root", str(tmp_path)]) == 0
    assert docgen.main(["--root", str(tmp_path), "--check"]) == 0
    assert policy.read_text() == (ROOT / "docs/policy.md").read_text()
