"""The pure reconcile core, driven through an in-memory world (no API server)."""

from __future__ import annotations

import dataclasses

import pytest
from world import BOOT, PENDING, T0, World, make_report, spec

from gpuaccept.checks.verdict import Verdict
from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.contracts.policy import PolicyChangeAction
from gpuaccept.operator.core import (
    CreateNodeAcceptance,
    CreateProbePod,
    DeleteNodeAcceptance,
    DeleteProbePod,
    NodeCondition,
    PatchNAStatus,
    PatchNodeTaintsLabels,
    PodView,
    PolicyView,
    QuarantineLimitCounts,
    RemoveReprobeAnnotation,
    Taint,
    reconcile,
)

QUARANTINE = Taint("gpuaccept.io/quarantined", "NoSchedule", "true")


def probing_world(**world_kwargs: object) -> World:
    world = World(**world_kwargs)  # type: ignore[arg-type]
    world.settle()
    assert world.status.phase == Phase.PROBING
    return world


def accepted_world() -> World:
    world = probing_world()
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    return world


# ---------------------------------------------------------------- node join


def test_new_node_gets_na_and_pending_taint() -> None:
    world = World()
    plan = world.plan()
    assert isinstance(plan.actions[0], CreateNodeAcceptance)
    patch = plan.actions[1]
    assert isinstance(patch, PatchNodeTaintsLabels)
    assert patch.taints == (PENDING,)


def test_node_registered_with_pending_taint_is_not_patched() -> None:
    world = World()
    assert world.node is not None
    world.node = dataclasses.replace(world.node, taints=(PENDING,))
    plan = world.plan()
    assert [type(a) for a in plan.actions] == [CreateNodeAcceptance]


def test_first_probe_status_before_pod_and_one_pod() -> None:
    world = World()
    world.apply(world.plan())
    plan = world.plan()
    kinds = [type(a) for a in plan.actions]
    assert kinds.index(PatchNAStatus) < kinds.index(CreateProbePod)
    world.settle()
    assert len(world.pods) == 1
    assert world.status.attempts == 1
    assert world.status.probe_pod == world.current_pod().name


# ---------------------------------------------------------------- verdicts


def test_healthy_node_accepted_and_untainted() -> None:
    world = accepted_world()
    assert world.node is not None
    assert world.taint_keys() == []
    assert world.node.labels["gpuaccept.io/acceptance"] == "accepted"
    assert world.node.condition == NodeCondition(
        "True", "Accepted", "all required GPU acceptance checks passed"
    )
    assert world.pods == {}
    assert world.status.report is not None
    assert world.status.probed_boot_id == BOOT
    assert world.status.applied_taints == []
    assert [e.reason for e in world.events] == ["Accepted"]


def test_idempotent_after_verdict() -> None:
    world = accepted_world()
    assert world.plan().actions == ()
    assert world.plan().actions == ()


def test_failing_node_quarantined_with_reason_taint_label_event_condition() -> None:
    world = probing_world()
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    st = world.status
    assert st.phase == Phase.QUARANTINED
    assert st.reason == "PcieLinkFailed"
    assert world.node is not None
    assert world.node.taints == (QUARANTINE,)
    assert world.node.labels["gpuaccept.io/acceptance"] == "quarantined"
    assert world.node.condition is not None
    assert world.node.condition.status == "False"
    assert world.node.condition.reason == "PcieLinkFailed"
    warnings = [(e.kind, e.reason) for e in world.events if e.type == "Warning"]
    assert ("Node", "Quarantined") in warnings
    assert ("NodeAcceptance", "Quarantined") in warnings
    assert st.applied_taints == ["gpuaccept.io/quarantined"]
    assert world.plan().actions == ()


def test_quarantine_labels_and_noexecute_effect() -> None:
    world = probing_world(
        policies=[
            PolicyView(
                "default",
                1,
                spec(quarantine={"taintEffect": "NoExecute", "labels": {"team/gpu-bad": "yes"}}),
            )
        ]
    )
    world.finish_with_report(make_report(failing=["gpu_count"]))
    world.settle()
    assert world.node is not None
    assert world.node.taints == (Taint("gpuaccept.io/quarantined", "NoExecute", "true"),)
    assert world.node.labels["team/gpu-bad"] == "yes"


