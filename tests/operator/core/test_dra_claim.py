"""A DRA node's probe gets its GPUs through a ResourceClaim the operator creates for
the attempt (core/draclaim.py): its shape, the pod's placement by the scheduler,
the claim's lifecycle (created before the pod, deleted once no attempt needs it) and
kill safety at every step."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from world import World, make_report, spec

from gpuaccept.contracts.api import CREATION_NONCE_ANNOTATION
from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.contracts.probe_invocation import (
    ENV_EXPECTED_GPU_UUIDS,
    ENV_EXPECTED_GPUS,
    ENV_NODE_GPU_CAPACITY,
)
from gpuaccept.operator.core.creationintent import intend, intended
from gpuaccept.operator.core.draclaim import FABRIC_CLAIM, RESOURCE_CLAIM
from gpuaccept.operator.core.model import (
    CreateProbePod,
    CreateResourceClaim,
    DeleteResourceClaim,
    DraDevice,
    PatchNAStatus,
    Plan,
    PolicyView,
    ResourceSliceView,
)
from gpuaccept.operator.core.podidentity import REASON_POD_NAME_TAKEN, pinned_node, pod_shape
from gpuaccept.operator.views import pod_view

NAME = "gpuaccept-probe-gpu-1-1"
UUIDS = [f"GPU-{i:08x}" for i in range(8)]


def pool(count: int = 8) -> tuple[ResourceSliceView, ...]:
    devices = tuple(
        DraDevice(f"gpu-{i}", uuid=UUIDS[i], product_name="NVIDIA H100", kind="gpu")
        for i in range(count)
    )
    return (ResourceSliceView("s", "gpu.nvidia.com", "gpu-1", 1, 1, "gpu-1", devices),)


def dra_world() -> World:
    world = World(resource_slices=pool())
    assert world.node is not None
    world.node = dataclasses.replace(world.node, gpus=0, gpu_capacity=0)
    return world


def to_the_creates(world: World) -> Plan:
    """Reconcile until the plan that creates the attempt's claim and pod (not applied)."""
    for _ in range(10):
        plan = world.plan()
        if any(isinstance(a, CreateProbePod) for a in plan.actions):
            return plan
        world.apply(plan)
    raise AssertionError("no create")


def bound(world: World) -> None:
    """The scheduler binds the pod (its claim allocated): spec.nodeName set."""
    body = world.bodies[NAME]
    body = {**body, "spec": {**body["spec"], "nodeName": "gpu-1"}}
    world.bodies[NAME] = body
    world.pods[NAME] = pod_view(body)


def env(manifest: Any) -> dict[str, str]:
    container = manifest["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_the_claim_is_created_before_the_pod_both_intended_first() -> None:
    world = dra_world()
    plan = to_the_creates(world)
    kinds = [type(a) for a in plan.actions]
    assert kinds.index(PatchNAStatus) < kinds.index(CreateResourceClaim)
    assert kinds.index(CreateResourceClaim) < kinds.index(CreateProbePod)
    write = next(a for a in plan.actions if isinstance(a, PatchNAStatus))
    claim = next(a for a in plan.actions if isinstance(a, CreateResourceClaim))
    nonce = claim.manifest["metadata"]["annotations"][CREATION_NONCE_ANNOTATION]
    assert intended(write.status.creation_intents, RESOURCE_CLAIM, NAME, nonce)
    assert claim.name == NAME


def test_the_claim_asks_for_every_device_of_the_class_fenced_ones_too() -> None:
    world = dra_world()
    claim = next(a for a in to_the_creates(world).actions if isinstance(a, CreateResourceClaim))
    manifest = claim.manifest
    assert manifest["apiVersion"] == "resource.k8s.io/v1"
    assert manifest["metadata"]["namespace"] == world.config.namespace
    assert manifest["metadata"]["ownerReferences"][0]["uid"] == "uid-na"
    assert manifest["metadata"]["labels"]["app.kubernetes.io/component"] == "probe-claim"
    assert manifest["spec"] == {
        "devices": {
            "requests": [
                {
                    "name": "gpus",
                    "exactly": {
                        "deviceClassName": "gpu.nvidia.com",
                        "allocationMode": "All",
                        # a fenced GPU is tested again (core/fencerules.py)
                        "tolerations": [{"key": "gpuaccept.io/fenced", "operator": "Exists"}],
                    },
                }
            ]
        }
    }


def test_the_pod_is_placed_by_the_scheduler_pinned_to_its_node_through_the_claim() -> None:
    world = dra_world()
    pod = next(a for a in to_the_creates(world).actions if isinstance(a, CreateProbePod))
    spec = pod.manifest["spec"]
    assert "nodeName" not in spec
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]
    assert spec["resourceClaims"] == [{"name": "gpus", "resourceClaimName": NAME}]
    container = spec["containers"][0]
    assert container["resources"]["claims"] == [{"name": "gpus"}]
    assert "nvidia.com/gpu" not in str(pod.manifest)
    assert {"key": "gpuaccept.io/pending", "operator": "Exists"} in spec["tolerations"]
    assert pinned_node(spec) == "gpu-1"
    variables = env(pod.manifest)
    assert (variables[ENV_EXPECTED_GPUS], variables[ENV_NODE_GPU_CAPACITY]) == ("8", "8")
    assert variables[ENV_EXPECTED_GPU_UUIDS] == ",".join(UUIDS)


