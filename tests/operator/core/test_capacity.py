"""The limit counts capacity: one pure rule (``take_out_allowed``, table-tested here
in the style of cluster-api's ``isAllowedRemediation``) for every action that takes
a node out of service, and what the phases do with its answer."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from world import T0, World, make_report, spec

from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.operator.core import PolicyView, QuarantineLimitCounts
from gpuaccept.operator.core.capacity import (
    gpus_out,
    in_service,
    out_of_service,
    take_out_allowed,
    window_gpus,
)
from gpuaccept.operator.core.fleet import FleetSnapshot, tally
from gpuaccept.operator.core.fleetcount import FleetCount
from gpuaccept.operator.core.model import NodeView, OperatorConfig


@dataclass(frozen=True)
class Row:
    spec: dict[str, Any]
    counts: QuarantineLimitCounts
    allowed: bool
    why: str = ""  # a fragment of the refusal
    ceiling: int | str = "100%"
    already_out: bool = False
    new_take_out: bool = True


def counts(quarantined: int = 0, matched: int = 10, out: int = 0, recent: int = 0) -> Any:
    return QuarantineLimitCounts(quarantined, matched, out, recent)


ROWS = {
    "room under the standing limit": Row({"maxQuarantined": 2}, counts(1), True),
    "the standing limit counts quarantined nodes": Row(
        {"maxQuarantined": 2}, counts(2), False, "2 of limit 2"
    ),
    "held and re-probed nodes count as quarantined ones do": Row(
        {"maxQuarantined": 2}, counts(0, out=2), False, "maxQuarantined=2"
    ),
    "a node already quarantined here takes no new slot": Row(
        {"maxQuarantined": 0}, counts(5), True, already_out=True
    ),
    "the rate: one more within the window is too many": Row(
        {"maxQuarantined": 10, "quarantineRate": {"maxPerWindow": 2}}, counts(recent=2), False,
        "quarantineRate=2/300s",
    ),
    "the rate counts only a new take-out": Row(
        {"maxQuarantined": 10, "quarantineRate": {"maxPerWindow": 2}}, counts(recent=2), True,
        new_take_out=False,
    ),
    "a percentage rate of 10 nodes": Row(
        {"maxQuarantined": 10, "quarantineRate": {"maxPerWindow": "20%"}}, counts(recent=1), True
    ),
    "the operator's ceiling caps a policy's limit": Row(
        {"maxQuarantined": "100%"}, counts(5), False, "of limit 5", ceiling="50%"
    ),
    "the operator's ceiling caps a policy's rate": Row(
        {"maxQuarantined": "100%", "quarantineRate": {"maxPerWindow": "100%"}}, counts(recent=3),
        False, "of limit 3", ceiling=3,
    ),
    "0 quarantines nothing": Row({"maxQuarantined": 0}, counts(), False),
    "the ceiling counts the whole fleet: a one-node policy's own room is no room": Row(
        {"maxQuarantined": "100%"},
        QuarantineLimitCounts(0, 1, fleet_matched=12, fleet_unavailable=6), False,
        "6 of fleet limit 6", ceiling="50%",
    ),
    "under the fleet's ceiling a one-node policy may take its node out": Row(
        {"maxQuarantined": "100%"},
        QuarantineLimitCounts(0, 1, fleet_matched=12, fleet_unavailable=5), True, ceiling="50%",
    ),
    "a node already out takes no new slot of the fleet's either": Row(
        {"maxQuarantined": "100%"},
        QuarantineLimitCounts(0, 1, fleet_matched=12, fleet_unavailable=6), True,
        ceiling="50%", already_out=True,
    ),
}  # fmt: skip


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_take_out_allowed(row: Row) -> None:
    decision = take_out_allowed(
        spec(**row.spec),
        row.counts,
        ceiling=row.ceiling,
        already_out=row.already_out,
        new_take_out=row.new_take_out,
    )
    assert decision.allowed == row.allowed, decision.why
    assert row.why in decision.why
    assert (decision.why == "") == row.allowed


# One policy per node (each a one-node pool, where a percentage rounds up to 1), 12
# nodes, every node failing: how many the limit lets out, node after node.
FLEET_CEILING = {
    "0%": 0,
    "10%": 1,
    "25%": 3,
    "50%": 6,
    "100%": 12,
    5: 5,
}


@pytest.mark.parametrize(("ceiling", "most"), FLEET_CEILING.items(), ids=map(str, FLEET_CEILING))
def test_one_policy_per_node_takes_out_no_more_than_the_ceiling_of_the_fleet(
    ceiling: int | str, most: int
) -> None:
    count = FleetCount()
    names = [f"gpu-{i}" for i in range(12)]
    count.set_policies(
        PolicyView(f"only-{name}", 1, spec(nodeSelector={"node": name}, maxQuarantined="100%"))
        for name in names
    )
    for name in names:
        count.set_node(name, {"node": name})
    out = []
    for name in names:  # each failing node in turn: an accepted one, in service
        count.set_acceptance(
            name, NodeAcceptanceStatus(phase=Phase.ACCEPTED, policy=f"only-{name}")
        )
        policy_spec = spec(nodeSelector={"node": name}, maxQuarantined="100%")
        limits = count.limit_counts(f"only-{name}", name, T0)
        assert take_out_allowed(policy_spec, limits).allowed  # each policy alone: always room
        if take_out_allowed(policy_spec, limits, ceiling=ceiling).allowed:
            out.append(name)
            quarantined = NodeAcceptanceStatus(
                phase=Phase.QUARANTINED, policy=f"only-{name}", taken_out_time=T0
            )
            count.set_acceptance(name, quarantined)
    assert len(out) == most
    # the fleet count says as much to any node
    assert count.limit_counts("only-gpu-0", "absent").fleet_out == most


OUT = {
    (Phase.QUARANTINED, None, False): (True, False),
    (Phase.HELD, "BreakerOpen", False): (False, False),  # a new node, never in service
    (Phase.HELD, "BreakerOpen", True): (True, False),
    (Phase.HELD, "DryRun", False): (False, True),
    (Phase.ACCEPTED, None, False): (False, True),
    (Phase.ACCEPTED, "BreakerOpen", False): (False, True),  # held in service
    (Phase.PROBING, None, False): (False, False),  # a new node: never in service
    (Phase.PROBING, None, True): (True, False),
    (Phase.PENDING, None, True): (True, False),
    (Phase.FABRIC, None, True): (True, False),
    (Phase.STALLED, None, True): (True, False),
    (Phase.WAITING, "ImageUnavailable", True): (True, False),  # a re-probe that cannot start
    (Phase.WAITING, "ImageUnavailable", False): (False, False),  # a new node
}


@pytest.mark.parametrize(("state", "expected"), OUT.items(), ids=[str(k) for k in OUT])
def test_out_of_service_and_in_service(state: tuple[Any, Any, bool], expected: Any) -> None:
    phase, reason, was = state
    st = NodeAcceptanceStatus(phase=phase, reason=reason, was_in_service=was)
    assert (out_of_service(st), in_service(st)) == expected


# ---------------------------------------------------------------- the phases


def accepted(**fields: Any) -> World:
    world = World(policies=[PolicyView("default", 1, spec(**fields))])
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    return world


FULL = QuarantineLimitCounts(quarantined=5, matched=10)  # maxQuarantined 5 reached


def test_at_the_limit_an_accepted_node_stays_in_service_with_its_would_be_verdict() -> None:
    world = accepted()
    world.limit_counts = FULL
    world.policies = [PolicyView("default", 2, spec(probe={"pcieLink": {"minWidth": 32}}))]
    world.settle()
    st = world.status
    assert (st.phase, st.reason, st.held_action) == (Phase.ACCEPTED, "BreakerOpen", "Quarantine")
    assert "would quarantine" in (st.message or "")
    assert st.reasons
    assert st.reasons[0].reason == "PcieLinkFailed"
    assert world.taint_keys() == []  # untouched: no pending taint, no quarantine taint
    assert world.node is not None
    assert world.node.labels.get("gpuaccept.io/acceptance") == "accepted"
    # counted in the policy's status
    assert world.na is not None
    share = tally(FleetSnapshot((world.policies[0],), (world.node,), (world.na,)))["default"]
    assert share.held_by_limit == ("gpu-1",)
    assert share.out_of_service == frozenset()
    # room again: the verdict goes through
    world.limit_counts = QuarantineLimitCounts(quarantined=4, matched=10)
    world.settle()
    assert (world.status.phase, world.status.reason) == (Phase.QUARANTINED, "PcieLinkFailed")
    assert world.status.taken_out_time == world.now


def test_at_the_limit_a_reprobe_request_waits_and_the_node_stays_in_service() -> None:
    world = accepted()
    world.limit_counts = FULL
    assert world.node is not None
    world.node = dataclasses.replace(world.node, annotations={"gpuaccept.io/reprobe": "1"})
    world.settle()
    st = world.status
    assert (st.phase, st.reason, st.held_action) == (Phase.ACCEPTED, "BreakerOpen", "Reprobe")
    assert "gpuaccept.io/reprobe" in world.node.annotations  # the request is kept
    assert world.taint_keys() == []
    world.limit_counts = QuarantineLimitCounts(quarantined=4, matched=10)
    world.settle()
    st = world.status
    assert st.phase == Phase.PROBING
    assert st.was_in_service
    assert st.taken_out_time == world.now
    assert "gpuaccept.io/reprobe" not in world.node.annotations


def test_a_reboot_wave_is_rate_limited() -> None:
    world = accepted(quarantineRate={"maxPerWindow": 2, "windowSeconds": 300})
    world.limit_counts = QuarantineLimitCounts(quarantined=0, matched=10, taken_out_recently=2)
    assert world.node is not None
    world.node = dataclasses.replace(world.node, boot_id="boot-2")
    world.settle()
    assert (world.status.phase, world.status.held_action) == (Phase.ACCEPTED, "Reprobe")
    assert "quarantineRate=2/300s" in (world.status.message or "")
    world.limit_counts = QuarantineLimitCounts(quarantined=0, matched=10, taken_out_recently=1)
    world.advance(30)
    world.settle()
    assert world.status.phase == Phase.PROBING


def test_a_policy_change_reprobe_of_the_whole_fleet_is_rate_limited() -> None:
    world = accepted()
    world.limit_counts = QuarantineLimitCounts(quarantined=0, matched=10, taken_out_recently=1)
    world.policies = [PolicyView("default", 2, spec(reprobe={"onPolicyChange": "Reprobe"}))]
    world.settle()
    assert (world.status.phase, world.status.held_action) == (Phase.ACCEPTED, "Reprobe")
    assert world.status.policy_generation == 1  # not stamped: the change is still to apply


def test_the_operator_ceiling_holds_a_policy_that_allows_everything() -> None:
    world = World(
        policies=[PolicyView("default", 1, spec(maxQuarantined="100%"))],
        config=OperatorConfig(accept_simulated_reports=True, max_unavailable_ceiling=2),
        limit_counts=QuarantineLimitCounts(quarantined=2, matched=10),
    )
    world.settle()
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    assert (world.status.phase, world.status.reason) == (Phase.HELD, "BreakerOpen")


def test_a_new_node_under_the_pending_taint_is_probed_whatever_the_limit() -> None:
    world = World(limit_counts=QuarantineLimitCounts(quarantined=5, matched=10, out_of_service=5))
    world.settle()
    assert world.status.phase == Phase.PROBING
    assert not world.status.was_in_service


def test_at_the_limit_a_passing_rejudge_under_a_fabric_policy_waits_in_service() -> None:
    world = accepted()
    world.limit_counts = FULL
    fabric = {"enabled": True, "minBusbwGBps": 300}
    world.policies = [PolicyView("default", 2, spec(fabric=fabric))]
    world.settle()
    st = world.status
    assert (st.phase, st.reason, st.held_action) == (Phase.ACCEPTED, "BreakerOpen", "Fabric")
    assert world.taint_keys() == []
    world.limit_counts = QuarantineLimitCounts(quarantined=4, matched=10)
    world.settle()
    assert world.status.phase == Phase.FABRIC
    assert world.status.was_in_service


def test_a_reprobed_node_counts_against_the_limit_until_decided() -> None:
    world = accepted()
    assert world.node is not None
    world.node = dataclasses.replace(world.node, boot_id="boot-2")
    world.settle()
    assert world.na is not None
    node = NodeView(name="gpu-1", labels=dict(world.node.labels))
    share = tally(FleetSnapshot((world.policies[0],), (node,), (world.na,)))["default"]
    assert share.out_of_service == {"gpu-1"}
    assert share.limit_counts("other", T0 + timedelta(seconds=1)).out_of_service == 1
    assert share.limit_counts("other", T0 + timedelta(seconds=1)).taken_out_recently == 1
    assert share.limit_counts("other", T0 + timedelta(seconds=400)).taken_out_recently == 0
    world.finish_with_report(make_report(boot_id="boot-2"))
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert not world.status.was_in_service


def found_in_service(**world_kwargs: Any) -> World:
    """A node already running workloads (no pending taint) that a new or widened
    policy takes on."""
    world = World(**world_kwargs)
    assert world.node is not None
    world.node = dataclasses.replace(world.node, taints=())
    return world


def test_adopting_a_running_fleet_is_rate_limited() -> None:
    world = found_in_service(
        limit_counts=QuarantineLimitCounts(quarantined=0, matched=10, taken_out_recently=1)
    )
    world.settle()
    st = world.status
    assert (st.phase, st.reason, st.held_action) == (Phase.PENDING, "BreakerOpen", "Adopt")
    assert world.taint_keys() == []  # still in service
    assert world.pods == {}
    assert st.policy == "default"  # counted under its policy
    world.limit_counts = QuarantineLimitCounts(quarantined=0, matched=10, taken_out_recently=0)
    world.advance(30)
    world.settle()
    st = world.status
    assert st.phase == Phase.PROBING
    assert world.taint_keys() == ["gpuaccept.io/pending"]
    assert st.was_in_service
    assert st.taken_out_time == world.now


def test_adopting_counts_against_the_standing_limit_too() -> None:
    world = found_in_service(limit_counts=QuarantineLimitCounts(quarantined=3, out_of_service=2))
    world.limit_counts = QuarantineLimitCounts(quarantined=3, matched=10, out_of_service=2)
    world.settle()
    assert (world.status.reason, world.status.held_action) == ("BreakerOpen", "Adopt")
    assert world.taint_keys() == []


def test_a_paused_policy_leaves_a_node_found_in_service_in_service() -> None:
    world = found_in_service(policies=[PolicyView("default", 1, spec(paused=True))])
    world.settle()
    assert world.na is not None
    assert world.taint_keys() == []


def test_a_dry_run_over_a_node_found_in_service_is_not_held_back() -> None:
    """Nothing is taken out of service under dryRun, so the limit does not hold it."""
    world = found_in_service(
        policies=[PolicyView("default", 1, spec(dryRun=True))],
        limit_counts=QuarantineLimitCounts(quarantined=5, matched=10, taken_out_recently=9),
    )
    world.settle()
    assert world.status.phase == Phase.PROBING
    assert world.taint_keys() == []
    assert world.status.taken_out_time is None


def test_two_held_new_nodes_do_not_block_each_other() -> None:
    """Held new nodes were never in service: neither counts against the other, so
    raising the limit by one lets one of them through."""
    world = World(limit_counts=QuarantineLimitCounts(quarantined=1, matched=10))
    world.policies = [PolicyView("default", 1, spec(maxQuarantined=1))]
    world.settle()
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    assert (world.status.phase, world.status.reason) == (Phase.HELD, "BreakerOpen")
    assert not out_of_service(world.status)
    world.policies = [PolicyView("default", 2, spec(maxQuarantined=2))]
    world.settle()
    assert world.status.phase == Phase.QUARANTINED


def test_every_plan_that_takes_a_node_out_holds_the_policy_lock() -> None:
    """Two workers must not both take the last slot: a new round of an in-service
    node and an adoption are planned again under the policy's lock, as a quarantine is."""
    world = accepted()
    assert world.node is not None
    world.node = dataclasses.replace(
        world.node, annotations={**world.node.annotations, "gpuaccept.io/reprobe": "1"}
    )
    assert world.plan().needs_limit_lock  # the re-probe's new round
    adopted = World(policies=[PolicyView("default", 1, spec())])
    assert adopted.node is not None
    adopted.node = dataclasses.replace(adopted.node, taints=())  # found in service
    adopted.apply(adopted.plan())  # its NodeAcceptance is created
    assert adopted.na is not None
    assert adopted.plan().needs_limit_lock  # the adoption takes it out


