"""The benchmark's quick path, for correctness only (issue 6): small N, no timing assertions.

Runs ``python -m bench.fleet_bench`` as a user would (a subprocess, its own
control plane under tmp_path) and checks that every node was decided, nothing
was lost or duplicated, and the last line is the well-formed summary.
"""

from __future__ import annotations

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


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_bench_check_decides_every_node(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.fleet_bench", "--label", "bench-check", *ARGS, str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=840,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    output = f"stdout:\n{proc.stdout[-6000:]}\nstderr:\n{proc.stderr[-6000:]}"
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
