"""Judging one figure measured on every GPU (matmul TFLOPS, memory bandwidth)
against a per-model minimum and against the node's other GPUs.

The sibling rule compares each GPU with the median of the node's measured GPUs:
a GPU more than ``max_below_median_percent`` below it fails. The median needs a
majority of healthy GPUs to stand for "what this model does here", so the rule
applies only with at least :data:`MIN_SIBLINGS` measured GPUs (with two, a slow
one and a healthy one are indistinguishable: each is as far from their mean).

Both forms of a check's observed value are judged here: the full per-GPU list,
and the condensed :data:`Spread` (the lowest figure, the median, the GPU with the
lowest figure, the GPUs measured). Any GPU fails a rule exactly when the lowest
one does, so the condensed form gives the same verdict; its message names only
that GPU.
"""

import statistics
from dataclasses import dataclass

from gpuaccept.checks.spec import gpu_list

MIN_SIBLINGS = 3
# condensed: [lowest figure, median, GPU with the lowest figure, GPUs measured]
Spread = tuple[float, float, int, int]


@dataclass(frozen=True)
class FigureRule:
    """How one figure is judged: ``label`` and ``unit`` for the messages."""

    label: str  # "bf16", "memory"
    unit: str  # "TFLOPS", "GB/s"
    minimum: float | None  # the per-model minimum; None: not set
    max_below_median_percent: float


def measured(figures: list[float], failed: set[int]) -> dict[int, float]:
    """GPU → figure for the GPUs that produced one (a failed GPU's 0 is not a figure)."""
    return {gpu: f for gpu, f in enumerate(figures) if gpu not in failed and f > 0}


def spread(figures: dict[int, float]) -> Spread | None:
    """The condensed form of ``figures`` (None: no GPU measured)."""
    if not figures:
        return None
    gpu = min(figures, key=lambda g: (figures[g], g))
    median = round(statistics.median(figures.values()), 1)
    return (figures[gpu], median, gpu, len(figures))


def _fmt(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def problems(
    candidates: dict[int, float],
    median: float,
    count: int,
    rule: FigureRule,
    clocks: dict[int, int] | None = None,
) -> list[str]:
    """What fails among ``candidates`` (GPU → figure; every GPU, or only the lowest),
    given the node's ``median`` over ``count`` measured GPUs."""
    clocks = clocks or {}
    out: list[str] = []
    slow = {}
    for gpu, value in sorted(candidates.items()):
        at = f" at {clocks[gpu]} MHz" if gpu in clocks else ""
        figure = f"GPU {gpu}: {_fmt(value)} {rule.unit} {rule.label}{at}"
        if rule.minimum is not None and value < rule.minimum:
            out.append(f"{figure} < minimum {_fmt(rule.minimum)}")
        elif count >= MIN_SIBLINGS and median > 0:
            below = (median - value) / median * 100
            if below > rule.max_below_median_percent:
                slow[gpu] = f"{figure}, {below:.0f} % below the node median {_fmt(median)}"
    return out + list(slow.values())


def summary(figures: Spread, rule: FigureRule) -> str:
    """The pass message part of one figure."""
    low, median, _gpu, count = figures
    gpus = f"{count} GPU{'s' if count != 1 else ''}"
    siblings = (
        f"none > {rule.max_below_median_percent:g} % below it"
        if count >= MIN_SIBLINGS
        else f"no sibling comparison with {gpus} (needs {MIN_SIBLINGS})"
    )
    minimum = f"min {_fmt(rule.minimum)}" if rule.minimum is not None else "no model minimum"
    return (
        f"{rule.label} lowest {_fmt(low)} {rule.unit}, median {_fmt(median)} on {gpus}; "
        f"{minimum}; {siblings}"
    )


def judge_figure(
    figures: list[float] | None,
    condensed: Spread | None,
    failed: set[int],
    rule: FigureRule,
    clocks: dict[int, int] | None = None,
) -> tuple[list[str], str | None]:
    """(what fails, the pass summary) of one figure from either form; (``[]``, None)
    when no GPU produced it."""
    if figures is not None:
        values = measured(figures, failed)
        whole = spread(values)
    else:
        whole = condensed
        values = {condensed[2]: condensed[0]} if condensed is not None else {}
    if whole is None:
        return [], None
    _low, median, _gpu, count = whole
    return problems(values, median, count, rule, clocks), summary(whole, rule)


def failed_text(failed: dict[int, str]) -> list[str]:
    """``GPU n failed: …`` for every failed GPU (shortened beyond three)."""
    items = sorted(failed.items())
    out = [f"GPU {gpu} failed: {what}" for gpu, what in items[:3]]
    if len(items) > 3:
        out.append(f"also failed: {gpu_list([g for g, _w in items[3:]])}")
    return out
