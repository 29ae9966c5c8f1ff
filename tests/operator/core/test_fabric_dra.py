"""Fabric pairs on DRA nodes (pure; core/draclaim.py, core/fabric/policypass.py): a
fabric pod on a node whose GPUs a DRA driver publishes gets them through a
ResourceClaim the pass creates before it, placed by the scheduler; the claim's
intent is on record with the pod's, and the claim goes once no pod of the pass
needs it, whatever moment an operator was killed at."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from fabric_pods import CONFIG, SPEC, T0, na_uid, ours, owned, pod, report

from gpuaccept.contracts.api import CREATION_NONCE_ANNOTATION
from gpuaccept.contracts.nodeacceptance import (
    CreationIntent,
    FabricStatus,
    NodeAcceptanceStatus,
    Phase,
)
from gpuaccept.contracts.probe_invocation import ENV_EXPECTED_GPUS
from gpuaccept.operator.core.creationintent import POD, intend, intended
from gpuaccept.operator.core.draclaim import (
    FABRIC_CLAIM,
    RESOURCE_CLAIM,
    claim_is_intended,
    claims_to_delete,
    fabric_claims_to_delete,
)
from gpuaccept.operator.core.fabric.policypass import (
    FabricMember,
    FabricSnapshot,
    FabricStep,
    plan_fabric_pass,
)
from gpuaccept.operator.core.gpupublishing import node_gpus
from gpuaccept.operator.core.model import (
    Action,
    CreateProbePod,
    CreateResourceClaim,
    DeleteProbePod,
    DeleteResourceClaim,
    DraDevice,
    FabricPodLabels,
    NAView,
    NodeView,
    PatchNAStatus,
    PodView,
    PolicyView,
    ResourceSliceView,
)
from gpuaccept.operator.core.podspec import fabric_pod_name

DRIVER = "gpu.nvidia.com"


def slices(node: str, count: int = 8, *, complete: bool = True) -> tuple[ResourceSliceView, ...]:
    devices = tuple(
        DraDevice(f"gpu-{i}", uuid=f"GPU-{node}-{i}", product_name="NVIDIA H100", kind="gpu")
        for i in range(count)
    )
    # an incomplete pool: one slice seen of the two its generation has
    return (ResourceSliceView("s", DRIVER, node, 1, 1 if complete else 2, node, devices),)


def member(
    name: str,
    *,
    dra: bool,
    pods: tuple[PodView, ...] = (),
    intents: tuple[CreationIntent, ...] = (),
    complete: bool = True,
) -> FabricMember:
    pods = ours(name, pods)
    status = NodeAcceptanceStatus(
        phase=Phase.FABRIC,
        policy="fab",
        fabric=FabricStatus(waiting_since=T0, summary="waiting"),
        applied_taints=["gpuaccept.io/pending"],
        owned_pods=owned(name, pods),
        creation_intents=list(intents),
    )
    gpus = 0 if dra else 8
    node = NodeView(name=name, boot_id=f"boot-{name}", gpus=gpus, gpu_capacity=gpus)
    published = node_gpus(node, slices(name, complete=complete) if dra else (), (DRIVER,))
    na = NAView(name=name, status=status, resource_version=f"rv-{name}", uid=na_uid(name))
    return FabricMember(node=node, na=na, pods=pods, gpus=published)


def run(*members: FabricMember, seed: str = "seed") -> FabricStep:
    snapshot = FabricSnapshot(
        PolicyView(name="fab", spec=SPEC), SPEC, members, T0, CONFIG, nonce_seed=seed
    )
    return plan_fabric_pass(snapshot)


def actions(step: FabricStep) -> list[Action]:
    return [a for _n, a in step.writes]


def status_of(step: FabricStep, node: str) -> NodeAcceptanceStatus:
    (status,) = [a.status for n, a in step.writes if isinstance(a, PatchNAStatus) and n == node]
    return status


def container(manifest: Any) -> dict[str, Any]:
    (only,) = manifest["spec"]["containers"]
    return dict(only)


def env(manifest: Any) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container(manifest)["env"]}


def nonce(manifest: Any) -> str:
    return str(manifest["metadata"]["annotations"][CREATION_NONCE_ANNOTATION])


# ------------------------------------------------------------------ the pods and claims


def test_a_dra_nodes_rank0_pod_gets_its_gpus_through_a_claim_made_before_it() -> None:
    step = run(member("a", dra=True), member("b", dra=True))
    kinds = [type(a).__name__ for a in actions(step)]
    assert kinds == ["PatchNAStatus", "CreateResourceClaim", "CreateProbePod"]
    _, claim, create = actions(step)
    assert isinstance(claim, CreateResourceClaim)
    assert isinstance(create, CreateProbePod)
    node = step.started[0].first
    assert claim.name == create.name
    # both intents on record first, in the node's status the create carries
    status = status_of(step, node)
    assert intended(status.creation_intents, FABRIC_CLAIM, claim.name, nonce(claim.manifest))
    assert intended(status.creation_intents, POD, create.name, nonce(create.manifest))
    assert claim_is_intended(claim.manifest, claim.intents)
    # the probe claim's shape: every device of the DeviceClass, the fence tolerated
    (request,) = claim.manifest["spec"]["devices"]["requests"]
    assert request["exactly"] == {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "All",
        "tolerations": [{"key": "gpuaccept.io/fenced", "operator": "Exists"}],
    }
    meta = claim.manifest["metadata"]
    assert meta["namespace"] == CONFIG.namespace
    assert meta["labels"]["app.kubernetes.io/component"] == "probe-claim"
    assert meta["labels"]["gpuaccept.io/fabric-rank"] == "0"
    assert meta["ownerReferences"] == create.manifest["metadata"]["ownerReferences"]
    # the pod: placed by the scheduler (which allocates the claim), pinned to its node
    spec = create.manifest["spec"]
    assert "nodeName" not in spec
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": [node]}]
    assert spec["resourceClaims"] == [{"name": "gpus", "resourceClaimName": create.name}]
    resources = container(create.manifest)["resources"]
    assert resources["claims"] == [{"name": "gpus"}]
    assert "nvidia.com/gpu" not in str(resources)
    assert env(create.manifest)[ENV_EXPECTED_GPUS] == "8"  # one rank per GPU of the pool


@pytest.mark.parametrize("dra_rank", [0, 1])
def test_a_mixed_pair_gives_each_pod_its_nodes_way(dra_rank: int) -> None:
    """One DRA node, one device-plugin node: the DRA node's pod through a claim, the
    other's through nvidia.com/gpu pinned by nodeName."""
    labels = FabricPodLabels("p1", 0, "a", "b")
    rank0 = pod(0, ip="10.0.0.7", labels=labels)
    step = run(member("a", dra=dra_rank == 0, pods=(rank0,)), member("b", dra=dra_rank == 1))
    creates = [a for a in actions(step) if isinstance(a, CreateProbePod)]
    claims = [a for a in actions(step) if isinstance(a, CreateResourceClaim)]
    (create,) = creates
    assert create.name == fabric_pod_name(CONFIG.pod_prefix, "p1", 1)
    if dra_rank == 1:
        assert [c.name for c in claims] == [create.name]
        assert "nodeName" not in create.manifest["spec"]
        assert "nvidia.com/gpu" not in str(container(create.manifest)["resources"])
    else:
        assert claims == []
        assert create.manifest["spec"]["nodeName"] == "b"
        assert container(create.manifest)["resources"]["limits"]["nvidia.com/gpu"] == "8"
    # the rank-0 pod of a new mixed pair: a claim only where that node is DRA's
    first_step = run(member("a", dra=dra_rank == 0), member("b", dra=dra_rank == 1))
    (rank0_create,) = [a for a in actions(first_step) if isinstance(a, CreateProbePod)]
    first_node = first_step.started[0].first
    made = [a.name for a in actions(first_step) if isinstance(a, CreateResourceClaim)]
    assert made == ([rank0_create.name] if first_node == "ab"[dra_rank] else [])


