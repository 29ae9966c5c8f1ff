"""How long this process has existed: the probe's wall time from process start.

The kernel records each task's start in ``/proc/<pid>/stat`` field 22
(``starttime``: clock ticks since boot, on the boot-time clock since Linux 5.5's
``start_boottime``; proc(5)). Against ``CLOCK_BOOTTIME`` now, that is the time
since the process was created: before the interpreter started, so the
interpreter's own start, every import (torch included), NVML and CUDA
initialisation are counted. Inside a time namespace both are shifted by the same
boot-time offset. The resolution is one clock tick (``SC_CLK_TCK``, 100 Hz:
10 ms).

The process measured is the probe's own (``/proc/self``), never the
``--proc-root`` a probe may be given for the host's files.
"""

import os
import time
from pathlib import Path

SELF_STAT = Path("/proc/self/stat")
STARTTIME_FIELD = 22  # proc(5), counting from 1


class ProcessStatError(ValueError):
    """``/proc/<pid>/stat`` does not read as the kernel writes it."""


def start_ticks(stat: str) -> int:
    """The ``starttime`` field of a ``/proc/<pid>/stat`` line. The command name
    (field 2) is in parentheses and may hold spaces and parentheses itself, so the
    fields are counted from the last ``)``."""
    _, paren, rest = stat.rpartition(")")
    if not paren:
        raise ProcessStatError("no ')' after the command name")
    fields = rest.split()
    index = STARTTIME_FIELD - 3  # the fields after ')' start at field 3 (state)
    if len(fields) <= index or not fields[index].isdigit():
        raise ProcessStatError(f"field {STARTTIME_FIELD} (starttime) is not a tick count")
    return int(fields[index])


def process_age_s(stat_path: Path = SELF_STAT) -> float | None:
    """Seconds since this process started, or None where it cannot be read (not Linux)."""
    try:
        ticks = start_ticks(stat_path.read_text())
        hertz = os.sysconf("SC_CLK_TCK")
        now = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (OSError, ValueError, AttributeError):  # AttributeError: no CLOCK_BOOTTIME
        return None
    return max(0.0, now - ticks / hertz)