def test_manual_taint_and_cordon_survive_acceptance() -> None:
    world = World()
    assert world.node is not None
    manual = Taint("example.com/maintenance", "NoSchedule", "x")
    world.node = dataclasses.replace(world.node, taints=(manual, PENDING), unschedulable=True)
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.node.taints == (manual,)
    for plan in world.log:
        for action in plan.actions:
            if isinstance(action, PatchNodeTaintsLabels) and action.taints is not None:
                assert manual in action.taints


def test_another_owners_noexecute_taint_is_rewritten_as_it_was() -> None:
    # the taint list is patched whole: the other taint goes back with its timeAdded
    world = World()
    assert world.node is not None
    wire = {"key": "example.com/drain", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}
    other = Taint.from_wire(wire)
    world.node = dataclasses.replace(world.node, taints=(other, PENDING))
    world.settle()
    world.finish_with_report()
    world.settle()
    patches = [
        a.taints
        for plan in world.log
        for a in plan.actions
        if isinstance(a, PatchNodeTaintsLabels) and a.taints is not None
    ]
    assert patches
    assert [t.to_wire() for t in patches[-1]] == [wire]


# ---------------------------------------------------------------- errors and retries


@pytest.mark.parametrize(
    "message",
    [
        "garbage, not json",
        "{}",
        "x" * 5000,
        make_report(node="gpu-2").to_compact_json(),
        make_report(boot_id="other-boot").to_compact_json(),
        make_report().to_compact_json().replace("gpuaccept.io/v1alpha1", "gpuaccept.io/v9"),
        "",
    ],
    ids=["garbage", "empty-object", "oversize", "other-node", "other-boot", "version", "empty"],
)
def test_untrustworthy_message_never_accepts(message: str) -> None:
    world = probing_world()
    for _attempt in range(3):
        world.finish_pod(message)
        world.settle()
        assert world.status.phase in (Phase.PENDING, Phase.QUARANTINED)
        world.advance(3600)
        world.settle()
    assert world.status.phase == Phase.QUARANTINED
    assert world.status.reason == "ProbeError"
    assert world.node is not None
    assert "gpuaccept.io/acceptance" not in world.node.labels or (
        world.node.labels["gpuaccept.io/acceptance"] == "quarantined"
    )


def test_failed_pod_retries_with_backoff_then_probe_error() -> None:
    world = probing_world()
    first = world.current_pod().name
    world.finish_pod(None, exit_code=137, phase="Failed", reason="Error")
    world.settle()
    st = world.status
    assert st.phase == Phase.PENDING
    assert st.reason == "ProbeFailed"
    assert st.next_attempt_time is not None
    assert world.pods == {}
    assert world.plan().requeue_after == pytest.approx(10)
    world.advance(9)
    assert world.plan().actions == ()
    world.advance(1)
    world.settle()
    assert world.status.attempts == 2
    assert world.current_pod().name != first
    world.finish_pod(None, exit_code=1, phase="Failed")
    world.settle()
    assert world.plan().requeue_after == pytest.approx(20)  # exponential backoff
    world.advance(20)
    world.settle()
    assert world.status.attempts == 3
    world.finish_pod(None, exit_code=1, phase="Failed")
    world.settle()
    st = world.status
    assert st.phase == Phase.QUARANTINED
    assert st.reason == "ProbeError"
    assert st.reasons[0].check == "probe"
    assert world.node is not None
    assert QUARANTINE in world.node.taints
    assert world.pods == {}


def test_timeout_when_pod_never_finishes() -> None:
    world = probing_world()
    plan = world.plan()
    assert plan.actions == ()
    assert plan.requeue_after == pytest.approx(60 + 30)
    world.advance(91)
    world.settle()
    assert world.status.phase == Phase.PENDING
    assert world.status.reason == "ProbeTimeout"
    assert world.pods == {}


def test_image_pull_error_is_an_attempt_error() -> None:
    world = probing_world()
    pod = world.current_pod()
    world.pods[pod.name] = dataclasses.replace(pod, waiting_reason="ImagePullBackOff")
    world.settle()
    assert world.status.reason == "ProbeImagePullFailed"


