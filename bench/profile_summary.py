"""Summarise a py-spy raw (folded) profile: where the sampled process spent its CPU.

Each line of ``py-spy record --format raw`` is ``frame;frame;...;leaf COUNT``
(outermost first). Prints the frames with the most samples *inclusive* (the
frame is anywhere on the stack) and *self* (the frame is the leaf), as a share
of all samples. ``python -m bench.profile_summary bench/out/bench/py-spy-operator-n2000.txt``
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

_LOCATION = re.compile(r"\s*\((?P<file>[^)]*?)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    """``handle (kopf/_core/x.py:12)`` → ``handle (kopf/_core/x.py)``: lines merged."""
    match = _LOCATION.search(frame)
    if match is None:
        return frame.strip()
    path = match["file"]
    for marker in ("site-packages/", "lib/python3.11/", "/work/main/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{frame[: match.start()].strip()} ({path})"


def summarise(text: str) -> tuple[int, Counter[str], Counter[str]]:
    total = 0
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame_name(f) for f in stack.split(";") if f]
        if frames and frames[0].startswith("process "):
            frames = frames[1:]  # py-spy's "process <pid>:..." pseudo-frame
        if frames and frames[0].startswith("thread "):
            frames = frames[1:]
        total += count
        for frame in set(frames):
            inclusive[frame] += count
        if frames:
            leaf[frames[-1]] += count
    return total, inclusive, leaf


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_summary", description=__doc__)
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--grep", default="", help="only frames whose text contains this")
    args = parser.parse_args(argv)
    total, inclusive, leaf = summarise(args.profile.read_text())
    if not total:
        print("no samples")
        return 1
    print(f"{total} samples")
    for title, counter in (("inclusive", inclusive), ("self", leaf)):
        print(f"\n-- top {args.top} frames, {title} --")
        rows = [(f, c) for f, c in counter.most_common() if args.grep in f][: args.top]
        for frame, count in rows:
            print(f"{100 * count / total:5.1f}%  {frame}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
