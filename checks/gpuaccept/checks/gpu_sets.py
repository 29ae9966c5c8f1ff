"""Messages and merges over GPU sets written as ranges (``"0-3,5"``, see
:mod:`gpuaccept.checks.gpu_ranges`), for the checks that name a few GPUs out of
many (memory health, Xid events)."""

from gpuaccept.checks.gpu_ranges import format_gpus, parse_gpus


def gpu_label(text: str) -> str:
    """``"5"`` → ``"GPU 5"``, ``"0-3,5"`` → ``"GPUs 0-3,5"``."""
    single = text.isdigit()
    return f"GPU{'' if single else 's'} {text}"


def merged(counts: dict[str, int]) -> dict[str, int]:
    """``{"3": 2, "5": 7}`` → ``{"3,5": 7}``: every GPU concerned, with the largest count."""
    if len(counts) <= 1:
        return counts
    gpus = [g for key in counts for g in parse_gpus(key)]
    return {format_gpus(gpus): max(counts.values())}


def notes_condensed(notes: dict[str, str] | None) -> dict[str, str] | None:
    """``{"eccMode": "GPUs 0-3: NotSupported"}`` → ``{"eccMode": "GPUs 0-3"}``: which
    GPUs a part was not read on, without why (notes are not judged)."""
    if not notes:
        return notes
    return {part: why.split(":", 1)[0] for part, why in notes.items()}
