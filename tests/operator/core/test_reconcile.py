"""The pure reconcile core, driven through an in-memory world (no API server): the
state machine as one table (phase x trigger -> next phase, actions, requeue), then
the sequences and the Node's side in detail."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from world import BOOT, PENDING, T0, World, make_report, spec

from gpuaccept.checks.verdict import Verdict
from gpuaccept.contracts.nodeacceptance import Phase
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


# ---------------------------------------------------------------- the state machine, as a table
#
# Each row: a world in some phase, a trigger, and what reconciling to a fixed point
# gives: the next phase (None: no NodeAcceptance) and reason, the trigger's first
# plan (its action kinds in order, or as a set), whether it asks for the quarantine
# limit's lock, the requeue once settled, the Node's taint keys, and what else the
# row checks. After settling, a further plan always has no writes.

ANNOTATION = "gpuaccept.io/reprobe"
PENDING_KEY, QUARANTINE_KEY = "gpuaccept.io/pending", "gpuaccept.io/quarantined"
UNSET: Any = object()


def world_with(*, gpus: int = 8, taints: tuple[Taint, ...] = (), **world_kwargs: Any) -> World:
    world = World(**world_kwargs)
    assert world.node is not None
    world.node = dataclasses.replace(world.node, gpus=gpus, taints=taints)
    return world


def decided(report: Any = None, **world_kwargs: Any) -> World:
    world = probing_world(**world_kwargs)
    world.finish_with_report(report)
    world.settle()
    return world


def quarantined(**world_kwargs: Any) -> World:
    world = decided(make_report(failing=["pcie_link"]), **world_kwargs)
    assert world.status.phase == Phase.QUARANTINED
    return world


def held_by_limit() -> World:
    counts = QuarantineLimitCounts(quarantined=5, matched=10)
    world = decided(make_report(failing=["cpu_governor"]), limit_counts=counts)
    assert (world.status.phase, world.status.reason) == (Phase.HELD, "BreakerOpen")
    return world


def policy(generation: int = 1, *, uid: str = "", **fields: Any) -> list[PolicyView]:
    return [PolicyView("default", generation, spec(**fields), uid=uid)]


def _settled(world: World) -> World:
    world.settle()
    return world


def stalled() -> World:
    world = world_with(gpus=0, policies=policy(waitForGPUs={"timeoutSeconds": 60}))
    world.settle()
    world.advance(60)
    world.settle()
    assert world.status.phase == Phase.STALLED
    return world


def nothing(_world: World) -> None:
    pass


def report(**report_kwargs: Any) -> Callable[[World], None]:
    return lambda world: world.finish_with_report(make_report(**report_kwargs))


def pod_ended(exit_code: int, reason: str = "Error") -> Callable[[World], None]:
    return lambda world: world.finish_pod(None, exit_code=exit_code, phase="Failed", reason=reason)


def later(seconds: float) -> Callable[[World], None]:
    return lambda world: world.advance(seconds)


def node(**changes: Any) -> Callable[[World], None]:
    def change(world: World) -> None:
        assert world.node is not None
        world.node = dataclasses.replace(world.node, **changes)

    return change


def policies(views: list[PolicyView]) -> Callable[[World], None]:
    return lambda world: setattr(world, "policies", views)


def limit(quarantined: int, matched: int) -> Callable[[World], None]:
    return lambda world: setattr(world, "limit_counts", QuarantineLimitCounts(quarantined, matched))


def pod(**changes: Any) -> Callable[[World], None]:
    def change(world: World) -> None:
        current = world.current_pod()
        world.pods[current.name] = dataclasses.replace(current, **changes)

    return change


def pod_lost(world: World) -> None:
    world.pods.clear()


def both(*triggers: Callable[[World], None]) -> Callable[[World], None]:
    def run(world: World) -> None:
        for trigger in triggers:
            trigger(world)

    return run


@dataclasses.dataclass(frozen=True)
class Transition:
    start: Callable[[], World]
    trigger: Callable[[World], None]
    phase: Phase | None
    reason: str | None = UNSET
    first: tuple[type, ...] | frozenset[type] | None = None
    lock: bool | None = None
    requeue: float | None = UNSET
    taints: list[str] | None = None
    pods: int | None = None
    status: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    also: Callable[[World], None] | None = None


def _accepted_side(w: World) -> None:
    assert w.node is not None
    assert w.node.labels["gpuaccept.io/acceptance"] == "accepted"
    assert w.node.condition == NodeCondition(
        "True", "Accepted", "all required GPU acceptance checks passed"
    )
    assert w.pods == {}
    assert w.status.report is not None
    assert w.status.probed_boot_id == BOOT
    # the pending key stays on record: the operator's whatever the record says, its
    # record not worth a status write of its own (nodecontext.applied_taints)
    assert w.status.applied_taints == [PENDING_KEY]
    assert [e.reason for e in w.events] == ["Accepted"]


def _quarantined_side(w: World) -> None:
    assert w.node is not None
    assert w.node.taints == (QUARANTINE,)
    assert w.node.labels["gpuaccept.io/acceptance"] == "quarantined"
    assert w.node.condition is not None
    assert (w.node.condition.status, w.node.condition.reason) == ("False", "PcieLinkFailed")
    warnings = [(e.kind, e.reason) for e in w.events if e.type == "Warning"]
    assert ("Node", "Quarantined") in warnings
    assert ("NodeAcceptance", "Quarantined") in warnings
    assert w.status.applied_taints == [PENDING_KEY, QUARANTINE_KEY]


def _noexecute_side(w: World) -> None:
    """taintEffect NoExecute: a NoSchedule taint and a drain through the Eviction API
    (core/phases/drain.py), never a NoExecute taint, which evicts past PodDisruptionBudgets."""
    assert w.node is not None
    assert w.node.taints == (Taint(QUARANTINE_KEY, "NoSchedule", "true"),)
    assert w.node.labels["team/gpu-bad"] == "yes"
    w.settle()
    assert w.status.drain is not None
    assert w.status.drain.done is not None


def _dry_run_side(w: World) -> None:
    assert w.status.held_action == "Quarantine"
    assert w.node is not None
    assert (w.node.taints, w.node.condition) == ((), None)
    assert w.node.labels == {"nvidia.com/gpu.present": "true"}
    for plan in w.log:
        assert not any(isinstance(a, PatchNodeTaintsLabels) for a in plan.actions)
    assert any(e.reason == "DryRun" for e in w.events)


def _rebooted_and_probed_again(w: World) -> None:
    assert (w.status.attempts, w.status.pod_serial) == (1, 2)
    w.finish_with_report(make_report(boot_id="boot-2"))
    w.settle()
    assert (w.status.phase, w.status.probed_boot_id) == (Phase.ACCEPTED, "boot-2")


def _stuck_terminating(w: World) -> None:
    assert "stuck terminating" in (w.status.message or "")


def _cannot_be_judged(w: World) -> None:
    assert "report cannot be judged: ValueError" in (w.status.message or "")


def _same_pod(w: World) -> None:
    assert w.status.probe_pod == w.current_pod().name


def _limit_event(w: World) -> None:
    assert any(e.reason == "BreakerOpen" for e in w.events)


def _annotation_gone(w: World) -> None:
    assert w.node is not None
    assert w.node.annotations == {}


def _new_labels(w: World) -> None:
    assert w.node is not None
    assert "gpuaccept.io/old" not in w.node.labels
    assert w.node.labels["gpuaccept.io/new"] == "yes"


def _judge_raises(report: object, policy: object) -> Verdict:
    raise ValueError("min_pcie_generation must be >= 0")


QUARANTINE_LABEL_POLICY = {
    "quarantine": {"taintEffect": "NoExecute", "labels": {"team/gpu-bad": "yes"}}
}
DRY_RUN_REPROBE = {"dryRun": True, "reprobe": {"onPolicyChange": "Reprobe"}}
OLD_LABELS = {"quarantine": {"labels": {"gpuaccept.io/old": "yes"}}}
NEW_LABELS = {"quarantine": {"labels": {"gpuaccept.io/new": "yes"}}}

TRANSITIONS = {
    # ---- a node joins
    "a node found in service gets its NodeAcceptance, the pending taint as the limit "
    "allows, then a probe": Transition(
        lambda: world_with(taints=()), nothing, Phase.PROBING, None,
        first=(CreateNodeAcceptance,), taints=[PENDING_KEY],
    ),
    "a node registered under the pending taint is not patched": Transition(
        lambda: world_with(taints=(PENDING,)), nothing, Phase.PROBING,
        first=(CreateNodeAcceptance,), taints=[PENDING_KEY],
    ),
    "no probe until the node advertises GPUs; it names its policy at once": Transition(
        lambda: world_with(gpus=0), nothing, Phase.PENDING, "WaitingForGPUs",
        taints=[PENDING_KEY], pods=0, status={"policy": "default", "waiting_since": T0},
    ),
    "a waiting node is probed once it advertises GPUs": Transition(
        lambda: world_with(gpus=0), both(lambda w: w.settle(), node(gpus=8)), Phase.PROBING,
        None, pods=1,
    ),
    "a new node under a paused policy waits out of service, naming its policy": Transition(
        lambda: World(policies=policy(paused=True)), nothing, Phase.PENDING,
        taints=[PENDING_KEY], pods=0, status={"policy": "default"},
    ),
    "a stalled node waits again when the deadline is raised": Transition(
        stalled, policies(policy(2, waitForGPUs={"timeoutSeconds": 3600})), Phase.PENDING,
        "WaitingForGPUs", status={"waiting_since": T0},  # still counted from the start
    ),
    # ---- verdicts
    "a healthy report accepts and untaints": Transition(
        probing_world, report(), Phase.ACCEPTED, None, taints=[], also=_accepted_side,
    ),
    "an accepted node is left as it is": Transition(
        accepted_world, nothing, Phase.ACCEPTED, None, first=(), requeue=None,
    ),
    "a failing report quarantines: reason, taint, label, Events, condition": Transition(
        probing_world, report(failing=["pcie_link"]), Phase.QUARANTINED, "PcieLinkFailed",
        lock=True, taints=[QUARANTINE_KEY], also=_quarantined_side,
    ),
    "the quarantine's labels, and a drain for the NoExecute effect": Transition(
        lambda: probing_world(policies=policy(**QUARANTINE_LABEL_POLICY)),
        report(failing=["gpu_count"]), Phase.QUARANTINED, also=_noexecute_side,
    ),
    "a report the judge cannot use is an attempt error": Transition(
        lambda: probing_world(judge=_judge_raises), report(), Phase.PENDING, "InvalidReport",
        taints=[PENDING_KEY], also=_cannot_be_judged,
    ),
    # ---- attempt errors
    "a failed pod is retried after the backoff": Transition(
        probing_world, pod_ended(137), Phase.PENDING, "ProbeFailed", requeue=10, pods=0,
    ),
    "a pod ended DeadlineExceeded is a timeout": Transition(
        probing_world, pod_ended(137, "DeadlineExceeded"), Phase.PENDING, "ProbeTimeout",
    ),
    "a probing node waits for its deadline": Transition(
        probing_world, nothing, Phase.PROBING, None, first=(), requeue=60 + 30,
    ),
    "no result by the deadline is a timeout": Transition(
        probing_world, later(91), Phase.PENDING, "ProbeTimeout", pods=0,
    ),
    "a pod stuck terminating past the deadline is a timeout": Transition(
        probing_world, both(pod(deleting=True), later(10_000)), Phase.PENDING, "ProbeTimeout",
        also=_stuck_terminating,
    ),
    "an image that cannot be pulled waits, no attempt spent": Transition(
        probing_world, pod(waiting_reason="ImagePullBackOff"), Phase.WAITING,
        "ImageUnavailable", taints=[PENDING_KEY], status={"attempts": 0},
    ),
    "a pod lost in a restart is created again under the same name": Transition(
        probing_world, pod_lost, Phase.PROBING, None, first=(PatchNAStatus, CreateProbePod),
        also=_same_pod,
    ),
    "a pod lost past the grace period waits, no attempt spent": Transition(
        probing_world, both(pod_lost, later(61)), Phase.WAITING, "ProbePodLost",
        status={"attempts": 0},
    ),
    # ---- the quarantine limit, dryRun, paused
    "a quarantine over the limit is held under the pending taint": Transition(
        lambda: probing_world(limit_counts=QuarantineLimitCounts(quarantined=5, matched=10)),
        report(failing=["cpu_governor"]), Phase.HELD, "BreakerOpen", lock=True,
        taints=[PENDING_KEY], status={"held_action": "Quarantine"}, also=_limit_event,
    ),
    "raising the limit lets a held quarantine through": Transition(
        held_by_limit, policies(policy(2, maxQuarantined=6)), Phase.QUARANTINED,
        "CpuGovernorFailed", taints=[QUARANTINE_KEY],
    ),
    "room under the limit lets a held quarantine through": Transition(
        held_by_limit, limit(4, 10), Phase.QUARANTINED, "CpuGovernorFailed",
    ),
    "a percentage limit: 2 of 20 is 10 %": Transition(
        lambda: probing_world(limit_counts=QuarantineLimitCounts(quarantined=1, matched=20),
                              policies=policy(maxQuarantined="10%")),
        report(failing=["pcie_link"]), Phase.QUARANTINED,
    ),
    "a percentage limit: 10 % of 4 nodes rounds to 1, not 0": Transition(
        lambda: probing_world(limit_counts=QuarantineLimitCounts(quarantined=0, matched=4),
                              policies=policy(maxQuarantined="10%")),
        report(failing=["pcie_link"]), Phase.QUARANTINED,
    ),
    "a quarantine moved to another policy takes a slot there": Transition(
        quarantined,
        both(policies([PolicyView("b", 1, spec())]), limit(5, 10)), Phase.HELD, "BreakerOpen",
        status={"policy": "b"},
    ),
    "dryRun holds the verdict and changes no taint or label": Transition(
        lambda: _settled(world_with(taints=(), policies=policy(dryRun=True))),
        report(failing=["pcie_link"]), Phase.HELD, "DryRun", also=_dry_run_side,
    ),
    "dryRun off applies the stored verdict without a new probe": Transition(
        lambda: decided(make_report(failing=["pcie_link"]), policies=policy(dryRun=True)),
        policies(policy(2)), Phase.QUARANTINED, status={"rejudged": True}, pods=0,
    ),
    "a dryRun verdict is re-judged under onPolicyChange Reprobe too": Transition(
        lambda: decided(policies=policy(**DRY_RUN_REPROBE)),
        policies(policy(2, reprobe={"onPolicyChange": "Reprobe"})), Phase.ACCEPTED,
        status={"rejudged": True}, pods=0,
    ),
    "a policy recreated under its name is a change": Transition(
        lambda: decided(policies=policy(dryRun=True, uid="uid-1")),
        policies(policy(1, uid="uid-2")), Phase.ACCEPTED, taints=[],
        status={"policy_uid": "uid-2"},
    ),
    "a paused policy starts nothing on a decided node": Transition(
        accepted_world,
        both(node(boot_id="boot-2", annotations={ANNOTATION: "1"}),
             policies(policy(2, paused=True))),
        Phase.ACCEPTED, first=(),
    ),
    # ---- re-probe and re-judge
    "a new bootID starts a new round": Transition(
        accepted_world, node(boot_id="boot-2"), Phase.PROBING, taints=[PENDING_KEY],
        also=_rebooted_and_probed_again,
    ),
    "the re-probe annotation starts a new round and is removed": Transition(
        accepted_world, node(annotations={ANNOTATION: "now"}), Phase.PROBING,
        "ReprobeRequested",
        also=_annotation_gone,
    ),
    "the re-probe annotation while probing is kept for after it": Transition(
        probing_world, node(annotations={ANNOTATION: ""}), Phase.PROBING, first=(),
    ),
    "the re-probe annotation set while probing starts a round after the verdict": Transition(
        probing_world, both(node(annotations={ANNOTATION: ""}), report()), Phase.PROBING,
        "ReprobeRequested", also=_annotation_gone,
    ),
    "a policy change re-judges the stored report": Transition(
        accepted_world, policies(policy(2, probe={"ncclAllreduce": {"minBusbwGBps": 500}})),
        Phase.QUARANTINED, "NcclAllreduceFailed", taints=[QUARANTINE_KEY],
        status={"rejudged": True, "policy_generation": 2}, pods=0,
    ),
    "a policy change under onPolicyChange Ignore": Transition(
        accepted_world, policies(policy(2, reprobe={"onPolicyChange": "Ignore"})),
        Phase.ACCEPTED,
    ),
    "a policy change under onPolicyChange Reprobe": Transition(
        accepted_world, policies(policy(2, reprobe={"onPolicyChange": "Reprobe"})),
        Phase.PROBING,
    ),
    "a new quarantine taint key replaces the old owned taint": Transition(
        quarantined, policies(policy(2, quarantine={"taintKey": "example.com/bad-gpu"})),
        Phase.QUARANTINED, taints=["example.com/bad-gpu"],
        status={"applied_taints": ["example.com/bad-gpu", PENDING_KEY]},
    ),
    "an old quarantine label key is removed after a policy change": Transition(
        lambda: quarantined(policies=policy(**OLD_LABELS)), policies(policy(2, **NEW_LABELS)),
        Phase.QUARANTINED, status={"applied_labels": ["gpuaccept.io/new"]}, also=_new_labels,
    ),
    # ---- policies, deletion
    "a deleted node takes its NodeAcceptance and pods along": Transition(
        probing_world, lambda w: setattr(w, "node", None), None,
        first=frozenset({DeleteNodeAcceptance, DeleteProbePod}), pods=0,
    ),
    "two policies: no action": Transition(
        lambda: World(policies=[PolicyView("a", 1, spec()), PolicyView("b", 1, spec())]),
        nothing, None, first=(),
    ),
    "no policy: no action": Transition(lambda: World(policies=[]), nothing, None, first=()),
    "an invalid policy: no action": Transition(
        lambda: World(policies=[PolicyView("a", 1, None, "bad")]), nothing, None, first=(),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", TRANSITIONS.values(), ids=TRANSITIONS.keys())
def test_transition(case: Transition) -> None:
    world = case.start()
    case.trigger(world)
    plan = world.plan()
    if case.first is not None:
        kinds = tuple(type(a) for a in plan.actions)
        assert (frozenset(kinds) if isinstance(case.first, frozenset) else kinds) == case.first
    if case.lock is not None:
        assert plan.needs_limit_lock is case.lock
    world.settle()
    settled = world.plan()
    assert settled.actions == ()
    if case.phase is None:
        assert world.na is None
    else:
        assert world.status.phase == case.phase, world.status
    if case.reason is not UNSET:
        assert world.status.reason == case.reason
    if case.requeue is not UNSET:
        assert settled.requeue_after == (
            pytest.approx(case.requeue) if case.requeue is not None else None
        )
    if case.taints is not None:
        assert world.taint_keys() == case.taints
    if case.pods is not None:
        assert len(world.pods) == case.pods
    for field, value in case.status.items():
        assert getattr(world.status, field) == value, field
    if case.also is not None:
        case.also(world)


# ------------------------------------------------ sequences, and the Node's side in detail


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


def test_manual_taint_and_cordon_survive_acceptance() -> None:
    world = World()
    assert world.node is not None
    manual = Taint("example.com/maintenance", "NoSchedule", "x")
    # cordoned, and a probe asked for (else it waits, Cordoned)
    asked = {"gpuaccept.io/reprobe": ""}
    world.node = dataclasses.replace(
        world.node, taints=(manual, PENDING), unschedulable=True, annotations=asked
    )
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
    # the probe pod tolerates it (else the node waits, UntoleratedTaint)
    world.config = dataclasses.replace(
        world.config, extra_tolerations=({"key": "example.com/drain", "operator": "Exists"},)
    )
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


def test_stale_pods_deleted_before_a_new_attempt() -> None:
    world = World()
    world.apply(world.plan())  # NA + taint
    world.place_pods(PodView("gpuaccept-probe-gpu-1-7", phase="Running"))  # an old one of ours
    plan = world.plan()
    assert [type(a) for a in plan.actions] == [DeleteProbePod]
    world.apply(plan)
    world.settle()
    assert len(world.pods) == 1


def test_refused_pod_creation_waits_with_the_api_message() -> None:
    world = probing_world()
    world.pods.clear()  # the API server refused the pod
    plan = reconcile(
        dataclasses.replace(world.observe(), pod_create_error='serviceaccount "x" not found'),
        world.judge,
    )
    world.apply(plan)
    assert world.status.phase == Phase.WAITING
    assert world.status.reason == "PodRefused"
    assert world.status.attempts == 0
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


def test_a_node_that_leaves_accepted_is_no_longer_labelled_accepted() -> None:
    # accepted, rebooted (out of service from then on), the new probe fails
    w = accepted_world()
    assert w.node is not None
    assert w.node.labels["gpuaccept.io/acceptance"] == "accepted"
    assert w.node.condition is not None
    assert w.node.condition.status == "True"
    w.node = dataclasses.replace(w.node, boot_id="boot-2")
    w.settle()
    assert "gpuaccept.io/acceptance" not in w.node.labels  # re-probing: not accepted
    assert w.node.condition is not None
    assert w.node.condition.status == "Unknown"
    # meanwhile other nodes fill the limit: this node was counted out of service when
    # its round began, so its quarantine changes no capacity and goes through
    w.limit_counts = QuarantineLimitCounts(quarantined=5, matched=10)
    w.finish_with_report(make_report(boot_id="boot-2", failing=["cpu_governor"]))
    w.settle()
    assert (w.status.phase, w.status.reason) == (Phase.QUARANTINED, "CpuGovernorFailed")
    assert w.node.labels.get("gpuaccept.io/acceptance") == "quarantined"
    assert w.node.condition.status == "False"


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
    w.node = dataclasses.replace(w.node, gpus=0, gpu_capacity=0)
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
    w.node = dataclasses.replace(w.node, gpus=8, gpu_capacity=8)
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


def test_a_verdict_is_the_last_status_write_of_the_probe() -> None:
    """The verdict's status write records everything: the pass after it (the probe pod
    deleted, the pending taint off the Node) writes no status only to drop the
    pending key's record (issue 41: a write whose content the next write makes anyway),
    and the pending key it recorded stays the operator's to remove."""
    w = World()
    w.settle()
    w.finish_with_report()
    verdict = w.plan()
    assert "verdict" in verdict.note
    w.apply(verdict)
    assert not w.settle(3).actions
    writes = [p.note for p in w.log if any(isinstance(a, PatchNAStatus) for a in p.actions)]
    assert writes[-1] == verdict.note
    assert w.taint_keys() == []
    assert w.status.applied_taints == [PENDING_KEY]