def test_restart_mid_probe_keeps_one_pod() -> None:
    world = probing_world()
    name = world.current_pod().name
    # a restarted operator sees the same state: nothing to do, no second pod
    assert world.plan().actions == ()
    # status written but the pod creation was lost in the crash: same name again
    world.pods.clear()
    plan = world.plan()
    assert [a.name for a in plan.actions if isinstance(a, CreateProbePod)] == [name]


def test_pod_lost_after_grace_counts_as_failed_attempt() -> None:
    world = probing_world()
    world.pods.clear()
    world.advance(61)
    world.settle()
    assert world.status.phase == Phase.PENDING
    assert world.status.reason == "ProbePodLost"


def test_stale_pods_deleted_before_a_new_attempt() -> None:
    world = World()
    world.pods["gpuaccept-probe-gpu-1-7"] = PodView("gpuaccept-probe-gpu-1-7", phase="Running")
    world.apply(world.plan())  # NA + taint
    plan = world.plan()
    assert [type(a) for a in plan.actions] == [DeleteProbePod]
    world.apply(plan)
    world.settle()
    assert len(world.pods) == 1


# ---------------------------------------------------------------- quarantine limit, dryRun, paused


def test_quarantine_limit_holds_under_pending_taint_then_releases_when_limit_raised() -> None:
    world = probing_world(limit_counts=QuarantineLimitCounts(quarantined=5, matched=10))
    world.finish_with_report(make_report(failing=["cpu_governor"]))
    plan = world.plan()
    assert plan.needs_limit_lock
    world.settle()
    st = world.status
    assert st.phase == Phase.HELD
    assert st.held_action == "Quarantine"
    assert st.reason == "BreakerOpen"
    assert world.taint_keys() == ["gpuaccept.io/pending"]
    assert any(e.reason == "BreakerOpen" for e in world.events)
    # raising the limit (a new generation) lets the held quarantine through
    world.policies = [PolicyView("default", 2, spec(maxQuarantined=6))]
    world.settle()
    assert world.status.phase == Phase.QUARANTINED
    assert world.status.reason == "CpuGovernorFailed"
    assert world.taint_keys() == ["gpuaccept.io/quarantined"]


def test_quarantine_limit_room_freed_applies_held_quarantine() -> None:
    world = probing_world(limit_counts=QuarantineLimitCounts(quarantined=5, matched=10))
    world.finish_with_report(make_report(failing=["cpu_governor"]))
    world.settle()
    held = world.status.phase
    world.limit_counts = QuarantineLimitCounts(quarantined=4, matched=10)
    world.settle()
    assert (held, world.status.phase) == (Phase.HELD, Phase.QUARANTINED)


def test_quarantine_limit_percentage() -> None:
    world = probing_world(
        limit_counts=QuarantineLimitCounts(quarantined=1, matched=20),
        policies=[PolicyView("default", 1, spec(maxQuarantined="10%"))],
    )
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    assert world.status.phase == Phase.QUARANTINED  # 2 of 20 = 10%


def test_dry_run_changes_no_taint_or_label() -> None:
    world = World(policies=[PolicyView("default", 1, spec(dryRun=True))])
    world.settle()
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    st = world.status
    assert st.phase == Phase.HELD
    assert st.held_action == "Quarantine"
    assert st.reason == "DryRun"
    assert world.node is not None
    assert world.node.taints == ()
    assert world.node.labels == {"nvidia.com/gpu.present": "true"}
    assert world.node.condition is None
    for plan in world.log:
        assert not any(isinstance(a, PatchNodeTaintsLabels) for a in plan.actions)
    assert any(e.reason == "DryRun" for e in world.events)
    # switching dryRun off applies the stored verdict without a new probe
    world.policies = [PolicyView("default", 2, spec())]
    world.settle()
    assert world.status.phase == Phase.QUARANTINED
    assert world.status.rejudged
    assert world.pods == {}


def test_paused_starts_no_probe_and_changes_nothing_decided() -> None:
    world = World(policies=[PolicyView("default", 1, spec(paused=True))])
    world.settle()
    assert world.status.phase == Phase.PENDING
    assert world.pods == {}
    assert world.taint_keys() == ["gpuaccept.io/pending"]  # fail safe: the node stays out
    accepted = accepted_world()
    assert accepted.node is not None
    accepted.node = dataclasses.replace(
        accepted.node, boot_id="boot-2", annotations={"gpuaccept.io/reprobe": "1"}
    )
    accepted.policies = [PolicyView("default", 2, spec(paused=True))]
    assert accepted.plan().actions == ()


