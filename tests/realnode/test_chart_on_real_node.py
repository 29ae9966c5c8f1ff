"""End to end on the real node (issue 27): the chart, the operator image and the probe
image, run by a real kubelet and containerd.

- ``helm install`` the chart with the locally built images (``make node-images``,
  imported into containerd; pull policy Never); the operator Deployment's pod is
  created by the ReplicaSet controller, scheduled, started by the kubelet, and
  holds the leader-election Lease;
- the node gets the pending taint and the GPU label, as a new GPU node would: the
  operator creates a probe pod; the kubelet admits it against the FAKE device
  plugin's ``nvidia.com/gpu``, runs ``gpuaccept probe`` from the probe image (the
  device plugin hands it the node's hardware profile: ``GPUACCEPT_PROFILE``), and
  the report comes back through the container's termination message; the node is
  Accepted (healthy profile), then, after a re-probe on a faulty profile,
  Quarantined;
- ``helm test`` passes (the test pod finds the operator through cluster DNS);
- ``helm uninstall`` and ``gpuaccept cleanup --yes`` leave nothing: no release
  objects, no gpuaccept taint, label, annotation or node condition, no
  NodeAcceptance, no probe pod, no Lease.

The operator runs on the node it judges (there is one node); it tolerates every
taint, which a real installation would not do (``operator.nodeSelector`` keeps it
off GPU nodes: e2e/install.sh).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from gpuaccept.contracts.report import decode_termination_message
from gpuaccept.operator.views import pod_view
from gpuaccept.testsupport.chart_rbac import chart_dir, helm
from gpuaccept.testsupport.controlplane import repo_root
from gpuaccept.testsupport.realnode import RealNode, ensure_layout_image

pytestmark = pytest.mark.realnode

OPERATOR_IMAGE = "localhost/gpuaccept/operator:e2e"
PROBE_IMAGE = "localhost/gpuaccept/probe:e2e"
DECIDE_WITHIN_S = 600  # the probe image's first start unpacks torch; not a performance check
FAULT_PROFILE = "profiles/faults/governor-powersave.yaml"
PENDING, QUARANTINED = "gpuaccept.io/pending", "gpuaccept.io/quarantined"


def _images_dir() -> Path:
    return Path(os.environ.get("GPUACCEPT_IMAGES_DIR", "/var/tmp/gpuaccept-images"))


@pytest.fixture(scope="module")
def images(real_node: RealNode) -> None:
    layout = _images_dir() / "oci"
    assert (layout / "index.json").exists(), f"no images in {layout}: run `make node-images`"
    ensure_layout_image(real_node, layout, "operator", OPERATOR_IMAGE)
    ensure_layout_image(real_node, layout, "probe", PROBE_IMAGE)


class ProbePods:
    """Every probe pod's views as the operator would read them (a watch in a thread)."""

    def __init__(self, api: k8s.CoreV1Api, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.bodies: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            stream: Any = watch.Watch()
            for event in stream.stream(
                self.api.list_namespaced_pod,
                self.namespace,
                label_selector="app.kubernetes.io/component=probe",
                timeout_seconds=5,
            ):
                self.bodies.append(self.api.api_client.sanitize_for_serialization(event["object"]))

    def messages(self) -> list[str]:
        return [
            str(view.message)
            for view in map(pod_view, self.bodies)
            if view.terminated and view.message
        ]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


def _json(node: RealNode, *args: str) -> Any:
    return json.loads(node.control_plane.kubectl(*args, "-o", "json").stdout)


def _wait(what: str, timeout_s: float, check: Any) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(2)
    raise AssertionError(f"{what}: not within {timeout_s:.0f}s (last: {last})")


def _phase(node: RealNode, wanted: str, *, after_serial: int = 0) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        got = node.control_plane.kubectl(
            "get", "nodeacceptance", node.settings.name, "-o", "json", check=False
        )
        if got.returncode != 0:
            return None
        status = json.loads(got.stdout).get("status") or {}
        serial = int(status.get("podSerial") or 0)
        return status if status.get("phase") == wanted and serial > after_serial else None

    return dict(_wait(f"NodeAcceptance {wanted}", DECIDE_WITHIN_S, check))


def _install(node: RealNode, release: str, namespace: str) -> None:
    sets = {
        "image.repository": OPERATOR_IMAGE.rsplit(":", 1)[0],
        "image.tag": "e2e",
        "image.pullPolicy": "Never",
        "probe.image.repository": PROBE_IMAGE.rsplit(":", 1)[0],
        "probe.image.tag": "e2e",
        "probe.image.pullPolicy": "Never",
        "probe.runtimeClassName": "",  # no NVIDIA runtime: the GPUs are FAKE
        "probe.resources.requests.cpu": "100m",  # a 2-core node
        "probe.resources.requests.memory": "256Mi",
        "probe.shmSize": "256Mi",
        "operator.tolerations[0].operator": "Exists",  # one node: it runs where it judges
        "operator.extraArgs[0]": "--accept-simulated-reports",  # the FAKE GPUs' reports
        "defaultPolicy.dryRun": "false",
        "defaultPolicy.maxQuarantined": "1",
    }
    args = [arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")]
    helm(
        "install",
        release,
        str(chart_dir()),
        "-n",
        namespace,
        "--create-namespace",
        *args,
        "--wait",
        "--timeout",
        "300s",
        kubeconfig=node.control_plane.kubeconfig,
    )


def _cleanup_command(node: RealNode, namespace: str, lease: str) -> list[str]:
    kubeconfig = str(node.control_plane.kubeconfig)
    command = [sys.executable, "-m", "gpuaccept.cli", "cleanup", "--kubeconfig", kubeconfig]
    return [*command, "--namespace", namespace, "--lease-name", lease, "--yes"]


def _plain_node(node: RealNode, namespace: str, lease: str) -> None:
    """The node as it registered: no GPU label, no gpuaccept leftovers of a failed run."""
    subprocess.run(_cleanup_command(node, namespace, lease), check=False, capture_output=True)
    node.control_plane.kubectl(
        "label", "node", node.settings.name, "nvidia.com/gpu.present-", check=False
    )


@pytest.fixture
def release(real_node: RealNode, images: None) -> Iterator[tuple[str, str]]:
    suffix = uuid.uuid4().hex[:6]
    name, namespace = "gpuaccept", f"gpuaccept-e2e-{suffix}"
    _plain_node(real_node, namespace, name)
    yield name, namespace
    kubeconfig = real_node.control_plane.kubeconfig
    helm("uninstall", name, "-n", namespace, "--wait", kubeconfig=kubeconfig, check=False)
    _plain_node(real_node, namespace, name)
    real_node.control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _node_gpuaccept_keys(node: RealNode) -> dict[str, Any]:
    obj = _json(node, "get", "node", node.settings.name)
    meta, spec = obj["metadata"], obj["spec"]
    return {
        "labels": sorted(k for k in meta.get("labels", {}) if k.startswith("gpuaccept.io/")),
        "annotations": sorted(
            k for k in meta.get("annotations", {}) if k.startswith("gpuaccept.io/")
        ),
        "taints": sorted(
            t["key"] for t in spec.get("taints", []) if t["key"].startswith("gpuaccept.io/")
        ),
        "conditions": [
            c["type"] for c in obj["status"].get("conditions", []) if c["type"] == "GPUAcceptance"
        ],
    }


@pytest.mark.timeout(1800)  # helm --wait, two probes of the 6.7 GB image, helm test
def test_chart_operator_and_probe_on_a_real_node(
    real_node: RealNode, release: tuple[str, str]
) -> None:
    name, namespace = release
    cp, node_name = real_node.control_plane, real_node.settings.name
    api = k8s.CoreV1Api(cp.api_client())
    real_node.set_profile(repo_root() / "profiles" / "h100-sxm-8gpu-healthy.yaml")
    _install(real_node, name, namespace)

    # The operator pod: created by the controllers, scheduled, run by the kubelet.
    pods = _json(
        real_node, "get", "pods", "-n", namespace, "-l", "app.kubernetes.io/component=operator"
    )
    assert len(pods["items"]) == 1, pods
    operator_pod = pods["items"][0]
    assert operator_pod["spec"]["nodeName"] == node_name
    assert operator_pod["status"]["phase"] == "Running"
    image = operator_pod["status"]["containerStatuses"][0]["image"]
    assert image.endswith(OPERATOR_IMAGE.split("/", 1)[1]), image
    lease = _wait(
        "the Lease",
        120,
        lambda: _json(real_node, "get", "lease", name, "-n", namespace)["spec"].get(
            "holderIdentity"
        ),
    )
    # The operator's identity: its pod name and a per-process suffix.
    assert lease.startswith(operator_pod["metadata"]["name"] + "_"), lease

    # A new GPU node: pending taint and GPU label; probed on the healthy profile.
    probes = ProbePods(api, namespace)
    try:
        cp.kubectl("taint", "node", node_name, f"{PENDING}=true:NoSchedule", "--overwrite")
        cp.kubectl("label", "node", node_name, "nvidia.com/gpu.present=true", "--overwrite")
        accepted = _phase(real_node, "Accepted")
        assert PENDING not in _node_gpuaccept_keys(real_node)["taints"]
        reports = [decode_termination_message(m) for m in probes.messages()]
        assert reports, "no probe pod ended with a termination message"
        report = reports[-1]
        assert report.node_name == node_name
        assert report.hardware.value == "simulated"
        assert report.summary.gpu_count == real_node.settings.gpu_count
        assert all(r.status.value == "pass" for r in report.results), report.results

        # Re-probe on a faulty profile: quarantined, with the check that failed.
        real_node.set_profile(repo_root() / FAULT_PROFILE)
        cp.kubectl(
            "annotate", "node", node_name, f"gpuaccept.io/reprobe={time.time():.0f}", "--overwrite"
        )
        quarantined = _phase(real_node, "Quarantined", after_serial=int(accepted["podSerial"]))
        assert "cpu_governor" in json.dumps(quarantined.get("reasons")), quarantined
        assert QUARANTINED in _node_gpuaccept_keys(real_node)["taints"]
    finally:
        probes.stop()

    # helm test: the operator serves /healthz and holds the Lease (found through DNS).
    helm("test", name, "-n", namespace, "--timeout", "180s", kubeconfig=cp.kubeconfig)

    # helm uninstall, then gpuaccept cleanup: nothing is left.
    helm(
        "uninstall", name, "-n", namespace, "--wait", "--timeout", "180s", kubeconfig=cp.kubeconfig
    )
    _wait(
        "the operator pod to go",
        120,
        lambda: not _json(real_node, "get", "pods", "-n", namespace)["items"],
    )
    cleanup = _cleanup_command(real_node, namespace, name)
    done = _wait(
        "gpuaccept cleanup --yes",
        120,
        lambda: subprocess.run(cleanup, check=False, capture_output=True).returncode == 0,
    )
    assert done
    assert _node_gpuaccept_keys(real_node) == {
        "labels": [],
        "annotations": [],
        "taints": [],
        "conditions": [],
    }
    assert not _json(real_node, "get", "nodeacceptances")["items"]
    left = cp.kubectl(
        "get", "all,lease,sa,cm,secret,role,rolebinding", "-n", namespace, "-o", "name", check=False
    ).stdout.split()
    assert [o for o in left if not o.endswith(("/default", "/kube-root-ca.crt"))] == [], left
    cluster_left = cp.kubectl(
        "get",
        "clusterrole,clusterrolebinding,validatingadmissionpolicy,"
        "validatingadmissionpolicybinding,nodeacceptancepolicy",
        "-o",
        "name",
        "-l",
        f"app.kubernetes.io/instance={name}",
        check=False,
    ).stdout.split()
    assert cluster_left == [], cluster_left
