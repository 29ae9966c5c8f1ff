"""GPU sets as short range text: ``[0, 1, 2, 3, 5]`` ↔ ``"0-3,5"``.

The checks that name a few GPUs out of many (memory health, Xid events) store
them in this form in their ``observed`` value: 16 GPUs all concerned take
``"0-15"``, so a condensed observation stays small however many GPUs fail.
"""

import re

_RANGES = re.compile(r"^\d{1,3}(-\d{1,3})?(,\d{1,3}(-\d{1,3})?)*$")
MAX_GPU = 255


def gpu_ranges(indices: list[int] | set[int]) -> str:
    """``[0, 1, 2, 3, 5]`` → ``"0-3,5"`` (sorted, duplicates dropped)."""
    ordered = sorted(set(indices))
    parts: list[str] = []
    start = prev = None
    for index in ordered:
        if prev is not None and index == prev + 1:
            prev = index
            continue
        if start is not None:
            parts.append(f"{start}-{prev}" if prev != start else f"{start}")
        start = prev = index
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(parts)


def parse_gpu_ranges(text: str) -> list[int]:
    """``"0-3,5"`` → ``[0, 1, 2, 3, 5]``; raises ValueError on anything else."""
    if not _RANGES.match(text):
        raise ValueError(f"not a GPU range list: {text[:32]!r}")
    out: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        if high < low or high > MAX_GPU:
            raise ValueError(f"bad GPU range {part!r}")
        out.update(range(low, high + 1))
    return sorted(out)


def gpu_label(text: str) -> str:
    """``"5"`` → ``"GPU 5"``, ``"0-3,5"`` → ``"GPUs 0-3,5"``."""
    single = text.isdigit()
    return f"GPU{'' if single else 's'} {text}"


def merged(counts: dict[str, int]) -> dict[str, int]:
    """``{"3": 2, "5": 7}`` → ``{"3,5": 7}``: every GPU concerned, with the largest count."""
    if len(counts) <= 1:
        return counts
    gpus = [g for key in counts for g in parse_gpu_ranges(key)]
    return {gpu_ranges(gpus): max(counts.values())}


def notes_condensed(notes: dict[str, str] | None) -> dict[str, str] | None:
    """``{"eccMode": "GPUs 0-3: NotSupported"}`` → ``{"eccMode": "GPUs 0-3"}``: which
    GPUs a part was not read on, without why (notes are not judged)."""
    if not notes:
        return notes
    return {part: why.split(":", 1)[0] for part, why in notes.items()}