# ---------------------------------------------------------------- re-probe


def test_boot_id_change_reprobes() -> None:
    world = accepted_world()
    assert world.node is not None
    world.node = dataclasses.replace(world.node, boot_id="boot-2")
    world.settle()
    st = world.status
    assert st.phase == Phase.PROBING
    assert st.attempts == 1
    assert st.pod_serial == 2
    assert world.taint_keys() == ["gpuaccept.io/pending"]
    world.finish_with_report(make_report(boot_id="boot-2"))
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.status.probed_boot_id == "boot-2"


def test_reprobe_annotation_reprobes_and_is_removed() -> None:
    world = accepted_world()
    assert world.node is not None
    world.node = dataclasses.replace(world.node, annotations={"gpuaccept.io/reprobe": "now"})
    plan = world.plan()
    assert any(isinstance(a, RemoveReprobeAnnotation) for a in plan.actions)
    world.settle()
    assert world.node.annotations == {}
    assert world.status.phase == Phase.PROBING
    assert world.status.reason == "ReprobeRequested"


def test_reprobe_annotation_while_probing_is_just_removed() -> None:
    world = probing_world()
    assert world.node is not None
    world.node = dataclasses.replace(world.node, annotations={"gpuaccept.io/reprobe": ""})
    plan = world.plan()
    assert [type(a) for a in plan.actions] == [RemoveReprobeAnnotation]


def test_policy_change_rejudges_stored_report() -> None:
    world = accepted_world()
    stricter = spec(probe={"ncclAllreduce": {"minBusbwGBps": 500}})  # the report: 468
    world.policies = [PolicyView("default", 2, stricter)]
    world.settle()
    st = world.status
    assert st.phase == Phase.QUARANTINED
    assert st.reason == "NcclAllreduceFailed"
    assert st.rejudged
    assert st.policy_generation == 2
    assert world.pods == {}
    assert world.taint_keys() == ["gpuaccept.io/quarantined"]


@pytest.mark.parametrize(
    ("action", "probes"), [(PolicyChangeAction.IGNORE, False), (PolicyChangeAction.REPROBE, True)]
)
def test_policy_change_ignore_or_reprobe(action: PolicyChangeAction, probes: bool) -> None:
    world = accepted_world()
    world.policies = [PolicyView("default", 2, spec(reprobe={"onPolicyChange": action.value}))]
    world.settle()
    assert (world.status.phase == Phase.PROBING) is probes


def test_quarantine_key_change_removes_old_owned_taint() -> None:
    world = probing_world()
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    world.policies = [
        PolicyView("default", 2, spec(quarantine={"taintKey": "example.com/bad-gpu"}))
    ]
    world.settle()
    assert world.taint_keys() == ["example.com/bad-gpu"]
    assert world.status.applied_taints == ["example.com/bad-gpu"]


# ---------------------------------------------------------------- policies, deletion


def test_node_deleted_removes_na_and_pods() -> None:
    world = probing_world()
    world.node = None
    plan = world.plan()
    kinds = {type(a) for a in plan.actions}
    assert kinds == {DeleteNodeAcceptance, DeleteProbePod}
    world.settle()
    assert world.na is None
    assert world.pods == {}


def test_two_policies_no_action() -> None:
    world = World(policies=[PolicyView("a", 1, spec()), PolicyView("b", 1, spec())])
    assert world.plan().actions == ()


def test_no_policy_no_action() -> None:
    world = World(policies=[])
    assert world.plan().actions == ()


def test_invalid_policy_no_action() -> None:
    world = World(policies=[PolicyView("a", 1, None, "bad")])
    assert world.plan().actions == ()


def test_deadline_exceeded_pod_is_a_timeout_error() -> None:
    world = probing_world()
    world.finish_pod(None, exit_code=137, phase="Failed", reason="DeadlineExceeded")
    world.settle()
    assert world.status.phase == Phase.PENDING
    assert world.status.reason == "ProbeTimeout"


