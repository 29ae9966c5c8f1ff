"""Judging one figure measured on every GPU (matmul TFLOPS, memory bandwidth)
against a per-model minimum and against the node's other GPUs.

The sibling rule compares each GPU with the median of the node's measured GPUs:
a GPU more than ``fail_below_median_percent`` below it fails, one more than
``warn_below_median_percent`` below it warns. The median needs a majority of
healthy GPUs to stand for "what this model does here", so with at least
:data:`MIN_SIBLINGS` measured GPUs it is the node's median. With exactly two,
neither can be told to be the slow one, but two GPUs of one model that differ by
more than the fail threshold make a bad node either way: the rule then fails
(warns) naming both, judging the lower against the higher. With one GPU there is
nothing to compare.

The median is blind to a large slow group: with 4 GPUs at 15 % below the other 4,
the median sits between the groups and no GPU is far enough below it. The same
reasoning as for two GPUs applies (GPUs of one model that far apart make a bad
node either way), so with at least :data:`MIN_SIBLINGS` GPUs a GPU more than
``fail_below_median_percent`` below the **faster half's median** (the median of
the upper half of the figures, :func:`faster_half_median`) fails too. It only
fails, never warns, so it adds no warning to a healthy node, and it does not
apply where the sibling rule does not fail (fp8 by default).

Every GPU of the node must be accounted for: the per-GPU list has one figure per
GPU of the summary, and a GPU whose figure is 0 without being in ``failed`` fails
as "no figure" (a probe that lost a figure must not pass it).

Both forms of a check's observed value are judged here: the full per-GPU list,
and the condensed :data:`Spread` (the lowest figure, the median, the GPU with the
lowest figure, the GPUs measured, and the faster half's median; reports of
earlier probes have the first four only and are judged without the faster-half
rule). Any GPU fails or warns by a rule exactly when
the lowest one does, so the condensed form gives the same verdict; its message
names only that GPU. Condensing moves a "no figure" GPU into ``failed``, so the
condensed form accounts for every GPU as the full one does.
"""

import statistics
from dataclasses import dataclass, field

from gpuaccept.checks.spec import gpu_list

MIN_SIBLINGS = 3
# condensed: [lowest figure, median, GPU with the lowest figure, GPUs measured,
# the faster half's median]; earlier probes' reports: the first four
Spread = tuple[float, float, int, int] | tuple[float, float, int, int, float]


@dataclass(frozen=True)
class FigureRule:
    """How one figure is judged: ``label`` and ``unit`` for the messages."""

    label: str  # "bf16", "memory"
    unit: str  # "TFLOPS", "GB/s"
    minimum: float | None  # the per-model minimum; None: not set
    fail_below_median_percent: float | None  # None: the sibling rule does not fail
    warn_below_median_percent: float | None = None  # None: no warning short of failing


@dataclass
class FigureVerdict:
    """What one figure gives: failures, warnings, and the pass note (None: no GPU
    produced the figure)."""

    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    note: str | None = None


def measured(figures: list[float], failed: set[int]) -> dict[int, float]:
    """GPU → figure for the GPUs that produced one (a failed GPU's 0 is not a figure)."""
    return {gpu: f for gpu, f in enumerate(figures) if gpu not in failed and f > 0}


def without_figure(figures: list[float], failed: set[int]) -> list[int]:
    """The GPUs whose figure is 0 though they are not in ``failed``."""
    return [gpu for gpu, f in enumerate(figures) if gpu not in failed and f <= 0]


