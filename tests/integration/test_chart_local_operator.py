"""The issue's "done when", automated: ``helm install`` into the local control
plane with the operator's image swapped for a local run of the operator under
the chart's ServiceAccount; simulated GPU nodes are then decided.

- ``helm install`` the chart (``operator.replicas=0``: the Deployment stays, its
  pods do not run; there is no kubelet for them anyway);
- a TokenRequest token for the chart's operator ServiceAccount: the operator
  process authenticates with it alone (no admin certificate, no impersonation),
  so every call it makes is checked against the chart's RBAC, and against the
  chart's admission rules (installed by default; templates/admission.yaml): its
  probe pods, Node patches, node condition and status writes are admitted, and
  the release namespace enforces Pod Security "restricted" (docs/install.md);
- ``gpuaccept operator`` runs locally with the exact arguments the chart renders;
- the kubelet stand-in registers two GPU nodes under the pending taint and runs
  the probe pods as local processes with simulated hardware. Under the default
  policy (dryRun) both are Held with the action they would get (Accept /
  Quarantine) and the nodes are untouched;
- ``helm upgrade --reset-then-reuse-values --set defaultPolicy.dryRun=false`` (the documented
  switch) applies the held verdicts: the healthy node is Accepted and its pending
  taint removed, the failing one Quarantined under the quarantine taint.

docs/install.md shows the same steps by hand (e2e/local-controlplane.sh).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import gpuaccept.operator.command  # noqa: F401  (run below as a subprocess; a broken import fails here)
from gpuaccept.testsupport.chart_rbac import (
    chart_dir,
    helm,
    operator_args,
    release_token_kubeconfig,
    render_chart,
)
from gpuaccept.testsupport.controlplane import ControlPlane, repo_root
from gpuaccept.testsupport.kubelet_standin import KubeletStandIn, SimNode
from gpuaccept.testsupport.ports import free_ports

pytestmark = pytest.mark.integration

FINAL = {"Accepted", "Quarantined", "Held"}
DECIDE_WITHIN_S = 240  # a generous bound for a slow CI machine; not a performance check


@pytest.fixture
def installed(control_plane: ControlPlane, tmp_path: Path) -> Iterator[dict[str, object]]:
    # A leading letter: an all-digit suffix such as "296570" would reach the chart as a
    # number through ``--set`` and fail values.schema.json (seen once in CI).
    suffix = f"t{uuid.uuid4().hex[:6]}"
    release, namespace = f"local-{suffix}", f"gpuaccept-local-{suffix}"
    health_port, metrics_port = free_ports(2)
    sets = {
        "operator.replicas": "0",
        "defaultPolicy.name": f"{release}-policy",
        # Only this test's nodes: its own label instead of the GPU label, so that
        # no other policy on a shared control plane claims them (nor this one others).
        "defaultPolicy.nodeSelector.nvidia\\.com/gpu\\.present": "null",
        "defaultPolicy.nodeSelector.gpuaccept\\.io/test": suffix,
        # ... and watched by the operator (its default watches GPU-labelled nodes only).
        "operator.watchNodeSelector": f"gpuaccept.io/test={suffix}",
        # The control plane has no RuntimeClass "nvidia" (and no container runtime).
        "probe.runtimeClassName": "",
        "probe.image.pullPolicy": "Never",
        # The chart's health and metrics ports, on free local ports.
        "operator.healthPort": str(health_port),
        "operator.metricsPort": str(metrics_port),
    }
    args = ["-n", namespace]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    helm(
        "install", release, str(chart_dir()), "--create-namespace", *args,
        kubeconfig=control_plane.kubeconfig,
    )  # fmt: skip
    yield {"release": release, "namespace": namespace, "sets": sets, "suffix": suffix}
    helm("uninstall", release, "-n", namespace, kubeconfig=control_plane.kubeconfig, check=False)
    control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), ""


def _phases(cp: ControlPlane, names: list[str]) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for name in names:
        proc = cp.kubectl("get", "nodeacceptance", name, "-o", "json", check=False)
        if proc.returncode == 0:
            out[name] = json.loads(proc.stdout).get("status") or {}
    return out


def _taint_keys(cp: ControlPlane, node: str) -> set[str]:
    obj = json.loads(cp.kubectl("get", "node", node, "-o", "json").stdout)
    return {t["key"] for t in obj["spec"].get("taints") or []}


def _wait_final(
    cp: ControlPlane,
    names: list[str],
    operator: subprocess.Popen[bytes],
    log_path: Path,
    *,
    exclude_phase: str | None = None,
) -> dict[str, dict[str, object]]:
    """Poll until every node's NodeAcceptance is in a final phase (not ``exclude_phase``)."""
    final = FINAL - {exclude_phase} if exclude_phase else FINAL
    deadline = time.monotonic() + DECIDE_WITHIN_S
    phases: dict[str, dict[str, object]] = {}
    while time.monotonic() < deadline:
        assert operator.poll() is None, log_path.read_text()[-4000:]
        phases = _phases(cp, names)
        if len(phases) == len(names) and all(p.get("phase") in final for p in phases.values()):
            return phases
        time.sleep(1)
    raise AssertionError(f"not decided: {phases}\n{log_path.read_text()[-4000:]}")


