"""The real node with its FAKE GPUs published through DRA (issues 39 and 40): the
FAKE DRA kubelet plugin (``hack/node/fakedraplugin``) publishes them as devices of a
``gpu.nvidia.com`` ResourceSlice, the real kube-scheduler allocates claims on them,
the real kubelet asks the plugin to prepare them, and containerd injects the claim's
CDI device into the container (docs/realnode.md, "DRA mode"). No ``nvidia.com/gpu``
anywhere on the node.

- The plugin against the real scheduler and kubelet: the slice is what the kubelet
  stand-in publishes; a pod's claim of two GPUs is allocated, prepared (a CDI spec
  with the device plugin's variables and the profile) and injected; the spec goes
  when the pod does.
- The chart end to end on that node, as ``test_chart_on_real_node.py`` on the
  device-plugin node: pending, probed through the operator's ResourceClaim, Accepted
  on the healthy profile, Quarantined on a faulty one; nothing left after
  ``helm uninstall`` and ``gpuaccept cleanup``, no claim, no CDI spec.
- Fencing (issue 40): under ``fencing: gpu`` a profile with one bad GPU of eight ends
  Accepted with one DeviceTaintRule, and the real scheduler gives seven single-GPU
  claims exactly the seven other GPUs and leaves an eighth unschedulable.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from chart_e2e import (
    FAULT_PROFILE,
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

from gpuaccept.contracts.api import FENCE_TAINT_KEY
from gpuaccept.contracts.report import decode_termination_message
from gpuaccept.probe.hardware.simulated import simulated_uuid
from gpuaccept.testsupport.controlplane import repo_root
from gpuaccept.testsupport.realnode import BUSYBOX_IMAGE, RealNode, node_slices
from gpuaccept.testsupport.standin_dra import DRA_DRIVER, node_gpus

pytestmark = pytest.mark.realnode

HEALTHY_PROFILE = "profiles/h100-sxm-8gpu-healthy.yaml"
ONE_BAD_GPU = "profiles/faults/row-remap-pending.yaml"  # GPU 5: memory_health
CDI_KIND = "gpuaccept.io/fakegpu"
PROFILE_IN_CONTAINER = "/etc/gpuaccept/fake-gpu-profile.yaml"


@pytest.fixture
def namespace(dra_node: RealNode) -> Iterator[str]:
    name = f"dra-{uuid.uuid4().hex[:6]}"
    dra_node.control_plane.kubectl("create", "namespace", name)
    wait_until(
        "the namespace's default ServiceAccount",
        60,
        lambda: (
            dra_node.control_plane.kubectl(
                "get", "sa", "default", "-n", name, check=False
            ).returncode
            == 0
        ),
    )
    yield name
    dra_node.control_plane.kubectl("delete", "namespace", name, "--wait=true", check=False)


@pytest.fixture
def release(dra_node: RealNode) -> Iterator[tuple[str, str]]:
    with release_on(dra_node) as names:
        yield names


def _apply(node: RealNode, *manifests: dict[str, Any]) -> None:
    body = {"apiVersion": "v1", "kind": "List", "items": list(manifests)}
    node.control_plane.kubectl("apply", "-f", "-", input=json.dumps(body))


def workload(node: RealNode, namespace: str, name: str, gpus: int) -> None:
    """A claim of ``gpus`` GPUs of NVIDIA's class (no toleration) and a pod that uses
    it and prints what its container was given, placed by the real scheduler."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": DRA_DRIVER, "allocationMode": "ExactCount", "count": gpus}}]}},
    }  # fmt: skip
    script = f"env | grep -E '^(NVIDIA_|GPUACCEPT_)' | sort; head -3 {PROFILE_IN_CONTAINER}; "
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "gpus", "resourceClaimName": name}],
            "containers": [{"name": "w", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                            "command": ["sh", "-c", script + "exec sleep 3600"],
                            "resources": {"claims": [{"name": "gpus"}]}}],
        },
    }  # fmt: skip
    _apply(node, claim, pod)


def claim(node: RealNode, namespace: str, name: str) -> dict[str, Any]:
    return dict(kubectl_json(node, "get", "resourceclaim", name, "-n", namespace))


def allocated(node: RealNode, namespace: str, name: str) -> list[str]:
    """The devices the scheduler allocated to the claim (each on this node's pool)."""
    results = ((claim(node, namespace, name).get("status") or {}).get("allocation") or {}).get(
        "devices", {}
    )
    got = results.get("results") or ()
    assert all(r["driver"] == DRA_DRIVER and r["pool"] == node.settings.name for r in got), got
    return sorted(str(r["device"]) for r in got)


def pod_phase(node: RealNode, namespace: str, name: str) -> str:
    pod = kubectl_json(node, "get", "pod", name, "-n", namespace)
    return str(pod["status"].get("phase", ""))


