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
a slice of a driver not configured is not a DRA pool. Under a policy with the fabric
test, DRA nodes are paired (with each other, and with a device-plugin node), each
fabric pod through a claim of its own, and no claim or pod outlives an operator
killed at any step of a fabric pod's creation.
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

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.api import (
    ACCEPTANCE_PLURAL,
    CREATION_NONCE_ANNOTATION,
    GROUP,
    PENDING_TAINT_KEY,
    VERSION,
)
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus
from gpuaccept.operator.core.creationintent import intended_create
from gpuaccept.operator.core.draclaim import intended_claim
from gpuaccept.operator.core.model import DraDevice, FabricPodLabels, NodeView, OperatorConfig
from gpuaccept.operator.core.podidentity import shape_digest
from gpuaccept.operator.core.podspec import (
    FabricPodRequest,
    fabric_claim_manifest,
    fabric_pod_manifest,
    fabric_pod_name,
)
from gpuaccept.testsupport.controlplane import ControlPlane
from gpuaccept.testsupport.kubelet_standin import RunProcess, fabric_pairs_from_profiles
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
FABRIC = {"enabled": True, "minBusbwGBps": 200, "deadlineSeconds": 600}


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


# ------------------------------------------------------------------ fabric pairs


def fabric_claims(env: Env) -> list[dict[str, Any]]:
    items = env.kube.request("GET", CLAIMS)["items"]
    return [c for c in items if "gpuaccept.io/fabric-pair" in c["metadata"]["labels"]]


def fabric_pods(env: Env, names: list[str]) -> list[dict[str, Any]]:
    return [
        p
        for n in names
        for p in probe_pods(env, n)
        if "gpuaccept.io/fabric-pair" in p["metadata"]["labels"]
    ]


def pair_records(env: Env, name: str) -> list[dict[str, Any]]:
    return list((env.status(name).get("fabric") or {}).get("pairs") or [])


def no_fabric_claim_intent(env: Env, names: list[str]) -> bool:
    return not any(
        i["kind"] == "FabricResourceClaim"
        for n in names
        for i in env.status(n).get("creationIntents") or []
    )


def test_dra_nodes_are_paired_with_each_other_and_with_a_device_plugin_node(env: Env) -> None:
    """Two DRA nodes under one fabric policy, and a DRA node with a device-plugin node
    under another: every node probed, paired with the other of its policy, Accepted on
    the passed pair; a DRA node's fabric pod gets its GPUs through its claim only (the
    node has no nvidia.com/gpu), and no claim, pod or claim intent is left."""
    behaviour = fabric_pairs_from_profiles(env.standin.inter_node_busbw, RunProcess())
    dra_suite, mixed_suite = suite_id("dra-fab"), suite_id("dra-fabmix")
    env.policy(dra_suite, fabric=FABRIC)
    env.policy(mixed_suite, fabric=FABRIC)
    first, second = env.dra_nodes(dra_suite, {"a": HEALTHY, "b": HEALTHY}, behaviour=behaviour)
    (dra,) = env.dra_nodes(mixed_suite, {"dra": HEALTHY}, behaviour=behaviour)
    (plugin,) = env.nodes(mixed_suite, {"plugin": HEALTHY}, behaviour=behaviour)
    names = [first, second, dra, plugin]
    env.wait_phase(names, "Accepted", timeout=300)
    partners = {
        n: {r["partner"] for r in pair_records(env, n) if r["outcome"] == "passed"} for n in names
    }
    assert partners == {first: {second}, second: {first}, dra: {plugin}, plugin: {dra}}
    assert env.status(dra)["gpuPublishing"] == "DRA"
    assert env.status(plugin)["gpuPublishing"] == "DevicePlugin"
    wait_for("no claim left", lambda: not any(claims(env, n) for n in names), 60)
    wait_for("no probe or fabric pod left", lambda: not any(probe_pods(env, n) for n in names))
    assert no_fabric_claim_intent(env, names)
    for name in (first, second, dra):
        no_gpu_resource_anywhere(env, name)


def _na_in_fabric(env: Env, name: str, policy: str) -> None:
    """The NodeAcceptance of a DRA node that passed its single-node checks."""
    boot = env.node(name)["status"]["nodeInfo"]["bootID"]
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeAcceptance",
            "metadata": {"name": name}, "spec": {"nodeName": name}}  # fmt: skip
    na = env.kube.request("POST", f"/apis/{GROUP}/{VERSION}/{ACCEPTANCE_PLURAL}", body)
    policy_body = env.kube.request(
        "GET", f"/apis/{GROUP}/{VERSION}/nodeacceptancepolicies/{policy}"
    )
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "phase": "Fabric", "reason": "FabricPending", "policy": policy,
        "policyGeneration": policy_body["metadata"]["generation"],
        "policyUID": policy_body["metadata"]["uid"], "probedBootID": boot,
        "attempts": 1, "podSerial": 1, "appliedTaints": [PENDING_TAINT_KEY],
        "gpuPublishing": "DRA", "fabric": {"waitingSince": since, "summary": "waiting"},
    }  # fmt: skip
    env.kube.patch_na_status(name, na["metadata"]["resourceVersion"], status)


