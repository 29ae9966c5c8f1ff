"""The chart's alerts, checked by Prometheus's own promtool (built from Go modules
by mk/tools.mk): `promtool check rules --lint=all`, and `promtool test rules` on
tests/chart/prometheus/alerts.test.yaml (operator down, no leader, a node stuck,
a new quarantine firing while a node that stays quarantined does not, the
breaker, probe errors). Every alert links to a section of docs/runbook.md."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaccept.testsupport.chart_rbac import render_chart
from gpuaccept.testsupport.controlplane import bin_dir, repo_root

ROOT = repo_root()
TESTS = Path(__file__).parent / "prometheus" / "alerts.test.yaml"
RUNBOOK = ROOT / "docs" / "runbook.md"
RUNBOOK_URL = "https://github.com/gpuaccept/gpuaccept/blob/main/docs/runbook.md"


def go_tool(name: str) -> Path:
    """``.bin/<name>``, built by mk/tools.mk when missing (a no-op when up to date)."""
    exe = bin_dir() / name
    if not exe.exists():
        make = shutil.which("make")
        assert make, "make is needed to build " + name
        subprocess.run(
            [make, "--no-print-directory", "-C", str(ROOT), "-f", "mk/tools.mk", f".bin/{name}"],
            check=True,
            capture_output=True,
            text=True,
        )
    return exe


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    docs = render_chart(set_values={"metrics.prometheusRule.enabled": "true"})
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


@pytest.fixture(scope="module")
def rules_file(rules: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rules}))
    return path


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(go_tool("promtool")), *args], capture_output=True, text=True, check=False
    )


def test_promtool_check_rules(rules_file: Path) -> None:
    proc = _promtool("check", "rules", "--lint=all", "--lint-fatal", str(rules_file))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_unit_tests(rules_file: Path, tmp_path: Path) -> None:
    tests = yaml.safe_load(TESTS.read_text())
    tests["rule_files"] = [str(rules_file)]
    path = tmp_path / "alerts.test.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    proc = _promtool("test", "rules", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to '-'."""
    out = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_every_alert_links_to_a_runbook_section(rules: list[dict[str, Any]]) -> None:
    anchors = _anchors(RUNBOOK.read_text())
    alerts = [rule for group in rules for rule in group["rules"]]
    assert len(alerts) >= 6
    for alert in alerts:
        url = alert["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page == RUNBOOK_URL, alert["alert"]
        assert anchor in anchors, f"{alert['alert']}: no section #{anchor} in docs/runbook.md"


def test_the_tests_cover_every_alert(rules: list[dict[str, Any]]) -> None:
    tested = {
        case["alertname"]
        for test in yaml.safe_load(TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case["exp_alerts"]
    }
    assert tested == {rule["alert"] for group in rules for rule in group["rules"]}