# ------------------------------------------------------------ lost capacity in GPUs (issue 40)


def gpu_counts(
    quarantined: int = 0, *, out_gpus: int, recent_gpus: int = 0, gpus: int = 80, asked: int = 8
) -> QuarantineLimitCounts:
    return QuarantineLimitCounts(
        quarantined,
        10,
        0,
        0,
        matched_gpus=gpus,
        unavailable_gpus=out_gpus,
        taken_out_recently_gpus=recent_gpus,
        asked_gpus=asked,
    )


@pytest.mark.parametrize("policy", [{"maxQuarantined": 3}, {"maxQuarantined": "30%"}])
@pytest.mark.parametrize("out_nodes", range(6))
def test_on_nodes_of_equal_size_gpus_decide_as_nodes_do(
    policy: dict[str, Any], out_nodes: int
) -> None:
    """Ten 8-GPU nodes: a node's take-out in GPUs is allowed exactly when it is in nodes."""
    nodes = take_out_allowed(spec(**policy), counts(out_nodes))
    in_gpus = take_out_allowed(spec(**policy), gpu_counts(out_nodes, out_gpus=8 * out_nodes))
    assert nodes.allowed == in_gpus.allowed == (out_nodes < 3)


@dataclass(frozen=True)
class GpuRow:
    spec: dict[str, Any]
    counts: QuarantineLimitCounts
    gpus: int
    allowed: bool
    why: str = ""
    new_take_out: bool = True


