"""The benchmark's quick path, for correctness only (issue 6): small N, no timing assertions.

Runs ``python -m bench.fleet_bench`` as a user would (a subprocess, its own
control plane under tmp_path) and checks that every node was decided, nothing
was lost or duplicated, and the last line is the well-formed summary.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NODES = 20
ARGS = ("--nodes", str(NODES), "--settle", "1", "--out")

SUMMARY = re.compile(
    r"^bench-check: nodes=(?P<nodes>\d+) decided=(?P<decided>\d+) correct=(?P<correct>\d+) "
    r"lost=(?P<lost>\d+) duplicated=(?P<duplicated>\d+) "
    r"req_per_node=(?P<req>\d+\.\d+) floor_req_per_node=(?P<floor>\d+\.\d+) "
    r"req_ratio=\d+\.\d+ wall_s=\d+\.\d+ floor_wall_s=\d+\.\d+ wall_ratio=\d+\.\d+ "
    r"p95_s=\d+\.\d+ rss_mb=\d+ cpu_s=\d+\.\d+$"
)


def run_bench(
    tmp_path: Path, label: str, *extra: str
) -> tuple[subprocess.CompletedProcess[str], str]:
    """``python -m bench.fleet_bench`` as a user runs it (a subprocess, its own control
    plane under tmp_path); the process and the tail of its output for messages."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.fleet_bench", "--label", label, *ARGS, str(tmp_path), *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=840,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    return proc, f"stdout:\n{proc.stdout[-6000:]}\nstderr:\n{proc.stderr[-6000:]}"


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_bench_check_decides_every_node(tmp_path: Path) -> None:
    proc, output = run_bench(tmp_path, "bench-check")
    lines = proc.stdout.strip().splitlines()
    assert lines, output
    match = SUMMARY.match(lines[-1])
    assert match is not None, f"summary line malformed: {lines[-1]!r}\n{output}"
    assert int(match["nodes"]) == NODES, output
    assert int(match["decided"]) == NODES, output
    assert int(match["correct"]) == NODES, output
    assert int(match["lost"]) == 0, output
    assert int(match["duplicated"]) == 0, output
    assert float(match["floor"]) > 0, output
    assert float(match["req"]) > 0, output
    assert proc.returncode == 0, output
    assert (tmp_path / "bench-check" / "results.json").is_file()
    assert (tmp_path / "bench-check" / "time-to-verdict.png").is_file()


REVERIFY = re.compile(
    r" reverified=(?P<reverified>\d+) max_out=(?P<max_out>\d+) max_pending=\d+ "
    r"limit=(?P<limit>\d+) max_taken_out_in_window=(?P<in_window>\d+) rate=(?P<rate>\d+) "
    r"req_per_reverification=\d+\.\d+ reverify_ok=(?P<ok>[01])$"
)


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_bench_check_reverifies_within_the_limit_and_the_rate(tmp_path: Path) -> None:
    """The re-verification phase (bench/reverify_fleet.py) on a small accepted fleet:
    some nodes are re-verified, never more out at once or per window than allowed
    (the run checks itself: exit 1 otherwise), no busy node is re-probed."""
    proc, output = run_bench(
        tmp_path,
        "bench-check-reverify",
        *("--arms", "operator", "--fail-every", "0", "--reverify-seconds", "45"),
        *("--reverify-period-seconds", "10", "--reverify-idle-seconds", "2"),
        *("--reverify-sample-seconds", "5", "--reverify-round-seconds", "5"),
        *("--reverify-rate", "3", "--reverify-max-quarantined", "4"),
        *("--reverify-busy-every", "10"),
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, output
    match = REVERIFY.search(lines[-1])
    assert match is not None, f"summary line malformed: {lines[-1]!r}\n{output}"
    assert int(match["reverified"]) > 0, output
    assert int(match["limit"]) == 4, output
    assert int(match["rate"]) == 3, output
    assert int(match["max_out"]) <= 4, output
    assert int(match["in_window"]) <= 3, output
    assert match["ok"] == "1", output
    assert proc.returncode == 0, output
    results = json.loads((tmp_path / "bench-check-reverify" / "results.json").read_text())
    phase = results["results"][0]["reverify"]
    assert phase["busy_nodes"] == 2, output
    assert phase["busy_found_busy"] >= 1, output  # the first in the schedule's order is busy
    assert phase["busy_reprobed"] == 0, output
