"""No fabric pod is left behind (issue 14, docs/fabric.md Safety): the pair pass sees
only its members' pods, so a node's own reconcile leaves a fabric pod to the pass only
while the node is a member of its policy's pass (phase Fabric, or Accepted/Held with
fabric results, under a policy with fabric enabled), and deletes it otherwise."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from world import T0, World, spec

from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.core import PodView, PolicyView
from gpuaccept.operator.core.model import DeleteProbePod, FabricPassed, FabricPodLabels

FABRIC = {"enabled": True, "minBusbwGBps": 300}
TIGHTER = {"driverLibraries": {"driverVersions": {"min": "999.0.0"}}}
IGNORE = {"onPolicyChange": "Ignore"}


def waiting(**spec_kwargs: object) -> World:
    """A node in phase Fabric under policy "default" (fabric enabled)."""
    policy = PolicyView(name="default", generation=1, spec=spec(fabric=FABRIC, **spec_kwargs))
    world = World(policies=[policy])
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.FABRIC
    return world


def passed(phase: Phase, **spec_kwargs: object) -> World:
    """A node that passed a pair, its fabric result in its status."""
    world = waiting(**spec_kwargs)
    world.fabric_verdict = FabricPassed("gpu-2", 390.0, T0)
    world.settle()
    assert world.status.phase == phase
    assert world.status.fabric is not None
    return world


def accepted() -> World:
    return passed(Phase.ACCEPTED)


def held_by_dry_run() -> World:
    return passed(Phase.HELD, dryRun=True)


def idle_partner() -> World:
    """A node accepted before its policy ran fabric tests, now an idle partner
    (idleAcceptedPartners): Accepted, no fabric results."""
    world = World()
    world.settle()
    world.finish_with_report()
    world.settle()
    fabric = {**FABRIC, "idleAcceptedPartners": True}
    # Kept decided as it is (Ignore): a re-judge under a fabric policy would send it
    # to the fabric test, which it has not passed.
    ignore = {"onPolicyChange": "Ignore"}
    world.policies = [PolicyView("default", 2, spec(fabric=fabric, reprobe=ignore))]
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.status.fabric is None
    return world


def fabric_turned_off(world: World) -> None:
    world.policies = [PolicyView("default", 2, spec())]


def tightened(world: World) -> None:  # the report now fails: Quarantined
    world.policies = [PolicyView("default", 2, spec(fabric=FABRIC, probe=TIGHTER))]


def relabelled(world: World) -> None:  # to a policy without fabric tests
    world.policies = [PolicyView("b", 1, spec())]


def relabelled_ignored(world: World) -> None:  # to a fabric policy, verdict kept as is
    world.policies = [PolicyView("b", 1, spec(fabric=FABRIC, reprobe=IGNORE))]


ORPHANS: list[tuple[str, Callable[[], World], Callable[[World], None], Phase]] = [
    ("fabric turned off, partner", accepted, fabric_turned_off, Phase.ACCEPTED),
    ("fabric turned off, waiting node", waiting, fabric_turned_off, Phase.ACCEPTED),
    ("partner re-judged to Quarantined", accepted, tightened, Phase.QUARANTINED),
    ("waiting node re-judged to Quarantined", waiting, tightened, Phase.QUARANTINED),
    ("partner relabelled to a policy without fabric", accepted, relabelled, Phase.ACCEPTED),
    ("waiting node relabelled to a policy without fabric", waiting, relabelled,
     Phase.ACCEPTED),
    ("partner relabelled, onPolicyChange Ignore", accepted, relabelled_ignored,
     Phase.ACCEPTED),
]  # fmt: skip


@pytest.mark.parametrize("pod_phase", ["Running", "Failed"])
@pytest.mark.parametrize(
    ("make", "change", "phase"), [c[1:] for c in ORPHANS], ids=[c[0] for c in ORPHANS]
)
def test_a_fabric_pod_of_a_node_that_left_the_pass_is_deleted(
    make: Callable[[], World],
    change: Callable[[World], None],
    phase: Phase,
    pod_phase: str,
) -> None:
    world = make()
    labels = FabricPodLabels("p1", 1, "gpu-7", "gpu-1")
    world.place_pods(PodView(name="fab", phase=pod_phase, fabric=labels))
    world.settle()
    assert set(world.pods) == {"fab"}  # a member's pair pod is the pass's
    change(world)
    seen = len(world.log)
    world.settle()
    assert world.status.phase == phase
    assert world.pods == {}
    deletes = [a for p in world.log[seen:] for a in p.actions if isinstance(a, DeleteProbePod)]
    assert [(d.name, d.force) for d in deletes] == [("fab", pod_phase == "Failed")]


MEMBERS: list[tuple[str, Callable[[], World]]] = [
    ("waiting node", waiting),
    ("partner that passed", accepted),
    ("partner held by dryRun", held_by_dry_run),
    ("idle accepted partner", idle_partner),
]


@pytest.mark.parametrize("make", [c[1] for c in MEMBERS], ids=[c[0] for c in MEMBERS])
def test_a_legitimately_running_pair_pod_is_kept(make: Callable[[], World]) -> None:
    world = make()
    labels = FabricPodLabels("p1", 1, "gpu-7", "gpu-1")
    world.place_pods(PodView(name="fab", phase="Running", fabric=labels))
    # a policy change that keeps the node in the pass changes nothing either
    policy = world.policies[0]
    world.policies = [PolicyView(policy.name, 2, policy.spec)]
    world.settle()
    assert set(world.pods) == {"fab"}