def test_refused_pod_creation_is_an_attempt_error_with_the_api_message() -> None:
    world = probing_world()
    world.pods.clear()  # the API server refused the pod
    plan = reconcile(
        dataclasses.replace(world.observe(), pod_create_error='serviceaccount "x" not found'),
        world.judge,
    )
    world.apply(plan)
    assert world.status.phase == Phase.PENDING
    assert world.status.reason == "ProbePodError"
    assert world.status.message is not None
    assert 'serviceaccount "x" not found' in world.status.message


def test_policy_change_never_rejudges_an_older_rounds_report() -> None:
    """Accepted on boot 1; after a reboot every attempt fails (ProbeError). A policy
    edit re-judges the stored report: it must not be boot 1's (which would accept)."""
    w = accepted_world()
    w.node = dataclasses.replace(w.node, boot_id="boot-2")
    w.settle()
    assert w.status.report is None
    for _ in range(10):
        if w.status.phase == Phase.QUARANTINED:
            break
        w.finish_pod(None, exit_code=1, phase="Failed")
        w.settle()
        w.advance(3600)
        w.settle()
    assert (w.status.phase, w.status.reason) == (Phase.QUARANTINED, "ProbeError")
    assert w.status.report is None
    w.policies = [PolicyView(name="default", generation=2, spec=spec())]
    w.settle()
    assert (w.status.phase, w.status.reason) == (Phase.QUARANTINED, "ProbeError")
    assert "gpuaccept.io/quarantined" in w.taint_keys()


def test_a_report_the_judge_cannot_use_is_an_attempt_error() -> None:
    """Valid against the contract, but the judge raises on it: an attempt error
    (retry, then ProbeError), never an exception that leaves the node Probing."""

    def broken_judge(report: object, policy: object) -> Verdict:
        raise ValueError("min_pcie_generation must be >= 0")

    w = probing_world(judge=broken_judge)
    w.finish_with_report(make_report())
    w.settle()
    assert (w.status.phase, w.status.reason) == (Phase.PENDING, "InvalidReport")
    assert "report cannot be judged: ValueError" in (w.status.message or "")
    assert "gpuaccept.io/pending" in w.taint_keys()


# ---------------------------------------------------------------- review fixes


def test_a_node_that_leaves_accepted_is_no_longer_labelled_accepted() -> None:
    # accepted, rebooted, the new probe fails and the quarantine limit is reached: Held
    w = accepted_world()
    assert w.node is not None
    assert w.node.labels["gpuaccept.io/acceptance"] == "accepted"
    assert w.node.condition is not None
    assert w.node.condition.status == "True"
    w.limit_counts = QuarantineLimitCounts(quarantined=5, matched=10)
    w.node = dataclasses.replace(w.node, boot_id="boot-2")
    w.settle()
    assert "gpuaccept.io/acceptance" not in w.node.labels  # re-probing: not accepted
    assert w.node.condition is not None
    assert w.node.condition.status == "Unknown"
    w.finish_with_report(make_report(boot_id="boot-2", failing=["cpu_governor"]))
    w.settle()
    assert (w.status.phase, w.status.reason) == (Phase.HELD, "BreakerOpen")
    assert "gpuaccept.io/acceptance" not in w.node.labels
    assert w.node.condition.status == "Unknown"
    assert w.taint_keys() == ["gpuaccept.io/pending"]


def test_a_quarantine_moved_to_another_policy_takes_a_slot_there() -> None:
    w = probing_world()
    w.finish_with_report(make_report(failing=["cpu_governor"]))
    w.settle()
    assert (w.status.phase, w.status.policy) == (Phase.QUARANTINED, "default")
    # relabelled into policy "b", which already has 5 of its 5 slots in use
    w.policies = [PolicyView(name="b", generation=1, spec=spec())]
    w.limit_counts = QuarantineLimitCounts(quarantined=5, matched=10)
    w.settle()
    assert (w.status.phase, w.status.reason, w.status.policy) == (Phase.HELD, "BreakerOpen", "b")