GPU_ROWS = {
    "a fenced GPU is a share of a node: two nodes and seven GPUs out, one GPU more fits": GpuRow(
        {"maxQuarantined": 3}, gpu_counts(2, out_gpus=23), 1, True
    ),
    "but not a whole node": GpuRow(
        {"maxQuarantined": 3}, gpu_counts(2, out_gpus=23), 8, False, "23 GPU(s) of limit 24"
    ),
    "fenced GPUs add up to a node's worth": GpuRow(
        {"maxQuarantined": 1}, gpu_counts(out_gpus=8), 1, False, "maxQuarantined=1"
    ),
    "nodes of unequal size: the limit at the average node": GpuRow(
        {"maxQuarantined": 2, "quarantineRate": {"maxPerWindow": 2}},
        gpu_counts(out_gpus=4, gpus=60),
        8,
        True,
    ),
    "over it": GpuRow(
        {"maxQuarantined": 2, "quarantineRate": {"maxPerWindow": 2}},
        gpu_counts(out_gpus=5, gpus=60),
        8,
        False,
        "5 GPU(s) of limit 12",
    ),
    "a one-node limit admits a node larger than the average when nothing is out": GpuRow(
        {"maxQuarantined": 1, "quarantineRate": {"maxPerWindow": 1}},
        gpu_counts(out_gpus=0, gpus=60),
        8,
        True,
    ),
    "a zero limit admits nothing": GpuRow(
        {"maxQuarantined": 0}, gpu_counts(out_gpus=0), 1, False, "0 GPU(s) of limit 0"
    ),
    "the rate in GPUs": GpuRow(
        {"maxQuarantined": 10, "quarantineRate": {"maxPerWindow": 1}},
        gpu_counts(out_gpus=0, recent_gpus=4),
        8,
        False,
        "4 GPU(s) of limit 8 taken out",
    ),
    "the rate counts only a new take-out": GpuRow(
        {"maxQuarantined": 10, "quarantineRate": {"maxPerWindow": 1}},
        gpu_counts(out_gpus=0, recent_gpus=8),
        8,
        True,
        new_take_out=False,
    ),
    "a fence asks the rate for the GPUs it adds to its node's window, not the fences "
    "that stand": GpuRow(
        {"maxQuarantined": 10, "quarantineRate": {"maxPerWindow": 1}},
        dataclasses.replace(gpu_counts(out_gpus=0, recent_gpus=7), asked_recent_gpus=1),
        3,
        True,
    ),
    "a fence over the rate's GPUs is held": GpuRow(
        {"maxQuarantined": 10, "quarantineRate": {"maxPerWindow": 1}},
        dataclasses.replace(gpu_counts(out_gpus=0, recent_gpus=7), asked_recent_gpus=2),
        3,
        False,
        "7 GPU(s) of limit 8 taken out in the last 300s, 2 more asked",
    ),
}


