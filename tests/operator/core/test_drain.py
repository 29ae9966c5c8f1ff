"""A quarantine never evicts past a PodDisruptionBudget (issue 29, item 4): under
``quarantine.taintEffect: NoExecute`` the node gets a NoSchedule taint and a drain
through the Eviction API, retried while a budget refuses; no NoExecute taint."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from world import World, make_report, spec

from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.core import PolicyView, Taint
from gpuaccept.operator.core.model import DrainNode, NodePod, QuarantineLimitCounts
from gpuaccept.operator.core.phases.drain import DRAIN_RETRY_SECONDS, evictable

TAINT = Taint("gpuaccept.io/quarantined", "NoSchedule", "true")
NS = "gpuaccept-system"
EVERYTHING = {"operator": "Exists"}  # tolerates every taint

PODS: dict[str, tuple[NodePod, bool]] = {
    "a workload": (NodePod("team", "train-0"), True),
    "a Deployment's pod": (NodePod("team", "web-1", owner_kinds=("ReplicaSet",)), True),
    "a DaemonSet's pod": (NodePod("kube-system", "dcgm", owner_kinds=("DaemonSet",)), False),
    "a static pod's mirror": (NodePod("kube-system", "etcd", mirror=True), False),
    "ended": (NodePod("team", "job-0", phase="Succeeded"), False),
    "failed": (NodePod("team", "job-1", phase="Failed"), False),
    "already being deleted": (NodePod("team", "old", deleting=True), False),
    "gpuaccept's probe pod": (NodePod(NS, "gpuaccept-probe-n-1", managed_by="gpuaccept"), False),
    "labelled gpuaccept elsewhere": (NodePod("team", "x", managed_by="gpuaccept"), True),
    "tolerates the quarantine key": (
        NodePod("team", "t", tolerations=({"key": TAINT.key, "operator": "Exists"},)), False),
    "tolerates every taint": (NodePod("team", "u", tolerations=(EVERYTHING,)), False),
    "tolerates it only as NoSchedule": (
        NodePod("team", "v", tolerations=(
            {"key": TAINT.key, "operator": "Exists", "effect": "NoSchedule"},)), True),
    "tolerates another value": (
        NodePod("team", "w", tolerations=({"key": TAINT.key, "value": "no"},)), True),
}  # fmt: skip


@pytest.mark.parametrize(("pod", "evicted"), PODS.values(), ids=PODS.keys())
def test_a_drain_evicts_what_a_noexecute_taint_would_have(pod: NodePod, evicted: bool) -> None:
    assert (evictable([pod], TAINT, namespace=NS) == [pod]) is evicted


NOEXECUTE: dict[str, Any] = {"quarantine": {"taintEffect": "NoExecute"}}


def quarantined(**fields: Any) -> World:
    world = World(policies=[PolicyView("default", 1, spec(**{**NOEXECUTE, **fields}))])
    world.node_pods = [NodePod("team", "train-0"), NodePod("team", "db-0")]
    world.protected = {"db-0"}  # its PodDisruptionBudget allows no disruption now
    world.settle()
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    return world


def drains(world: World) -> list[DrainNode]:
    return [a for p in world.log for a in p.actions if isinstance(a, DrainNode)]


def test_noexecute_taints_noschedule_and_drains_as_budgets_allow() -> None:
    world = quarantined()
    assert world.status.phase == Phase.QUARANTINED
    assert world.node is not None
    assert [t.effect for t in world.node.taints] == ["NoSchedule"]  # never NoExecute
    assert [p.name for p in world.node_pods] == ["db-0"]  # train-0 evicted
    drain = world.status.drain
    assert drain is not None
    assert drain.done is None
    assert drain.blocked == ["team/db-0: 429"]
    assert [e.reason for e in world.events if e.reason.startswith("Drain")] == ["DrainBlocked"]
    assert world.plan().requeue_after == pytest.approx(DRAIN_RETRY_SECONDS)
    world.settle()
    assert len(drains(world)) == 1  # no retry before its time
    world.protected.clear()  # the budget allows a disruption now
    world.advance(DRAIN_RETRY_SECONDS)
    world.settle()
    assert world.node_pods == []
    drain = world.status.drain
    assert drain is not None
    assert drain.done == world.now
    assert drain.blocked == []
    assert "Drained" in [e.reason for e in world.events]
    world.advance(3600)
    assert world.plan().actions == ()  # done: never drained again
    assert len(drains(world)) == 2


def test_a_noschedule_quarantine_never_drains() -> None:
    world = quarantined(quarantine={"taintEffect": "NoSchedule"})
    assert world.status.phase == Phase.QUARANTINED
    assert drains(world) == []
    assert len(world.node_pods) == 2
    assert world.status.drain is None


def test_no_drain_while_the_limit_or_a_dry_run_holds_the_quarantine() -> None:
    for world in (
        quarantined(dryRun=True),
        quarantined(maxQuarantined=0),
    ):
        assert world.status.phase == Phase.HELD
        assert drains(world) == []
        assert len(world.node_pods) == 2


def test_the_limit_still_counts_a_draining_node() -> None:
    world = World(
        policies=[PolicyView("default", 1, spec(**NOEXECUTE, maxQuarantined=1))],
        limit_counts=QuarantineLimitCounts(quarantined=1, matched=10),
    )
    world.node_pods = [NodePod("team", "train-0")]
    world.settle()
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    assert world.status.phase == Phase.HELD
    assert drains(world) == []


def test_a_restart_mid_drain_drains_again_and_a_new_quarantine_has_its_own_drain() -> None:
    world = quarantined()
    world.restart()  # the last drain's result is forgotten; the status says it is not done
    world.advance(1)
    plan = world.plan()
    assert [type(a) for a in plan.actions][-1] is DrainNode
    # released by a re-probe, quarantined again: the old drain's result counts for nothing
    world.protected.clear()
    world.settle()
    assert world.status.drain is not None
    assert world.status.drain.done is not None
    assert world.node is not None
    world.node = dataclasses.replace(world.node, annotations={"gpuaccept.io/reprobe": "now"})
    world.settle()
    assert world.status.phase == Phase.PROBING
    assert world.status.drain is None
    world.node_pods = [NodePod("team", "late-0")]
    world.finish_with_report(make_report(failing=["pcie_link"]))
    world.settle()
    assert world.status.phase == Phase.QUARANTINED
    assert world.node_pods == []
    assert world.status.drain is not None
    assert world.status.drain.done == world.now
