"""DRA-published GPU nodes on the real API server with the real kube-scheduler
(issue 39, parts 1 to 3).

The kubelet stand-in publishes a node's GPUs as NVIDIA's DRA driver does
(``resource.k8s.io/v1`` ResourceSlices, driver ``gpu.nvidia.com``, no
``nvidia.com/gpu``), and runs a pod with ResourceClaims only once they are allocated
and reserved for it, as a kubelet's DRA manager does; the DeviceClass is NVIDIA's
chart's; ``.bin/kube-scheduler`` allocates the claims and binds the pods. The
operator, a subprocess under the chart's RBAC, watches the slices. A DRA node waits
for its whole pool, then is probed through a ResourceClaim it creates for the attempt
and decided; the claim goes with the attempt, even when the operator is killed at any
step of it; a device-plugin node beside it under the same policy is probed as before;
a slice of a driver not configured is not a DRA pool.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.api import CREATION_NONCE_ANNOTATION, PENDING_TAINT_KEY
from gpuaccept.testsupport.controlplane import ControlPlane
from gpuaccept.testsupport.operator_env import (
    HEALTHY,
    NAMESPACE,
    ROOT,
    Env,
    Operator,
    operator_ports,
    suite_id,
    wait_for,
)
from gpuaccept.testsupport.scheduler import kube_scheduler
from gpuaccept.testsupport.standin_dra import ClaimController, device_class_manifest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
PCIE_X8 = str(ROOT / "profiles/faults/pcie-x8.yaml")


@pytest.fixture(scope="module", autouse=True)
def scheduler(
    control_plane: ControlPlane, env: Env, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """The real kube-scheduler, NVIDIA's chart's DeviceClass and the resourceclaim
    controller's part for the probe claims (the control plane runs no controller
    manager: standin_dra.ClaimController), for this module."""
    try:
        env.kube.request("POST", "/apis/resource.k8s.io/v1/deviceclasses", device_class_manifest())
    except ApiException as error:
        if error.status != 409:
            raise
    logs = tmp_path_factory.mktemp("scheduler")
    with kube_scheduler(control_plane, logs), ClaimController(env.api, NAMESPACE):
        yield


def shows(env: Env, name: str, phase: str, reason: str | None) -> bool:
    status = env.status(name)
    return status.get("phase") == phase and status.get("reason") == reason


def claims(env: Env, node: str) -> list[dict[str, Any]]:
    items = env.kube.request("GET", CLAIMS)["items"]
    return [c for c in items if c["metadata"]["labels"].get("gpuaccept.io/node") == node]


def probe_pods(env: Env, node: str) -> list[dict[str, Any]]:
    """The node's probe pods, bound or not (a DRA node's pod names its node by affinity)."""
    items = env.kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    return [p for p in items if p["metadata"]["labels"].get("gpuaccept.io/node") == node]


def no_gpu_resource_anywhere(env: Env, node: str) -> None:
    body = env.node(node)
    assert "nvidia.com/gpu" not in body["status"]["capacity"]
    assert "nvidia.com/gpu" not in body["status"]["allocatable"]


def test_a_dra_node_waits_for_its_whole_pool_then_is_accepted_through_a_claim(
    env: Env,
) -> None:
    suite = suite_id("dra-pool")
    env.policy(suite)
    (name,) = env.dra_nodes(suite, {"a": HEALTHY}, slices=2, left_out=(1,))
    wait_for(
        "the DRA node waiting for its pool's second slice",
        lambda: shows(env, name, "Pending", "WaitingForResourceSlices"),
    )
    status = env.status(name)
    assert status["gpuPublishing"] == "DRA"
    assert "1 of its 2 ResourceSlices" in status["message"]
    assert env.taint_keys(name) == [PENDING_TAINT_KEY]
    assert probe_pods(env, name) == []
    assert claims(env, name) == []

    generation = env.standin.publish_pool(name, slices=2)  # the whole pool, generation 2
    assert generation == 2
    seen: dict[str, Any] = {}

    def claim_allocated() -> bool:
        for claim in claims(env, name):
            allocation = (claim.get("status") or {}).get("allocation")
            if allocation:
                seen["claim"] = claim
                return True
        return False

    wait_for("the probe claim allocated by the scheduler", claim_allocated, 120)
    claim = seen["claim"]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == [f"gpu-{i}" for i in range(8)]
    assert {r["pool"] for r in results} == {name}
    (pod,) = probe_pods(env, name)
    assert "nvidia.com/gpu" not in json.dumps(pod["spec"])  # its GPUs come through the claim
    reserved = claim["status"].get("reservedFor") or []
    assert [r["uid"] for r in reserved] == [pod["metadata"]["uid"]]
    assert pod["metadata"]["name"] == claim["metadata"]["name"]
    assert pod["spec"]["resourceClaims"][0]["resourceClaimName"] == claim["metadata"]["name"]
    env.wait_phase([name], "Accepted", timeout=180)
    wait_for("the probe pod and its claim gone", lambda: not claims(env, name), 60)
    wait_for("no probe pod left", lambda: not probe_pods(env, name), 60)
    status = env.status(name)
    assert status["attempts"] == 1, status
    assert PENDING_TAINT_KEY not in env.taint_keys(name)
    no_gpu_resource_anywhere(env, name)


def test_a_faulty_dra_node_is_quarantined(env: Env) -> None:
    suite = suite_id("dra-faulty")
    env.policy(suite)
    (name,) = env.dra_nodes(suite, {"x8": PCIE_X8})
    env.wait_phase([name], "Quarantined", timeout=240)
    wait_for("its probe claim deleted", lambda: not claims(env, name), 60)
    no_gpu_resource_anywhere(env, name)


def test_a_mixed_cluster_decides_both_kinds_of_node(env: Env) -> None:
    suite = suite_id("dra-mixed")
    env.policy(suite)
    (plugin,) = env.nodes(suite, {"plugin": HEALTHY})
    (dra,) = env.dra_nodes(suite, {"dra": HEALTHY})
    env.wait_phase([plugin, dra], "Accepted", timeout=240)
    assert env.status(plugin)["gpuPublishing"] == "DevicePlugin"
    assert env.status(dra)["gpuPublishing"] == "DRA"
    wait_for("no claim left", lambda: not claims(env, dra), 60)


def test_slices_of_a_driver_not_configured_are_not_a_pool(env: Env) -> None:
    suite = suite_id("dra-other")
    env.policy(suite)
    (name,) = env.dra_nodes(suite, {"a": HEALTHY}, driver="other.example.com")
    wait_for(
        "the node waiting for GPUs (its only slices are another driver's)",
        lambda: shows(env, name, "Pending", "WaitingForGPUs"),
    )
    assert "gpuPublishing" not in env.status(name)
    listed = env.kube.request(
        "GET",
        "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3D" + name,
    )
    assert [s["spec"]["driver"] for s in listed["items"]] == ["other.example.com"]


# ------------------------------------------------------------------ kill safety


def _digest(nonce: str) -> str:
    return hashlib.sha256(nonce.encode()).hexdigest()


def _crash_window(env: Env, name: str, step: str, log_dir: Path) -> None:
    """The API server as an operator killed at ``step`` of a DRA attempt leaves it
    (built from the state after the record, with no operator running): ``intent``:
    both intents on record, neither object made; ``claim``: the claim made, its pod
    not; ``pod``: both made, the pod's UID not recorded; ``record``: as it is."""
    if step == "record":
        return
    status = env.status(name)
    attempt = status["probePod"]
    claim = env.kube.request("GET", f"{CLAIMS}/{attempt}")
    claim_nonce = claim["metadata"]["annotations"][CREATION_NONCE_ANNOTATION]
    pod = env.kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{attempt}")
    pod_nonce = pod["metadata"]["annotations"][CREATION_NONCE_ANNOTATION]
    if step in ("intent", "claim"):
        env.cp.kubectl("-n", NAMESPACE, "delete", "pod", attempt, "--grace-period=0", "--force")
        wait_for("the pod gone", lambda: not probe_pods(env, name), 30)
        pod_nonce = uuid.uuid4().hex  # the pod never made: its nonce was never sent
    if step == "intent":
        env.cp.kubectl("-n", NAMESPACE, "delete", "resourceclaim", attempt, "--wait=true")
        wait_for("the claim gone", lambda: not claims(env, name), 30)
        claim_nonce = uuid.uuid4().hex
    intents = [
        {"kind": "ResourceClaim", "name": attempt, "nonceDigest": _digest(claim_nonce)},
        {"kind": "Pod", "name": attempt, "nonceDigest": _digest(pod_nonce)},
    ]
    patch = {
        "ownedPods": [],
        "creationIntents": intents,
        "probeStartedTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    env.cp.kubectl(
        "patch", "nodeacceptance", name, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": patch}),
    )  # fmt: skip
    (log_dir / f"crash-{step}.json").write_text(json.dumps(patch))


