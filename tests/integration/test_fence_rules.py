"""A fenced GPU is a DeviceTaintRule, on the real API server (issue 40): DRA nodes of the
kubelet stand-in (NVIDIA's driver's ResourceSlices), the real kube-scheduler allocating
the probe claims, the operator a subprocess under the chart's RBAC (as test_dra_gate.py).

One bad GPU of eight under ``fencing: gpu`` ends Accepted with exactly one rule selecting
that device, and the real scheduler then gives a workload's claim of 7 GPUs exactly the
other seven and cannot place a claim of 8; two bad GPUs over ``maxFencedGpus`` end
Quarantined with no rule; dryRun makes a rule of effect None; a passing re-probe (its
claim tolerating the fence, so the scheduler gives it the fenced GPU too) deletes the
rule; a deleted node takes its rule; a GPU fenced again after a passing probe lifted its
fence, its ``repeatOffenders.count``-th time, quarantines the node (RepeatedFence) and a
passing probe then keeps it quarantined.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.api import FENCE_TAINT_KEY, REPROBE_ANNOTATION
from gpuaccept.operator.plugin.kubectl import explain
from gpuaccept.probe.hardware.simulated import simulated_uuid
from gpuaccept.testsupport.controlplane import ControlPlane
from gpuaccept.testsupport.operator_env import (
    HEALTHY,
    NAMESPACE,
    ROOT,
    Env,
    suite_id,
    wait_for,
)
from gpuaccept.testsupport.scheduler import kube_scheduler
from gpuaccept.testsupport.standin_behaviours import Hang
from gpuaccept.testsupport.standin_dra import ClaimController, device_class_manifest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

RULES = "/apis/resource.k8s.io/v1/devicetaintrules"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"
REMAP_PENDING = str(ROOT / "profiles/faults/row-remap-pending.yaml")  # GPU 5
GPU = {"mode": "gpu", "maxFencedGpus": 1}


@pytest.fixture(scope="module", autouse=True)
def scheduler(
    control_plane: ControlPlane, env: Env, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """The real kube-scheduler, NVIDIA's chart's DeviceClass and the resourceclaim
    controller's part for the probe claims (standin_dra.ClaimController)."""
    try:
        env.kube.request("POST", "/apis/resource.k8s.io/v1/deviceclasses", device_class_manifest())
    except ApiException as error:
        if error.status != 409:
            raise
    logs = tmp_path_factory.mktemp("scheduler")
    with kube_scheduler(control_plane, logs), ClaimController(env.api, NAMESPACE):
        yield


def rules(env: Env, node: str) -> list[dict[str, Any]]:
    items = env.kube.request("GET", RULES)["items"]
    return [r for r in items if r["metadata"]["labels"].get("gpuaccept.io/node") == node]


