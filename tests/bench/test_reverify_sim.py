"""The re-verification simulation's correctness check (no timings): at a small
fleet, the schedule never takes out more nodes than the limit or the rate allows,
and re-verifies some."""

from __future__ import annotations

import json

import pytest

from bench import reverify_sim


def test_a_small_fleet_stays_within_the_limit_and_the_rate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = reverify_sim.main(
        ["--nodes", "200", "--hours", "6", "--max-quarantined", "3", "--rate", "2",
         "--window", "1800", "--idle-seconds", "600", "--pass-seconds", "60"]
    )  # fmt: skip
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0
    assert summary["within_limits"]
    assert summary["max_out_at_once"] <= 3
    assert summary["max_taken_out_in_a_window"] <= 2
    assert summary["reverified"] > 0
