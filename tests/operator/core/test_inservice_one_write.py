"""Health in service at one status write per window (issue 41 item 2;
docs/benchmarks.md, "One status write per window"): window N + 1's pod is created
under the serial window N - 1's write reserved, before the write that counts window
N's report and records the new pod's UID, then pod N is deleted. Killed between any
two of the three, refused, or unanswered: no report lost or counted twice, no serial
used twice, a pod not on record never read, one live watch pod at most."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import pytest
from test_inservice_watch import WINDOW, accepted, end_watch, report, watch_pods

from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.core.model import (
    Action,
    CreateProbePod,
    DeleteProbePod,
    PatchNAStatus,
    Plan,
)

WRITES = (CreateProbePod, PatchNAStatus, DeleteProbePod)


class Run:
    """A world whose applied writes are kept, to count and to check for reuse."""

    def __init__(self) -> None:
        self.world = accepted()
        self.applied: list[Action] = []

    def apply(self, plan: Plan, keep: Callable[[Action], bool] = lambda _: True) -> None:
        kept = Plan(actions=tuple(a for a in plan.actions if keep(a)), note=plan.note)
        self.world.apply(kept)
        self.applied += kept.actions
        self.check_one_live()

    def settle(self) -> None:
        for _ in range(10):
            plan = self.world.plan()
            if not plan.actions:
                return
            self.apply(plan)
        raise AssertionError("no fixed point")

    def end_window(self, *xids: tuple[int, float]) -> None:
        self.world.advance(WINDOW)
        end_watch(self.world, report(self.world, *xids))

    def writes(self) -> list[type]:
        return [type(a) for a in self.applied if isinstance(a, WRITES)]

    def created(self) -> list[str]:
        return [a.name for a in self.applied if isinstance(a, CreateProbePod)]

    def check_one_live(self) -> None:
        live = [p for p in watch_pods(self.world) if not p.ended and not p.deleting]
        assert len(live) <= 1, live

    def xid_events(self, xid: int) -> int:
        ledger = self.world.status.in_service
        assert ledger is not None
        return sum(1 for e in ledger.events if getattr(e, "xid", None) == xid)


def serial_of(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


def test_each_window_after_the_first_costs_one_create_one_status_write_and_one_delete() -> None:
    run = Run()
    for _ in range(4):
        run.applied.clear()
        run.end_window()
        run.settle()
        assert run.writes() == [CreateProbePod, PatchNAStatus, DeleteProbePod]
    assert run.world.status.phase == Phase.ACCEPTED


def test_the_write_after_the_create_records_its_uid_and_reserves_the_next_serial() -> None:
    run = Run()
    run.end_window()
    run.settle()
    st = run.world.status
    ledger = st.in_service
    assert ledger is not None
    (live,) = [p for p in watch_pods(run.world) if not p.ended]
    assert live.name == ledger.watch_pod
    assert [o.uid for o in st.owned_pods if o.name == live.name] == [live.uid]
    reserved = [e.name for e in st.creation_intents if e.kind == "Pod"]
    assert [serial_of(n) for n in reserved] == [ledger.watch_serial + 1]


def _one_window_then(run: Run, step: str) -> None:
    """Window N ends with an Xid 13; the operator is stopped at ``step``."""
    run.end_window()
    run.settle()  # window N - 1 ran the new way: N's serial is reserved
    run.end_window((13, 5.0))
    first = run.world.plan()
    assert [type(a) for a in first.actions if isinstance(a, WRITES)] == [CreateProbePod]
    if step == "before-create":
        run.world.restart()
        return
    run.apply(first)
    if step == "create-write":
        run.world.restart()
        return
    if step == "unanswered-create":
        (name,) = [a.name for a in first.actions if isinstance(a, CreateProbePod)]
        run.world.created.pop(name)  # the pod made, its answer lost
        run.world.unanswered.add(name)
        return
    second = run.world.plan()
    kinds = [type(a) for a in second.actions if isinstance(a, WRITES)]
    assert kinds == [PatchNAStatus, DeleteProbePod]
    if step == "conflict":
        return  # the write refused (409): the plan dropped, re-planned from the cache
    run.apply(second, keep=lambda a: not isinstance(a, DeleteProbePod))
    if step == "write-delete":
        run.world.restart()


# The serials created from window N - 1 on, as steps between them: a reservation a
# stopped process made and never used is passed over (2); a pod made and not
# recorded (a restart, a lost answer) is deleted unread and costs a window (1, 1, 1).
GAPS = {
    "before-create": [2, 1],
    "create-write": [1, 1, 1],
    "unanswered-create": [1, 1, 1],
    "conflict": [1, 1],
    "write-delete": [1, 2],
}


@pytest.mark.parametrize("step", list(GAPS))
def test_stopped_at_each_step_no_report_is_lost_or_counted_twice_and_no_serial_reused(
    step: str,
) -> None:
    run = Run()
    _one_window_then(run, step)
    run.settle()
    run.end_window()
    run.settle()
    world = run.world
    assert run.xid_events(13) == 1
    created = run.created()
    assert len(created) == len(set(created)), created
    serials = [serial_of(n) for n in created]
    assert serials == sorted(serials), serials
    st = world.status
    assert st.phase == Phase.ACCEPTED
    (live,) = [p for p in watch_pods(world) if not p.ended]
    assert st.in_service is not None
    assert st.in_service.watch_pod == live.name
    assert [p.name for p in watch_pods(world)] == [live.name]  # the others deleted
    owned = {o.name for o in st.owned_pods}
    assert live.name in owned
    # a serial reserved by a process that is gone is passed over, never created
    gaps = [b - a for a, b in pairwise(serials)]
    assert gaps == GAPS[step], (step, serials)


def test_a_fatal_xid_is_judged_before_the_next_pod_is_created() -> None:
    """The verdict path runs in the pass that reads the report: no new pod, no
    longer wait than before (settle delay aside)."""
    run = Run()
    run.end_window()
    run.settle()
    run.end_window((79, 5.0))
    run.applied.clear()
    run.settle()
    world = run.world
    world.advance(20)
    run.settle()
    assert world.status.phase == Phase.QUARANTINED
    assert not [p for p in watch_pods(world) if not p.ended]
    assert not [n for n in run.created()], run.created()


def test_after_a_restart_the_first_window_writes_its_intent_first() -> None:
    """An intent an earlier process recorded cannot be matched (its nonce's seed is
    gone): that window goes the old way, under the next free serial."""
    run = Run()
    run.end_window()
    run.settle()
    run.world.restart()
    run.applied.clear()
    run.end_window()
    run.settle()
    assert run.writes() == [PatchNAStatus, CreateProbePod, DeleteProbePod, PatchNAStatus]
    run.applied.clear()
    run.end_window()
    run.settle()
    assert run.writes() == [CreateProbePod, PatchNAStatus, DeleteProbePod]
