"""The join under a policy with health in service: the verdict's status write starts
the node's ledger and reserves its first watch pod's serial, so the first window
costs a create and the one write that records its UID (as every later window), not
a write of its own before the create. Stopped between any two of them: one live
watch pod at the end, its UID on record, no serial used twice, and a name reserved
by a process that is gone never created."""

from __future__ import annotations

import dataclasses

import pytest
from test_inservice_one_write import WRITES, serial_of
from test_inservice_watch import WINDOW, watch_pods
from world import World, spec

from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.core import PolicyView
from gpuaccept.operator.core.model import CreateProbePod, PatchNAStatus, Plan


def probing(**section: object) -> World:
    """A node whose probe pod has just ended with a passing report."""
    policy = spec(inService={"enabled": True, "windowSeconds": WINDOW, **section})
    world = World(policies=[PolicyView(name="default", generation=1, spec=policy)])
    world.settle()
    world.finish_with_report()
    return world


def writes(plans: list[Plan]) -> list[str]:
    return [type(a).__name__ for p in plans for a in p.actions if isinstance(a, WRITES)]


def verdict_onwards(world: World) -> list[Plan]:
    """The plans from the verdict's on, applied until a fixed point."""
    start = len(world.log)
    world.settle()
    return world.log[start:]


def test_the_verdicts_write_starts_the_ledger_and_reserves_the_first_watch_pod() -> None:
    world = probing()
    plans = verdict_onwards(world)
    assert "verdict" in plans[0].note
    # the verdict (its write, the probe pod deleted), then the first window's create
    # and the write of its UID: no write of the ledger alone before the create
    assert writes(plans) == [
        "PatchNAStatus",
        "DeleteProbePod",
        "CreateProbePod",
        "PatchNAStatus",
    ], [p.note for p in plans]
    verdict_write = next(a for a in plans[0].actions if isinstance(a, PatchNAStatus))
    written = verdict_write.status
    assert written.phase == Phase.ACCEPTED
    assert written.in_service is not None
    assert written.in_service.boot_id == "boot-1"
    assert written.in_service.accepted_time == written.last_probe_time
    intents = [e.name for e in written.creation_intents if e.kind == "Pod"]
    assert [serial_of(n) for n in intents] == [1]
    st = world.status
    (live,) = [p for p in watch_pods(world) if not p.ended]
    assert st.in_service is not None
    assert st.in_service.watch_pod == live.name
    assert [o.uid for o in st.owned_pods if o.name == live.name] == [live.uid]


def test_without_watch_pods_the_verdict_reserves_nothing() -> None:
    world = probing(watchPods=False)
    plans = verdict_onwards(world)
    assert not watch_pods(world)
    written = next(a for a in plans[0].actions if isinstance(a, PatchNAStatus)).status
    assert not [e for e in written.creation_intents if e.kind == "Pod"]


def test_an_operator_without_watch_pods_reserves_nothing() -> None:
    world = probing()
    world.config = dataclasses.replace(world.config, watch_pods=False)
    plans = verdict_onwards(world)
    assert not watch_pods(world)
    written = next(a for a in plans[0].actions if isinstance(a, PatchNAStatus)).status
    assert not [e for e in written.creation_intents if e.kind == "Pod"]


# After a restart the reservation's nonce cannot be matched (its seed is gone): the
# first window goes under the next free serial (2); a pod made and not yet recorded
# is deleted unread and the next serial watches (2).
@pytest.mark.parametrize("step", ["verdict-create", "create-write"])
def test_stopped_in_the_first_window_one_watch_pod_on_record_no_serial_reused(step: str) -> None:
    world = probing()
    world.apply(world.plan())  # the verdict
    assert world.status.phase == Phase.ACCEPTED
    if step == "create-write":
        create = world.plan()
        assert [type(a) for a in create.actions if isinstance(a, WRITES)] == [CreateProbePod]
        world.apply(create)
    world.restart()
    start = len(world.log)
    world.settle()
    created = [
        a.name for p in world.log[start:] for a in p.actions if isinstance(a, CreateProbePod)
    ]
    assert [serial_of(n) for n in created] == [2], created
    st = world.status
    (live,) = [p for p in watch_pods(world) if not p.ended]
    assert [p.name for p in watch_pods(world)] == [live.name]  # serial 1's pod deleted
    assert st.in_service is not None
    assert st.in_service.watch_pod == live.name
    assert [o.uid for o in st.owned_pods if o.name == live.name] == [live.uid]
    assert st.phase == Phase.ACCEPTED
