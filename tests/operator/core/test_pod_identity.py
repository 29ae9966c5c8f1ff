"""Only the operator's own probe pod speaks for a node (issue 29, item 1): a pod is
trusted by the UID the create's answer carried and the shape it was created with,
never by its name or labels. A pod under the attempt's name that the operator did
not create is hostile: the node waits (never a verdict), the pod is left for a
person, and the next attempt takes a new name."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from world import World, make_report, pod_body

from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, OwnedPod, Phase
from gpuaccept.contracts.report import encode_termination_message
from gpuaccept.operator.core import CreateProbePod, DeleteProbePod, PodView
from gpuaccept.operator.core.model import CreatedPod
from gpuaccept.operator.core.podidentity import (
    REASON_POD_ALTERED,
    REASON_POD_NAME_TAKEN,
    mounts_token,
    recorded,
    shape_digest,
    split_pods,
)
from gpuaccept.operator.views import pod_view

NAME = "gpuaccept-probe-gpu-1-1"  # the first attempt's pod
MANIFEST: dict[str, Any] = {
    "metadata": {
        "name": NAME,
        "ownerReferences": [{"kind": "NodeAcceptance", "uid": "uid-na", "controller": True}],
    },
    "spec": {
        "nodeName": "gpu-1",
        "serviceAccountName": "gpuaccept-probe",
        "automountServiceAccountToken": False,
        "containers": [
            {"name": "probe", "image": "probe:1", "command": ["gpuaccept", "probe"], "args": []}
        ],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    },
}
SHAPE = shape_digest(MANIFEST)
OURS = pod_view(pod_body(MANIFEST, uid="u-1"))
RECORD = OwnedPod(name=NAME, uid="u-1", shape=SHAPE)


def changed(path: str, value: object) -> dict[str, Any]:
    """MANIFEST with ``spec.<path>`` (dotted, list indexes as numbers) set to ``value``."""
    body: dict[str, Any] = {
        "metadata": dict(MANIFEST["metadata"]),
        "spec": {**MANIFEST["spec"], "containers": [dict(MANIFEST["spec"]["containers"][0])]},
    }
    target: Any = body["spec"]
    *parents, last = path.split(".")
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    target[last] = value
    return body


SHAPE_CHANGES = {
    "another image": ("containers.0.image", "evil:1"),
    "another command": ("containers.0.command", ["sh", "-c", "echo ok"]),
    "arguments added": ("containers.0.args", ["--profile", "healthy.yaml"]),
    "a token mounted": ("automountServiceAccountToken", True),
    "another node": ("nodeName", "gpu-2"),
    "another ServiceAccount": ("serviceAccountName", "default"),
    "host network": ("hostNetwork", True),
    "a projected token volume": ("volumes", [{"name": "t", "projected": {"sources": []}}]),
    "privileged": ("containers.0.securityContext", {"privileged": True}),
}


@pytest.mark.parametrize(("path", "value"), SHAPE_CHANGES.values(), ids=SHAPE_CHANGES.keys())
def test_every_identity_field_changes_the_shape(path: str, value: object) -> None:
    assert shape_digest(changed(path, value)) != SHAPE


def test_fields_the_api_server_adds_leave_the_shape_as_created() -> None:
    served = pod_body(MANIFEST, uid="u-1")
    served["metadata"] = {**served["metadata"], "resourceVersion": "7", "generation": 1}
    served["spec"] = {**served["spec"], "schedulerName": "default-scheduler", "priority": 0}
    served["status"] = {"phase": "Pending"}
    assert shape_digest(served) == SHAPE


def test_no_token_only_with_automount_false_and_no_token_volume() -> None:
    assert not mounts_token(MANIFEST["spec"])
    assert mounts_token({**MANIFEST["spec"], "automountServiceAccountToken": None})
    secret = {"name": "s", "secret": {"secretName": "x"}}
    assert mounts_token({**MANIFEST["spec"], "volumes": [secret]})


# One row per pod as found on node gpu-1: (pod, status record, create's answer, reason or None)
CASES: dict[str, tuple[PodView, OwnedPod | None, CreatedPod | None, str | None]] = {
    "recorded": (OURS, RECORD, None, None),
    "just created": (OURS, None, CreatedPod("u-1", SHAPE), None),
    "no record, no create (a squatter, or a restart before the record)":
        (OURS, None, None, REASON_POD_NAME_TAKEN),
    "another UID under the recorded name": (
        dataclasses.replace(OURS, uid="u-2"), RECORD, None, REASON_POD_NAME_TAKEN),
    "another UID than the create's answer": (
        dataclasses.replace(OURS, uid="u-2"), None, CreatedPod("u-1", SHAPE),
        REASON_POD_NAME_TAKEN),
    "its image changed after the create": (
        pod_view(pod_body(changed("containers.0.image", "evil:1"), uid="u-1")), RECORD, None,
        REASON_POD_ALTERED),
    "a webhook mounted a token at the create": (
        pod_view(pod_body(changed("automountServiceAccountToken", True), uid="u-1")), None,
        CreatedPod("u-1", SHAPE), REASON_POD_ALTERED),
    "bound to another node": (
        dataclasses.replace(OURS, node_name="gpu-2"), RECORD, None, REASON_POD_ALTERED),
    "without the NodeAcceptance as controller": (
        dataclasses.replace(OURS, owner_uid=""), RECORD, None, REASON_POD_ALTERED),
}  # fmt: skip


@pytest.mark.parametrize(("pod", "record", "answer", "reason"), CASES.values(), ids=CASES.keys())
def test_only_the_pod_on_record_is_the_operators_own(
    pod: PodView, record: OwnedPod | None, answer: CreatedPod | None, reason: str | None
) -> None:
    split = split_pods(
        [pod],
        NodeAcceptanceStatus(owned_pods=[record] if record else []),
        {NAME: answer} if answer else {},
        node="gpu-1",
        owner="uid-na",
    )
    if reason is None:
        assert split.ours == (pod,)
        assert split.foreign == ()
        assert split.to_record == (() if record else (RECORD,))
    else:
        assert split.ours == ()
        assert [(f.pod, f.reason) for f in split.foreign] == [(pod, reason)]
        assert split.to_record == ()


def test_records_of_pods_gone_are_dropped_when_a_new_one_is_added() -> None:
    old = OwnedPod(name="old", uid="u-0", shape="s")
    live = OwnedPod(name="live", uid="u-1", shape="s")
    new = OwnedPod(name="new", uid="u-2", shape="s")
    assert recorded([old, live], [new], present=["live", "new"]) == [live, new]
    many = [OwnedPod(name=f"p{i}", uid=f"u{i}", shape="s") for i in range(20)]
    assert len(recorded(many, [], present=[p.name for p in many])) == 16


# --------------------------------------------------------------------------- the node


def forged_pod(name: str = NAME, *, node: str = "gpu-1") -> PodView:
    """A squatter's pod: the probe's name and labels, pinned to the node, "succeeded"
    with a passing report built from what the Node object shows."""
    return PodView(
        name=name,
        phase="Succeeded",
        serial=1,
        terminated=True,
        exit_code=0,
        message=encode_termination_message(make_report()),
        uid="u-squatter",
        node_name=node,
    )


def test_a_squatted_attempt_pod_never_accepts_and_is_left_for_a_person() -> None:
    world = World()
    world.pods[NAME] = forged_pod()  # there before the operator creates the attempt's pod
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.WAITING, REASON_POD_NAME_TAKEN)
    assert st.attempts == 0  # the attempt is given back
    assert NAME in (st.message or "")
    assert world.pods[NAME] == forged_pod()  # left in place, never deleted
    assert not any(isinstance(a, DeleteProbePod) for p in world.log for a in p.actions)
    warnings = [e for e in world.events if e.reason == REASON_POD_NAME_TAKEN]
    assert {e.kind for e in warnings} == {"Node", "NodeAcceptance"}
    assert all(e.type == "Warning" and NAME in e.message for e in warnings)
    assert world.taint_keys() == ["gpuaccept.io/pending"]  # not accepted, not quarantined
    # the retry takes a new name; its own pod decides
    world.advance((st.next_attempt_time - world.now).total_seconds())  # type: ignore[operator]
    world.settle()
    assert world.status.phase == Phase.PROBING
    assert world.status.probe_pod == "gpuaccept-probe-gpu-1-2"
    world.pods.pop(NAME)  # a person deleted it
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED


def test_a_squat_with_another_node_name_waits_and_never_convicts() -> None:
    world = World()
    world.elsewhere.add(NAME)  # the attempt's name, bound to another node
    for _ in range(4):  # however long it lasts
        world.settle()
        st = world.status
        assert (st.phase, st.reason) == (Phase.WAITING, REASON_POD_NAME_TAKEN), st
        assert st.attempts == 0
        world.elsewhere.add(f"gpuaccept-probe-gpu-1-{st.pod_serial + 1}")  # the next one too
        world.advance((st.next_attempt_time - world.now).total_seconds())  # type: ignore[operator]
    assert world.taint_keys() == ["gpuaccept.io/pending"]
    assert "gpuaccept.io/acceptance" not in (world.node.labels if world.node else {})


def test_a_pod_recreated_under_the_attempts_name_is_not_read() -> None:
    world = World()
    world.settle()
    assert world.status.owned_pods == [
        OwnedPod(name=NAME, uid=f"uid-{NAME}", shape=world.created[NAME].shape)
    ]
    world.pods[NAME] = forged_pod()  # the operator's pod deleted, another in its place
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.WAITING, REASON_POD_NAME_TAKEN)
    assert f"UID uid-{NAME} on record" in (st.message or "")
    assert NAME in world.pods


def test_the_operators_pod_altered_after_its_create_is_not_read() -> None:
    world = World()
    world.settle()
    body = world.bodies[NAME]
    container = {**body["spec"]["containers"][0], "image": "evil:1"}
    altered = {**body, "spec": {**body["spec"], "containers": [container]}}
    world.pods[NAME] = dataclasses.replace(
        pod_view(altered), phase="Succeeded", terminated=True, exit_code=0,
        message=encode_termination_message(make_report()),
    )  # fmt: skip
    world.settle()
    assert (world.status.phase, world.status.reason) == (Phase.WAITING, REASON_POD_ALTERED)
    assert NAME in world.pods


def test_a_restart_after_the_record_resumes_with_the_same_pod() -> None:
    world = World()
    world.settle()
    world.restart()  # the create's answer is forgotten; the status has it
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.status.pod_serial == 1


def test_a_pod_neither_recorded_nor_intended_is_never_read() -> None:
    """The record of the pod's UID, and of the intent to create it, gone from the status
    (a restart between the create and the record keeps the intent: its pod is deleted
    unread, tests/operator/core/test_creation_intent.py)."""
    world = World()
    world.settle()
    plan = world.plan()
    assert plan.actions == ()
    assert world.status.creation_intents == []  # served: dropped with the UID's record
    assert world.na is not None
    status = world.status.model_copy(update={"owned_pods": []})
    world.na = dataclasses.replace(world.na, status=status)
    world.restart()
    world.finish_with_report()
    world.settle()
    assert (world.status.phase, world.status.reason) == (Phase.WAITING, REASON_POD_NAME_TAKEN)
    assert NAME in world.pods  # unverified: left, not read


def test_the_create_is_recorded_in_one_status_write_right_after_it() -> None:
    world = World()
    world.apply(world.plan())  # NodeAcceptance, pending taint
    world.apply(world.plan())  # status Probing, then the pod
    assert any(isinstance(a, CreateProbePod) for a in world.log[-1].actions)
    plan = world.plan()
    assert [type(a).__name__ for a in plan.actions] == ["PatchNAStatus"]
    world.apply(plan)
    assert [p.name for p in world.status.owned_pods] == [NAME]
    assert world.plan().actions == ()