def test_the_shape_holds_the_pin_and_the_claim_and_binding_does_not_change_it() -> None:
    world = dra_world()
    pod = next(a for a in to_the_creates(world).actions if isinstance(a, CreateProbePod))
    shape = pod_shape(pod.manifest)
    assert (shape["node"], shape["claims"]) == ("gpu-1", [NAME])
    bound_spec = {**pod.manifest["spec"], "nodeName": "gpu-1"}
    assert pod_shape({**pod.manifest, "spec": bound_spec}) == shape
    other = {**pod.manifest["spec"], "resourceClaims": [{"name": "gpus", "resourceClaimName": "x"}]}
    assert pod_shape({**pod.manifest, "spec": other}) != shape


def test_a_device_plugin_pods_shape_is_unchanged() -> None:
    """Old pods' recorded shapes still match (no claims key, the node is nodeName)."""
    body = {"spec": {"nodeName": "gpu-1", "containers": []}, "metadata": {}}
    assert "claims" not in pod_shape(body)
    assert pod_shape(body)["node"] == "gpu-1"


@pytest.mark.parametrize(
    ("fields", "pin"),
    [
        ([{"key": "metadata.name", "operator": "In", "values": ["a"]}], "a"),
        ([{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}], ""),
        ([{"key": "metadata.name", "operator": "NotIn", "values": ["a"]}], ""),
        ([{"key": "spec.other", "operator": "In", "values": ["a"]}], ""),
    ],
)
def test_only_one_exact_name_is_a_pin(fields: list[dict[str, Any]], pin: str) -> None:
    required = {"nodeSelectorTerms": [{"matchFields": fields}]}
    spec = {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    }
    assert pinned_node(spec) == pin


def test_accepted_through_the_claim_and_the_claim_deleted() -> None:
    world = dra_world()
    world.settle()
    assert list(world.claims) == [NAME]
    assert world.pods[NAME].node_name == ""  # not bound yet: still the operator's own
    assert world.status.owned_pods[0].name == NAME
    bound(world)
    world.settle()
    assert world.status.phase == Phase.PROBING
    world.finish_with_report(make_report())
    world.settle()
    assert world.status.phase == Phase.ACCEPTED, world.status.message
    assert world.claims == {}
    assert world.pods == {}
    assert not any(e.kind == RESOURCE_CLAIM for e in world.status.creation_intents)


def test_a_faulty_dra_node_is_quarantined_and_its_claim_deleted() -> None:
    world = dra_world()
    world.settle()
    bound(world)
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    assert world.status.phase == Phase.QUARANTINED
    assert world.claims == {}


def test_a_report_is_held_to_the_pools_count() -> None:
    """A report of 8 GPUs on a node whose pool publishes 7: not trusted."""
    world = World(resource_slices=pool(7))
    assert world.node is not None
    world.node = dataclasses.replace(world.node, gpus=0, gpu_capacity=0)
    world.settle()
    bound(world)
    world.finish_with_report(make_report())
    world.settle()
    assert world.status.phase != Phase.ACCEPTED
    assert "7" in (world.status.message or ""), world.status.message


def test_a_claim_name_taken_by_another_creator_is_left_and_no_pod_made() -> None:
    world = dra_world()
    world.claims[NAME] = {"metadata": {"name": NAME, "annotations": {}}}
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.WAITING, REASON_POD_NAME_TAKEN)
    assert NAME not in world.pods
    assert NAME in world.claims  # never deleted: not the operator's


def _without(plan: Plan, *kinds: type) -> Plan:
    return Plan(actions=tuple(a for a in plan.actions if not isinstance(a, kinds)))


def test_killed_between_the_intent_and_the_claim() -> None:
    world = dra_world()
    world.apply(_without(to_the_creates(world), CreateResourceClaim, CreateProbePod))
    assert world.claims == {}
    assert world.pods == {}
    world.restart()
    world.settle()
    assert list(world.claims) == list(world.pods) == [NAME]  # the same attempt
    _accepted_and_clean(world)