def unschedulable(node: RealNode, namespace: str, name: str) -> bool:
    pod = kubectl_json(node, "get", "pod", name, "-n", namespace)
    conditions = pod["status"].get("conditions") or ()
    return any(
        c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
    )


def cdi_specs(node: RealNode) -> dict[str, dict[str, Any]]:
    """The CDI spec files the plugin has written, by file name."""
    directory = node.layout.cdi_dir
    files = sorted(directory.glob("*.json")) if directory.is_dir() else []
    return {path.name: json.loads(path.read_text()) for path in files}


def test_the_fake_dra_driver_publishes_as_the_standin_and_prepares_through_cdi(
    dra_node: RealNode, namespace: str
) -> None:
    name = dra_node.settings.name
    dra_node.set_profile(repo_root() / HEALTHY_PROFILE)
    node = kubectl_json(dra_node, "get", "node", name)
    assert "nvidia.com/gpu" not in node["status"].get("capacity", {})

    # The pool: one slice, the node's, with the devices the kubelet stand-in publishes.
    (published,) = node_slices(dra_node)
    spec = published["spec"]
    assert spec["driver"] == DRA_DRIVER
    assert spec["nodeName"] == name
    assert spec["pool"]["name"] == name
    assert spec["pool"]["resourceSliceCount"] == 1
    model = "NVIDIA H100 80GB HBM3"  # the healthy profile's gpus.model
    standin = [gpu.device() for gpu in node_gpus(name, 8, model)]
    for device in spec["devices"]:
        assert device["attributes"].pop("driverVersion") == {"version": "550.54.15"}
    assert spec["devices"] == standin

    # A claim of two GPUs: allocated by the scheduler, prepared by the plugin, injected.
    workload(dra_node, namespace, "two", 2)
    wait_until("the pod Running", 180, lambda: pod_phase(dra_node, namespace, "two") == "Running")
    devices = allocated(dra_node, namespace, "two")
    assert len(devices) == 2, devices
    indices = ",".join(d.removeprefix("gpu-") for d in devices)
    uid = claim(dra_node, namespace, "two")["metadata"]["uid"]
    file = f"{CDI_KIND.replace('/', '-')}_{uid}.json"
    specs = cdi_specs(dra_node)
    assert list(specs) == [file], specs
    (cdi_device,) = specs[file]["devices"]
    assert specs[file]["kind"] == CDI_KIND
    assert cdi_device["name"] == uid
    assert cdi_device["containerEdits"]["env"] == [
        f"NVIDIA_VISIBLE_DEVICES={indices}",
        "GPUACCEPT_FAKE_GPU=true",
        f"GPUACCEPT_PROFILE={PROFILE_IN_CONTAINER}",
    ]
    # containerd put the CDI device's edits into the container.
    profile_head = (repo_root() / HEALTHY_PROFILE).read_text().splitlines()[:3]
    expected = [
        "GPUACCEPT_FAKE_GPU=true",
        f"GPUACCEPT_PROFILE={PROFILE_IN_CONTAINER}",
        f"NVIDIA_VISIBLE_DEVICES={indices}",
        *profile_head,
    ]

    def logged() -> list[str]:
        return dra_node.control_plane.kubectl(
            "logs", "two", "-n", namespace, check=False
        ).stdout.splitlines()

    wait_until("the container's output", 60, lambda: len(logged()) >= len(expected))
    assert logged() == expected

    # The pod goes: the kubelet unprepares the claim, the plugin removes its spec.
    dra_node.control_plane.kubectl("delete", "pod", "two", "-n", namespace, "--wait=true")
    wait_until("the CDI spec removed", 60, lambda: not cdi_specs(dra_node))


