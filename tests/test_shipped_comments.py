"""Shipped code names no issue of this project (the history is in git); a reference
to another project's tracker (``NVIDIA/nccl issue 814``) names that project."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ISSUE = re.compile(r"\b[Ii]ssues? \d+")
ELSEWHERE = re.compile(r"NVIDIA/|nccl|NCCL")  # the trackers shipped code may cite


@pytest.mark.parametrize("folder", ["contracts", "checks", "probes"])
def test_no_issue_numbers_in_shipped_code(folder: str) -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ISSUE.search(line) and not ELSEWHERE.search(line)
    ]
    assert not found, "\n".join(found)
