"""Peak RSS and CPU seconds of a process, read from /proc (Linux only).

``VmHWM`` in ``/proc/<pid>/status`` is the peak resident set size; ``utime``
and ``stime`` in ``/proc/<pid>/stat`` are the CPU seconds spent in user and
kernel mode, over all of the process's threads. Read both while the process is
still alive (after it exits, /proc has nothing).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcSample:
    pid: int
    rss_mb: float
    peak_rss_mb: float
    cpu_s: float
    threads: int


def sample(pid: int) -> ProcSample | None:
    """The process's current numbers, or None if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields: dict[str, str] = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    # "pid (comm) S ppid ..." : comm may contain spaces; fields follow the last ')'.
    rest = stat[stat.rfind(")") + 2 :].split()
    utime, stime = int(rest[11]), int(rest[12])  # fields 14 and 15 of proc(5)
    return ProcSample(
        pid=pid,
        rss_mb=_kib(fields.get("VmRSS", "0 kB")) / 1024,
        peak_rss_mb=_kib(fields.get("VmHWM", "0 kB")) / 1024,
        cpu_s=(utime + stime) / _CLOCK_TICKS,
        threads=int(fields.get("Threads", "0")),
    )


def _kib(value: str) -> float:
    return float(value.split(maxsplit=1)[0]) if value else 0.0
