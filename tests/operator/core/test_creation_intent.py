"""Objects the operator cannot own after a crash (issue 42, item 9): the intent to
create a pod is on record (its name and the digest of a nonce) before the create,
and the pod carries the nonce, so a pod created just before a restart, its UID never
recorded, is told from a squatter's and deleted unread (core/creationintent.py).
An operator killed at each step: before the create, between the create and the
record of its UID, after the record."""

from __future__ import annotations

import dataclasses

import pytest
from fabric_pods import CONFIG, SPEC, T0, na_uid
from world import World, make_report

from gpuaccept.contracts.api import CREATION_NONCE_ANNOTATION
from gpuaccept.contracts.nodeacceptance import (
    MAX_CREATION_INTENTS,
    CreationIntent,
    FabricStatus,
    NodeAcceptanceStatus,
    OwnedPod,
    Phase,
)
from gpuaccept.contracts.report import encode_termination_message
from gpuaccept.operator.core import CreateProbePod, DeleteProbePod, Plan, PodView
from gpuaccept.operator.core.creationintent import (
    POD,
    creation_nonce,
    intend,
    intended,
    intended_create,
    nonce_digest,
    settled,
)
from gpuaccept.operator.core.fabric.policypass import (
    FabricMember,
    FabricSnapshot,
    plan_fabric_pass,
)
from gpuaccept.operator.core.model import NAView, NodeView, PatchNAStatus, PolicyView
from gpuaccept.operator.core.podidentity import REASON_POD_NAME_TAKEN, split_pods
from gpuaccept.operator.core.transitions import EVENT_CRASH_WINDOW_POD

NAME = "gpuaccept-probe-gpu-1-1"  # the first attempt's pod
SECOND = "gpuaccept-probe-gpu-1-2"

# --------------------------------------------------------------------------- the nonce


def test_the_status_keeps_only_the_digest_of_the_nonce() -> None:
    nonce = creation_nonce("seed", POD, NAME)
    st = intend(NodeAcceptanceStatus(), POD, NAME, nonce)
    assert st.creation_intents == [
        CreationIntent(kind=POD, name=NAME, nonce_digest=nonce_digest(nonce))
    ]
    assert nonce not in st.to_wire().__repr__()
    assert len(nonce) == 32
    assert set(nonce) <= set("0123456789abcdef")  # a label-safe value


def test_the_nonce_depends_on_the_seed_and_the_name() -> None:
    nonces = {
        creation_nonce(seed, kind, name)
        for seed in ("a", "b")
        for kind in (POD, "ResourceClaim")
        for name in (NAME, SECOND)
    }
    assert len(nonces) == 8


def test_intents_are_bounded_and_dropped_once_their_uid_is_on_record() -> None:
    st = NodeAcceptanceStatus()
    for i in range(MAX_CREATION_INTENTS + 3):
        st = intend(st, POD, f"p{i}", f"n{i}")
    names = [e.name for e in st.creation_intents]
    assert names == [f"p{i}" for i in range(3, MAX_CREATION_INTENTS + 3)]  # newest kept
    last = f"p{MAX_CREATION_INTENTS + 2}"
    st = intend(st, POD, last, "another")  # a second intent under one name: both kept
    assert [e.name for e in st.creation_intents].count(last) == 2
    left = settled(st.creation_intents, POD, [last, "p5"])
    assert {e.name for e in left} == {f"p{i}" for i in range(4, MAX_CREATION_INTENTS + 2)} - {"p5"}
    assert settled(st.creation_intents, "ResourceClaim", ["p5"]) == st.creation_intents


INTENTS = [CreationIntent(kind=POD, name=NAME, nonce_digest=nonce_digest("n-1"))]
MATCH = {
    "the recorded nonce": (NAME, "n-1", True),
    "another nonce": (NAME, "n-2", False),
    "no nonce": (NAME, "", False),
    "the digest itself, copied from the status": (NAME, nonce_digest("n-1"), False),
    "the nonce under another name": (SECOND, "n-1", False),
}


@pytest.mark.parametrize(("name", "nonce", "ours"), MATCH.values(), ids=MATCH.keys())
def test_only_the_recorded_nonce_under_its_name_is_intended(
    name: str, nonce: str, ours: bool
) -> None:
    assert intended(INTENTS, POD, name, nonce) is ours
    assert intended(INTENTS, "ResourceClaim", name, nonce) is False


def _pod(nonce: str, uid: str = "u-1") -> PodView:
    return PodView(name=NAME, uid=uid, node_name="gpu-1", owner_uid="uid-na", nonce=nonce)


SPLIT = {
    # pod, UID on record, outcome
    "intended, no UID on record: the operator's crash-window pod": (_pod("n-1"), None, "crashed"),
    "intended, its UID on record: its own": (_pod("n-1"), "u-1", "ours"),
    "intended nonce, another UID on record: a squatter's": (_pod("n-1", "u-2"), "u-1", "foreign"),
    "another nonce, no UID on record: a squatter's": (_pod("n-2"), None, "foreign"),
    "no nonce, no UID on record: a squatter's": (_pod(""), None, "foreign"),
}  # fmt: skip


