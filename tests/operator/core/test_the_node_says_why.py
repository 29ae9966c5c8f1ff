"""The node and its NodeAcceptance say why (issue 25, items 2 and 4): the
``Accepted`` condition follows the phase (``kubectl wait --for=condition=Accepted``),
a quarantined Node carries its reason as a label, and a dry run's counts say how
many nodes it would accept and quarantine."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from world import T0, World, make_report, spec

from gpuaccept.contracts.nodeacceptance import (
    Condition,
    ConditionStatus,
    NodeAcceptanceStatus,
    Phase,
)
from gpuaccept.operator.core.conditions import (
    accepted_state,
    condition_reason,
    with_accepted_condition,
)
from gpuaccept.operator.core.fleet import FleetSnapshot, policy_status, tally
from gpuaccept.operator.core.fleetcount import FleetCount
from gpuaccept.operator.core.model import NAView, NodeView, PolicyView
from gpuaccept.operator.core.nodestate import desired_labels, reason_label_value

REASON_LABEL = "gpuaccept.io/reason"
ACCEPTANCE_LABEL = "gpuaccept.io/acceptance"


def _accepted(st: NodeAcceptanceStatus) -> Condition:
    (condition,) = [c for c in st.conditions if c.type == "Accepted"]
    return condition


# ------------------------------------------------------------------ the condition
@pytest.mark.parametrize(
    ("phase", "reason", "expected"),
    [
        (Phase.ACCEPTED, None, (ConditionStatus.TRUE, "Accepted")),
        (Phase.QUARANTINED, "PcieLinkFailed", (ConditionStatus.FALSE, "PcieLinkFailed")),
        (Phase.HELD, "DryRun", (ConditionStatus.FALSE, "DryRun")),
        (Phase.STALLED, "NoGPUsAdvertised", (ConditionStatus.FALSE, "NoGPUsAdvertised")),
        (Phase.RELEASED, "Released", (ConditionStatus.FALSE, "Released")),
        (Phase.PENDING, None, (ConditionStatus.UNKNOWN, "Pending")),
        (Phase.PROBING, None, (ConditionStatus.UNKNOWN, "Probing")),
        (Phase.WAITING, "ImageUnavailable", (ConditionStatus.UNKNOWN, "ImageUnavailable")),
        (Phase.FABRIC, "FabricPending", (ConditionStatus.UNKNOWN, "FabricPending")),
    ],
)
def test_the_accepted_condition_follows_the_phase(
    phase: Phase, reason: str | None, expected: tuple[ConditionStatus, str]
) -> None:
    status, why, _message = accepted_state(NodeAcceptanceStatus(phase=phase, reason=reason))
    assert (status, why) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("PcieLinkFailed", "PcieLinkFailed"),
        ("not a word!", "not_a_word"),
        ("9lives", "Reason9lives"),
    ],
)
def test_a_condition_reason_is_always_valid(text: str, reason: str) -> None:
    assert condition_reason(text) == reason
    Condition(type="Accepted", status=ConditionStatus.FALSE, reason=reason, last_transition_time=T0)


def test_the_transition_time_moves_only_when_the_status_does() -> None:
    st = with_accepted_condition(NodeAcceptanceStatus(phase=Phase.PENDING), T0)
    probing = with_accepted_condition(
        st.model_copy(update={"phase": Phase.PROBING}), T0 + timedelta(1)
    )
    assert _accepted(probing).last_transition_time == T0  # Unknown -> Unknown
    assert _accepted(probing).reason == "Probing"
    done = with_accepted_condition(
        probing.model_copy(update={"phase": Phase.ACCEPTED}), T0 + timedelta(2)
    )
    assert _accepted(done).status == ConditionStatus.TRUE
    assert _accepted(done).last_transition_time == T0 + timedelta(2)
    assert with_accepted_condition(done, T0 + timedelta(3)) is done  # nothing to write


def test_every_status_write_keeps_the_condition_in_line() -> None:
    world = World()
    world.settle()
    assert _accepted(world.status).status == ConditionStatus.UNKNOWN  # probing
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert _accepted(world.status).status == ConditionStatus.TRUE
    # a re-probe takes it back to Unknown; a failing report to False
    assert world.node is not None
    world.node = dataclasses.replace(world.node, annotations={"gpuaccept.io/reprobe": "1"})
    world.settle()
    assert _accepted(world.status).status == ConditionStatus.UNKNOWN
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    condition = _accepted(world.status)
    assert (condition.status, condition.reason) == (ConditionStatus.FALSE, "PcieLinkFailed")
    assert world.settle().actions == ()  # level-triggered: nothing more to write


# ------------------------------------------------------------------ the reason label
def test_a_quarantined_node_carries_its_reason_as_a_label() -> None:
    world = World()
    world.settle()
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    assert world.node is not None
    assert world.node.labels[ACCEPTANCE_LABEL] == "quarantined"
    assert world.node.labels[REASON_LABEL] == "PcieLinkFailed"
    # repaired and re-probed: the reason stays while the quarantine does, then goes
    world.node = dataclasses.replace(world.node, annotations={"gpuaccept.io/reprobe": "1"})
    world.settle()
    assert world.status.phase == Phase.PROBING
    assert world.node.labels[REASON_LABEL] == "PcieLinkFailed"
    world.finish_with_report()
    world.settle()
    assert world.node.labels[ACCEPTANCE_LABEL] == "accepted"
    assert REASON_LABEL not in world.node.labels


def test_a_dry_run_puts_no_reason_on_the_node() -> None:
    world = World(policies=[PolicyView(name="default", spec=spec(dryRun=True))])
    world.settle()
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    assert world.status.phase == Phase.HELD
    assert world.node is not None
    assert REASON_LABEL not in world.node.labels


@pytest.mark.parametrize(
    ("reason", "value"),
    [
        ("PcieLinkFailed", "PcieLinkFailed"),
        (None, "ProbeError"),
        ("a reason: with spaces", "a-reason-with-spaces"),
        ("X" * 64, "X" * 63),
        ("-_.", "ProbeError"),
    ],
)
def test_the_reason_label_value_is_a_valid_label_value(reason: str | None, value: str) -> None:
    assert reason_label_value(reason) == value
    node = NodeView(name="n")
    status = NodeAcceptanceStatus(phase=Phase.QUARANTINED, reason=reason)
    assert desired_labels(node, spec(), status)[REASON_LABEL] == value


# ------------------------------------------------------------------ the dry run's counts
GPU = {"nvidia.com/gpu.present": "true"}


def _held(name: str, action: str | None, phase: Phase = Phase.HELD) -> NAView:
    reason = "DryRun" if phase == Phase.HELD else None
    status = NodeAcceptanceStatus(phase=phase, reason=reason, held_action=action, policy="dry")
    return NAView(name=name, status=status)


def test_a_dry_run_says_how_many_it_would_accept_and_quarantine() -> None:
    policy = PolicyView(name="dry", spec=spec(dryRun=True))
    nas = (
        _held("a", "Accept"),
        _held("b", "Accept"),
        _held("c", "Quarantine"),
        _held("d", None, Phase.PROBING),
    )
    snapshot = FleetSnapshot(
        policies=(policy,),
        nodes=tuple(NodeView(name=na.name, labels=GPU) for na in nas),
        acceptances=nas,
    )
    share = tally(snapshot)["dry"]
    assert (share.would_accept, share.would_quarantine) == (2, 1)
    status = policy_status(policy, share, {}, T0)
    wire = status.model_dump(mode="json", by_alias=True)
    assert (wire["wouldAccept"], wire["wouldQuarantine"]) == (2, 1)
    # the incremental count agrees, and follows a node's change
    count = FleetCount()
    count.set_policies([policy])
    for na in nas:
        count.set_node(na.name, GPU)
        count.set_acceptance(na.name, na.status)
    assert count.tally() == tally(snapshot)
    count.set_acceptance("c", _held("c", "Accept").status)
    assert (count.tally()["dry"].would_accept, count.tally()["dry"].would_quarantine) == (3, 0)