def faster_half_median(values: list[float]) -> float:
    """The median of the upper half of ``values`` (the middle one counted with
    both halves when their number is odd): 4 fast and 4 slow GPUs give the fast
    ones' figure, one fast outlier moves it by half a place only."""
    ordered = sorted(values)
    return round(statistics.median(ordered[len(ordered) // 2 :]), 1)


def spread(figures: dict[int, float]) -> Spread | None:
    """The condensed form of ``figures`` (None: no GPU measured)."""
    if not figures:
        return None
    gpu = min(figures, key=lambda g: (figures[g], g))
    median = round(statistics.median(figures.values()), 1)
    return (figures[gpu], median, gpu, len(figures), faster_half_median(list(figures.values())))


def _fmt(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _percent_below(value: float, reference: float) -> float:
    return (reference - value) / reference * 100 if reference > 0 else 0.0


def _sibling_rule(below: float, rule: FigureRule, text: str, verdict: FigureVerdict) -> None:
    fail, warn = rule.fail_below_median_percent, rule.warn_below_median_percent
    if fail is not None and below > fail:
        verdict.failures.append(text)
    elif warn is not None and below > warn:
        verdict.warnings.append(text)


def _figure(gpu: int, value: float, rule: FigureRule, clocks: dict[int, int]) -> str:
    at = f" at {clocks[gpu]} MHz" if gpu in clocks else ""
    return f"GPU {gpu}: {_fmt(value)} {rule.unit} {rule.label}{at}"


def _thresholds(rule: FigureRule) -> str:
    parts = []
    if rule.warn_below_median_percent is not None:
        parts.append(f"warn > {rule.warn_below_median_percent:g}")
    if rule.fail_below_median_percent is not None:
        parts.append(f"fail > {rule.fail_below_median_percent:g}")
    return ", ".join(parts) or "not judged"


def _judge_values(
    values: dict[int, float],
    whole: Spread,
    other: int | None,
    rule: FigureRule,
    clocks: dict[int, int],
) -> FigureVerdict:
    """The minimum and the sibling rules over ``values`` (every GPU, or only the
    lowest), given the node's :data:`Spread` ``whole``; ``other``: with two measured
    GPUs, the one that is not the lowest (None: not known)."""
    verdict = FigureVerdict()
    low, median, low_gpu, count = whole[:4]
    upper = whole[4] if len(whole) == 5 else None
    under_minimum = set()
    for gpu, value in sorted(values.items()):
        if rule.minimum is not None and value < rule.minimum:
            under_minimum.add(gpu)
            verdict.failures.append(
                f"{_figure(gpu, value, rule, clocks)} < minimum {_fmt(rule.minimum)}"
            )
        elif count >= MIN_SIBLINGS and median > 0:
            below = _percent_below(value, median)
            text = f"{_figure(gpu, value, rule, clocks)}, {below:.0f} % below the node median "
            failing = len(verdict.failures)
            _sibling_rule(below, rule, text + _fmt(median), verdict)
            if len(verdict.failures) == failing and upper is not None:
                _faster_half_rule(_figure(gpu, value, rule, clocks), value, upper, rule, verdict)
    if count == 2 and low_gpu not in under_minimum:
        high = round(2 * median - low, 1)  # the median of two is their mean
        apart = _percent_below(low, high)
        name = f"GPU {other}" if other is not None else "the other GPU"
        text = (
            f"{_figure(low_gpu, low, rule, clocks)}, {apart:.0f} % below {name}'s "
            f"{_fmt(high)} (2 GPUs: either may be the slow one)"
        )
        _sibling_rule(apart, rule, text, verdict)
    return verdict


def _faster_half_rule(
    figure: str, value: float, upper: float, rule: FigureRule, verdict: FigureVerdict
) -> None:
    """Fails the GPU of ``figure`` (its "GPU n: …" text) when ``value`` is more than
    the fail threshold below the faster half's median (a slow group the node median
    hides); never warns."""
    fail = rule.fail_below_median_percent
    apart = _percent_below(value, upper)
    if fail is None or upper <= 0 or apart <= fail:
        return
    if verdict.warnings and verdict.warnings[-1].startswith(figure):
        verdict.warnings.pop()  # the failure says more than the median rule's warning
    verdict.failures.append(
        f"{figure}, {apart:.0f} % below the faster half's median "
        f"{_fmt(upper)} (a slow group the node median hides)"
    )


def summary(figures: Spread, rule: FigureRule) -> str:
    """The pass message part of one figure."""
    low, median, _gpu, count = figures[:4]
    gpus = f"{count} GPU{'s' if count != 1 else ''}"
    minimum = f"min {_fmt(rule.minimum)}" if rule.minimum is not None else "no model minimum"
    if count >= MIN_SIBLINGS:
        siblings = f"lowest {_percent_below(low, median):.0f} % below it ({_thresholds(rule)})"
    elif count == 2:
        high = 2 * median - low
        siblings = f"the 2 GPUs {_percent_below(low, high):.0f} % apart ({_thresholds(rule)})"
    else:
        siblings = f"no sibling comparison with {gpus}"
    return (
        f"{rule.label} lowest {_fmt(low)} {rule.unit}, median {_fmt(median)} on {gpus}; "
        f"{minimum}; {siblings}"
    )


@dataclass(frozen=True)
class NodeGpus:
    """The GPUs a figure must account for: ``count`` (the summary's) and the failed."""

    count: int
    failed: frozenset[int]


def judge_figure(
    figures: list[float] | None,
    condensed: Spread | None,
    node: NodeGpus,
    rule: FigureRule,
    clocks: dict[int, int] | None = None,
) -> FigureVerdict:
    """The verdict on one figure from either form; an empty verdict without a note
    when no GPU produced it."""
    clocks = clocks or {}
    gpus, failed = node.count, set(node.failed)
    verdict = FigureVerdict()
    if figures is not None:
        if len(figures) != gpus:
            verdict.failures.append(f"{rule.label}: {len(figures)} figures for {gpus} GPUs")
        verdict.failures += [
            f"GPU {gpu}: no {rule.label} figure" for gpu in without_figure(figures, failed)
        ]
        values = measured(figures, failed)
        whole = spread(values)
        other = next((g for g in values if whole is not None and g != whole[2]), None)
    else:
        whole = condensed
        values = {condensed[2]: condensed[0]} if condensed is not None else {}
        count = condensed[3] if condensed is not None else 0
        if condensed is not None and count + len(failed) != gpus:
            verdict.failures.append(
                f"{rule.label}: {count} GPUs measured and {len(failed)} failed for {gpus} GPUs"
            )
        rest = set(range(gpus)) - failed - set(values)
        other = rest.pop() if len(rest) == 1 else None
    if whole is None:
        return verdict
    found = _judge_values(values, whole, other, rule, clocks)
    verdict.failures += found.failures
    verdict.warnings += found.warnings
    verdict.note = summary(whole, rule)
    return verdict


def failed_text(failed: dict[int, str]) -> list[str]:
    """``GPU n failed: …`` for every failed GPU (shortened beyond three)."""
    items = sorted(failed.items())
    out = [f"GPU {gpu} failed: {what}" for gpu, what in items[:3]]
    if len(items) > 3:
        out.append(f"also failed: {gpu_list([g for g, _w in items[3:]])}")
    return out
