"""Fabric pairs on the kubelet stand-in, against the real kube-apiserver: the
operator's fabric pod manifests run for real (``gpuaccept probe fabric``, gloo over
the loopback, each pod on its own loopback address), and in scale mode from the profiles."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.report import decode_termination_message
from gpuaccept.operator.core.fabric.pairing import pod_outcome
from gpuaccept.operator.core.model import FabricPodLabels, NodeView, OperatorConfig, PairOutcome
from gpuaccept.operator.core.podspec import FabricPodRequest, fabric_pod_manifest
from gpuaccept.testsupport.controlplane import ControlPlane
from gpuaccept.testsupport.kubelet_standin import (
    Hang,
    KubeletStandIn,
    SimNode,
    StandInSettings,
    fabric_pairs_from_profiles,
)

pytestmark = pytest.mark.integration

WAIT_S = 180  # an upper bound for a wait, not a timing assertion
ROOT = Path(__file__).resolve().parents[2]
HEALTHY = ROOT / "profiles" / "h100-sxm-8gpu-healthy.yaml"
DAMAGED = ROOT / "profiles" / "fabric" / "h100-sxm-8gpu-damaged-cable.yaml"
SPEC = NodeAcceptancePolicySpec.model_validate({"fabric": {"enabled": True, "minBusbwGBps": 300}})


@pytest.fixture(scope="module")
def suffix() -> str:
    return uuid.uuid4().hex[:6]


@pytest.fixture(scope="module")
def core(control_plane: ControlPlane) -> Iterator[k8s.CoreV1Api]:
    with control_plane.api_client() as api:
        yield k8s.CoreV1Api(api)


@pytest.fixture(scope="module")
def namespace(core: k8s.CoreV1Api, suffix: str) -> Iterator[str]:
    ns = f"fabric-{suffix}"
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_service_account(ns, {"metadata": {"name": "gpuaccept-probe"}})
    yield ns
    core.delete_namespace(ns)


@pytest.fixture(scope="module")
def standin(control_plane: ControlPlane, suffix: str) -> Iterator[KubeletStandIn]:
    nodes = [
        SimNode(f"fab-{suffix}-ok", profile=str(HEALTHY)),
        SimNode(f"fab-{suffix}-slow", profile=str(DAMAGED)),
        SimNode(f"fab-{suffix}-scale-ok", profile=str(HEALTHY)),
        SimNode(f"fab-{suffix}-scale-slow", profile=str(DAMAGED)),
    ]
    s = KubeletStandIn(
        control_plane.configuration(), nodes=nodes, settings=StandInSettings(kill_grace_cap_s=2.0)
    )
    s.start()
    scale = fabric_pairs_from_profiles(s.inter_node_busbw, Hang())
    for node in nodes[2:]:
        s.set_behaviour(node.name, scale)
    yield s
    s.stop(delete_nodes=True)


def manifest(namespace: str, node: str, labels: FabricPodLabels, rendezvous: str | None) -> Any:
    config = OperatorConfig(namespace=namespace, probe_command=("gpuaccept", "probe"))
    request = FabricPodRequest(
        labels=labels,
        node=NodeView(name=node, gpus=8, gpu_capacity=8),
        policy_name="fabric-test",
        spec=SPEC,
        rendezvous_address=rendezvous,
    )
    return fabric_pod_manifest(request, config)


def wait_pod(
    core: k8s.CoreV1Api, ns: str, name: str, done: Callable[[k8s.V1Pod], bool]
) -> k8s.V1Pod:
    pod = core.read_namespaced_pod(name, ns)
    if done(pod):
        return pod
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_pod,
        ns,
        field_selector=f"metadata.name={name}",
        resource_version=pod.metadata.resource_version,
        timeout_seconds=WAIT_S,
    ):
        if event["type"] != "DELETED" and done(event["object"]):
            w.stop()
            return event["object"]
    raise AssertionError(f"pod {ns}/{name} did not get there: {pod.status}")


def has_ip(pod: k8s.V1Pod) -> bool:
    return bool(pod.status and pod.status.pod_ip)


def ended(pod: k8s.V1Pod) -> bool:
    return bool(pod.status and pod.status.phase in ("Succeeded", "Failed"))


def outcome(pod: k8s.V1Pod) -> tuple[PairOutcome, float | None]:
    (state,) = pod.status.container_statuses
    report = decode_termination_message(state.state.terminated.message)
    (result,) = report.results
    assert isinstance(result.observed, dict)
    busbw = result.observed.get("busbwGBps")
    return pod_outcome(result, 300.0), float(busbw) if busbw is not None else None


def run_pair(core: k8s.CoreV1Api, ns: str, first: str, second: str, pair: str) -> list[k8s.V1Pod]:
    """As the operator does: rank 0 first, then rank 1 with rank 0's pod IP."""
    labels = FabricPodLabels(pair, 0, first, second)
    rank0 = manifest(ns, first, labels, None)
    core.create_namespaced_pod(ns, rank0)
    started = wait_pod(core, ns, rank0["metadata"]["name"], has_ip)
    labels1 = FabricPodLabels(pair, 1, first, second)
    rank1 = manifest(ns, second, labels1, started.status.pod_ip)
    core.create_namespaced_pod(ns, rank1)
    return [wait_pod(core, ns, m["metadata"]["name"], ended) for m in (rank0, rank1)]


def test_a_real_pair_runs_on_two_loopback_addresses_at_the_slower_nodes_pace(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    pods = run_pair(core, namespace, f"fab-{suffix}-ok", f"fab-{suffix}-slow", f"real{suffix}")
    ips = [p.status.pod_ip for p in pods]
    assert len(set(ips)) == 2
    assert all(ip.startswith("127.") for ip in ips)
    for pod in pods:
        judged, busbw = outcome(pod)
        assert judged is PairOutcome.FAILED  # the damaged cable's 180 GB/s < 300
        assert busbw is not None
        assert 0 < busbw <= 180.0


def test_scale_mode_completes_a_pair_from_the_profiles_once_both_pods_exist(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    first, second = f"fab-{suffix}-scale-ok", f"fab-{suffix}-scale-slow"
    labels = FabricPodLabels(f"scale{suffix}", 0, first, second)
    rank0 = manifest(namespace, first, labels, None)
    core.create_namespaced_pod(namespace, rank0)
    running = wait_pod(core, namespace, rank0["metadata"]["name"], has_ip)
    assert running.status.phase == "Running"  # it waits for its partner pod
    pods = run_pair_second(core, namespace, labels, running.status.pod_ip, rank0)
    for pod in pods:
        assert outcome(pod) == (PairOutcome.FAILED, 180.0)


def run_pair_second(
    core: k8s.CoreV1Api, ns: str, labels: FabricPodLabels, ip: str, rank0: Any
) -> list[k8s.V1Pod]:
    second = FabricPodLabels(labels.pair, 1, labels.first, labels.second)
    rank1 = manifest(ns, labels.second, second, ip)
    core.create_namespaced_pod(ns, rank1)
    return [wait_pod(core, ns, m["metadata"]["name"], ended) for m in (rank0, rank1)]
