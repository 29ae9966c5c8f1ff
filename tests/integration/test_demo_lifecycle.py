"""The demo stops cleanly (issue 16 item 7): after ``KEEP=1 make demo``, ``make
demo-down`` stops everything the demo started, and ``make cluster-down`` stops a
demo that runs on the cluster it stops. Each scenario runs the real demo on its
own control plane in a temp dir, so the shared test cluster is never touched.
The kept demo's DRA nodes (issue 39) are read back from its API server: published
through ResourceSlices only, probed through a claim the scheduler allocated, two
Accepted and the one with a PCIe link at x8 Quarantined; and the one under the
fencing policy (issue 40), its GPU 5's row remap pending, Accepted with FENCED 1/8
and exactly one DeviceTaintRule with gpuaccept's key, on that GPU's device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.contracts.api import ACCEPTANCE_PLURAL, FENCE_TAINT_KEY, GROUP, VERSION
from gpuaccept.testsupport import controlplane
from gpuaccept.testsupport.attached import AttachedProcess, attached, stop_attached
from gpuaccept.testsupport.controlplane import ControlPlane
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
    assert {p.name for p in procs} == {
        "demo-operator",
        "demo-kubelet-standin",
        "demo-kube-scheduler",
    }
    assert all(p.running() for p in procs)
    cp_pid = int(json.loads((cluster / "state.json").read_text())["pid"])
    assert pid_alive(cp_pid)
    return procs, cp_pid


NA_PATH = f"/apis/{GROUP}/{VERSION}/{ACCEPTANCE_PLURAL}"
DRA_NODES = {
    "gpu-dra-1": ("Accepted", None),
    "gpu-dra-2": ("Accepted", None),
    "gpu-dra-pcie-x8": ("Quarantined", "PcieLinkFailed"),
    "gpu-dra-row-remap-pending": ("Accepted", None),
}
FENCED = "gpu-dra-row-remap-pending"  # under demo-fencing: GPU 5 fenced alone


def _dra_nodes_decided(cluster: Path) -> None:
    """The kept demo's DRA nodes: GPUs in gpu.nvidia.com's slices and nowhere else, each
    decided as its profile says, with the GPU count judged against its pool."""
    cp = controlplane.find_running(cluster)
    assert isinstance(cp, ControlPlane)
    get = cp.get_raw
    slices = json.loads(get("/apis/resource.k8s.io/v1/resourceslices"))["items"]
    for name, (phase, reason) in DRA_NODES.items():
        node = json.loads(get(f"/api/v1/nodes/{name}"))
        assert "nvidia.com/gpu" not in node["status"]["capacity"], name
        pool = [s for s in slices if s["spec"]["nodeName"] == name]
        assert [s["spec"]["driver"] for s in pool] == ["gpu.nvidia.com"], name
        assert len(pool[0]["spec"]["devices"]) == 8, name
        na = json.loads(get(f"{NA_PATH}/{name}"))
        status = na["status"]
        assert (status["gpuPublishing"], status["phase"], status.get("reason")) == (
            "DRA",
            phase,
            reason,
        ), status
        counted = [c for c in status["report"]["results"] if c["check"] == "gpu_count"]
        assert counted[0]["status"] == "pass", counted
        assert counted[0]["observed"]["published"] == 8, counted
    healthy = json.loads(get(f"{NA_PATH}/gpu-healthy-1"))
    assert healthy["status"]["gpuPublishing"] == "DevicePlugin"
    _one_gpu_fenced(get, slices)


def _one_gpu_fenced(get: Callable[[str], str], slices: list[dict[str, Any]]) -> None:
    """The fencing policy's node: GPU 5 alone fenced, by the one rule with gpuaccept's
    key in the cluster, selecting the device whose uuid is that GPU's in its pool."""
    status = json.loads(get(f"{NA_PATH}/{FENCED}"))["status"]
    assert (status["phase"], status["fenced"]) == ("Accepted", "1/8"), status
    assert [(g["index"], g["fenced"]) for g in status["gpuVerdicts"]] == [(5, True)], status
    uuid = status["gpuVerdicts"][0]["uuid"]
    (device,) = [
        (s["spec"]["pool"]["name"], d["name"])
        for s in slices
        if s["spec"]["nodeName"] == FENCED
        for d in s["spec"]["devices"]
        if d["attributes"]["uuid"]["string"] == uuid
    ]
    rules = json.loads(get("/apis/resource.k8s.io/v1/devicetaintrules"))["items"]
    (rule,) = [r for r in rules if r["spec"]["taint"]["key"] == FENCE_TAINT_KEY]
    assert rule["spec"]["deviceSelector"] == {
        "driver": "gpu.nvidia.com",
        "pool": device[0],
        "device": device[1],
    }
    assert rule["spec"]["taint"]["effect"] == "NoSchedule"
    assert rule["metadata"]["labels"]["gpuaccept.io/node"] == FENCED
    node = json.loads(get(f"/api/v1/nodes/{FENCED}"))
    assert not node["spec"].get("taints"), node["spec"]  # the node in service


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
        _dra_nodes_decided(cluster)
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
