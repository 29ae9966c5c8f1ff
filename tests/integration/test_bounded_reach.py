"""A policy author's reach is bounded by the chart's watch selector
(``operator.watchNodeSelector``, the operator's ``--node-selector``).

A policy that selects every Linux node (``kubernetes.io/os: linux``) is created; a
CPU node and a GPU node (labelled ``nvidia.com/gpu.present=true``, as the GPU
Operator labels them) both match it. The operator runs locally with the arguments
the chart renders, as the chart's ServiceAccount:

- with ``watchNodeSelector: ""`` (the chart's old default) the CPU node gets a
  NodeAcceptance and the pending NoSchedule taint: no workload lands on it any more;
- with the chart's default (``nvidia.com/gpu.present=true``) the GPU node is
  governed as before and the CPU node is never touched (no NodeAcceptance, no taint,
  no label), while the operator has seen and handled the GPU node created after it.

Both nodes carry this test's own label too (in the policy's selector), so that no
other test's nodes on the shared control plane are matched.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import gpuaccept.operator.command  # noqa: F401  (run below as a subprocess; a broken import fails here)
from gpuaccept.contracts.api import GROUP, VERSION
from gpuaccept.testsupport.chart_rbac import (
    ChartRelease,
    apply_chart_rbac,
    apply_crds,
    apply_manifests,
    operator_args,
    remove_chart_rbac,
)
from gpuaccept.testsupport.controlplane import ControlPlane

pytestmark = pytest.mark.integration

DECIDE_WITHIN_S = 60.0
PENDING = "gpuaccept.io/pending"


def _node(name: str, labels: dict[str, str]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def _get(cp: ControlPlane, *what: str) -> dict[str, object] | None:
    proc = cp.kubectl("get", *what, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def _taints(cp: ControlPlane, node: str) -> set[str]:
    obj = _get(cp, "node", node) or {}
    spec = obj.get("spec") or {}
    assert isinstance(spec, dict)
    return {t["key"] for t in spec.get("taints") or []}


@pytest.fixture
def fleet(control_plane: ControlPlane) -> Iterator[tuple[str, str, str]]:
    """A policy on every Linux node (and this test's label); a CPU node, then a GPU node."""
    suffix = uuid.uuid4().hex[:6]
    label = {"gpuaccept.io/reach-test": suffix, "kubernetes.io/os": "linux"}
    policy = f"reach-{suffix}"
    cpu, gpu = f"reach-cpu-{suffix}", f"reach-gpu-{suffix}"
    # The policy needs its CRD, whichever test ran on this worker's control plane first.
    apply_crds(control_plane)
    apply_manifests(
        control_plane,
        [
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "NodeAcceptancePolicy",
                "metadata": {"name": policy},
                # Both nodes registered without the pending taint, so they are in
                # service and adopted under the limit: room for both (the limit is
                # not what this test is about; tests/operator/core/test_capacity.py).
                "spec": {
                    "nodeSelector": label,
                    "dryRun": False,
                    "maxQuarantined": 2,
                    "quarantineRate": {"maxPerWindow": 2},
                },
            },
            _node(cpu, label),
        ],
    )
    apply_manifests(control_plane, [_node(gpu, {**label, "nvidia.com/gpu.present": "true"})])
    yield policy, cpu, gpu
    control_plane.kubectl("delete", "nodeacceptancepolicy", policy, "--ignore-not-found")
    control_plane.kubectl("delete", "node", cpu, gpu, "--ignore-not-found")
    control_plane.kubectl("delete", "nodeacceptance", cpu, gpu, "--ignore-not-found")


def _run_operator(
    cp: ControlPlane, tmp_path: Path, watch: str | None
) -> tuple[subprocess.Popen[bytes], Path, ChartRelease, object]:
    suffix = uuid.uuid4().hex[:6]
    values = {"probe.runtimeClassName": "", "operator.maxUnavailableCeiling": "100%"}
    if watch is not None:
        values["operator.watchNodeSelector"] = watch
    release = ChartRelease(f"reach-{suffix}", f"reach-{suffix}", set_values=values)
    identity = apply_chart_rbac(cp, workdir=tmp_path, release=release)
    args = operator_args(release.render())
    log_path = tmp_path / "operator.log"
    command = [
        sys.executable, "-m", "gpuaccept.cli", *args,
        "--kubeconfig", str(identity.kubeconfig), "--log-format", "text",
        "--health-port", "0", "--metrics-port", "0",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    return proc, log_path, release, identity


def _wait_governed(cp: ControlPlane, node: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """The node has its NodeAcceptance and the pending taint."""
    deadline = time.monotonic() + DECIDE_WITHIN_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-4000:]
        if _get(cp, "nodeacceptance", node) is not None and PENDING in _taints(cp, node):
            return
        time.sleep(1)
    raise AssertionError(f"{node} not governed:\n{log.read_text()[-4000:]}")


@pytest.mark.parametrize(
    ("watch", "cpu_touched"),
    [("", True), (None, False)],
    ids=["watch-every-node", "chart-default"],
)
def test_a_policy_on_every_linux_node_reaches_cpu_nodes_only_without_the_base_selector(
    control_plane: ControlPlane,
    fleet: tuple[str, str, str],
    tmp_path: Path,
    watch: str | None,
    cpu_touched: bool,
) -> None:
    _, cpu, gpu = fleet
    proc, log, release, identity = _run_operator(control_plane, tmp_path, watch)
    try:
        _wait_governed(control_plane, gpu, proc, log)
        if cpu_touched:
            _wait_governed(control_plane, cpu, proc, log)
        else:
            assert "--node-selector=nvidia.com/gpu.present=true" in operator_args(release.render())
            assert _get(control_plane, "nodeacceptance", cpu) is None
            assert _taints(control_plane, cpu) == set()
            labels = (_get(control_plane, "node", cpu) or {}).get("metadata", {})
            assert isinstance(labels, dict)
            assert not [k for k in labels.get("labels", {}) if k.startswith("gpuaccept.io/a")]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        remove_chart_rbac(control_plane, identity)  # type: ignore[arg-type]
        control_plane.kubectl("delete", "namespace", release.namespace, "--wait=false")