def _sim_nodes(suffix: str) -> tuple[str, str, list[SimNode]]:
    """A healthy and a failing node (names, then nodes) with this test's label, under the
    pending taint."""
    profiles = repo_root() / "profiles"
    labels = {"gpuaccept.io/test": suffix, "nvidia.com/gpu.present": "false"}
    pending = [{"key": "gpuaccept.io/pending", "value": "true", "effect": "NoSchedule"}]
    good, bad = f"demo-{suffix}-good", f"demo-{suffix}-bad"
    nodes = [
        SimNode(
            name=good,
            profile=str(profiles / "h100-sxm-8gpu-healthy.yaml"),
            labels=labels,
            taints=pending,
        ),
        SimNode(
            name=bad,
            profile=str(profiles / "faults" / "governor-powersave.yaml"),
            labels=labels,
            taints=pending,
        ),
    ]
    return good, bad, nodes


def _start_operator(args: list[str], kubeconfig: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """``gpuaccept operator`` with the chart's arguments, as the chart's ServiceAccount."""
    assert args[0] == "operator"
    command = [
        sys.executable, "-m", "gpuaccept.cli", *args,
        "--kubeconfig", str(kubeconfig), "--log-format", "text",
        # Not a chart value: the stand-in's nodes are simulated hardware.
        "--accept-simulated-reports",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)


def _stop(operator: subprocess.Popen[bytes]) -> None:
    operator.terminate()
    try:
        operator.wait(timeout=30)
    except subprocess.TimeoutExpired:
        operator.kill()


def _assert_endpoints_serve(sets: dict[str, str], release: str) -> None:
    """The endpoints the chart's probes and Service point at."""
    health, metrics = int(sets["operator.healthPort"]), int(sets["operator.metricsPort"])
    assert _get(health, "/healthz")[0] == 200
    assert _get(health, "/readyz")[0] == 200
    # The policy gauges are refreshed periodically: wait for them.
    wanted = f'gpuaccept_nodes{{phase="Accepted",policy="{release}-policy"}} 1.0'
    deadline = time.monotonic() + DECIDE_WITHIN_S
    status, text = _get(metrics, "/metrics")
    while wanted not in text and time.monotonic() < deadline:
        time.sleep(1)
        status, text = _get(metrics, "/metrics")
    assert status == 200
    assert wanted in text, text[-2000:]
    assert "gpuaccept_leader 1.0" in text


def test_local_operator_under_chart_rbac_decides_nodes(
    control_plane: ControlPlane, installed: dict[str, object], tmp_path: Path
) -> None:
    release, namespace = str(installed["release"]), str(installed["namespace"])
    sets = dict(installed["sets"])  # type: ignore[call-overload]
    rendered = render_chart(release=release, namespace=namespace, set_values=sets)
    sa = f"{release}-gpuaccept"
    kubeconfig = release_token_kubeconfig(
        control_plane.kubeconfig, namespace=namespace, service_account=sa, out=tmp_path / "op.kc"
    )
    assert "client-certificate" not in kubeconfig.read_text()

    bound = control_plane.kubectl(
        "get", "validatingadmissionpolicybindings", "-o", "name",
        "-l", f"app.kubernetes.io/instance={release}",
    )  # fmt: skip
    assert len(bound.stdout.split()) == 11, (
        bound.stdout
    )  # the admission rules, rules 11 (probe claims) and 12 (fence rules), and the lock
    # The level docs/install.md tells you to enforce: the operator's probe pods pass it.
    control_plane.kubectl(
        "label", "namespace", namespace, "--overwrite",
        "pod-security.kubernetes.io/enforce=restricted",
    )  # fmt: skip

    good, bad, nodes = _sim_nodes(str(installed["suffix"]))
    standin = KubeletStandIn(control_plane.configuration(), nodes=nodes)
    standin.start()
    log_path = tmp_path / "operator.log"
    operator = _start_operator(operator_args(rendered), kubeconfig, log_path)
    try:
        phases = _wait_final(control_plane, [good, bad], operator, log_path)
        assert phases[good]["phase"] == "Held", phases
        assert phases[good]["heldAction"] == "Accept", phases
        assert phases[bad]["phase"] == "Held", phases
        assert phases[bad]["heldAction"] == "Quarantine", phases
        assert "cpu_governor" in json.dumps(phases[bad]["reasons"])
        assert _taint_keys(control_plane, good) == {"gpuaccept.io/pending"}, "dryRun touched it"

        # Switch enforcement on, as docs/install.md says.
        helm(
            "upgrade", release, str(chart_dir()), "-n", namespace, "--reset-then-reuse-values",
            "--set", "defaultPolicy.dryRun=false", "--set", "defaultPolicy.maxQuarantined=1",
            kubeconfig=control_plane.kubeconfig,
        )  # fmt: skip
        phases = _wait_final(control_plane, [good, bad], operator, log_path, exclude_phase="Held")
        assert phases[good]["phase"] == "Accepted", phases
        assert phases[bad]["phase"] == "Quarantined", phases
        assert _taint_keys(control_plane, good) == set()
        assert _taint_keys(control_plane, bad) == {"gpuaccept.io/quarantined"}

        _assert_endpoints_serve(sets, release)

        # Nothing the operator tried was refused by the chart's RBAC.
        output = log_path.read_text()
        assert "Forbidden" not in output, output[-4000:]
        assert " 403" not in output, output[-4000:]
    finally:
        _stop(operator)
        standin.stop(delete_nodes=True)
        for name in (good, bad):
            control_plane.kubectl("delete", "nodeacceptance", name, "--ignore-not-found")
