"""DRA-published GPU nodes on the real API server (issue 39, parts 1 and 2).

The kubelet stand-in publishes a node's GPUs as NVIDIA's DRA driver does
(``resource.k8s.io/v1`` ResourceSlices, driver ``gpu.nvidia.com``, no
``nvidia.com/gpu``); the operator, a subprocess under the chart's RBAC, watches
the slices. A DRA node waits for its whole pool, then waits for the probe through
a ResourceClaim (not built yet: never probed through ``nvidia.com/gpu``, never
accepted unprobed); a device-plugin node beside it under the same policy is
probed and accepted as before; a slice of a driver not configured is not a DRA
pool.
"""

from __future__ import annotations

import pytest

from gpuaccept.contracts.api import PENDING_TAINT_KEY
from gpuaccept.testsupport.operator_env import HEALTHY, Env, suite_id, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def shows(env: Env, name: str, phase: str, reason: str | None) -> bool:
    status = env.status(name)
    return status.get("phase") == phase and status.get("reason") == reason


def test_a_dra_node_waits_for_its_whole_pool_then_for_the_claim_probe(env: Env) -> None:
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
    assert "nvidia.com/gpu" not in env.node(name)["status"]["capacity"]

    generation = env.standin.publish_pool(name, slices=2)  # the whole pool, generation 2
    assert generation == 2
    wait_for(
        "the complete pool's node waiting for the probe through a claim",
        lambda: shows(env, name, "Waiting", "ProbeThroughClaimNotBuilt"),
    )
    status = env.status(name)
    assert "8 GPU device(s)" in status["message"], status["message"]
    assert status.get("attempts", 0) == 0
    assert env.pods(name) == []
    assert env.taint_keys(name) == [PENDING_TAINT_KEY]


def test_a_mixed_cluster_says_how_each_node_publishes_its_gpus(env: Env) -> None:
    suite = suite_id("dra-mixed")
    env.policy(suite)
    (plugin,) = env.nodes(suite, {"plugin": HEALTHY})
    (dra,) = env.dra_nodes(suite, {"dra": HEALTHY})
    env.wait_phase([plugin], "Accepted", timeout=300)
    wait_for(
        "the DRA node waiting for the probe through a claim",
        lambda: shows(env, dra, "Waiting", "ProbeThroughClaimNotBuilt"),
    )
    assert env.status(plugin)["gpuPublishing"] == "DevicePlugin"
    assert env.status(dra)["gpuPublishing"] == "DRA"
    assert env.taint_keys(dra) == [PENDING_TAINT_KEY]


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
