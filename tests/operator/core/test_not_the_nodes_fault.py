"""What is not the node's fault never convicts it: phase Waiting, no attempt spent,
retried with a growing backoff for as long as it lasts; and the paths that got
stuck or convicted too early (a lowered retries, all GPUs unhealthy, a refused
status write outside Probing)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from world import World, make_report, spec

from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.core import CreateProbePod, PolicyView, Taint, reconcile
from gpuaccept.operator.core.phases.startfailure import NODE_BUSY_PREFIX

PENDING_KEY = "gpuaccept.io/pending"


def probing(**world_kwargs: object) -> World:
    world = World(**world_kwargs)
    world.settle()
    assert world.status.phase == Phase.PROBING
    return world


def pod_status(**changes: object) -> Callable[[World], None]:
    def change(world: World) -> None:
        pod = world.current_pod()
        world.pods[pod.name] = dataclasses.replace(pod, **changes)

    return change


def create_refused(message: str) -> Callable[[World], None]:
    def refuse(world: World) -> None:
        world.pods.clear()
        world.apply(
            reconcile(dataclasses.replace(world.observe(), pod_create_error=message), world.judge)
        )

    return refuse


def pod_gone(world: World) -> None:
    world.pods.clear()
    world.advance(61)  # past the grace for a pod that was never created


def foreign_noexecute(world: World) -> None:
    assert world.node is not None
    drain = Taint("example.com/maintenance", "NoExecute", "true")
    world.node = dataclasses.replace(world.node, taints=(*world.node.taints, drain))


# Each row: what happens to the probe's first attempt, and the Waiting reason.
BLOCKED = {
    "image pull back-off": (pod_status(waiting_reason="ImagePullBackOff"), "ImageUnavailable"),
    "image pull error": (pod_status(waiting_reason="ErrImagePull"), "ImageUnavailable"),
    "the kubelet's OutOfnvidia.com/gpu (GPU pods still on the node)": (
        pod_status(
            phase="Failed",
            pod_reason="OutOfnvidia.com/gpu",
            pod_message="Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, "
            "requested: 8, used: 8, capacity: 8",
        ),
        "NodeBusy",
    ),
    "the kubelet's device manager: GPUs other pods hold (kubelet 1.37, the real node)": (
        pod_status(
            phase="Failed",
            pod_reason="UnexpectedAdmissionError",
            pod_message="Pod was rejected: Allocate failed due to requested number of devices "
            "unavailable for nvidia.com/gpu. Requested: 8, Available: 0, which is unexpected",
        ),
        "NodeBusy",
    ),
    "GPU pods listed on the node before the create": (
        create_refused(NODE_BUSY_PREFIX + "team/train-0"),
        "NodeBusy",
    ),
    "evicted by the kubelet mid-probe": (
        pod_status(phase="Failed", pod_reason="Evicted", terminated=True, exit_code=137),
        "Evicted",
    ),
    "deleted by someone else mid-probe (an API eviction, a drain)": (
        pod_status(phase="Failed", deleting=True, terminated=True, exit_code=143),
        "Evicted",
    ),
    "the kubelet refuses an untolerated NoExecute taint": (
        pod_status(phase="Failed", pod_reason="TaintToleration"),
        "UntoleratedTaint",
    ),
    "the kubelet refuses a node its required node affinity does not match (kubelet 1.37)": (
        pod_status(
            phase="Failed",
            pod_reason="NodeAffinity",
            pod_message="Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match "
            "Pod's node affinity/selector",
        ),
        "NodeAffinityRefused",
    ),
    "a Secret or ConfigMap the pod names is missing": (
        pod_status(waiting_reason="CreateContainerConfigError", waiting_message='secret "x"'),
        "PodRefused",
    ),
    "a ResourceQuota refuses the create": (
        create_refused('pods "p" is forbidden: exceeded quota: gpu-quota'),
        "PodRefused",
    ),
    "a LimitRange refuses the create": (
        create_refused('pods "p" is forbidden: maximum memory usage per Container is 1Gi'),
        "PodRefused",
    ),
    "the pod never appears (429/5xx on create for longer than the grace)": (
        pod_gone,
        "ProbePodLost",
    ),
}


@pytest.mark.parametrize(("trigger", "reason"), BLOCKED.values(), ids=BLOCKED.keys())
def test_not_the_nodes_fault_waits_and_never_convicts(
    trigger: Callable[[World], None], reason: str
) -> None:
    world = probing(policies=[PolicyView("default", 1, spec(probeRun={"retries": 1}))])
    backoffs = []
    for _ in range(6):  # far more times than probeRun.retries allows attempts
        trigger(world)
        world.settle()
        st = world.status
        assert (st.phase, st.reason) == (Phase.WAITING, reason), st.message
        assert st.attempts == 0  # the attempt was given back
        assert world.taint_keys() == [PENDING_KEY]
        assert st.next_attempt_time is not None
        world.pods = {n: p for n, p in world.pods.items() if not p.deleting}  # it went
        backoffs.append((st.next_attempt_time - world.now).total_seconds())
        world.now = st.next_attempt_time
        world.settle()
        assert world.status.phase == Phase.PROBING, world.status
    assert backoffs == sorted(backoffs)
    assert backoffs[-1] > backoffs[0]
    # The cause goes away: the node is probed and judged on its own evidence.
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.status.attempts == 1


def test_an_untolerated_noexecute_taint_waits_before_any_pod() -> None:
    world = World()
    foreign_noexecute(world)
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.WAITING, "UntoleratedTaint")
    assert "example.com/maintenance" in (st.message or "")
    assert world.pods == {}
    assert not [a for plan in world.log for a in plan.actions if isinstance(a, CreateProbePod)]


def test_a_failed_probe_still_convicts() -> None:
    # what the probe ran and found is the node's: waits never change that
    world = probing()
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    assert world.status.phase == Phase.QUARANTINED


# ---------------------------------------------------------------- premature and stuck paths


def test_lowering_retries_while_backing_off_never_convicts() -> None:
    world = probing(policies=[PolicyView("default", 1, spec(probeRun={"retries": 3}))])
    for _ in range(2):  # two failed attempts, backing off after the second
        world.finish_pod(None, exit_code=2, phase="Failed")
        world.settle()
        assert world.status.phase == Phase.PENDING
        assert world.status.next_attempt_time is not None
        if world.status.attempts < 2:
            world.now = world.status.next_attempt_time
            world.settle()
    assert world.status.attempts == 2
    world.policies = [PolicyView("default", 2, spec(probeRun={"retries": 0}))]
    world.settle()
    assert world.status.phase == Phase.PENDING  # still backing off, not quarantined
    assert world.status.next_attempt_time is not None
    world.now = world.status.next_attempt_time
    world.settle()
    assert world.status.phase == Phase.PROBING  # one last attempt, on its evidence
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED


def test_all_gpus_unhealthy_never_enters_service_unprobed() -> None:
    policy = spec(waitForGPUs={"timeoutSeconds": 60, "onTimeout": "RemovePendingTaint"})
    world = World(policies=[PolicyView("default", 1, policy)])
    assert world.node is not None
    world.node = dataclasses.replace(world.node, gpus=0, gpu_capacity=8)  # all unhealthy
    world.settle()
    world.advance(60)
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.STALLED, "GPUsUnhealthy")
    assert world.taint_keys() == [PENDING_KEY]  # whatever onTimeout says
    assert world.pods == {}


def test_a_status_refusal_outside_probing_is_not_repeated_in_a_loop() -> None:
    world = World()
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    # A policy change makes the re-judged status one the API server refuses.
    world.refuse_status = lambda st: "422 status.message: Too long" if st.rejudged else None
    world.policies = [PolicyView("default", 2, spec())]
    plan = world.settle()  # a fixed point, not a loop of the same refused write
    assert world.status.phase == Phase.ACCEPTED  # kept as it was
    assert world.status_write_error is not None
    assert plan.requeue_after is not None
    assert plan.requeue_after >= 60
    assert world.taint_keys() == []


# ---------------------------------------------------------------- identity


def test_a_node_recreated_under_its_name_does_not_inherit_accepted() -> None:
    world = World()
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.status.node_uid == "uid-node"
    assert world.node is not None
    # deleted and registered again, before the operator saw the deletion
    world.node = dataclasses.replace(world.node, uid="uid-node-2", taints=(), labels={})
    world.settle()
    st = world.status
    assert st.phase == Phase.PROBING  # a new round: probed again
    assert st.node_uid == "uid-node-2"
    assert st.report is None
    assert world.taint_keys() == [PENDING_KEY]
    assert world.node.labels.get("gpuaccept.io/acceptance") != "accepted"


# ------------------------------------------------------ what drain and the autoscaler read


def test_a_probe_pod_is_controlled_by_its_nodeacceptance_and_safe_to_evict() -> None:
    world = World()
    world.settle()
    (create,) = [a for plan in world.log for a in plan.actions if isinstance(a, CreateProbePod)]
    meta = create.manifest["metadata"]
    # kubectl drain's unreplicated-pod filter: a controller ownerReference, no --force
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "gpuaccept.io/v1alpha1",
            "kind": "NodeAcceptance",
            "name": "gpu-1",
            "uid": "uid-na",
            "controller": True,
        }
    ]
    # the cluster autoscaler: a bare pod with an emptyDir would block scale-down
    assert meta["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "true"


# ---------------------------------------------------------------- human intent


def test_a_quarantine_key_taint_the_operator_did_not_apply_survives_acceptance() -> None:
    world = World()
    assert world.node is not None
    manual = Taint("gpuaccept.io/quarantined", "NoSchedule", "held-by-ops")
    world.node = dataclasses.replace(world.node, taints=(manual,))
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.node.taints == (manual,)  # a person's: never removed
    assert "gpuaccept.io/quarantined" not in world.status.applied_taints


def test_the_quarantine_taint_the_operator_applied_goes_on_acceptance() -> None:
    world = World()
    world.settle()
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    assert world.taint_keys() == ["gpuaccept.io/quarantined"]
    assert world.node is not None
    world.node = dataclasses.replace(world.node, annotations={"gpuaccept.io/reprobe": ""})
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.taint_keys() == []
    assert world.status.applied_taints == ["gpuaccept.io/pending"]  # owned anyway


def test_a_cordoned_node_is_not_probed_unless_asked() -> None:
    world = World()
    assert world.node is not None
    world.node = dataclasses.replace(world.node, unschedulable=True)
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.WAITING, "Cordoned")
    assert world.pods == {}
    assert world.taint_keys() == [PENDING_KEY]
    # asked for: probed though cordoned, the request taken off
    world.node = dataclasses.replace(world.node, annotations={"gpuaccept.io/reprobe": ""})
    world.settle()
    assert world.status.phase == Phase.PROBING
    assert world.node.annotations == {}
    assert world.node.unschedulable  # the cordon is the person's: kept


def test_a_cordoned_accepted_node_asked_for_a_reprobe_is_probed() -> None:
    """The request is taken off the Node when the new round starts; the round
    remembers it was asked for, so the cordon does not strand it in Waiting."""
    world = World()
    world.settle()
    world.finish_with_report(make_report())
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.node is not None
    world.node = dataclasses.replace(
        world.node, unschedulable=True, annotations={"gpuaccept.io/reprobe": ""}
    )
    world.settle()
    assert world.node.annotations == {}
    assert world.status.phase == Phase.PROBING
    assert world.status.reprobe_requested
    world.finish_with_report(make_report())
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    # a later round not asked for waits for the cordon to end, as before
    world.node = dataclasses.replace(world.node, boot_id="boot-2")
    world.settle()
    assert (world.status.phase, world.status.reason) == (Phase.WAITING, "Cordoned")
    assert not world.status.reprobe_requested


def test_an_uncordoned_node_is_probed() -> None:
    world = World()
    assert world.node is not None
    world.node = dataclasses.replace(world.node, unschedulable=True)
    world.settle()
    world.node = dataclasses.replace(world.node, unschedulable=False)
    world.settle()
    assert world.status.phase == Phase.PROBING
    assert world.status.attempts == 1


def test_an_opted_out_node_is_left_alone_and_says_so() -> None:
    world = World()
    assert world.node is not None
    # registered without the pending taint, so that "left alone" shows on the Node
    world.node = dataclasses.replace(
        world.node, annotations={"gpuaccept.io/opt-out": "maintenance"}, taints=()
    )
    world.settle()
    st = world.status
    assert [c.type for c in st.conditions] == ["Accepted", "OptedOut"]
    assert st.phase == Phase.PENDING
    assert world.pods == {}
    assert world.taint_keys() == []  # not even the pending taint
    # opted out mid-probe: the pod goes, the attempt is given back, the node untouched
    world.node = dataclasses.replace(world.node, annotations={})
    world.settle()
    assert world.status.phase == Phase.PROBING
    assert [c.type for c in world.status.conditions] == ["Accepted"]
    taints = world.taint_keys()
    world.node = dataclasses.replace(world.node, annotations={"gpuaccept.io/opt-out": ""})
    world.settle()
    assert (world.status.phase, world.status.attempts) == (Phase.PENDING, 0)
    assert world.pods == {}
    assert world.taint_keys() == taints


def test_an_opted_out_accepted_node_keeps_its_verdict_untouched() -> None:
    world = World()
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.node is not None
    # opted out, then rebooted: no new round while opted out
    world.node = dataclasses.replace(
        world.node, annotations={"gpuaccept.io/opt-out": ""}, boot_id="other-boot"
    )
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.pods == {}
