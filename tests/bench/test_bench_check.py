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
from typing import Any

import pytest
from bench.accounting import LOOPS
from bench.fleet_bench import FULL_POLICY_LOOPS, JOIN_LOOPS

pytestmark = pytest.mark.long  # each runs the benchmark on its own control plane

REPO = Path(__file__).resolve().parents[2]
NODES = 20
ARGS = ("--settle", "1", "--out")

SUMMARY = re.compile(
    r"^bench-check: nodes=(?P<nodes>\d+) decided=(?P<decided>\d+) correct=(?P<correct>\d+) "
    r"lost=(?P<lost>\d+) duplicated=(?P<duplicated>\d+) "
    r"req_per_node=(?P<req>\d+\.\d+) floor_req_per_node=(?P<floor>\d+\.\d+) "
    r"req_ratio=\d+\.\d+ wall_s=\d+\.\d+ floor_wall_s=\d+\.\d+ wall_ratio=\d+\.\d+ "
    r"p95_s=\d+\.\d+ rss_mb=\d+ cpu_s=\d+\.\d+$"
)


def run_bench(
    tmp_path: Path, label: str, *extra: str, nodes: int = NODES
) -> tuple[subprocess.CompletedProcess[str], str]:
    """``python -m bench.fleet_bench`` as a user runs it (a subprocess, its own control
    plane under tmp_path); the process and the tail of its output for messages."""
    command = [sys.executable, "-m", "bench.fleet_bench", "--label", label]
    proc = subprocess.run(
        [*command, "--nodes", str(nodes), *ARGS, str(tmp_path), *extra],
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
    assert (tmp_path / "bench-check" / "time-to-verdict.png").is_file()
    results = json.loads((tmp_path / "bench-check" / "results.json").read_text())
    operator = next(r for r in results["results"] if r["arm"] == "operator")
    assert_accounted(operator["accounting"], JOIN_LOOPS, output)
    assert operator["accounting"]["unit"] == "node"
    assert "above_floor" in operator["accounting"], output  # the floor ran too


def assert_accounted(account: dict[str, Any], required: tuple[str, ...], output: str) -> None:
    """Every loop of the operator has its line (issue 41), the ``required`` ones made
    requests, and every request named its loop."""
    loops = account["loops"]
    assert set(LOOPS) <= set(loops), output
    assert {"kopf", "reconcile", "in-service", "reverify", "fabric"} <= set(loops)
    assert {"policy-status", "leader-election", "installation-lock", "startup"} <= set(loops)
    for loop in required:
        assert loops[loop]["requests"] > 0, f"{loop}: no requests\n{output}"
    assert loops["other"]["requests"] == 0, output


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_bench_check_accounts_for_the_fabric_loop(tmp_path: Path) -> None:
    """The fabric test on 10 nodes (every 5th with the damaged cable): the slow
    fabrics quarantined, no healthy node, and the fabric loop's requests per node in
    the join's account, with every other loop's."""
    proc, output = run_bench(
        tmp_path,
        "bench-check-fabric",
        *("--arms", "operator", "--fail-every", "0", "--fabric-slow-every", "5"),
        nodes=10,
    )
    assert proc.returncode == 0, output
    results = json.loads((tmp_path / "bench-check-fabric" / "results.json").read_text())
    operator = results["results"][0]
    assert operator["fabric"]["slow_quarantined"] == operator["fabric"]["slow_nodes"] == 2
    assert operator["fabric"]["healthy_quarantined"] == 0, output
    assert_accounted(operator["accounting"], (*JOIN_LOOPS, "fabric"), output)


REVERIFY = re.compile(
    r" reverified=(?P<reverified>\d+) max_out=(?P<max_out>\d+) max_pending=\d+ "
    r"limit=(?P<limit>\d+) max_taken_out_in_window=(?P<in_window>\d+) rate=(?P<rate>\d+) "
    r"req_per_reverification=\d+\.\d+ binds=(?P<binds>[a-z+]+) reverify_ok=(?P<ok>[01])$"
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
    assert_accounted(phase["accounting"], ("reverify",), output)
    assert phase["accounting"]["loops"]["reverify"]["phases"]["list"]["requests"] > 0, output


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_bench_check_reverification_starts_as_many_rounds_as_the_policys_rate(
    tmp_path: Path,
) -> None:
    """The policy's rate binds, not the loop (issue 41): with room for 20 take-outs a
    window, 20 nodes are taken out within it. A loop that listed at most one node per
    3 s (two lists per round) started about one round per 5 s pass: 10 in 50 s."""
    proc, output = run_bench(
        tmp_path,
        "bench-check-reverify-rate",
        *("--arms", "operator", "--fail-every", "0"),
        *("--reverify-seconds", "50", "--reverify-period-seconds", "10"),
        *("--reverify-idle-seconds", "2", "--reverify-sample-seconds", "5"),
        *("--reverify-round-seconds", "20", "--reverify-window-seconds", "120"),
        *("--reverify-rate", "20", "--reverify-max-quarantined", "25"),
        *("--reverify-busy-every", "0"),
        nodes=30,
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, output
    match = REVERIFY.search(lines[-1])
    assert match is not None, f"summary line malformed: {lines[-1]!r}\n{output}"
    assert int(match["rate"]) == 20, output
    assert int(match["limit"]) == 25, output
    assert int(match["in_window"]) == 20, output
    assert match["binds"] == "rate", output
    assert match["ok"] == "1", output
    assert proc.returncode == 0, output


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_bench_check_accounts_for_health_in_service(tmp_path: Path) -> None:
    """The in-service phase (bench/inservice_fleet.py) at 10 nodes and 10 s windows:
    its requests per node and window by loop, every loop accounted, the in-service
    loop's above the floor named; the fatal node tainted, no false quarantine."""
    command = [sys.executable, "-m", "bench.inservice_fleet", "--label", "bench-check-inservice"]
    proc = subprocess.run(
        [
            *command,
            *("--nodes", "10", "--window-seconds", "10", "--warmup-windows", "1"),
            *("--steady-windows", "2", "--fatal", "1", "--fatal-timeout", "60"),
            *("--out", str(tmp_path)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=840,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    output = f"stdout:\n{proc.stdout[-6000:]}\nstderr:\n{proc.stderr[-6000:]}"
    assert proc.returncode == 0, output
    results = json.loads((tmp_path / "bench-check-inservice" / "results.json").read_text())
    phase = results["in_service"]
    assert phase["fatal_tainted"] == 1, output
    assert phase["other_tainted"] == 0, output
    # the operator's memory over the run: where its peak was made, whether RSS grows
    memory = phase["memory"]
    keys = ("join_end_rss_mb", "join_peak_rss_mb", "steady_start_rss_mb", "steady_end_rss_mb")
    assert all(memory[key] > 0 for key in (*keys, "end_rss_mb", "peak_rss_mb")), memory
    assert memory["join_end_rss_mb"] <= memory["join_peak_rss_mb"] <= memory["peak_rss_mb"]
    assert memory["peak_rss_mb"] == phase["peak_rss_mb"], memory
    account = phase["accounting"]
    assert account["unit"] == "node-window"
    assert_accounted(account, ("in-service",), output)
    assert "above_floor" in account, output
    # Per watch pod the floor: one create, one status write (the ended pod's report,
    # the new pod's UID, the next serial reserved) and one delete (docs/benchmarks.md,
    # "One status write per window"); a second write per pod fails this.
    cycle = account["loops"]["in-service"]["phases"]["Accepted"]["by_call"]
    pods = cycle["create pods"]
    assert pods > 0, output
    assert cycle["delete pods"] == pytest.approx(pods, rel=0.15), output
    assert cycle["patch nodeacceptances/status"] / pods == pytest.approx(1.0, rel=0.15), output


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_bench_check_decides_a_fleet_half_of_it_dra_published(tmp_path: Path) -> None:
    """Ten nodes, every second one publishing its GPUs through DRA (issue 39): every
    node decided as prepared (the failing ones of both kinds), each DRA node probed
    through one claim, created and deleted once, and every request named its loop."""
    proc, output = run_bench(
        tmp_path, "bench-check-dra", *("--arms", "operator", "--dra-every", "2"), nodes=10
    )
    assert proc.returncode == 0, output
    assert re.search(r" dra_nodes=5 dra_req_per_dra_node=\d+\.\d+$", proc.stdout), output
    results = json.loads((tmp_path / "bench-check-dra" / "results.json").read_text())
    operator = results["results"][0]
    assert (operator["decided"], operator["correct"], operator["duplicated"]) == (10, 10, 0)
    dra = operator["dra"]
    assert dra["nodes"] == 5, output
    assert dra["by_call_per_dra_node"]["create resourceclaims"] == 1.0, output
    assert dra["by_call_per_dra_node"]["delete resourceclaims"] == 1.0, output
    assert_accounted(operator["accounting"], JOIN_LOOPS, output)


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_bench_check_the_join_under_the_full_policy_watches_each_node_at_one_write(
    tmp_path: Path,
) -> None:
    """The join with in service and re-verification on (``--full-policy``, their
    defaults): every node decided, its watch pod not taken for a second probe, and the
    in-service loop's first window at a create and one status write per accepted node
    (the ledger and the first reservation ride on the verdict's write); no
    re-verification list before a node's period."""
    proc, output = run_bench(
        tmp_path,
        "bench-check-full",
        *("--arms", "operator", "--fail-every", "0", "--full-policy", "--settle", "5"),
        nodes=10,
    )
    assert proc.returncode == 0, output
    results = json.loads((tmp_path / "bench-check-full" / "results.json").read_text())
    assert results["full_policy"] is True
    operator = results["results"][0]
    assert operator["decided"] == operator["correct"] == 10, output
    assert operator["duplicated"] == 0, output
    assert_accounted(operator["accounting"], FULL_POLICY_LOOPS, output)
    loops = operator["accounting"]["loops"]
    in_service = loops["in-service"]["phases"]
    assert set(in_service) == {"Accepted"}, output
    calls = in_service["Accepted"]["by_call"]
    assert calls == {"create pods": 1.0, "patch nodeacceptances/status": 1.0}, output
    assert loops["reverify"]["requests"] == 0, output
