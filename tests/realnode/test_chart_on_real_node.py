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
import time
from collections.abc import Iterator

import pytest
from chart_e2e import (
    FAULT_PROFILE,
    OPERATOR_IMAGE,
    PENDING,
    QUARANTINED,
    ProbePods,
    install,
    kubectl_json,
    node_gpuaccept_keys,
    release_on,
    uninstall_leaves_nothing,
    wait_phase,
    wait_until,
)
from kubernetes import client as k8s

from gpuaccept.contracts.report import decode_termination_message
from gpuaccept.testsupport.chart_rbac import helm
from gpuaccept.testsupport.controlplane import repo_root
from gpuaccept.testsupport.realnode import RealNode

pytestmark = pytest.mark.realnode


@pytest.fixture
def release(real_node: RealNode) -> Iterator[tuple[str, str]]:
    with release_on(real_node) as names:
        yield names


@pytest.mark.timeout(1800)  # helm --wait, two probes of the 6.7 GB image, helm test
def test_chart_operator_and_probe_on_a_real_node(
    real_node: RealNode, release: tuple[str, str]
) -> None:
    name, namespace = release
    cp, node_name = real_node.control_plane, real_node.settings.name
    api = k8s.CoreV1Api(cp.api_client())
    real_node.set_profile(repo_root() / "profiles" / "h100-sxm-8gpu-healthy.yaml")
    install(real_node, name, namespace)

    # The operator pod: created by the controllers, scheduled, run by the kubelet.
    pods = kubectl_json(
        real_node, "get", "pods", "-n", namespace, "-l", "app.kubernetes.io/component=operator"
    )
    assert len(pods["items"]) == 1, pods
    operator_pod = pods["items"][0]
    assert operator_pod["spec"]["nodeName"] == node_name
    assert operator_pod["status"]["phase"] == "Running"
    image = operator_pod["status"]["containerStatuses"][0]["image"]
    assert image.endswith(OPERATOR_IMAGE.split("/", 1)[1]), image
    lease = wait_until(
        "the Lease",
        120,
        lambda: kubectl_json(real_node, "get", "lease", name, "-n", namespace)["spec"].get(
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
        accepted = wait_phase(real_node, "Accepted")
        assert PENDING not in node_gpuaccept_keys(real_node)["taints"]
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
        quarantined = wait_phase(real_node, "Quarantined", after_serial=int(accepted["podSerial"]))
        assert "cpu_governor" in json.dumps(quarantined.get("reasons")), quarantined
        assert QUARANTINED in node_gpuaccept_keys(real_node)["taints"]
    finally:
        probes.stop()

    # helm test: the operator serves /healthz and holds the Lease (found through DNS).
    helm("test", name, "-n", namespace, "--timeout", "180s", kubeconfig=cp.kubeconfig)

    # helm uninstall, then gpuaccept cleanup: nothing is left.
    uninstall_leaves_nothing(real_node, name, namespace)