def test_held_by_dry_run_is_rejudged_under_reprobe_too() -> None:
    reprobe = {"reprobe": {"onPolicyChange": "Reprobe"}}
    w = probing_world(policies=[PolicyView("default", 1, spec(dryRun=True, **reprobe))])
    w.finish_with_report()
    w.settle()
    assert (w.status.phase, w.status.reason) == (Phase.HELD, "DryRun")
    w.policies = [PolicyView("default", 2, spec(**reprobe))]
    w.settle()
    assert w.status.phase == Phase.ACCEPTED  # the stored verdict, applied, no new pod
    assert w.status.rejudged
    assert w.pods == {}


def test_a_pod_stuck_terminating_past_the_deadline_is_a_timeout() -> None:
    w = probing_world()
    pod = w.current_pod()
    w.pods[pod.name] = dataclasses.replace(pod, deleting=True)  # evicted, kubelet gone
    w.advance(10_000)
    w.settle()
    assert (w.status.phase, w.status.reason) == (Phase.PENDING, "ProbeTimeout")
    assert "stuck terminating" in (w.status.message or "")


def test_no_probe_until_the_node_advertises_gpus() -> None:
    w = World()
    assert w.node is not None
    w.node = dataclasses.replace(w.node, gpus=0)  # the device plugin has not registered
    w.settle()
    assert (w.status.phase, w.status.reason) == (Phase.PENDING, "WaitingForGPUs")
    assert w.pods == {}
    assert w.taint_keys() == ["gpuaccept.io/pending"]
    w.node = dataclasses.replace(w.node, gpus=8)  # the Node update that wakes it
    w.settle()
    assert (w.status.phase, w.status.reason) == (Phase.PROBING, None)
    assert len(w.pods) == 1


def test_a_policy_recreated_under_its_name_is_a_change() -> None:
    # kubectl replace --force, or a Helm reinstall: generation 1 again, a new UID
    old = PolicyView("default", 1, spec(dryRun=True), uid="uid-1")
    w = probing_world(policies=[old])
    w.finish_with_report()
    w.settle()
    assert (w.status.phase, w.status.reason, w.status.policy_uid) == (
        Phase.HELD,
        "DryRun",
        "uid-1",
    )
    w.policies = [PolicyView("default", 1, spec(), uid="uid-2")]
    w.settle()
    assert (w.status.phase, w.status.policy_uid) == (Phase.ACCEPTED, "uid-2")
    assert w.taint_keys() == []


# ---------------------------------------------------------------- issue 10: keys, waiting, limits


def test_quarantine_labels_are_recorded_and_only_those_are_removed() -> None:
    labels = {"gpuaccept.io/pool": "bad"}
    w = probing_world(policies=[PolicyView("default", 1, spec(quarantine={"labels": labels}))])
    assert w.node is not None
    # A label the operator never set stays through quarantine and acceptance.
    w.node = dataclasses.replace(w.node, labels={**w.node.labels, "gpuaccept.io/team": "ml"})
    w.finish_with_report(make_report(failing=["pcie_link"]))
    w.settle()
    assert w.status.applied_labels == ["gpuaccept.io/pool"]
    assert w.node.labels["gpuaccept.io/pool"] == "bad"
    w.node = dataclasses.replace(w.node, annotations={"gpuaccept.io/reprobe": "1"})
    w.settle()
    w.finish_with_report()
    w.settle()
    assert w.status.phase == Phase.ACCEPTED
    assert "gpuaccept.io/pool" not in w.node.labels
    assert w.node.labels["gpuaccept.io/team"] == "ml"
    assert w.status.applied_labels == []


def test_a_label_the_operator_never_set_survives_acceptance() -> None:
    # The policy names a key the node already carries from its owner: the operator
    # did not set it, so accepting the node leaves it (it used to remove it).
    labels = {"gpuaccept.io/pool": "quarantined"}
    w = World(policies=[PolicyView("default", 1, spec(quarantine={"labels": labels}))])
    assert w.node is not None
    w.node = dataclasses.replace(w.node, labels={**w.node.labels, "gpuaccept.io/pool": "gpu-a"})
    w.settle()
    w.finish_with_report()
    w.settle()
    assert w.status.phase == Phase.ACCEPTED
    assert w.node.labels["gpuaccept.io/pool"] == "gpu-a"