@pytest.mark.parametrize("step", ["intent", "claim", "pod", "record"])
def test_an_operator_killed_at_each_step_of_a_dra_attempt_leaves_no_claim_or_pod(
    env: Env, step: str
) -> None:
    """Killed (SIGKILL) between the intents and the claim's create, between the claim
    and the pod, between the pod and the record of its UID, after the record: the
    restarted operator decides the node and leaves no claim and no pod behind."""
    suite = suite_id(f"dra-crash-{step}")
    env.policy(suite)
    lease = f"optest-dracrash-{uuid.uuid4().hex[:6]}"
    env.operator.stop()
    first = Operator(env.cp, env.log_dir, lease=lease, name=f"dra-crash-{step}-1").start()
    try:
        (name,) = env.dra_nodes(suite, {"n": HEALTHY})
        wait_for("the probe pod's UID on record", lambda: env.status(name).get("ownedPods"), 90)
        first.kill()
        _crash_window(env, name, step, env.log_dir)
        second = Operator(env.cp, env.log_dir, lease=lease, name=f"dra-crash-{step}-2").start()
        try:
            wait_for("the verdict after the restart", env.phase_of([name], "Accepted"), 240)
            wait_for("no claim left", lambda: not claims(env, name), 60)
            wait_for("no probe pod left", lambda: not probe_pods(env, name), 60)
            status = env.status(name)
            assert status["attempts"] == 1, status
            # the crash-window pod is deleted unread and its attempt given back; the
            # others go on under the same name (its claim the operator's own, kept)
            assert status["podSerial"] == (2 if step == "pod" else 1), status
            intents = [i for i in status.get("creationIntents") or [] if i["kind"] != "Pod"]
            assert intents == [], status
        finally:
            second.stop()
    finally:
        first.kill()
        env.operator.start(**operator_ports())