@pytest.mark.parametrize(("pod", "uid", "outcome"), SPLIT.values(), ids=SPLIT.keys())
def test_a_pod_under_an_intended_name_is_the_operators_only_with_its_nonce(
    pod: PodView, uid: str | None, outcome: str
) -> None:
    owned = [OwnedPod(name=NAME, uid=uid, shape=pod.shape)] if uid else []
    status = NodeAcceptanceStatus(owned_pods=owned, creation_intents=INTENTS)
    split = split_pods([pod], status, {}, node="gpu-1", owner="uid-na")
    found = {
        "crashed": split.crashed,
        "ours": split.ours,
        "foreign": tuple(f.pod for f in split.foreign),
    }
    assert {k: v for k, v in found.items() if v} == {outcome: (pod,)}
    if outcome == "foreign":
        assert split.foreign[0].reason == REASON_POD_NAME_TAKEN


def test_every_create_carries_the_nonce_of_the_intent_on_record() -> None:
    st, create = intended_create(NodeAcceptanceStatus(), "s", NAME, {"metadata": {"name": NAME}})
    nonce = create.manifest["metadata"]["annotations"][CREATION_NONCE_ANNOTATION]
    assert intended(st.creation_intents, POD, NAME, nonce)


# --------------------------------------------------------------------------- the node


def _to_the_create(world: World) -> Plan:
    """Reconcile and apply until the plan that creates a probe pod (not applied)."""
    for _ in range(10):
        plan = world.plan()
        if any(isinstance(a, CreateProbePod) for a in plan.actions):
            return plan
        world.apply(plan)
    raise AssertionError("no probe pod created")


def _nonce(world: World, name: str) -> str:
    return str(world.bodies[name]["metadata"]["annotations"][CREATION_NONCE_ANNOTATION])


def _decided(world: World) -> None:
    """The probe pod on the node reports, the node is accepted, no pod left."""
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.pods == {}, "a probe pod was left behind"


def test_every_probe_pod_create_follows_the_write_of_its_intent() -> None:
    world = World()
    plan = _to_the_create(world)
    kinds = [type(a) for a in plan.actions]
    write = next(a for a in plan.actions if isinstance(a, PatchNAStatus))
    create = next(a for a in plan.actions if isinstance(a, CreateProbePod))
    assert kinds.index(PatchNAStatus) < kinds.index(CreateProbePod)
    nonce = create.manifest["metadata"]["annotations"][CREATION_NONCE_ANNOTATION]
    assert intended(write.status.creation_intents, POD, create.name, nonce)


def test_killed_between_the_intent_and_the_create() -> None:
    world = World()
    plan = _to_the_create(world)
    world.apply(Plan(actions=tuple(a for a in plan.actions if not isinstance(a, CreateProbePod))))
    assert world.pods == {}
    assert world.status.creation_intents
    world.restart()
    world.settle()
    assert world.status.probe_pod == NAME  # the same attempt, its pod created now
    assert _nonce(world, NAME)
    assert world.status.owned_pods[0].name == NAME
    assert world.status.creation_intents == []  # served
    _decided(world)
    assert world.status.attempts == 1


def test_killed_between_the_create_and_the_record_of_its_uid() -> None:
    world = World()
    world.apply(_to_the_create(world))
    world.finish_with_report()  # even a passing report is never read from it
    world.restart()  # the create's answer is forgotten; the status has only the intent
    assert world.status.owned_pods == []
    plan = world.plan()
    assert DeleteProbePod(NAME, force=True) in plan.actions
    world.apply(plan)
    st = world.status
    assert (st.phase, st.attempts, st.probe_pod) == (Phase.PENDING, 0, None)
    assert [e.reason for e in world.events][-1] == EVENT_CRASH_WINDOW_POD
    assert NAME not in world.pods
    world.settle()
    assert world.status.probe_pod == SECOND  # a new attempt, a new name
    _decided(world)
    assert (world.status.attempts, world.status.pod_serial) == (1, 2)
    # the crash-window pod's intent stays (bounded); its name is never used again
    assert [e.name for e in world.status.creation_intents] == [NAME]


def test_killed_after_the_record() -> None:
    world = World()
    world.apply(_to_the_create(world))
    world.settle()  # the UID on record, the intent served
    assert world.status.owned_pods
    assert world.status.creation_intents == []
    world.restart()
    _decided(world)
    assert world.status.pod_serial == 1


