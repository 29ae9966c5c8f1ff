"""Docs that agree with the code and with each other: the ``kubectl get na``
examples show the CRD's printer columns, and every page gives the same direction
on dryRun and the pending taint."""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NA_CRD = ROOT / "crds" / "gpuaccept.io_nodeacceptances.yaml"
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "e2e" / "README.md"])


def _columns() -> tuple[list[str], list[str]]:
    """The NodeAcceptance columns kubectl shows: plain, and with ``-o wide``."""
    crd = yaml.safe_load(NA_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("served")]
    columns = version["additionalPrinterColumns"]
    plain = ["NAME", *(c["name"].upper() for c in columns if not c.get("priority"))]
    wide = ["NAME", *(c["name"].upper() for c in columns)]
    return plain, wide


def _na_headers() -> list[tuple[str, list[str]]]:
    """Every ``NAME  PHASE ...`` header line in the docs (a NodeAcceptance listing)."""
    out = []
    for page in PAGES:
        for line in page.read_text().splitlines():
            if re.match(r"^NAME\s+PHASE\s", line):
                out.append((page.name, line.split()))
    return out


def test_there_are_nodeacceptance_listings_to_check() -> None:
    assert len(_na_headers()) >= 3


@pytest.mark.parametrize(("page", "header"), _na_headers(), ids=lambda v: str(v)[:40])
def test_every_get_na_example_has_the_crds_columns(page: str, header: list[str]) -> None:
    plain, wide = _columns()
    assert header in (plain, wide), f"{page}: {header} is neither {plain} nor {wide}"


DRY_RUN_PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "install.md",
    ROOT / "docs" / "operator.md",
    ROOT / "docs" / "runbook.md",
    ROOT / "charts" / "gpuaccept" / "templates" / "NOTES.txt",
]
# What the pages said before they agreed: "do not register with the taint",
# "evaluate before adding it", "such nodes stay under it".
CONTRADICTIONS = [
    "do not register nodes with the pending taint during a dry run",
    "so nodes should not register with it during a dry run",
    "evaluate dryrun before adding the pending taint",
]


@pytest.mark.parametrize("page", DRY_RUN_PAGES, ids=lambda p: p.name)
def test_every_page_gives_one_direction_on_dry_run_and_the_pending_taint(page: Path) -> None:
    text = " ".join(page.read_text().lower().split())
    assert re.search(r"neither (adds|added)\b.{0,80}?\bnor (removes|removed)", text), page.name
    assert "do not register with" in text or "not register with" in text, page.name
    assert not [c for c in CONTRADICTIONS if c in text]
