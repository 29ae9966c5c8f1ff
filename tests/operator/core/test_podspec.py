"""Probe pod names and manifests (pure)."""

from __future__ import annotations

import json
import re

import pytest
from world import spec

from gpuaccept.operator.core import NodeView, OperatorConfig
from gpuaccept.operator.core.model import FabricPodLabels
from gpuaccept.operator.core.podspec import (
    FabricPodRequest,
    ProbeAttempt,
    fabric_pod_manifest,
    node_affinity,
    node_label_value,
    probe_pod_manifest,
    probe_pod_name,
)

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize(
    "node",
    ["gpu-1", "ip-10-0-0-1.ec2.internal", "n" * 253, "Upper-Case-Node", "a" * 40 + "." + "b" * 40],
)
def test_pod_name_is_a_dns_label_and_deterministic(node: str) -> None:
    name = probe_pod_name("gpuaccept-probe", node, 12)
    assert len(name) <= 63
    assert DNS_LABEL.match(name), name
    assert name == probe_pod_name("gpuaccept-probe", node, 12)
    assert name != probe_pod_name("gpuaccept-probe", node, 13)
    assert name.endswith("-12")


def test_long_names_stay_unique() -> None:
    a = probe_pod_name("gpuaccept-probe", "x" * 100 + "a", 1)
    b = probe_pod_name("gpuaccept-probe", "x" * 100 + "b", 1)
    assert a != b


def test_short_name_is_plain() -> None:
    assert probe_pod_name("gpuaccept-probe", "gpu-1", 3) == "gpuaccept-probe-gpu-1-3"


def test_label_value_fits() -> None:
    assert node_label_value("gpu-1") == "gpu-1"
    assert len(node_label_value("n" * 253)) <= 63