def test_a_squatter_under_the_intended_name_without_the_nonce_is_left() -> None:
    world = World()
    plan = _to_the_create(world)
    world.apply(Plan(actions=tuple(a for a in plan.actions if not isinstance(a, CreateProbePod))))
    digest = world.status.creation_intents[0].nonce_digest
    world.pods[NAME] = PodView(
        name=NAME, phase="Succeeded", terminated=True, exit_code=0,
        message=encode_termination_message(make_report()), uid="u-squatter",
        node_name="gpu-1", owner_uid="uid-na", nonce=digest,  # all the status shows
    )  # fmt: skip
    world.restart()
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.WAITING, REASON_POD_NAME_TAKEN)
    assert NAME in world.pods  # never deleted, never read


# --------------------------------------------------------------------------- fabric


def _waiting(name: str, pods: tuple[PodView, ...] = (), **status: object) -> FabricMember:
    st = NodeAcceptanceStatus(
        phase=Phase.FABRIC,
        policy="fab",
        fabric=FabricStatus(waiting_since=T0, summary="waiting"),
        applied_taints=["gpuaccept.io/pending"],
        **status,  # type: ignore[arg-type]
    )
    return FabricMember(
        node=NodeView(name=name, boot_id=f"boot-{name}", gpus=8, gpu_capacity=8),
        na=NAView(name=name, status=st, resource_version=f"rv-{name}", uid=na_uid(name)),
        pods=pods,
    )


def _pass(*members: FabricMember) -> tuple[tuple[str, object], ...]:
    snapshot = FabricSnapshot(
        PolicyView(name="fab", spec=SPEC), SPEC, members, T0, CONFIG, nonce_seed="s"
    )
    return plan_fabric_pass(snapshot).writes


def test_a_fabric_pod_create_follows_the_write_of_its_intent_on_its_node() -> None:
    writes = _pass(*(_waiting(f"f{i}") for i in range(2)))
    (node, create) = next((n, a) for n, a in writes if isinstance(a, CreateProbePod))
    assert isinstance(create, CreateProbePod)
    index = [a for _n, a in writes].index(create)
    (status,) = [a.status for n, a in writes[:index] if isinstance(a, PatchNAStatus) and n == node]
    nonce = create.manifest["metadata"]["annotations"][CREATION_NONCE_ANNOTATION]
    assert intended(status.creation_intents, POD, create.name, nonce)


def test_a_crash_window_fabric_pod_is_deleted_by_its_nodes_reconcile() -> None:
    writes = _pass(*(_waiting(f"f{i}") for i in range(2)))
    node, create = next((n, a) for n, a in writes if isinstance(a, CreateProbePod))
    assert isinstance(create, CreateProbePod)
    (status,) = [a.status for n, a in writes if isinstance(a, PatchNAStatus) and n == node]
    nonce = create.manifest["metadata"]["annotations"][CREATION_NONCE_ANNOTATION]
    pod = PodView(name=create.name, uid="u-f", node_name=node, owner_uid=na_uid(node), nonce=nonce)
    split = split_pods([pod], status, {}, node=node, owner=na_uid(node))
    assert split.crashed == (pod,)
    # the pass neither reads nor pairs it: not among its members' pods
    member = dataclasses.replace(_waiting(node, (pod,)), na=NAView(
        name=node, status=status, resource_version="rv", uid=na_uid(node)))  # fmt: skip
    again = _pass(member, _waiting("f9"))
    assert not any(isinstance(a, DeleteProbePod) for _n, a in again)


def _crash_pod(world: World, name: str, *, deleting: bool = False) -> PodView:
    """A pod the operator created on the node just before a restart: its intent on
    record, its nonce carried, no UID on record."""
    assert world.na is not None
    status = intend(world.status, POD, name, "n-crash")
    world.na = dataclasses.replace(world.na, status=status)
    pod = PodView(
        name=name, uid="u-crash", node_name="gpu-1", owner_uid=world.na.uid,
        nonce="n-crash", deleting=deleting, phase="Running",
    )  # fmt: skip
    world.pods[name] = pod
    return pod


def test_a_decided_node_goes_on_while_its_crash_window_pod_terminates() -> None:
    world = World()
    _decided(world)
    _crash_pod(world, "gpuaccept-watch-gpu-1-1")
    plan = world.plan()
    assert DeleteProbePod("gpuaccept-watch-gpu-1-1") in plan.actions
    assert not plan.note.startswith("crash-window")  # its phase planned too
    _crash_pod(world, "gpuaccept-watch-gpu-1-1", deleting=True)  # stuck terminating
    assert not world.plan().note.startswith("crash-window")


def test_an_undecided_node_waits_for_its_crash_window_pod_to_go() -> None:
    world = World()
    world.apply(_to_the_create(world))
    world.restart()
    world.apply(world.plan())  # deleted, the attempt given back
    _crash_pod(world, NAME, deleting=True)  # still terminating
    plan = world.plan()
    assert plan.note.startswith("crash-window")
    assert not any(isinstance(a, CreateProbePod) for a in plan.actions)


def test_a_deleted_nodes_crash_window_pod_goes_with_it() -> None:
    world = World()
    world.apply(_to_the_create(world))
    world.restart()
    world.node = None
    assert DeleteProbePod(NAME, force=True) in world.plan().actions