def test_an_old_quarantine_label_key_is_removed_after_a_policy_change() -> None:
    old = spec(quarantine={"labels": {"gpuaccept.io/old": "yes"}})
    w = probing_world(policies=[PolicyView("default", 1, old)])
    w.finish_with_report(make_report(failing=["pcie_link"]))
    w.settle()
    assert w.node is not None
    assert w.node.labels["gpuaccept.io/old"] == "yes"
    new = spec(quarantine={"labels": {"gpuaccept.io/new": "yes"}})
    w.policies = [PolicyView("default", 2, new)]
    w.settle()
    assert w.status.phase == Phase.QUARANTINED
    assert "gpuaccept.io/old" not in w.node.labels
    assert w.node.labels["gpuaccept.io/new"] == "yes"
    assert w.status.applied_labels == ["gpuaccept.io/new"]


def test_a_waiting_node_names_its_policy_at_once() -> None:
    w = World()
    assert w.node is not None
    w.node = dataclasses.replace(w.node, gpus=0)
    w.settle()
    assert (w.status.phase, w.status.reason, w.status.policy) == (
        Phase.PENDING,
        "WaitingForGPUs",
        "default",
    )
    assert w.status.waiting_since == w.now


def test_a_new_node_under_a_paused_policy_names_its_policy() -> None:
    w = World(policies=[PolicyView("default", 1, spec(paused=True))])
    w.settle()
    assert (w.status.phase, w.status.policy) == (Phase.PENDING, "default")


@pytest.mark.parametrize(
    ("on_timeout", "taints_after"),
    [
        ("KeepPendingTaint", ["gpuaccept.io/pending"]),
        ("RemovePendingTaint", []),
    ],
)
def test_a_node_that_never_advertises_gpus_stalls_at_the_deadline(
    on_timeout: str, taints_after: list[str]
) -> None:
    policy = spec(waitForGPUs={"timeoutSeconds": 600, "onTimeout": on_timeout})
    w = World(policies=[PolicyView("default", 1, policy)])
    assert w.node is not None
    w.node = dataclasses.replace(w.node, gpus=0)
    w.settle()
    assert w.log[-1].requeue_after == 600  # woken at the deadline
    w.advance(599)
    w.settle()
    assert w.status.phase == Phase.PENDING
    w.advance(1)
    w.settle()
    st = w.status
    assert (st.phase, st.reason) == (Phase.STALLED, "NoGPUsAdvertised")
    assert "does not tolerate the pending taint gpuaccept.io/pending" in (st.message or "")
    assert on_timeout in (st.message or "")
    assert w.taint_keys() == taints_after
    assert [e.reason for e in w.events] == ["NoGPUsAdvertised"]
    assert w.pods == {}
    w.advance(3600)
    assert w.plan().actions == ()  # stays Stalled, one Event
    # The device plugin is fixed: the node is probed, under the pending taint.
    w.node = dataclasses.replace(w.node, gpus=8)
    w.plan()
    w.settle()
    assert (w.status.phase, w.status.reason, w.status.waiting_since) == (
        Phase.PROBING,
        None,
        None,
    )
    assert w.taint_keys() == ["gpuaccept.io/pending"]
    w.finish_with_report()
    w.settle()
    assert w.status.phase == Phase.ACCEPTED


def test_a_stalled_node_waits_again_when_the_deadline_is_raised() -> None:
    w = World(policies=[PolicyView("default", 1, spec(waitForGPUs={"timeoutSeconds": 60}))])
    assert w.node is not None
    w.node = dataclasses.replace(w.node, gpus=0)
    w.settle()
    w.advance(60)
    w.settle()
    assert w.status.phase == Phase.STALLED
    w.policies = [PolicyView("default", 2, spec(waitForGPUs={"timeoutSeconds": 3600}))]
    w.settle()
    assert (w.status.phase, w.status.reason) == (Phase.PENDING, "WaitingForGPUs")
    assert w.status.waiting_since == T0  # the deadline still counts from the start


def test_the_first_bad_node_of_a_small_fleet_is_quarantined_under_a_percentage() -> None:
    w = probing_world(
        limit_counts=QuarantineLimitCounts(quarantined=0, matched=4),
        policies=[PolicyView("default", 1, spec(maxQuarantined="10%"))],
    )
    w.finish_with_report(make_report(failing=["pcie_link"]))
    w.settle()
    assert w.status.phase == Phase.QUARANTINED  # 10% of 4 rounds to 1, not 0
