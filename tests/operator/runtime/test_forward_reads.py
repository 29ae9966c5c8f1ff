"""A rollback leaves every node where it was: a NodeAcceptance status and a stored
report written by a newer release (fields this one does not know) are read, not
reset; a status that cannot be read at all keeps its applied taints and labels, the
pods it owns and its release record."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from world import BOOT, T0, World, make_report

from gpuaccept.contracts.nodeacceptance import (
    CheckSummary,
    NodeAcceptanceStatus,
    Phase,
    Reason,
)
from gpuaccept.operator.core import (
    NAView,
    PatchNAStatus,
    PatchNodeTaintsLabels,
    QuarantineLimitCounts,
    Taint,
)
from gpuaccept.operator.core.conditions import with_accepted_condition
from gpuaccept.operator.metrics import node_samples
from gpuaccept.operator.views import cached_acceptance

QUARANTINE = Taint("gpuaccept.io/quarantined", "NoSchedule", "true")


def _stored(phase: Phase, failing: tuple[str, ...] = ()) -> dict[str, Any]:
    report = make_report("gpu-1", BOOT, failing)
    status = NodeAcceptanceStatus(
        phase=phase,
        reason="PcieLinkFailed" if failing else None,
        reasons=[Reason(check=failing[0], reason="PcieLinkFailed")] if failing else [],
        checks=[CheckSummary(check=r.check, status=r.status) for r in report.results],
        policy="default",
        policy_generation=1,
        last_probe_time=T0,
        probed_boot_id=BOOT,
        report=report,
        applied_taints=["gpuaccept.io/quarantined"] if failing else [],
        node_uid="uid-node",
    )
    status = with_accepted_condition(status, T0)  # as this release writes it
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


def _as_a_newer_release_writes(wire: dict[str, Any]) -> dict[str, Any]:
    """New fields at every level: the status, a reason, a check summary, the report
    envelope and one of its results."""
    newer: dict[str, Any] = json.loads(json.dumps(wire))
    newer["capacityBudget"] = {"window": "1h", "used": 3}
    newer["installationID"] = "c0ffee"
    for reason in newer.get("reasons", []):
        reason["severity"] = "high"
    newer["checks"][0]["durationS"] = 1.5
    newer["report"]["attestation"] = {"kind": "tpm", "quote": "..."}
    newer["report"]["results"][0]["sampledAt"] = "2027-01-01T00:00:00Z"
    return newer


def _body(status: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu-1", "resourceVersion": "5", "uid": "na-uid"},
        "spec": {"nodeName": "gpu-1"},
        "status": status,
    }


@pytest.mark.parametrize(
    ("phase", "failing", "taints"),
    [
        (Phase.ACCEPTED, (), ()),
        (Phase.QUARANTINED, ("pcie_link",), (QUARANTINE,)),
    ],
    ids=["accepted", "quarantined"],
)
def test_a_rollback_leaves_the_node_where_it_was(
    phase: Phase, failing: tuple[str, ...], taints: tuple[Taint, ...]
) -> None:
    wire = _stored(phase, failing)
    view = cached_acceptance(_body(_as_a_newer_release_writes(wire))).with_evidence()
    # read as this release wrote it: nothing reset, the report kept
    assert view.status == NodeAcceptanceStatus.model_validate(wire)
    assert view.status.report is not None
    world = World(na=view)
    assert world.node is not None
    labels = {**world.node.labels, "gpuaccept.io/acceptance": phase.value.lower()}
    if failing:  # what this release writes on a quarantined node: its reason and remedy rung
        labels["gpuaccept.io/remedy"] = "person"
        labels["gpuaccept.io/reason"] = "PcieLinkFailed"
    world.node = dataclasses.replace(world.node, taints=taints, labels=labels)
    plan = world.plan()
    # no new round, no status reset, no taint change
    assert not [a for a in plan.actions if isinstance(a, (PatchNAStatus, PatchNodeTaintsLabels))]
    assert world.status.phase == phase


def test_an_unreadable_status_keeps_its_applied_taints_and_labels() -> None:
    wire = _unreadable(_stored(Phase.QUARANTINED, ("pcie_link",)))
    wire["appliedTaints"] = ["example.com/gpu-bad", "gpuaccept.io/quarantined"]
    wire["appliedLabels"] = ["example.com/gpu-bad"]
    wire["podSerial"] = 7
    status = cached_acceptance(_body(wire)).with_evidence().status
    assert status.phase == Phase.PENDING  # starts over, fail safe
    assert status.applied_taints == ["example.com/gpu-bad", "gpuaccept.io/quarantined"]
    assert status.applied_labels == ["example.com/gpu-bad"]
    assert status.pod_serial == 7


def test_unreadable_evidence_keeps_the_applied_taints() -> None:
    wire = _stored(Phase.QUARANTINED, ("pcie_link",))
    wire["report"]["results"][0]["status"] = "on-fire"  # a known field, a bad value
    status = cached_acceptance(_body(wire)).with_evidence().status
    assert status.phase == Phase.PENDING
    assert status.applied_taints == ["gpuaccept.io/quarantined"]


def test_a_known_field_with_a_bad_value_is_still_refused() -> None:
    wire = _stored(Phase.ACCEPTED)
    wire["attempts"] = -1
    wire["newField"] = 1
    status = cached_acceptance(_body(wire)).view.status
    assert status == NodeAcceptanceStatus(node_uid="uid-node")  # started over, UID kept


def _unreadable(wire: dict[str, Any]) -> dict[str, Any]:
    """``wire`` as a newer release that changed a known field's type writes it: this
    release cannot read the status at all."""
    return {**wire, "attempts": "two"}


def _stored_for(
    world: World, status: dict[str, Any], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """The world's NodeAcceptance object with ``status`` stored in it."""
    assert world.na is not None
    meta = {"name": "gpu-1", "resourceVersion": world.na.resource_version, "uid": world.na.uid}
    return {**_body(status), "metadata": {**meta, "annotations": annotations or {}}}


