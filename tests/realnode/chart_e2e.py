"""What the end-to-end tests on the real node share (docs/realnode.md): the locally
built images, a chart release with them, the probe pods' reports, and waiting for a
NodeAcceptance's phase."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch

from gpuaccept.operator.views import pod_view
from gpuaccept.testsupport.chart_rbac import chart_dir, helm
from gpuaccept.testsupport.realnode import RealNode, ensure_layout_image

OPERATOR_IMAGE = "localhost/gpuaccept/operator:e2e"
PROBE_IMAGE = "localhost/gpuaccept/probe:e2e"
DECIDE_WITHIN_S = 600  # the probe image's first start unpacks torch; not a performance check
FAULT_PROFILE = "profiles/faults/governor-powersave.yaml"
PENDING, QUARANTINED = "gpuaccept.io/pending", "gpuaccept.io/quarantined"


def _images_dir() -> Path:
    return Path(os.environ.get("GPUACCEPT_IMAGES_DIR", "/var/tmp/gpuaccept-images"))


def load_images(node: RealNode) -> None:
    """The operator and probe images of ``make node-images``, in the node's containerd."""
    layout = _images_dir() / "oci"
    assert (layout / "index.json").exists(), f"no images in {layout}: run `make node-images`"
    ensure_layout_image(node, layout, "operator", OPERATOR_IMAGE)
    ensure_layout_image(node, layout, "probe", PROBE_IMAGE)


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


def kubectl_json(node: RealNode, *args: str) -> Any:
    return json.loads(node.control_plane.kubectl(*args, "-o", "json").stdout)


def wait_until(what: str, timeout_s: float, check: Any) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(2)
    raise AssertionError(f"{what}: not within {timeout_s:.0f}s (last: {last})")


def wait_phase(node: RealNode, wanted: str, *, after_serial: int = 0) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        got = node.control_plane.kubectl(
            "get", "nodeacceptance", node.settings.name, "-o", "json", check=False
        )
        if got.returncode != 0:
            return None
        status = json.loads(got.stdout).get("status") or {}
        serial = int(status.get("podSerial") or 0)
        return status if status.get("phase") == wanted and serial > after_serial else None

    return dict(wait_until(f"NodeAcceptance {wanted}", DECIDE_WITHIN_S, check))


def install(
    node: RealNode, release: str, namespace: str, extra: dict[str, str] | None = None
) -> None:
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
        **(extra or {}),
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


def cleanup_command(node: RealNode, namespace: str, lease: str) -> list[str]:
    kubeconfig = str(node.control_plane.kubeconfig)
    command = [sys.executable, "-m", "gpuaccept.cli", "cleanup", "--kubeconfig", kubeconfig]
    return [*command, "--namespace", namespace, "--lease-name", lease, "--yes"]


def plain_node(node: RealNode, namespace: str, lease: str) -> None:
    """The node as it registered: no GPU label, no gpuaccept leftovers of a failed run."""
    subprocess.run(cleanup_command(node, namespace, lease), check=False, capture_output=True)
    node.control_plane.kubectl(
        "label", "node", node.settings.name, "nvidia.com/gpu.present-", check=False
    )


@contextmanager
def release_on(node: RealNode) -> Iterator[tuple[str, str]]:
    """A release name and namespace on a plain node; uninstalled and cleaned up after."""
    load_images(node)
    suffix = uuid.uuid4().hex[:6]
    name, namespace = "gpuaccept", f"gpuaccept-e2e-{suffix}"
    plain_node(node, namespace, name)
    try:
        yield name, namespace
    finally:
        kubeconfig = node.control_plane.kubeconfig
        helm("uninstall", name, "-n", namespace, "--wait", kubeconfig=kubeconfig, check=False)
        plain_node(node, namespace, name)
        node.control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def node_gpuaccept_keys(node: RealNode) -> dict[str, Any]:
    obj = kubectl_json(node, "get", "node", node.settings.name)
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


def uninstall_leaves_nothing(node: RealNode, name: str, namespace: str) -> None:
    """``helm uninstall``, then ``gpuaccept cleanup --yes``: no gpuaccept label,
    annotation, taint or node condition, no NodeAcceptance, nothing of the release."""
    helm(
        "uninstall",
        name,
        "-n",
        namespace,
        "--wait",
        "--timeout",
        "180s",
        kubeconfig=node.control_plane.kubeconfig,
    )
    wait_until(
        "the operator pod to go",
        120,
        lambda: not kubectl_json(node, "get", "pods", "-n", namespace)["items"],
    )
    cleanup = cleanup_command(node, namespace, name)
    done = wait_until(
        "gpuaccept cleanup --yes",
        120,
        lambda: subprocess.run(cleanup, check=False, capture_output=True).returncode == 0,
    )
    assert done
    assert node_gpuaccept_keys(node) == {
        "labels": [],
        "annotations": [],
        "taints": [],
        "conditions": [],
    }
    assert not kubectl_json(node, "get", "nodeacceptances")["items"]
    left = node.control_plane.kubectl(
        "get", "all,lease,sa,cm,secret,role,rolebinding", "-n", namespace, "-o", "name", check=False
    ).stdout.split()
    assert [o for o in left if not o.endswith(("/default", "/kube-root-ca.crt"))] == [], left
    cluster_left = node.control_plane.kubectl(
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