def _killed_at(env: Env, step: str, policy: str, pair: FabricPodLabels) -> None:
    """The API server as an operator killed at ``step`` of the rank-0 pod's creation on
    the DRA node ``pair.first`` leaves it (built with the operator's own functions):
    ``intent``: both intents on record, neither object made; ``claim``: the claim made,
    its pod not; ``pod``: both made, the pod's UID not recorded; ``record``: as it is
    once the pod's UID is recorded (its claim's intent stays while the claim lives)."""
    config = OperatorConfig(namespace=NAMESPACE, probe_command=("gpuaccept", "probe"))
    na = env.na(pair.first)
    assert na is not None
    name = fabric_pod_name(config.pod_prefix, pair.pair, 0)
    request = FabricPodRequest(
        labels=pair,
        node=NodeView(name=pair.first),
        policy_name=policy,
        spec=NodeAcceptancePolicySpec.model_validate({"fabric": FABRIC}),
        rendezvous_address=None,
        applied_taints=[PENDING_TAINT_KEY],
        owner_uid=na["metadata"]["uid"],
        claim=name,
        dra_gpus=tuple(DraDevice(f"gpu-{i}") for i in range(8)),
    )
    seed = uuid.uuid4().hex
    st, claim = intended_claim(
        NodeAcceptanceStatus(), seed, fabric_claim_manifest(request, config), fabric=True
    )
    st, create = intended_create(st, seed, name, fabric_pod_manifest(request, config))
    intents = [
        {"kind": e.kind, "name": e.name, "nonceDigest": e.nonce_digest} for e in st.creation_intents
    ]
    owned: list[dict[str, str]] = []
    if step != "intent":
        env.kube.request("POST", CLAIMS, dict(claim.manifest))
    if step in ("pod", "record"):
        pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
        pod = env.kube.request("POST", pods, dict(create.manifest))
        if step == "record":
            uid, shape = pod["metadata"]["uid"], shape_digest(create.manifest)
            owned = [{"name": name, "uid": uid, "shape": shape}]
            intents = [i for i in intents if i["kind"] != "Pod"]
    status = {**na["status"], "creationIntents": intents, "ownedPods": owned}
    env.kube.patch_na_status(pair.first, na["metadata"]["resourceVersion"], status)


def test_an_operator_killed_at_each_step_of_a_dra_fabric_pods_creation_leaves_nothing(
    env: Env,
) -> None:
    """Four pairs of DRA nodes waiting for their fabric test, each as an operator
    killed (SIGKILL) at one step of its rank-0 pod's creation leaves it: the restarted
    operator decides every node on a passed pair, and leaves no fabric claim, no
    fabric pod and no claim intent behind (the crash-window pod deleted unread)."""
    suite = suite_id("dra-fabkill")
    env.operator.stop()
    try:
        policy = env.policy(suite, fabric=FABRIC)
        behaviour = fabric_pairs_from_profiles(env.standin.inter_node_busbw, RunProcess())
        steps = ["intent", "claim", "pod", "record"]
        keys = [f"{step}{rank}" for step in steps for rank in (1, 2)]
        names = env.dra_nodes(suite, dict.fromkeys(keys, HEALTHY), behaviour=behaviour)
        node = dict(zip(keys, names, strict=True))
        for name in names:
            _na_in_fabric(env, name, policy)
        pair_id = {step: f"{step[0]}{uuid.uuid4().hex[:8]}" for step in steps}
        pairs = {
            step: FabricPodLabels(pair_id[step], 0, node[f"{step}1"], node[f"{step}2"])
            for step in steps
        }
        for step, pair in pairs.items():
            _killed_at(env, step, policy, pair)
        restarted = Operator(
            env.cp, env.log_dir, lease=f"dra-fabkill-{uuid.uuid4().hex[:6]}", name="dra-fabkill"
        ).start()
        try:
            env.wait_phase(names, "Accepted", timeout=300)
            wait_for("no fabric claim left", lambda: not fabric_claims(env), 60)
            wait_for("no fabric pod left", lambda: not fabric_pods(env, names), 60)
            wait_for("no claim intent left", lambda: no_fabric_claim_intent(env, names), 60)
            recorded = {n: {r["pair"] for r in pair_records(env, n)} for n in names}
            # the crash-window pod is never read: no result of its pair anywhere; the pod
            # on record runs on, its partner pod created by the restarted operator
            assert not any(pairs["pod"].pair in found for found in recorded.values())
            assert pairs["record"].pair in recorded[pairs["record"].first]
            assert pairs["record"].pair in recorded[pairs["record"].second]
        finally:
            restarted.kill()
    finally:
        env.operator.start(**operator_ports())