def test_a_dra_node_whose_pool_is_not_complete_is_not_paired() -> None:
    step = run(member("a", dra=True, complete=False), member("b", dra=True))
    assert step.started == ()
    assert not any(isinstance(a, CreateProbePod | CreateResourceClaim) for a in actions(step))


def test_a_dra_pairs_reports_are_held_to_its_pools_gpus() -> None:
    """The finished pair's reports are judged against the pool (no nvidia.com/gpu on
    the node): the pair passes, its result in both statuses."""
    labels = FabricPodLabels("p1", 0, "a", "b")
    a = member("a", dra=True, pods=(pod(0, message=report("a", 350.0), labels=labels),))
    b = member("b", dra=True, pods=(pod(1, message=report("b", 350.0), labels=labels),))
    step = run(a, b)
    for node in ("a", "b"):
        fabric = status_of(step, node).fabric
        assert fabric is not None
        assert fabric.pairs[-1].outcome == "passed", fabric.pairs[-1]


# ------------------------------------------------------------------ the claim's lifecycle


def _intent(kind: str, name: str, secret: str = "n") -> tuple[CreationIntent, ...]:
    return tuple(intend(NodeAcceptanceStatus(), kind, name, secret).creation_intents)


RANK0 = fabric_pod_name(CONFIG.pod_prefix, "p1", 0)
RANK1 = fabric_pod_name(CONFIG.pod_prefix, "p1", 1)


