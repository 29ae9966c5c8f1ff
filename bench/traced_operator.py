"""The operator under ``tracemalloc``: where its memory goes (a bench-only wrapper).

    python -m bench.traced_operator --dump-dir DIR [--every 60] [--frames 20] -- ARGS...

imports the operator, starts ``tracemalloc``, then runs ``gpuaccept operator ARGS``
in this process (the modules' own memory is not traced), so
the pid a benchmark measures is the traced operator; e.g. ``python -m
bench.inservice_fleet --operator-cmd "{python} -m bench.traced_operator --dump-dir
DIR -- --kubeconfig {kubeconfig} ..."`` (the rest as the fleet benchmark's default
operator command). The shipped operator is not changed.

A thread writes ``DIR/snapshot-NNN-<why>.txt``: every ``--every`` seconds
(``periodic``), whenever the traced bytes pass 1.15 x the largest dumped so far
(``peak``, at most one in 20 s: a transient such as a relist is caught near its
top), and at exit.
Each holds VmRSS and VmHWM (/proc), the traced bytes now and their peak since the
last dump, and the live blocks grouped four ways: by the innermost frame in
``gpuaccept`` (our code that asked for the memory, directly or through a
library), by the innermost frame in ``kopf``, by the line that allocated, and by
whole traceback. Tracing costs CPU and memory (RSS is inflated by its own
records); the traced bytes are the program's own.
"""

from __future__ import annotations

import argparse
import threading
import time
import tracemalloc
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

# imported before tracing starts: the modules' own memory is no cost per node, and
# importing under tracemalloc is slow enough to miss the benchmark's start-up limit
from gpuaccept.operator.command import main as operator_main

PACKAGES = ("gpuaccept", "kopf")
PEAK_STEP = 1.15  # a new peak dump when the traced bytes pass this x the largest dumped
PEAK_GAP_S = 20.0  # at most one peak dump in this many seconds (a dump stops the process)
POLL_S = 0.5
MB = 2**20


def innermost(traceback: tracemalloc.Traceback, package: str) -> str:
    """``file:line`` of the most recent frame whose file is under ``/<package>/``."""
    marker = f"/{package}/"
    for frame in reversed(traceback):  # oldest first; the most recent is last
        if marker in frame.filename:
            return f"{package}/{frame.filename.split(marker, 1)[1]}:{frame.lineno}"
    return f"<no {package} frame>"


def by_innermost(
    stats: Iterable[tracemalloc.Statistic], package: str
) -> list[tuple[str, int, int]]:
    """(holder, bytes, blocks) summed per innermost ``package`` frame, largest first."""
    size: dict[str, int] = defaultdict(int)
    count: dict[str, int] = defaultdict(int)
    for stat in stats:
        holder = innermost(stat.traceback, package)
        size[holder] += stat.size
        count[holder] += stat.count
    return sorted(((h, size[h], count[h]) for h in size), key=lambda row: -row[1])


def rss_lines() -> list[str]:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return []
    return [line for line in status.splitlines() if line.startswith(("VmRSS", "VmHWM"))]


def growth(
    snapshot: tracemalloc.Snapshot, previous: tracemalloc.Snapshot, top: int = 30
) -> list[str]:
    """What grew since ``previous`` (the last dump): by allocating line, and by the
    innermost gpuaccept and kopf frames (bytes and blocks, the largest growth first)."""
    lines = ["", "## grown since the last dump, by allocating line (MB, blocks)"]
    lines += [
        f"{d.size_diff / MB:+9.3f} {d.count_diff:+9d}  "
        f"{d.traceback[-1].filename}:{d.traceback[-1].lineno}"
        for d in snapshot.compare_to(previous, "lineno")[:top]
    ]
    for package in PACKAGES:
        now = {h: (b, n) for h, b, n in by_innermost(snapshot.statistics("traceback"), package)}
        then = {h: (b, n) for h, b, n in by_innermost(previous.statistics("traceback"), package)}
        rows = sorted(
            (
                (now.get(h, (0, 0))[0] - then.get(h, (0, 0))[0]),
                (now.get(h, (0, 0))[1] - then.get(h, (0, 0))[1]),
                h,
            )
            for h in set(now) | set(then)
        )
        rows.sort(key=lambda row: -abs(row[0]))  # the largest change first, either way
        lines += ["", f"## grown since the last dump, by innermost {package} frame (MB, blocks)"]
        lines += [f"{b / MB:+9.3f} {n:+9d}  {h}" for b, n, h in rows[:top]]
    return lines


