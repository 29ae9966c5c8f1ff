"""A node's own baseline and its drift against it (pure).

:func:`report_figures` takes the figures of a probe report that say how fast the
node's GPUs are: per check, from its condensed observed value (the form the
operator stores, the termination message's), so a full report and a stored one
give the same figures:

* ``gpu_compute``: bf16 and fp8 TFLOPS, the lowest GPU (with its index) and the median;
* ``gpu_memory_bandwidth``: triad GB/s, the lowest GPU and the median;
* ``peer_bandwidth``: per path, the median pair's GB/s and the weakest pair;
* ``nccl_allreduce``: the busbw at the largest message;
* ``pcie_link``: the lowest pinned host-to-device and device-to-host GB/s and their GPU.

(The fabric pair's busbw is the operator's to add: it is in the NodeAcceptance's
fabric record, not in the report.)

:func:`drift` compares a new probe's figures with a baseline, figure by figure
(same check, figure name): a figure lower than its baseline by more than the
policy's percentages warns or fails. All these figures are rates: higher is
better, so only a drop counts. A "lowest" figure is compared with the lowest at
acceptance, whichever GPU had it then: every GPU was at least that fast, so the
drop it shows is never more than the drop of the GPU now lowest (a condensed
baseline never overstates drift). A figure missing on either side is not compared
(a check turned off, a targeted probe): no figure, no finding.
"""

from collections.abc import Callable, Iterator
from typing import Any, Literal

from gpuaccept.checks import (
    gpu_compute,
    gpu_memory_bandwidth,
    nccl_allreduce,
    pcie_link,
    peer_bandwidth,
)
from gpuaccept.checks.per_gpu_figures import Spread
from gpuaccept.checks.spec import AnyCheckSpec
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.contracts.reverify import BaselineFigure, DriftFinding

FABRIC_CHECK = "fabric_allreduce"
FABRIC_FIGURE = "busbwGBps"
# Figures that only ever warn: a pair's figure is also its partner's.
WARN_ONLY = frozenset({(FABRIC_CHECK, FABRIC_FIGURE)})


def _spread(check: str, figure: str, spread: Spread | None) -> Iterator[BaselineFigure]:
    if spread is None:
        return
    low, median, gpu = spread[0], spread[1], spread[2]
    yield BaselineFigure(
        check=check, figure=f"{figure}.lowest", value=low, gpu=gpu, where=f"GPU {gpu}"
    )
    yield BaselineFigure(check=check, figure=f"{figure}.median", value=median)


def _gpu_compute(observed: Any) -> Iterator[BaselineFigure]:
    yield from _spread(gpu_compute.SPEC.name, "bf16Tflops", observed.bf16)
    yield from _spread(gpu_compute.SPEC.name, "fp8Tflops", observed.fp8)


def _memory(observed: Any) -> Iterator[BaselineFigure]:
    yield from _spread(gpu_memory_bandwidth.SPEC.name, "triadGBps", observed.memory)


def _peer(observed: Any) -> Iterator[BaselineFigure]:
    name = peer_bandwidth.SPEC.name
    for path, (median, src, dst, weakest) in sorted((observed.weakest or {}).items()):
        yield BaselineFigure(check=name, figure=f"{path}GBps.median", value=median)
        yield BaselineFigure(
            check=name,
            figure=f"{path}GBps.weakest",
            value=weakest,
            gpu=src,
            where=f"GPU {src}>{dst}",
        )


def _nccl(observed: Any) -> Iterator[BaselineFigure]:
    yield BaselineFigure(
        check=nccl_allreduce.SPEC.name, figure="busbwGBps", value=observed.busbw_gbps
    )


def _pcie(observed: Any) -> Iterator[BaselineFigure]:
    name = pcie_link.SPEC.name
    for figure, value, slow in (
        ("h2dGBps.lowest", observed.min_h2d_gbps, observed.slow_h2d),
        ("d2hGBps.lowest", observed.min_d2h_gbps, observed.slow_d2h),
    ):
        if value is None:
            continue
        gpu = slow[0] if slow else None
        where = f"GPU {gpu}" if gpu is not None else None
        yield BaselineFigure(check=name, figure=figure, value=value, gpu=gpu, where=where)


EXTRACTORS: dict[str, tuple[AnyCheckSpec, Callable[[Any], Iterator[BaselineFigure]]]] = {
    gpu_compute.SPEC.name: (gpu_compute.SPEC, _gpu_compute),
    gpu_memory_bandwidth.SPEC.name: (gpu_memory_bandwidth.SPEC, _memory),
    peer_bandwidth.SPEC.name: (peer_bandwidth.SPEC, _peer),
    nccl_allreduce.SPEC.name: (nccl_allreduce.SPEC, _nccl),
    pcie_link.SPEC.name: (pcie_link.SPEC, _pcie),
}


def report_figures(report: ProbeReport) -> list[BaselineFigure]:
    """The rate figures of ``report``'s passing and warning results (a failed or
    unreadable result gives none: a baseline is what the node did when it was good)."""
    out: list[BaselineFigure] = []
    for result in report.results:
        known = EXTRACTORS.get(result.check)
        if known is None or result.observed is None or result.status not in ("pass", "warn"):
            continue
        spec, extract = known
        try:
            observed = spec.condense(spec.parse(result.observed))
            out.extend(f for f in extract(observed) if f.value > 0)
        except ValueError:  # not this check's shape: no figure from it
            continue
    return out


def _level(
    check: str, figure: str, percent: float, warn: float, fail: float | None
) -> Literal["warn", "fail"] | None:
    if fail is not None and percent > fail and (check, figure) not in WARN_ONLY:
        return "fail"
    if percent > warn:
        return "warn"
    return None


def _fmt(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _message(base: BaselineFigure, now: BaselineFigure, percent: float) -> str:
    where_now = f" {now.where}" if now.where else ""
    where_then = f", {base.where}" if base.where and base.where != now.where else ""
    return (
        f"{now.check} {now.figure}{where_now}: {_fmt(now.value)} now, {percent:.1f} % below "
        f"its baseline {_fmt(base.value)} (at acceptance{where_then})"
    )[:240]


def drift(
    baseline: list[BaselineFigure],
    now: list[BaselineFigure],
    *,
    warn_percent: float,
    fail_percent: float | None,
) -> list[DriftFinding]:
    """Every figure of ``now`` more than ``warn_percent`` below its baseline, worst
    first; ``fail`` beyond ``fail_percent`` (never for a warn-only figure)."""
    before = {(f.check, f.figure): f for f in baseline}
    found: list[DriftFinding] = []
    for figure in now:
        base = before.get((figure.check, figure.figure))
        if base is None or base.value <= 0:
            continue
        percent = (base.value - figure.value) / base.value * 100
        level = _level(figure.check, figure.figure, percent, warn_percent, fail_percent)
        if level is None:
            continue
        found.append(
            DriftFinding(
                check=figure.check,
                figure=figure.figure,
                gpu=figure.gpu,
                baseline=base.value,
                value=figure.value,
                percent=round(percent, 1),
                level=level,
                message=_message(base, figure, percent),
            )
        )
    return sorted(found, key=lambda f: (f.level != "fail", -f.percent, f.check, f.figure))