def test_an_unreadable_status_keeps_its_probe_pod_the_operators_own() -> None:
    """A rollback with a probe pod running: the pod's UID stays on record, so the
    operator clears it out before its new attempt instead of leaving it stranded
    (unverified, never deleted, holding the node's GPUs)."""
    world = World()
    world.settle()
    assert world.status.phase == Phase.PROBING
    running = world.current_pod()
    owned = world.status.owned_pods
    assert [p.uid for p in owned] == [running.uid]
    assert world.na is not None
    world.na = cached_acceptance(_stored_for(world, _unreadable(world.status.to_wire())))
    world.na = world.na.with_evidence()
    world.restart()  # the rolled-back operator: a new process
    assert world.status.phase == Phase.PENDING  # starts over, fail safe
    assert world.status.owned_pods == owned
    world.settle()
    assert running.name not in world.pods  # deleted as the operator's own
    assert world.status.phase == Phase.PROBING
    assert world.current_pod().name != running.name


def test_an_unreadable_status_keeps_its_release_record() -> None:
    """A node a person released, probed since: its release request (the annotation
    stays on the NodeAcceptance) was applied once and is not applied again."""
    world = World()
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.na is not None
    annotations = {"gpuaccept.io/release-by": "alice", "gpuaccept.io/release-at": "2026-01-01"}
    world.na = dataclasses.replace(world.na, annotations=annotations)
    world.settle()
    assert world.status.phase == Phase.RELEASED
    record = world.status.release
    assert record is not None
    body = _stored_for(world, _unreadable(world.status.to_wire()), annotations)
    salvaged = cached_acceptance(body).with_evidence()
    assert salvaged.status.release == record
    assert salvaged.status.node_uid == "uid-node"
    world.na = salvaged
    world.restart()
    world.settle()
    assert world.status.phase != Phase.RELEASED  # probed again, the old request not re-applied
    assert world.status.release == record


# --------------------------------------------------------------------------- unknown phases


def _newer_phase(world: World, wire: dict[str, Any], phase: str) -> None:
    """The node's NodeAcceptance as a newer release left it: a phase this one lacks."""
    assert world.na is not None
    world.na = cached_acceptance(_stored_for(world, {**wire, "phase": phase})).with_evidence()
    world.restart()


def test_an_in_service_node_in_a_phase_this_release_lacks_is_left_as_it_is() -> None:
    """A rollback takes no capacity out: the newer release had the node in service,
    and this one neither starts it over (the pending taint, however the limit allows)
    nor writes anything; it says so in the node's phase series."""
    world = World()
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.node is not None
    node_before = world.node
    _newer_phase(world, world.status.to_wire(), "Reverifying")
    assert world.na is not None
    assert world.na.unknown_phase == "Reverifying"
    assert world.status.report is not None  # the rest read as it was
    for _ in range(3):
        plan = world.plan()
        assert plan.actions == (), plan
        world.advance(3600)
    assert world.node == node_before
    samples = node_samples(world.na)
    assert (samples.phase, samples.reason) == ("Reverifying", "UnknownPhase")


def test_a_node_out_of_service_in_a_phase_this_release_lacks_starts_a_new_round() -> None:
    """Never left undecided out of service: a new round at once, the limit not asked
    (nothing in service is taken out), what the status keeps across rounds kept; the
    node ends where its evidence says."""
    wire = _stored(Phase.QUARANTINED, ("pcie_link",))
    wire["podSerial"] = 4
    world = World(limit_counts=QuarantineLimitCounts(quarantined=5, matched=10))  # limit reached
    world.na = NAView(name="gpu-1", resource_version="3", uid="uid-na")
    assert world.node is not None
    world.node = dataclasses.replace(world.node, taints=(QUARANTINE,))
    _newer_phase(world, wire, "Draining")
    world.settle()
    st = world.status
    assert st.phase == Phase.PROBING
    assert st.pod_serial == 5
    assert "gpuaccept.io/pending" in world.taint_keys()  # still out of service
    assert "Draining" in next(e.message for e in world.events if e.reason == "Reprobe")
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.taint_keys() == []