def workload(env: Env, node: str, name: str, count: int) -> None:
    """A workload's claim of ``count`` GPUs of NVIDIA's class (no toleration) and its
    pod, required on ``node``, placed by the real scheduler."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount",
            "count": count}}]}},
    }  # fmt: skip
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": "gpuaccept-probe",
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
            "resourceClaims": [{"name": "gpus", "resourceClaimName": name}],
            "containers": [{"name": "w", "image": "w", "command": ["sleep", "300"],
                            "resources": {"claims": [{"name": "gpus"}]}}],
        },
    }  # fmt: skip
    env.kube.request("POST", CLAIMS.format(ns=NAMESPACE), claim)
    env.kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod)


def allocated(env: Env, name: str) -> set[str]:
    claim = env.kube.request("GET", f"{CLAIMS.format(ns=NAMESPACE)}/{name}")
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {})
    return {r["device"] for r in results.get("results") or ()}


def unschedulable(env: Env, name: str) -> bool:
    pod = env.kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(
        c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
    )


def gone(env: Env, name: str) -> None:
    env.kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
    env.kube.request("DELETE", f"{CLAIMS.format(ns=NAMESPACE)}/{name}")

    def absent() -> bool:
        try:
            env.kube.request("GET", f"{CLAIMS.format(ns=NAMESPACE)}/{name}")
        except ApiException as error:
            return error.status == 404
        return False

    wait_for(f"the claim {name} gone", absent)


def test_one_bad_gpu_of_eight_is_fenced_by_one_rule_and_a_passing_probe_lifts_it(
    env: Env,
) -> None:
    suite = suite_id("fence-one")
    env.policy(suite, fencing=GPU)
    (name,) = env.dra_nodes(suite, {"a": REMAP_PENDING})
    env.wait_phase([name], "Accepted", timeout=240)
    status = env.status(name)
    assert status["fenced"] == "1/8", env.describe([name])
    assert status["gpuVerdicts"] == [
        {"index": 5, "uuid": simulated_uuid(name, 5), "checks": ["memory_health"], "fenced": True}
    ]
    assert env.taint_keys(name) == []  # the node in service
    (rule,) = rules(env, name)
    assert rule["spec"]["deviceSelector"] == {
        "driver": "gpu.nvidia.com",
        "pool": name,
        "device": "gpu-5",
    }
    assert rule["spec"]["taint"]["key"] == FENCE_TAINT_KEY
    assert rule["spec"]["taint"]["effect"] == "NoSchedule"
    assert rule["metadata"]["ownerReferences"][0]["kind"] == "NodeAcceptance"

    # the real scheduler never gives the fenced GPU to a claim that does not tolerate it:
    # all eight cannot be had, seven are exactly the other seven
    workload(env, name, f"{name}-eight", 8)
    wait_for("a claim of 8 GPUs unschedulable", lambda: unschedulable(env, f"{name}-eight"))
    assert allocated(env, f"{name}-eight") == set()
    gone(env, f"{name}-eight")
    workload(env, name, f"{name}-seven", 7)
    wait_for("a claim of 7 GPUs allocated", lambda: allocated(env, f"{name}-seven"))
    assert allocated(env, f"{name}-seven") == {f"gpu-{i}" for i in range(8) if i != 5}
    gone(env, f"{name}-seven")

    # repaired: the re-probe's claim tolerates the fence (the scheduler gives it all
    # eight GPUs, the fenced one too), the probe passes, and only then the rule goes
    env.standin.node(name).profile = HEALTHY
    env.standin.set_behaviour(name, Hang())  # the re-test runs until we let it finish
    seen: dict[str, Any] = {}

    def allocated_with_the_fenced_gpu() -> bool:
        for claim in env.kube.request("GET", CLAIMS.format(ns=NAMESPACE))["items"]:
            if claim["metadata"]["labels"].get("gpuaccept.io/node") != name:
                continue
            results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {})
            devices = {r["device"] for r in results.get("results") or ()}
            if "gpu-5" in devices:
                seen["devices"] = devices
                seen["rules"] = len(rules(env, name))
                return True
        return False

    env.core.patch_node(name, {"metadata": {"annotations": {REPROBE_ANNOTATION: "now"}}})
    wait_for("the re-probe's claim allocated with the fenced GPU", allocated_with_the_fenced_gpu)
    assert len(seen["devices"]) == 8
    assert seen["rules"] == 1  # the fence stands while its GPU is re-tested
    assert len(rules(env, name)) == 1
    env.standin.set_behaviour(name, None)  # the hung attempt times out; the next one runs
    wait_for(
        "the passing re-probe recorded and the rule deleted",
        lambda: "fenced" not in env.status(name) and not rules(env, name),
        300,
    )
    status = env.status(name)
    assert status["phase"] == "Accepted"
    assert status.get("gpuVerdicts", []) == []


def test_two_bad_gpus_over_the_bound_quarantine_the_node_with_no_rule(env: Env) -> None:
    suite = suite_id("fence-two")
    env.policy(suite, fencing=GPU)
    two = str(ROOT / "tests/fixtures/profiles/h100-sxm-8gpu-two-remaps-pending.yaml")
    (name,) = env.dra_nodes(suite, {"a": two})
    env.wait_phase([name], "Quarantined", timeout=240)
    status = env.status(name)
    assert "over fencing.maxFencedGpus=1" in status["message"], env.describe([name])
    assert "fenced" not in status
    assert rules(env, name) == []


def test_dry_run_makes_a_rule_of_effect_none_and_a_deleted_node_takes_it(env: Env) -> None:
    suite = suite_id("fence-dry")
    env.policy(suite, fencing=GPU, dryRun=True)
    (name,) = env.dra_nodes(suite, {"a": REMAP_PENDING})
    env.wait_phase([name], "Held", timeout=240)
    status = env.status(name)
    assert (status["reason"], status["heldAction"]) == ("DryRun", "Fence"), env.describe([name])
    (rule,) = wait_for("the dry run's rule", lambda: rules(env, name))
    assert rule["spec"]["taint"]["effect"] == "None"
    assert rule["spec"]["deviceSelector"]["device"] == "gpu-5"
    # The feedback kube-controller-manager's device taint controller gives a rule of
    # effect None (k8s.io/api resource/v1 DeviceTaintRuleStatus), as it writes it, and
    # `kubectl gpuaccept explain` shows it beside the held fence.
    feedback = "2 pods would be evicted if the effect was NoExecute"
    condition = {
        "type": "EvictionInProgress", "status": "False", "reason": "NoEffect",
        "message": feedback, "lastTransitionTime": "2026-12-06T00:00:00Z",
        "observedGeneration": rule["metadata"].get("generation", 1),
    }  # fmt: skip
    env.kube.request(
        "PATCH",
        f"{RULES}/{rule['metadata']['name']}/status",
        {"status": {"conditions": [condition]}},
        content_type="application/merge-patch+json",
    )
    lines = explain(env.kube, name)
    at = lines.index("fence rules:")
    assert lines[at + 1].startswith(f"  {rule['metadata']['name']}: ")
    assert lines[at + 1].endswith("/gpu-5 effect None")
    assert lines[at + 2] == f"    EvictionInProgress=False: {feedback}"
    env.standin.delete_nodes([name])
    wait_for("the deleted node's rule gone", lambda: not rules(env, name), 120)


def _reprobe(env: Env, name: str, profile: str, done: Any, what: str) -> None:
    """The node re-probed on ``profile`` (the annotation) until ``done`` holds."""
    env.standin.node(name).profile = profile
    env.core.patch_node(name, {"metadata": {"annotations": {REPROBE_ANNOTATION: what}}})
    wait_for(what, done, 300)


def test_a_gpu_fenced_again_after_its_fence_was_lifted_escalates_to_the_node(env: Env) -> None:
    """Issue 40 item 5 under ``repeatOffenders: {count: 2}``: GPU 5 fenced at the door, a
    passing probe lifts the fence, GPU 5 fails the next probe: its second fence
    quarantines the node instead (RepeatedFence, no rule), and a passing probe keeps it
    quarantined until a person releases it."""
    suite = suite_id("fence-repeat")
    env.policy(suite, fencing=GPU, repeatOffenders={"count": 2})
    (name,) = env.dra_nodes(suite, {"r": REMAP_PENDING})
    env.wait_phase([name], "Accepted", timeout=240)
    assert env.status(name)["fenced"] == "1/8", env.describe([name])
    uuid = simulated_uuid(name, 5)
    assert [f["uuid"] for f in env.status(name)["reverify"]["gpuFences"]] == [uuid]

    _reprobe(
        env,
        name,
        HEALTHY,
        lambda: "fenced" not in env.status(name) and not rules(env, name),
        "the passing re-probe lifts the fence",
    )
    _reprobe(
        env,
        name,
        REMAP_PENDING,
        lambda: env.status(name).get("reason") == "RepeatedFence",
        "GPU 5 failing again quarantines the node",
    )
    status = env.status(name)
    assert status["phase"] == "Quarantined", env.describe([name])
    assert f"GPU {uuid} fenced 2 times within 7 days" in status["message"]
    assert rules(env, name) == []
    assert [f["uuid"] for f in status["reverify"]["gpuFences"]] == [uuid, uuid]
    assert status["reverify"].get("quarantines", []) == []  # the node's own count: untouched

    _reprobe(
        env,
        name,
        HEALTHY,
        lambda: env.status(name).get("lastProbeTime") != status.get("lastProbeTime"),
        "the repair passes its probe",
    )
    after = env.status(name)
    assert (after["phase"], after["reason"]) == ("Quarantined", "RepeatedFence")
    assert "a person must look at it and release it" in after["message"]
