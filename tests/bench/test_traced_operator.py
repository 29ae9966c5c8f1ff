"""The traced operator's grouping (bench/traced_operator.py): live memory is charged to
the innermost frame of a package, whichever library made the block below it."""

from __future__ import annotations

import json
import tracemalloc

from bench.traced_operator import by_innermost, growth, innermost, render

HELD: list[object] = []


def decode_many() -> None:
    # the blocks are made in the json module; the innermost frame here is this line
    HELD.extend(json.loads('{"a": [1, 2, 3], "name": "x' + str(i) + '"}') for i in range(2000))


def test_live_blocks_are_charged_to_the_innermost_frame_of_the_package() -> None:
    tracemalloc.start(25)
    try:
        decode_many()
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
        stats = snapshot.statistics("traceback")
    rows = by_innermost(stats, "bench")
    mine = [row for row in rows if "test_traced_operator.py" in row[0]]
    line = decode_many.__code__.co_firstlineno + 2
    assert mine[0][0] == f"bench/test_traced_operator.py:{line}", rows[:5]
    assert mine[0][2] >= 2000  # at least one block per decoded object
    assert sum(size for _h, size, _n in rows) == sum(stat.size for stat in stats)
    assert innermost(stats[0].traceback, "no-such-package") == "<no no-such-package frame>"
    text = render(snapshot, "test", peak=0)
    assert "## by innermost gpuaccept frame" in text
    assert f"bench/test_traced_operator.py:{line}" in text
    HELD.clear()


def test_growth_names_what_was_made_between_two_snapshots() -> None:
    tracemalloc.start(25)
    try:
        before = tracemalloc.take_snapshot()
        decode_many()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    line = decode_many.__code__.co_firstlineno + 2
    lines = growth(after, before)
    mine = [row for row in lines if f"bench/test_traced_operator.py:{line}" in row]
    assert mine, lines
    assert float(mine[0].split()[0]) > 0  # grown, in MB
    HELD.clear()
