"""Processes attached to a local control plane — test support, not shipped.

A program that runs against the control plane in ``DIR`` (the demo's operator
and kubelet stand-in) is registered in ``DIR/attached/NAME.pid`` as
``"PID STARTTIME"`` (STARTTIME is field 22 of ``/proc/PID/stat``).
``controlplane down --dir DIR`` (``make cluster-down``) stops every registered
process before the control plane, so that nothing is left retrying against a
dead API server; :func:`stop_attached` does the same from Python. The start
time makes a reused PID harmless: a registration whose process is gone is
never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ATTACHED_DIR = "attached"


def proc_start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/PID/stat``, or None when the process is gone (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 1 :].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


@dataclass(frozen=True)
class AttachedProcess:
    name: str
    pid: int
    start_time: str

    def running(self) -> bool:
        return proc_start_time(self.pid) == self.start_time


def register(cluster_dir: Path, name: str, pid: int) -> AttachedProcess:
    """Record ``pid`` as attached to the control plane in ``cluster_dir``."""
    start = proc_start_time(pid)
    if start is None:
        raise ProcessLookupError(f"process {pid} ({name}) is not running")
    folder = cluster_dir / ATTACHED_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.pid").write_text(f"{pid} {start}\n")
    return AttachedProcess(name, pid, start)


def attached(cluster_dir: Path) -> list[AttachedProcess]:
    out: list[AttachedProcess] = []
    for path in sorted((cluster_dir / ATTACHED_DIR).glob("*.pid")):
        parts = path.read_text().split()
        if len(parts) == 2 and parts[0].isdigit() and int(parts[0]) > 1:
            out.append(AttachedProcess(path.stem, int(parts[0]), parts[1]))
    return out


def _signal(process: AttachedProcess, sig: signal.Signals) -> None:
    for target in (-process.pid, process.pid):  # its process group, then itself
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, sig)


def stop_attached(cluster_dir: Path, *, grace: float = 30.0) -> list[str]:
    """SIGTERM every attached process that still runs, SIGKILL it after ``grace``;
    remove the registrations. Returns the names of the processes stopped."""
    live = [p for p in attached(cluster_dir) if p.running()]
    for process in live:
        _signal(process, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(p.running() for p in live) and time.monotonic() < deadline:
        time.sleep(0.1)
    for process in live:
        if process.running():
            _signal(process, signal.SIGKILL)
    for path in (cluster_dir / ATTACHED_DIR).glob("*.pid"):
        path.unlink(missing_ok=True)
    return [p.name for p in live]
