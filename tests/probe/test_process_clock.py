"""The probe's wall time from process start: /proc/self/stat's starttime."""

import os
import time
from pathlib import Path

import pytest

from gpuaccept.probe.process_clock import ProcessStatError, process_age_s, start_ticks

LINE = "1234 (python3) S 1 1234 1234 0 -1 4194560 9 0 0 0 0 0 0 0 20 0 1 0 {start} 1 2 3\n"


@pytest.mark.parametrize(
    ("stat", "ticks"),
    [
        (LINE.format(start=987654), 987654),
        # the command name may hold spaces and parentheses: fields count from the last ')'
        (LINE.replace("(python3)", "(gpu accept) (x))").format(start=42), 42),
    ],
)
def test_starttime_is_field_22(stat: str, ticks: int) -> None:
    assert start_ticks(stat) == ticks


@pytest.mark.parametrize("stat", ["", "1234 python3 S 1", "1 (p) S 1 2", LINE.format(start="x")])
def test_a_line_the_kernel_would_not_write_is_refused(stat: str) -> None:
    with pytest.raises(ProcessStatError):
        start_ticks(stat)


def test_the_age_counts_from_the_process_start(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    booted_s = time.clock_gettime(time.CLOCK_BOOTTIME)
    hertz = os.sysconf("SC_CLK_TCK")
    stat.write_text(LINE.format(start=round((booted_s - 30) * hertz)))  # 30 s ago
    age = process_age_s(stat)
    assert age is not None
    assert 30 - 1 / hertz <= age < 60
    assert process_age_s(tmp_path / "missing") is None
    own = process_age_s()
    assert own is not None
    assert own > 0