def render(snapshot: tracemalloc.Snapshot, why: str, peak: int, top: int = 40) -> str:
    stats = snapshot.statistics("traceback")
    total = sum(stat.size for stat in stats)
    lines = [
        f"why: {why}",
        f"time: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
        *rss_lines(),
        f"traced: {total / MB:.1f} MB now, {peak / MB:.1f} MB peak since the last dump",
    ]
    for package in PACKAGES:
        lines += ["", f"## by innermost {package} frame (MB, blocks)"]
        lines += [f"{s / MB:9.2f} {n:9d}  {h}" for h, s, n in by_innermost(stats, package)[:top]]
    lines += ["", "## by allocating line (MB, blocks)"]
    lines += [
        f"{s.size / MB:9.2f} {s.count:9d}  {s.traceback[-1].filename}:{s.traceback[-1].lineno}"
        for s in snapshot.statistics("lineno")[:top]
    ]
    lines += ["", "## by traceback (MB, blocks; most recent frame last)"]
    for stat in stats[: top // 2]:
        lines.append(f"{stat.size / MB:9.2f} {stat.count:9d}")
        lines += [f"    {line}" for line in stat.traceback.format(limit=12)]
    return "\n".join(lines) + "\n"


class Dumper:
    """Writes the snapshots of the module docstring into ``directory``."""

    def __init__(self, directory: Path, every_s: float) -> None:
        self.directory, self.every_s = directory, every_s
        self.serial = 0
        self.largest = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name="traced-dump", daemon=True)
        self.previous: tracemalloc.Snapshot | None = None  # the last dump's, with --growth
        self.growth = False
        self.start_after_s, self.frames = 0.0, 12

    def dump(self, why: str) -> None:
        with self.lock:
            current, peak = tracemalloc.get_traced_memory()
            snapshot = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(inclusive=False, filename_pattern=tracemalloc.__file__)]
            )
            tracemalloc.reset_peak()
            self.largest = max(self.largest, current)
            self.serial += 1
            path = self.directory / f"snapshot-{self.serial:03d}-{why}.txt"
            text = render(snapshot, why, peak)
            if self.growth and self.previous is not None:
                text += "\n".join(growth(snapshot, self.previous)) + "\n"
            if self.growth:
                self.previous = snapshot
            path.write_text(text)

    def _loop(self) -> None:
        if not tracemalloc.is_tracing():  # --start-after: tracing starts here, later
            if self.stop.wait(self.start_after_s):
                return
            tracemalloc.start(self.frames)
        last = last_peak = time.monotonic()
        while not self.stop.wait(POLL_S):
            current, _ = tracemalloc.get_traced_memory()
            now = time.monotonic()
            if current > PEAK_STEP * max(self.largest, 16 * MB) and now - last_peak >= PEAK_GAP_S:
                self.dump("peak")
                last_peak = time.monotonic()
            elif time.monotonic() - last >= self.every_s:
                self.dump("periodic")
                last = time.monotonic()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.traced_operator", description=__doc__)
    parser.add_argument("--dump-dir", type=Path, required=True)
    parser.add_argument("--every", type=float, default=60.0, help="seconds between dumps")
    parser.add_argument("--frames", type=int, default=12, help="frames kept per allocation")
    parser.add_argument(
        "--start-after",
        type=float,
        default=0.0,
        help="seconds before tracing starts (e.g. past the join, to see what grows in service)",
    )
    parser.add_argument(
        "--growth",
        action="store_true",
        help="each dump also says what grew since the last (keeps the last snapshot)",
    )
    parser.add_argument("operator_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    rest = args.operator_args[1:] if args.operator_args[:1] == ["--"] else args.operator_args
    args.dump_dir.mkdir(parents=True, exist_ok=True)
    dumper = Dumper(args.dump_dir, args.every)
    dumper.growth, dumper.start_after_s, dumper.frames = args.growth, args.start_after, args.frames
    if args.start_after <= 0:
        tracemalloc.start(args.frames)
    dumper.thread.start()
    try:
        return operator_main(rest)
    finally:
        dumper.stop.set()
        dumper.thread.join()
        if tracemalloc.is_tracing():
            dumper.dump("exit")


if __name__ == "__main__":
    raise SystemExit(main())