@pytest.mark.parametrize("row", GPU_ROWS.values(), ids=GPU_ROWS.keys())
def test_take_out_allowed_in_gpus(row: GpuRow) -> None:
    counts = dataclasses.replace(row.counts, asked_gpus=row.gpus)
    decision = take_out_allowed(spec(**row.spec), counts, new_take_out=row.new_take_out)
    assert decision.allowed == row.allowed, decision.why
    assert row.why in decision.why


@pytest.mark.parametrize(
    ("status", "out"),
    [
        (NodeAcceptanceStatus(phase=Phase.QUARANTINED), 8),
        (NodeAcceptanceStatus(phase=Phase.ACCEPTED), 0),
        (NodeAcceptanceStatus(phase=Phase.ACCEPTED, fenced="1/8"), 1),
        (NodeAcceptanceStatus(phase=Phase.ACCEPTED, fenced="9/8"), 8),  # never more than it has
        (NodeAcceptanceStatus(phase=Phase.ACCEPTED, fenced="one"), 0),
        (NodeAcceptanceStatus(phase=Phase.PROBING, was_in_service=True), 8),
    ],
)
def test_gpus_out(status: NodeAcceptanceStatus, out: int) -> None:
    assert gpus_out(status, 8) == out


@pytest.mark.parametrize(
    ("status", "gpus"),
    [
        (NodeAcceptanceStatus(phase=Phase.QUARANTINED, taken_out_time=T0), 8),  # the node
        (NodeAcceptanceStatus(phase=Phase.ACCEPTED, taken_out_time=T0, taken_out_gpus=1), 1),
        (NodeAcceptanceStatus(phase=Phase.ACCEPTED, taken_out_time=T0, taken_out_gpus=9), 8),
        (NodeAcceptanceStatus(phase=Phase.ACCEPTED), 0),  # never taken out
    ],
)
def test_taken_out_gpus_counts_a_fence_as_its_gpus(status: NodeAcceptanceStatus, gpus: int) -> None:
    """The rate's window counts a node's last take-out as all of its GPUs, a fence as the
    GPUs it took out (issue 40 item 4)."""
    assert window_gpus(status, 8) == gpus


@pytest.mark.parametrize(("fenced_elsewhere", "phase"), [(0, Phase.QUARANTINED), (1, Phase.HELD)])
def test_a_gpu_fenced_elsewhere_counts_against_a_one_node_limit(
    fenced_elsewhere: int, phase: Phase
) -> None:
    """Ten 8-GPU nodes, maxQuarantined 1 (8 GPUs): one GPU fenced on another node leaves
    room for 7 GPUs, not for this node's 8; the node counts alone would let it through."""
    limit = QuarantineLimitCounts(
        0, 10, matched_gpus=80, unavailable_gpus=fenced_elsewhere, taken_out_recently_gpus=0
    )
    world = World(policies=[PolicyView("default", 1, spec(maxQuarantined=1))], limit_counts=limit)
    world.settle()
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    assert world.status.phase == phase, world.status.message
    if phase == Phase.HELD:
        assert "1 GPU(s) of limit 8 out of service, 8 more asked" in (world.status.message or "")
