"""The three pod kinds (probe, fabric, watch; a DRA node's probe and fabric pods and
their claims)
render byte for byte as they did when
they were three builders: each kind for a few operator configurations and nodes,
dumped as JSON in key order, against ``pod_manifests.golden.json`` (rendered by the
three builders before they became one). A change to a pod is a change to that file,
seen in review: the probe policy each pod carries (``GPUACCEPT_POLICY``) is in it, so
a new policy field changes it too. ``make generate`` writes it again (as
``PYTHONPATH=tests/operator .venv/bin/python tests/operator/core/test_pod_manifests_rendered.py``);
read the diff."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from world import spec

from gpuaccept.operator.core import NodeView, OperatorConfig
from gpuaccept.operator.core.model import DraDevice, FabricPodConfig, FabricPodLabels
from gpuaccept.operator.core.podspec import (
    FabricPodRequest,
    ProbeAttempt,
    WatchPodRequest,
    fabric_claim_manifest,
    fabric_pair_nonce,
    fabric_pod_manifest,
    probe_claim_manifest,
    probe_pod_manifest,
    watch_pod_manifest,
)

GOLDEN = Path(__file__).with_name("pod_manifests.golden.json")

CONFIGS = {
    "defaults": OperatorConfig(),
    "everything-set": OperatorConfig(
        namespace="ns",
        probe_image="registry.example/probe:1",
        runtime_class="nvidia",
        priority_class="system-node-critical",
        extra_tolerations=({"key": "dedicated", "operator": "Exists"},),
        resources={"requests": {"cpu": "2", "nvidia.com/gpu": "1"}, "limits": {"memory": "8Gi"}},
        shm_size=None,
        image_pull_secrets=("regcred",),
        fabric=FabricPodConfig(
            resources={"rdma/ib": "1"},
            annotations={"k8s.v1.cni.cncf.io/networks": "ib"},
            capabilities=("IPC_LOCK",),
            env=(("NCCL_IB_HCA", "mlx5"), ("HTTP_PROXY", "fabric")),
        ),
        pod_labels={"sidecar.istio.io/inject": "false"},
        pod_annotations={"team": "gpu"},
        probe_env=(("HTTP_PROXY", "http://proxy"),),
        base_node_selector=(("gpu", "true"), ("pool", None)),
        allow_control_plane=True,
    ),
}
NODES = {
    "plain": NodeView(name="gpu-1", gpus=8, gpu_capacity=8, boot_id="b"),
    "long-gfd": NodeView(
        name="ip-10-0-0-1.ec2.internal." + "x" * 60,
        gpus=0,
        gpu_capacity=4,
        labels={"nvidia.com/gpu.count": "4", "nvidia.com/gpu.replicas": "2"},
    ),
}
POLICIES = {
    "default": spec(),
    "fabric-inservice": spec(
        includeControlPlane=True,
        fabric={"enabled": True, "minBusbwGBps": 40, "requireRdma": False},
        inService={"enabled": True},
    ),
}


def _rendered() -> dict[str, Any]:
    pods: dict[str, Any] = {}
    for config_name, config in CONFIGS.items():
        for node_name, node in NODES.items():
            for policy_name, policy in POLICIES.items():
                case = f"{config_name}/{node_name}/{policy_name}"
                pods[f"probe/{case}"] = probe_pod_manifest(
                    ProbeAttempt(
                        name="p-1", serial=3, node=node, policy_name=policy_name,
                        spec=policy, applied_taints=("example.com/old",), owner_uid="uid-1",
                    ),
                    config,
                )  # fmt: skip
                # a DRA node's probe pod (its claim, placed by the scheduler) and claim
                dra = ProbeAttempt(
                    name="p-1", serial=3, node=node, policy_name=policy_name, spec=policy,
                    applied_taints=("example.com/old",), owner_uid="uid-1", claim="p-1",
                    dra_gpus=tuple(DraDevice(f"gpu-{i}", uuid=f"GPU-{i}") for i in range(2)),
                )  # fmt: skip
                pods[f"probe-dra/{case}"] = probe_pod_manifest(dra, config)
                pods[f"claim/{case}"] = probe_claim_manifest(dra, config)
                for rank, address in ((0, None), (1, "10.0.0.9")):
                    pods[f"fabric{rank}/{case}"] = fabric_pod_manifest(
                        FabricPodRequest(
                            labels=FabricPodLabels(pair="abc", rank=rank, first="a", second="b"),
                            node=node, policy_name=policy_name, spec=policy,
                            rendezvous_address=address, owner_uid="uid-2" if rank else "",
                            nonce=fabric_pair_nonce(b"golden-render-key", "abc"),
                        ),
                        config,
                    )  # fmt: skip
                # a DRA node's fabric pod (through its claim, placed by the scheduler)
                # and its claim
                dra_fabric = FabricPodRequest(
                    labels=FabricPodLabels(pair="abc", rank=1, first="a", second="b"),
                    node=node, policy_name=policy_name, spec=policy,
                    rendezvous_address="10.0.0.9", owner_uid="uid-2",
                    nonce=fabric_pair_nonce(b"golden-render-key", "abc"), claim="f-1",
                    dra_gpus=dra.dra_gpus,
                )  # fmt: skip
                pods[f"fabric-dra/{case}"] = fabric_pod_manifest(dra_fabric, config)
                pods[f"fabric-claim/{case}"] = fabric_claim_manifest(dra_fabric, config)
                pods[f"watch/{case}"] = watch_pod_manifest(
                    WatchPodRequest(
                        name="w-1", serial=2, node=node, policy_name=policy_name, spec=policy,
                        fatal_xids=(79, 48) if policy_name != "default" else (), owner_uid="uid-3",
                    ),
                    config,
                )  # fmt: skip
    return pods


def render() -> str:
    """Every case, one JSON document per line in the builders' own key order."""
    return "".join(json.dumps({case: pod}) + "\n" for case, pod in sorted(_rendered().items()))


def test_each_pod_kind_renders_as_before() -> None:
    expected = GOLDEN.read_text(encoding="utf-8").splitlines(keepends=True)
    rendered = render().splitlines(keepends=True)
    # 2 configurations x 2 nodes x 2 policies x 8 objects (probe, DRA probe and its
    # claim, fabric rank 0 and 1, DRA fabric pod and its claim, watch)
    assert len(rendered) == len(expected) == 64
    for got, want in zip(rendered, expected, strict=True):
        assert got == want


if __name__ == "__main__":
    # `make generate` writes it; `--check` (its drift check) only says whether it is stale
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if GOLDEN.read_text(encoding="utf-8") == render() else 1)
    GOLDEN.write_text(render(), encoding="utf-8")