def test_the_claims_table() -> None:
    """Which fabric claims on record the pass deletes (its pod live or created now:
    kept), and which a node's own reconcile does (a member's: none)."""
    live, ending = pod(0), dataclasses.replace(pod(0), deleting=True)
    claim = _intent(FABRIC_CLAIM, RANK0)
    status = NodeAcceptanceStatus(phase=Phase.FABRIC, creation_intents=list(claim))
    table = [
        # (pods, created now, the pass deletes)
        ((), (), [RANK0]),  # killed between the intent (or the claim) and the pod
        ((live,), (), []),
        ((ending,), (), [RANK0]),  # the pair is over: the claim goes with its pod
        ((), (RANK0,), []),  # created again now: an earlier create's claim is used
    ]
    for pods, creating, expected in table:
        assert fabric_claims_to_delete(status, pods, creating) == expected, (pods, creating)
    # a node's own reconcile: a member's fabric claims are its pass's; not a member's
    assert claims_to_delete(status, (live,), fabric_member=True) == []
    assert claims_to_delete(status, (live,), fabric_member=False) == [RANK0]
    # a probe attempt's claim is never taken for a fabric pod's, nor the reverse
    probe = NodeAcceptanceStatus(
        phase=Phase.PROBING,
        probe_pod="gpuaccept-probe-a-1",
        creation_intents=[*_intent(RESOURCE_CLAIM, "gpuaccept-probe-a-1"), *claim],
    )
    assert fabric_claims_to_delete(probe, (), ()) == [RANK0]
    assert claims_to_delete(probe, (), fabric_member=True) == []


def test_a_claim_made_before_a_kill_whose_pod_never_came_is_deleted_then_forgotten() -> None:
    """Killed after the intents were written (the claim made or not), before the
    rank-0 pod: the next pass deletes the claim (first of its writes: the executor
    checks its nonce) and drops its intent; it starts a new pair as it would."""
    intents = _intent(FABRIC_CLAIM, RANK0) + _intent(POD, RANK0)
    step = run(member("a", dra=True, intents=intents), member("b", dra=True))
    first = actions(step)[0]
    assert first == DeleteResourceClaim(RANK0, intents)
    for node in ("a",):
        kept = status_of(step, node).creation_intents
        assert not any(e.kind == FABRIC_CLAIM and e.name == RANK0 for e in kept)


def test_a_partner_pod_created_again_after_a_kill_uses_its_first_claim() -> None:
    """Killed between rank 1's claim and its pod: the next pass creates the pod under
    the same name, and its claim's create (answered AlreadyExists) finds the first
    claim's nonce still on record: the claim is used, never made twice, never deleted."""
    labels = FabricPodLabels("p1", 0, "a", "b")
    first_claim = _intent(FABRIC_CLAIM, RANK1, "first")
    a = member("a", dra=True, pods=(pod(0, ip="10.0.0.7", labels=labels),))
    b = member("b", dra=True, intents=first_claim + _intent(POD, RANK1, "first"))
    step = run(a, b, seed="after-the-restart")
    assert not any(isinstance(x, DeleteResourceClaim) for x in actions(step))
    (claim,) = [x for x in actions(step) if isinstance(x, CreateResourceClaim)]
    earlier = {**claim.manifest, "metadata": {**claim.manifest["metadata"]}}
    earlier["metadata"]["annotations"] = {CREATION_NONCE_ANNOTATION: "first"}
    assert claim_is_intended(earlier, claim.intents)
    index = actions(step).index(claim)
    assert isinstance(actions(step)[index + 1], CreateProbePod)


def test_the_claim_of_a_finished_pairs_pods_goes_once_they_are_deleted() -> None:
    labels = FabricPodLabels("p1", 0, "a", "b")
    done0 = pod(0, message=report("a", 350.0), labels=labels)
    done1 = pod(1, message=report("b", 350.0), labels=labels)
    a = member("a", dra=True, pods=(done0,), intents=_intent(FABRIC_CLAIM, RANK0))
    b = member("b", dra=True, pods=(done1,), intents=_intent(FABRIC_CLAIM, RANK1))
    step = run(a, b)
    # read, the pods deleted; their claims stay until the pods are seen going
    assert [x.name for x in actions(step) if isinstance(x, DeleteProbePod)] == [RANK0, RANK1]
    assert not any(isinstance(x, DeleteResourceClaim) for x in actions(step))
    recorded = {n: status_of(step, n) for n in ("a", "b")}
    going0 = dataclasses.replace(ours("a", (done0,))[0], deleting=True)
    going1 = dataclasses.replace(ours("b", (done1,))[0], deleting=True)
    after = [
        dataclasses.replace(m, pods=(p,), na=dataclasses.replace(m.na, status=recorded[n]))
        for m, p, n in ((a, going0, "a"), (b, going1, "b"))
    ]
    step = run(*after)
    deletes = [x.name for x in actions(step) if isinstance(x, DeleteResourceClaim)]
    assert deletes == [RANK0, RANK1]
    assert all(isinstance(x, DeleteResourceClaim) for x in actions(step)[:2])
    for node in ("a", "b"):
        intents = status_of(step, node).creation_intents
        assert not any(e.kind == FABRIC_CLAIM for e in intents)


def test_a_device_plugin_pair_makes_no_claim() -> None:
    step = run(member("a", dra=False), member("b", dra=False))
    assert not any(isinstance(a, CreateResourceClaim | DeleteResourceClaim) for a in actions(step))
