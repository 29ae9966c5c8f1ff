"""GPU sets written as ranges (``"0-3,5"``), so that a per-GPU finding on 16 GPUs
stays a few bytes in a report: ``{"0-15": "not_started"}``, not 16 entries."""

import re
from collections.abc import Iterable
from typing import TypeVar

ValueT = TypeVar("ValueT")
MAX_GPU = 63  # a report describes at most 64 GPUs
RANGES = re.compile(r"^\d{1,2}(-\d{1,2})?(,\d{1,2}(-\d{1,2})?)*$")


def format_gpus(gpus: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 5]`` → ``"0-3,5"``."""
    parts: list[str] = []
    ordered = sorted(set(gpus))
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        first, last = ordered[start], ordered[end]
        parts.append(str(first) if first == last else f"{first}-{last}")
        start = end + 1
    return ",".join(parts)


def parse_gpus(text: str) -> list[int]:
    """``"0-3,5"`` → ``[0, 1, 2, 3, 5]``; raises ValueError for anything else."""
    if not RANGES.match(text):
        raise ValueError(f"not a GPU range list: {text[:40]!r}")
    out: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        if high < low or high > MAX_GPU:
            raise ValueError(f"bad GPU range {part!r}")
        out.extend(range(low, high + 1))
    return sorted(set(out))


def group(by_gpu: dict[int, ValueT]) -> dict[str, ValueT]:
    """GPU → value as ranges → value, one entry per distinct value."""
    gpus_of: dict[str, tuple[ValueT, list[int]]] = {}
    for gpu, value in sorted(by_gpu.items()):
        key = repr(value)
        gpus_of.setdefault(key, (value, []))[1].append(gpu)
    return {format_gpus(gpus): value for value, gpus in gpus_of.values()}


def ungroup(grouped: dict[str, ValueT]) -> dict[int, ValueT]:
    return {gpu: value for text, value in grouped.items() for gpu in parse_gpus(text)}