def test_manifest_is_locked_down() -> None:
    config = OperatorConfig(
        namespace="ns",
        probe_image="registry.example/probe:1",
        runtime_class="nvidia",
        priority_class="system-node-critical",
        extra_tolerations=({"key": "dedicated", "operator": "Exists"},),
        resources={"requests": {"cpu": "2"}},
    )
    node = NodeView(name="gpu-1", gpus=8, boot_id="b")
    attempt = ProbeAttempt(name="p", serial=4, node=node, policy_name="default", spec=spec())
    manifest = probe_pod_manifest(attempt, config)
    pod = manifest["spec"]
    assert manifest["metadata"]["namespace"] == "ns"
    assert manifest["metadata"]["labels"]["gpuaccept.io/attempt"] == "4"
    assert manifest["metadata"]["labels"]["gpuaccept.io/node"] == "gpu-1"
    assert manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuaccept"
    assert pod["nodeName"] == "gpu-1"
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "gpuaccept-probe"
    assert pod["hostNetwork"] is False
    assert pod["restartPolicy"] == "Never"
    assert pod["activeDeadlineSeconds"] == 60
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["priorityClassName"] == "system-node-critical"
    keys = [t["key"] for t in pod["tolerations"]]
    assert keys == ["gpuaccept.io/pending", "gpuaccept.io/quarantined", "dedicated"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example/probe:1"
    assert container["command"] == [
        "gpuaccept",
        "probe",
        "--termination-log",
        "/dev/termination-log",
    ]
    assert container["terminationMessagePolicy"] == "File"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert container["resources"]["requests"] == {"cpu": "2", "nvidia.com/gpu": "8"}
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["GPUACCEPT_EXPECTED_GPUS"]["value"] == "8"
    assert json.loads(env["GPUACCEPT_POLICY"]["value"])["cpuGovernor"]["requiredGovernor"] == (
        "performance"
    )
    assert pod["volumes"][0]["emptyDir"]["medium"] == "Memory"
    assert container["volumeMounts"][0]["mountPath"] == "/dev/shm"
    # Pod Security "restricted"
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_an_old_owned_taint_still_on_the_node_is_tolerated() -> None:
    node = NodeView(name="gpu-1", gpus=8, boot_id="b")
    attempt = ProbeAttempt(
        name="p", serial=1, node=node, policy_name="default", spec=spec(),
        applied_taints=["example.com/old-q", "gpuaccept.io/pending"],
    )  # fmt: skip
    manifest = probe_pod_manifest(attempt, OperatorConfig())
    keys = [t["key"] for t in manifest["spec"]["tolerations"]]
    assert keys == ["gpuaccept.io/pending", "gpuaccept.io/quarantined", "example.com/old-q"]


def test_image_pull_secrets_reach_the_probe_pod() -> None:
    node = NodeView(name="gpu-1", gpus=8, boot_id="b")
    attempt = ProbeAttempt(name="p", serial=1, node=node, policy_name="default", spec=spec())
    config = OperatorConfig(image_pull_secrets=("regcred", "mirror"))
    pod = probe_pod_manifest(attempt, config)["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    assert "imagePullSecrets" not in probe_pod_manifest(attempt, OperatorConfig())["spec"]


# --------------------------------------------------------------------------- node affinity

GPU_PRESENT = {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
POOL = {"key": "pool", "operator": "Exists"}
NO_CONTROL_PLANE = [
    {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"},
    {"key": "node-role.kubernetes.io/master", "operator": "DoesNotExist"},
]
GPU_BASE = (("nvidia.com/gpu.present", "true"), ("pool", None))

# Each row: the operator's base selector, whether it allows control-plane nodes,
# whether the policy includes them, and the one nodeSelectorTerm every pod requires
# (None: no affinity at all).
AFFINITY = {
    "the chart's default: GPU nodes, never a control-plane node": (
        (("nvidia.com/gpu.present", "true"),), False, False, [GPU_PRESENT, *NO_CONTROL_PLANE]),
    "a bare key is Exists": (GPU_BASE, False, False, [GPU_PRESENT, POOL, *NO_CONTROL_PLANE]),
    "every node watched: still never a control-plane node": ((), False, False, NO_CONTROL_PLANE),
    "a policy's includeControlPlane alone reaches no control-plane node": (
        GPU_BASE, False, True, [GPU_PRESENT, POOL, *NO_CONTROL_PLANE]),
    "the operator allows them, the policy does not include them": (
        GPU_BASE, True, False, [GPU_PRESENT, POOL, *NO_CONTROL_PLANE]),
    "allowed and included: the base selector only": (GPU_BASE, True, True, [GPU_PRESENT, POOL]),
    "allowed and included, every node watched: no affinity": ((), True, True, None),
}  # fmt: skip


@pytest.mark.parametrize(
    ("base", "allowed", "included", "term"), AFFINITY.values(), ids=AFFINITY.keys()
)
def test_every_pod_requires_the_operators_reach_as_its_node_affinity(
    base: tuple[tuple[str, str | None], ...],
    allowed: bool,
    included: bool,
    term: list[dict[str, object]] | None,
) -> None:
    """Probe and fabric pods alike: the node's kubelet refuses them on any other node
    (reason NodeAffinity), and the chart's admission rule 3 requires exactly this."""
    config = OperatorConfig(base_node_selector=base, allow_control_plane=allowed)
    policy = spec(includeControlPlane=included, fabric={"enabled": True})
    node = NodeView(name="gpu-1", gpus=8, boot_id="b")
    probe = probe_pod_manifest(
        ProbeAttempt(name="p", serial=1, node=node, policy_name="default", spec=policy), config
    )
    fabric = fabric_pod_manifest(
        FabricPodRequest(
            labels=FabricPodLabels(pair="abc", rank=0, first="gpu-1", second="gpu-2"),
            node=node, policy_name="default", spec=policy, rendezvous_address=None,
        ),
        config,
    )  # fmt: skip
    expected = (
        None
        if term is None
        else {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": term}]
                }
            }
        }
    )
    for pod in (probe, fabric):
        assert pod["spec"].get("affinity") == expected
        assert pod["spec"]["nodeName"] == "gpu-1"
    assert node_affinity(config, include_control_plane=included) == expected
