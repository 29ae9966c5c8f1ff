"""The order in which ``make test`` hands tests to its xdist workers: the long ones
first, one share at the head of each worker's queue — test support, not shipped.

A test marked ``long`` (the fleet trial, the benchmark's and the demo's runs, the
fabric pairs that wait out a rendezvous) runs for minutes. In collection order they
sit wherever their file does, so one of them could start near the end of the run
and finish it alone while the other workers idle. ``--dist worksteal`` first splits
the collection into one contiguous slice per worker (as :func:`slices` does), then
lets an idle worker take the *tail* of the longest queue; a slice's head stays with
its worker. So the long tests are dealt round-robin to the heads of the slices: every
worker starts on its share of them, and the short tests behind them are what the
others steal. They are dealt one file at a time in turn (the long tests of one file
run the same product, e.g. the benchmark: not all of them at the same moment).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from itertools import zip_longest
from typing import TypeVar

T = TypeVar("T")


def slices(count: int, workers: int) -> list[int]:
    """The sizes of worksteal's first split of ``count`` tests over ``workers``
    (xdist's ``WorkStealingScheduling.check_schedule``: each idle worker in turn gets
    the pending tests divided by the workers still to serve)."""
    sizes = []
    left = count
    for served in range(workers):
        size = left // (workers - served)
        sizes.append(size)
        left -= size
    return sizes


def in_turn(items: Sequence[T], group: Callable[[T], Hashable]) -> list[T]:
    """``items`` taking one of each group in turn (the groups in the order they first
    appear, each group's items in their order)."""
    groups: dict[Hashable, list[T]] = {}
    for item in items:
        groups.setdefault(group(item), []).append(item)
    rounds = zip_longest(*groups.values())
    return [item for one_round in rounds for item in one_round if item is not None]


def long_first(
    items: Sequence[T],
    is_long: Callable[[T], bool],
    workers: int,
    group: Callable[[T], Hashable] = id,
) -> list[T]:
    """``items`` reordered so that the long ones, dealt round-robin (one ``group``, a
    file, at a time in turn), head the ``workers`` slices; every other test keeps its
    relative order."""
    longs = in_turn([item for item in items if is_long(item)], group)
    rest = [item for item in items if not is_long(item)]
    if workers <= 1:
        return longs + rest
    ordered: list[T] = []
    taken = 0
    for worker, size in enumerate(slices(len(items), workers)):
        heads = longs[worker::workers]
        fill = max(0, size - len(heads))
        ordered += heads + rest[taken : taken + fill]
        taken += fill
    return ordered + rest[taken:]