@pytest.mark.timeout(1800)  # helm --wait, two probes of the 6.7 GB image, helm test
def test_chart_operator_and_probe_on_a_dra_node(
    dra_node: RealNode, release: tuple[str, str]
) -> None:
    name, namespace = release
    cp, node_name = dra_node.control_plane, dra_node.settings.name
    api = k8s.CoreV1Api(cp.api_client())
    dra_node.set_profile(repo_root() / HEALTHY_PROFILE)
    install(dra_node, name, namespace)
    probes = ProbePods(api, namespace)
    claims: dict[str, list[str]] = {}  # the probe claims seen allocated: their devices
    try:
        cp.kubectl("taint", "node", node_name, f"{PENDING}=true:NoSchedule", "--overwrite")
        cp.kubectl("label", "node", node_name, "nvidia.com/gpu.present=true", "--overwrite")

        def probed_through_a_claim() -> dict[str, Any] | None:
            for item in kubectl_json(dra_node, "get", "resourceclaims", "-n", namespace)["items"]:
                results = ((item.get("status") or {}).get("allocation") or {}).get("devices", {})
                devices = sorted(r["device"] for r in results.get("results") or ())
                if devices:
                    claims[item["metadata"]["name"]] = devices
            status = (kubectl_json(dra_node, "get", "nodeacceptances")["items"] or [{}])[0].get(
                "status"
            ) or {}
            return status if status.get("phase") == "Accepted" else None

        accepted = wait_until("Accepted through a claim", 600, probed_through_a_claim)
        assert accepted["gpuPublishing"] == "DRA"
        assert claims
        assert all(d == [f"gpu-{i}" for i in range(8)] for d in claims.values())
        assert PENDING not in node_gpuaccept_keys(dra_node)["taints"]
        reports = [decode_termination_message(m) for m in probes.messages()]
        assert reports, "no probe pod ended with a termination message"
        report = reports[-1]
        assert report.node_name == node_name
        assert report.hardware.value == "simulated"
        assert report.summary.gpu_count == dra_node.settings.gpu_count
        assert list(report.summary.gpu_uuids or ()) == [
            simulated_uuid(node_name, i) for i in range(8)
        ]
        assert all(r.status.value == "pass" for r in report.results), report.results

        dra_node.set_profile(repo_root() / FAULT_PROFILE)
        cp.kubectl(
            "annotate", "node", node_name, f"gpuaccept.io/reprobe={time.time():.0f}", "--overwrite"
        )
        quarantined = wait_phase(dra_node, "Quarantined", after_serial=int(accepted["podSerial"]))
        assert "cpu_governor" in json.dumps(quarantined.get("reasons")), quarantined
        assert QUARANTINED in node_gpuaccept_keys(dra_node)["taints"]
    finally:
        probes.stop()

    uninstall_leaves_nothing(dra_node, name, namespace)
    assert not kubectl_json(dra_node, "get", "resourceclaims", "-n", namespace)["items"]
    wait_until("every claim unprepared", 60, lambda: not cdi_specs(dra_node))


def rules(node: RealNode) -> list[dict[str, Any]]:
    items = kubectl_json(node, "get", "devicetaintrules")["items"]
    mine = node.settings.name
    return [r for r in items if r["metadata"]["labels"].get("gpuaccept.io/node") == mine]


@pytest.mark.timeout(1800)
def test_one_bad_gpu_of_eight_is_fenced_and_never_given_to_a_workload(
    dra_node: RealNode, release: tuple[str, str]
) -> None:
    name, namespace = release
    cp, node_name = dra_node.control_plane, dra_node.settings.name
    dra_node.set_profile(repo_root() / ONE_BAD_GPU)
    fencing = {"defaultPolicy.fencing.mode": "gpu", "defaultPolicy.fencing.maxFencedGpus": "1"}
    install(dra_node, name, namespace, fencing)
    cp.kubectl("taint", "node", node_name, f"{PENDING}=true:NoSchedule", "--overwrite")
    cp.kubectl("label", "node", node_name, "nvidia.com/gpu.present=true", "--overwrite")
    status = wait_phase(dra_node, "Accepted")
    assert status["fenced"] == "1/8", status
    bad = {"index": 5, "uuid": simulated_uuid(node_name, 5), "checks": ["memory_health"]}
    assert status["gpuVerdicts"] == [{**bad, "fenced": True}]
    (rule,) = rules(dra_node)
    assert rule["spec"]["deviceSelector"] == {
        "driver": DRA_DRIVER,
        "pool": node_name,
        "device": "gpu-5",
    }
    assert rule["spec"]["taint"]["key"] == FENCE_TAINT_KEY
    assert rule["spec"]["taint"]["effect"] == "NoSchedule"
    wait_until(
        "the probe's claim gone",
        120,
        lambda: not kubectl_json(dra_node, "get", "resourceclaims", "-n", namespace)["items"],
    )

    # Seven single-GPU workloads get the seven healthy GPUs; an eighth gets none.
    workloads = f"work-{uuid.uuid4().hex[:6]}"
    cp.kubectl("create", "namespace", workloads)
    wait_until(
        "the namespace's default ServiceAccount",
        60,
        lambda: cp.kubectl("get", "sa", "default", "-n", workloads, check=False).returncode == 0,
    )
    try:
        for i in range(7):
            workload(dra_node, workloads, f"one-{i}", 1)
        for i in range(7):
            wait_until(
                f"one-{i} Running",
                180,
                lambda i=i: pod_phase(dra_node, workloads, f"one-{i}") == "Running",
            )
        given = sorted(d for i in range(7) for d in allocated(dra_node, workloads, f"one-{i}"))
        assert given == [f"gpu-{i}" for i in range(8) if i != 5]
        workload(dra_node, workloads, "eighth", 1)
        wait_until(
            "the eighth unschedulable", 120, lambda: unschedulable(dra_node, workloads, "eighth")
        )
        assert allocated(dra_node, workloads, "eighth") == []
        assert len(rules(dra_node)) == 1
    finally:
        cp.kubectl("delete", "namespace", workloads, "--wait=true", check=False)
    uninstall_leaves_nothing(dra_node, name, namespace)
    assert rules(dra_node) == []
