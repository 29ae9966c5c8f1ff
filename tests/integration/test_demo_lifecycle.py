"""The demo stops cleanly (issue 16 item 7): after ``KEEP=1 make demo``, ``make
demo-down`` stops everything the demo started, and ``make cluster-down`` stops a
demo that runs on the cluster it stops. Each scenario runs the real demo on its
own control plane in a temp dir, so the shared test cluster is never touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaccept.testsupport import controlplane
from gpuaccept.testsupport.attached import AttachedProcess, attached, stop_attached
from gpuaccept.testsupport.processes import pid_alive

# The kept demo may take its subprocess's 500 s and `make` its 180 s: the default
# 300 s per test would cut a slow run short before either limit speaks.
pytestmark = [pytest.mark.integration, pytest.mark.long, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def _env(cluster: Path, *, keep: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KEEP"}
    env["GPUACCEPT_CLUSTER_DIR"] = str(cluster)
    if keep:
        env["KEEP"] = "1"
    return env


def _kept_demo(cluster: Path) -> tuple[list[AttachedProcess], int]:
    """Run ``KEEP=1`` demo; return its attached processes and the control plane's pid."""
    proc = subprocess.run(
        [sys.executable, "scripts/demo.py"],
        cwd=ROOT, env=_env(cluster, keep=True), capture_output=True, text=True, timeout=500,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    procs = attached(cluster)
    assert {p.name for p in procs} == {"demo-operator", "demo-kubelet-standin"}
    assert all(p.running() for p in procs)
    cp_pid = int(json.loads((cluster / "state.json").read_text())["pid"])
    assert pid_alive(cp_pid)
    return procs, cp_pid


def _make(target: str, cluster: Path) -> None:
    proc = subprocess.run(
        ["make", "--no-print-directory", target, f"CLUSTER_DIR={cluster}"],
        cwd=ROOT, env=_env(cluster, keep=False), capture_output=True, text=True, timeout=180,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def _nothing_left(procs: list[AttachedProcess], cp_pid: int, cluster: Path) -> None:
    left = [p.name for p in procs if p.running()]
    assert left == [], f"still running: {left}"
    assert not pid_alive(cp_pid), "the control plane still runs"
    assert not (cluster / "state.json").exists()


def _leave_nothing(cluster: Path) -> None:
    """Whatever the test's outcome: no demo process and no control plane left."""
    stop_attached(cluster, grace=5)
    if (cluster / "state.json").exists():
        controlplane.stop(cluster)


def test_demo_down_stops_the_demo_and_the_cluster_it_started(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    try:
        procs, cp_pid = _kept_demo(cluster)
        _make("demo-down", cluster)
        _nothing_left(procs, cp_pid, cluster)
    finally:
        _leave_nothing(cluster)


def test_cluster_down_stops_a_demo_running_on_it(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    controlplane.start(cluster)  # as `make cluster-up` would: not the demo's own
    try:
        procs, cp_pid = _kept_demo(cluster)
        _make("cluster-down", cluster)
        _nothing_left(procs, cp_pid, cluster)
    finally:
        _leave_nothing(cluster)
