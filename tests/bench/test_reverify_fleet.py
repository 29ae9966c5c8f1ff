"""The fleet benchmark's re-verification phase: what it reads from the records and
how it judges them (no cluster; the phase on the API server is test_bench_check.py's)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

import pytest
from bench.reverify_fleet import (
    WORKLOADS,
    ReverifyResult,
    ReverifySettings,
    RoundRecords,
    max_in_window,
    probe_behaviour,
)
from pydantic import ValidationError

from bench import reverify_fleet
from gpuaccept.testsupport.kubelet_standin import Complete, Hang, PodInfo

T0 = datetime(2026, 12, 2, 21, 0, tzinfo=UTC)


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("times", "window", "most"),
    [
        ([], 60, 0),
        ([5.0], 60, 1),
        ([0.0, 30.0, 59.0, 61.0], 60, 3),  # 0, 30, 59 within [-1, 59]
        ([0.0, 60.0], 60, 2),  # closed: a take-out at now - window still counts
        ([0.0, 60.5], 60, 1),
        ([120.0, 0.0, 60.0, 61.0, 100.0], 60, 4),  # unsorted: 60, 61, 100, 120
    ],
)
def test_max_in_window_is_the_most_in_any_closed_window(
    times: list[float], window: float, most: int
) -> None:
    assert max_in_window(times, window) == most


def test_records_keep_what_happened_since_the_phase_started() -> None:
    records = RoundRecords()
    since = T0 + timedelta(seconds=10)
    before = {"takenOutTime": stamp(0), "reverify": {"last": {"started": stamp(1)}}}
    records.add("a", before, since)
    assert records.taken_out == {}
    assert records.started == {}
    assert records.ended == {}
    under_way = {
        "takenOutTime": stamp(20),
        "reverify": {"round": {"cause": "Idle", "started": stamp(20)}, "busyPods": []},
    }
    records.add("a", under_way, since)
    ended = {
        "takenOutTime": stamp(20),
        "reverify": {
            "last": {"started": stamp(20), "finished": stamp(80), "outcome": "Passed"},
        },
    }
    records.add("a", ended, since)
    records.add("a", ended, since)  # watched twice: one round
    records.add("b", {"reverify": {"busyPods": ["ml/job"], "sampledTime": stamp(30)}}, since)
    assert records.taken_out == {"a": {stamp(20)}}
    assert records.started == {"a": {stamp(20)}}
    assert records.ended == {("a", stamp(20)): "Passed"}
    assert records.found_busy == {"b"}
    assert records.take_out_times() == [(T0 + timedelta(seconds=20)).timestamp()]


def pod(namespace: str) -> PodInfo:
    return PodInfo(namespace, "p", "uid", "node-1", "boot", None, {})


def test_the_phase_runs_workloads_forever_and_probe_pods_for_a_round() -> None:
    behaviour = probe_behaviour(lambda p: Complete(exit_code=0, message="report"), 120.0)
    assert isinstance(behaviour(pod(WORKLOADS)), Hang)
    assert behaviour(pod("gpuaccept-bench")) == Complete(
        exit_code=0, message="report", delay_s=120.0
    )
    assert isinstance(probe_behaviour(Hang(), 5.0)(pod("gpuaccept-bench")), Hang)


def test_settings_come_from_the_options_and_are_validated_as_the_policy() -> None:
    parser = argparse.ArgumentParser()
    reverify_fleet.add_arguments(parser)
    assert reverify_fleet.settings_from(parser.parse_args([])) is None
    settings = reverify_fleet.settings_from(
        parser.parse_args(["--reverify-seconds", "300", "--reverify-rate", "5"])
    )
    assert settings is not None
    assert settings.rate == 5
    assert settings.max_quarantined == "2%"
    spec = settings.spec()
    assert spec.reverify.enabled
    assert spec.reverify.period_seconds == 60
    assert spec.rate_count(5000) == 5
    assert spec.max_quarantined_count(5000) == 100
    with pytest.raises(ValidationError):
        reverify_fleet.settings_from(
            parser.parse_args(["--reverify-seconds", "1", "--reverify-period-seconds", "5"])
        )


def test_busy_nodes_are_every_kth_from_the_first() -> None:
    settings = ReverifySettings(seconds=1, busy_every=50)
    assert [i for i in range(200) if settings.busy(i)] == [0, 50, 100, 150]
    assert not any(ReverifySettings(seconds=1, busy_every=0).busy(i) for i in range(10))


def judged(**figures: int) -> ReverifyResult:
    result = ReverifyResult(nodes=500, seconds=300, settings={}, standing_limit=10, rate_limit=5)
    result.completed, result.outcomes = 4, {"Passed": 4}
    for name, value in figures.items():
        setattr(result, name, value)
    reverify_fleet._check(result)
    return result


def test_the_phase_fails_over_the_limit_or_the_rate_or_on_a_busy_reprobe() -> None:
    assert judged(max_out_at_once=10, max_taken_out_in_a_window=5).within_limits
    assert judged().problems == []
    over_limit = judged(max_out_at_once=11)
    assert not over_limit.within_limits
    assert "over the limit 10" in over_limit.problems[0]
    over_rate = judged(max_taken_out_in_a_window=6)
    assert not over_rate.within_limits
    assert "over the rate 5" in over_rate.problems[0]
    assert judged(busy_reprobed=1).problems == ["1 busy nodes were re-probed"]
    assert judged(completed=0).problems == ["no re-verification completed"]


def test_a_failed_round_of_a_healthy_node_is_a_problem() -> None:
    result = ReverifyResult(nodes=50, seconds=60, settings={}, standing_limit=1, rate_limit=1)
    result.completed, result.outcomes = 2, {"Failed": 1, "Passed": 1}
    reverify_fleet._check(result)
    assert result.within_limits
    assert result.problems == ["1 re-verifications of healthy nodes did not pass"]
