"""Who is re-verified now: a pure table of the schedule's decision (idle time,
period, the limit and the rate, suspects first), in the style of cluster-api's
``needsRemediation`` tables."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from world import T0, spec

from gpuaccept.contracts.reverify import Reverification, ReverifyRound, ReverifyStatus, Suspicion
from gpuaccept.operator.core.model import GpuPodSample, QuarantineLimitCounts
from gpuaccept.operator.core.reverify_schedule import (
    Candidate,
    after_sample,
    open_suspicion,
    ready_at,
    room,
    select_for_sampling,
)

DAY = timedelta(days=1)
POLICY = Reverification(
    enabled=True, idle_seconds=600, period_seconds=7 * 86400, sample_seconds=600
)
NOW = T0 + 30 * DAY


def at(days: float = 0, seconds: float = 0) -> datetime:
    return NOW - timedelta(days=days, seconds=seconds)


def suspected(since: datetime) -> Suspicion:
    return Suspicion(checks=["gpu_compute"], gpus=[3], cause="Xid 13 x3", since=since)


@dataclass(frozen=True)
class Row:
    candidates: tuple[Candidate, ...]
    slots: int
    chosen: list[str]
    policy: Reverification = POLICY


ROWS = {
    "nothing due: verified two days ago": Row((Candidate("a", at(2)),), 5, []),
    "due: verified eight days ago": Row((Candidate("a", at(8)),), 5, ["a"]),
    "never verified: due": Row((Candidate("a", None),), 5, ["a"]),
    "no room: nothing listed": Row((Candidate("a", at(8)),), 0, []),
    "off: nothing": Row((Candidate("a", at(8)),), 5, [], Reverification(enabled=False)),
    "oldest first, within the room": Row(
        (Candidate("new", at(8)), Candidate("old", at(20)), Candidate("mid", at(10))),
        2,
        ["old", "mid"],
    ),
    "a suspect first, even verified yesterday": Row(
        (Candidate("old", at(20)), Candidate("sus", at(1), suspicion=suspected(at(0, 60)))),
        1,
        ["sus"],
    ),
    "busy, listed 5 min ago: not again before sampleSeconds": Row(
        (Candidate("a", at(8), sampled=at(0, 300)),), 5, []
    ),
    "busy, listed 11 min ago: listed again": Row(
        (Candidate("a", at(8), sampled=at(0, 660)),), 5, ["a"]
    ),
    "idle for 5 min: the confirming list waits for idleSeconds": Row(
        (Candidate("a", at(8), sampled=at(0, 300), idle_since=at(0, 300)),), 5, []
    ),
    "idle for 10 min: the confirming list": Row(
        (Candidate("a", at(8), sampled=at(0, 600), idle_since=at(0, 600)),), 5, ["a"]
    ),
    "a waiting streak holds its slot: its confirming list comes": Row(
        (
            Candidate("streak", at(20), sampled=at(0, 60), idle_since=at(0, 60)),
            Candidate("next", at(9)),
        ),
        1,
        [],
    ),
    "a slot beyond the waiting streak goes to another": Row(
        (
            Candidate("streak", at(20), sampled=at(0, 60), idle_since=at(0, 60)),
            Candidate("next", at(9)),
        ),
        2,
        ["next"],
    ),
    "the whole room in one pass (the policy's rate, not the loop's)": Row(
        tuple(Candidate(f"n{i:02d}", at(8 + i)) for i in range(40)),
        30,
        [f"n{i:02d}" for i in range(39, 9, -1)],
    ),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=list(ROWS))
def test_who_is_listed_now(row: Row) -> None:
    assert select_for_sampling(row.candidates, row.policy, row.slots, NOW) == row.chosen


def test_ready_at_is_the_later_of_due_and_the_next_list() -> None:
    c = Candidate("a", at(6), sampled=at(0, 60))
    assert ready_at(c, POLICY) == at(6) + timedelta(days=7)


ROOM = {
    "the standing limit": (spec(maxQuarantined=3), QuarantineLimitCounts(1, 100, 1, 0), 1),
    "the rate": (
        spec(maxQuarantined=50, quarantineRate={"maxPerWindow": 4, "windowSeconds": 300}),
        QuarantineLimitCounts(0, 100, 0, 3),
        1,
    ),
    "reached": (spec(maxQuarantined=2), QuarantineLimitCounts(2, 100, 0, 0), 0),
    "over: never negative": (spec(maxQuarantined=1), QuarantineLimitCounts(3, 100, 0, 0), 0),
}


@pytest.mark.parametrize(("policy", "counts", "expected"), ROOM.values(), ids=list(ROOM))
def test_room_is_the_tighter_of_the_limit_and_the_rate(
    policy: object, counts: QuarantineLimitCounts, expected: int
) -> None:
    assert room(policy, counts, "100%") == expected  # type: ignore[arg-type]


def test_the_operators_ceiling_caps_the_room() -> None:
    assert room(spec(maxQuarantined=50), QuarantineLimitCounts(0, 100, 0, 0), 2) == 2


def test_the_operators_ceiling_counts_every_policys_nodes() -> None:
    """A one-node policy in a fleet of 12 with 5 out elsewhere: a 50% ceiling leaves 1."""
    counts = QuarantineLimitCounts(0, 1, 0, 0, fleet_matched=12, fleet_unavailable=5)
    assert room(spec(maxQuarantined="100%"), counts, "50%") == 1
    full = QuarantineLimitCounts(0, 1, 0, 0, fleet_matched=12, fleet_unavailable=6)
    assert room(spec(maxQuarantined="100%"), full, "50%") == 0


SAMPLES = {
    "first idle list starts a streak": (None, GpuPodSample(NOW), NOW, False),
    "idle 10 min: the window is complete": (
        ReverifyStatus(sampled_time=at(0, 600), idle_since=at(0, 600)),
        GpuPodSample(NOW),
        at(0, 600),
        True,
    ),
    "idle 5 min: not yet": (
        ReverifyStatus(sampled_time=at(0, 300), idle_since=at(0, 300)),
        GpuPodSample(NOW),
        at(0, 300),
        False,
    ),
    "a GPU pod ends the streak": (
        ReverifyStatus(sampled_time=at(0, 600), idle_since=at(0, 600)),
        GpuPodSample(NOW, ("ml/job",)),
        None,
        False,
    ),
}


@pytest.mark.parametrize(
    ("before", "sample", "since", "start"), SAMPLES.values(), ids=list(SAMPLES)
)
def test_a_list_records_the_streak(
    before: ReverifyStatus | None, sample: GpuPodSample, since: datetime | None, start: bool
) -> None:
    outcome = after_sample(before, sample, POLICY)
    assert outcome.status.idle_since == since
    assert outcome.status.sampled_time == sample.at
    assert outcome.start is start


def test_idle_seconds_zero_starts_on_the_first_idle_list() -> None:
    policy = POLICY.model_copy(update={"idle_seconds": 0})
    assert after_sample(None, GpuPodSample(NOW), policy).start


def test_a_suspicion_is_open_until_a_suspect_round_after_it() -> None:
    old, new = suspected(at(2)), suspected(at(1))
    rv = ReverifyStatus(suspicions=[old, new])
    assert open_suspicion(rv, POLICY) == old
    done = ReverifyRound(cause="Suspect", started=at(1.5), outcome="Passed")
    assert open_suspicion(rv.model_copy(update={"last": done}), POLICY) == new
    later = ReverifyRound(cause="Suspect", started=at(0.5))
    assert open_suspicion(rv.model_copy(update={"round": later}), POLICY) is None
    idle = ReverifyRound(cause="Idle", started=at(0.5))  # a periodic round confirms nothing
    assert open_suspicion(rv.model_copy(update={"last": idle}), POLICY) == old
    off = POLICY.model_copy(update={"suspects": False})
    assert open_suspicion(rv, off) is None
