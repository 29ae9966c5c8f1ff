"""Where the upgrade test's "previous chart version" comes from.

tests/integration/test_chart_install.py upgrades from the previous chart
version. This checks both sources of it, in a throwaway git repository:
the git history (once Chart.yaml has had another version), and the fallback
for a first release (the current chart, then a copy with the version bumped).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuaccept.testsupport import chart_rbac

ROOT = Path(__file__).resolve().parents[2]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        check=True,
        capture_output=True,
    )


def _set_version(chart: Path, version: str) -> None:
    path = chart / "Chart.yaml"
    text = path.read_text()
    current = yaml.safe_load(text)["version"]
    path.write_text(text.replace(f"version: {current}", f"version: {version}", 1))


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "charts" / "gpuaccept", repo / "charts" / "gpuaccept")
    (repo / "hack" / "controlplane").mkdir(parents=True)
    (repo / "hack" / "controlplane" / "go.mod").write_text("module x\n")
    _git(repo, "init", "-q")
    monkeypatch.setenv("GPUACCEPT_REPO_ROOT", str(repo))
    return repo


def test_first_release_upgrades_to_a_bumped_copy(repo: Path, tmp_path: Path) -> None:
    chart = repo / "charts" / "gpuaccept"
    _set_version(chart, "1.2.3")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    previous, upgraded, where = chart_rbac.previous_and_next_chart(tmp_path / "work")
    assert previous == chart
    assert chart_rbac.chart_version(previous) == "1.2.3"
    assert chart_rbac.chart_version(upgraded) == "1.2.4"
    assert "first release" in where


def test_previous_version_comes_from_git_history(repo: Path, tmp_path: Path) -> None:
    chart = repo / "charts" / "gpuaccept"
    _set_version(chart, "0.9.0")
    (chart / "templates" / "old-marker.yaml").write_text("# only in 0.9.0\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "0.9.0")
    (chart / "templates" / "old-marker.yaml").unlink()
    _set_version(chart, "1.0.0")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "1.0.0")
    _set_version(chart, "1.0.0")  # unchanged version, another commit
    (chart / "values.yaml").write_text((chart / "values.yaml").read_text() + "\n")
    _git(repo, "commit", "-q", "-am", "values only")

    previous, upgraded, where = chart_rbac.previous_and_next_chart(tmp_path / "work")
    assert chart_rbac.chart_version(previous) == "0.9.0"
    assert (previous / "templates" / "old-marker.yaml").exists()
    assert upgraded == chart
    assert "(0.9.0)" in where