def test_killed_between_the_claim_and_the_pod() -> None:
    world = dra_world()
    world.apply(_without(to_the_creates(world), CreateProbePod))
    assert list(world.claims) == [NAME]
    assert world.pods == {}
    world.restart()
    world.settle()  # the pod made within the grace: its own claim (nonce on record) kept
    assert list(world.pods) == [NAME]
    _accepted_and_clean(world)


def test_killed_between_the_claim_and_the_pod_past_the_grace() -> None:
    world = dra_world()
    world.apply(_without(to_the_creates(world), CreateProbePod))
    world.restart()
    world.advance(world.config.pod_missing_grace_seconds + 1)
    world.settle()
    assert NAME not in world.claims  # the lost attempt's claim deleted
    assert not any(
        e.kind == RESOURCE_CLAIM and e.name == NAME for e in world.status.creation_intents
    )


def test_killed_between_the_pod_and_the_record_of_its_uid() -> None:
    world = dra_world()
    world.apply(to_the_creates(world))
    world.restart()  # the pod is a crash-window pod: deleted unread
    world.settle()
    assert NAME not in world.pods
    assert NAME not in world.claims
    assert world.status.probe_pod != NAME
    assert set(world.claims) == set(world.pods) == {world.status.probe_pod}


def test_killed_after_the_record() -> None:
    world = dra_world()
    world.settle()
    world.restart()
    world.settle()
    assert list(world.claims) == list(world.pods) == [NAME]
    _accepted_and_clean(world)


def _accepted_and_clean(world: World) -> None:
    bound(world)
    world.finish_with_report(make_report())
    world.settle()
    assert world.status.phase == Phase.ACCEPTED, world.status.message
    assert world.claims == {}
    assert world.pods == {}


def test_deletes_check_the_nonce() -> None:
    world = dra_world()
    world.settle()
    claim = world.claims[NAME]
    world.claims[NAME] = {**claim, "metadata": {**claim["metadata"], "annotations": {}}}
    bound(world)
    world.finish_with_report(make_report())
    world.settle()
    deletes = [a for plan in world.log for a in plan.actions if isinstance(a, DeleteResourceClaim)]
    assert [d.name for d in deletes] == [NAME]
    assert NAME in world.claims  # a claim without the nonce is not the operator's: left


def test_a_dra_node_under_a_fabric_policy_is_probed_then_waits_for_its_pair() -> None:
    """Fabric pairs are built on DRA nodes too (their pods through claims,
    core/fabric/policypass.py): the node is probed through its claim, and waits for
    its fabric verdict in phase Fabric, its probe claim gone."""
    world = dra_world()
    world.policies = [PolicyView(name="default", generation=1, spec=spec(fabric={"enabled": True}))]
    world.settle()
    assert world.status.phase == Phase.PROBING
    assert NAME in world.claims
    bound(world)
    world.finish_with_report(make_report())
    world.settle()
    assert world.status.phase == Phase.FABRIC, world.status.message
    assert world.claims == {}


def test_a_pod_the_scheduler_never_places_is_not_the_nodes_fault() -> None:
    """Other claims hold the node's GPUs (or no scheduler runs): the pod stays unbound
    past the deadline; the node waits, no attempt counted against it, the claim goes."""
    world = dra_world()
    world.settle()
    assert world.pods[NAME].node_name == ""
    world.advance(world.config.timeout_for(world.policies[0].spec) + 60)  # type: ignore[arg-type]
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.WAITING, "ProbePodUnscheduled")
    assert "ResourceClaim" in (st.message or "")
    assert NAME not in world.claims
    assert NAME not in world.pods


def test_a_fabric_claim_is_its_pass_s_while_the_node_is_a_member_then_its_own() -> None:
    """A fabric pod's claim on record (core/draclaim.py): while the node is a member of
    its policy's fabric pass (waiting in phase Fabric) the pass alone deletes it; once
    it is not (the policy no longer runs the fabric test), its own reconcile does."""
    fabric = "gpuaccept-probe-fabric-abc-0"
    world = dra_world()
    world.policies = [PolicyView(name="default", generation=1, spec=spec(fabric={"enabled": True}))]
    world.settle()
    bound(world)
    world.finish_with_report(make_report())
    world.settle()
    assert world.status.phase == Phase.FABRIC
    assert world.na is not None
    world.na = dataclasses.replace(world.na, status=intend(world.status, FABRIC_CLAIM, fabric, "n"))
    assert not any(isinstance(a, DeleteResourceClaim) for a in world.plan().actions)
    world.policies = [PolicyView(name="default", generation=2, spec=spec())]
    plan = world.plan()
    assert [a.name for a in plan.actions if isinstance(a, DeleteResourceClaim)] == [fabric]
    world.apply(plan)
    assert not any(e.kind == FABRIC_CLAIM for e in world.status.creation_intents)
