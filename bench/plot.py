"""The PNG plots: time to verdict, requests and CPU per node against fleet size.

``plot_time_to_verdict`` draws one run (what ``fleet_bench`` writes next to its
results.json); ``python -m bench.plot OUT.png RESULTS.json...`` draws the
operator's and the floor's CPU per node against N from several runs' result
files (``bench/out/<label>/results.json``), one point per run and a line
through the medians, so that a cost per node that grows with the fleet shows
at a glance.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # the backend must be chosen first

ARM_STYLE = {"operator": ("tab:blue", "o"), "floor": ("tab:gray", "s")}


def cpu_ms_per_node(result: Mapping[str, Any]) -> float | None:
    """The arm process's CPU (``cpu_s``: its whole life, start-up included) per node, in ms."""
    nodes, cpu = int(result.get("nodes") or 0), result.get("cpu_s")
    if nodes <= 0 or not isinstance(cpu, int | float) or cpu <= 0:
        return None
    return 1000.0 * float(cpu) / nodes


def cpu_points(documents: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """Per arm, every (N, CPU ms per node) of the decided arm runs in ``documents``
    (results.json contents), sorted by N."""
    points: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for document in documents:
        for result in document.get("results") or ():
            ms = cpu_ms_per_node(result)
            if ms is None or int(result.get("decided") or 0) != int(result["nodes"]):
                continue
            points[str(result["arm"])].append((int(result["nodes"]), ms))
    return {arm: sorted(rows) for arm, rows in points.items()}


def medians(points: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """The median per N of ``points``, sorted by N."""
    by_n: dict[int, list[float]] = defaultdict(list)
    for n, value in points:
        by_n[n].append(value)
    return [(n, statistics.median(values)) for n, values in sorted(by_n.items())]


def _draw_cpu(axes: Any, points: Mapping[str, Sequence[tuple[int, float]]]) -> None:
    for arm, (color, marker) in ARM_STYLE.items():
        rows = points.get(arm) or []
        if not rows:
            continue
        axes.scatter([n for n, _ in rows], [v for _, v in rows], color=color, marker=marker, s=14)
        line = medians(rows)
        axes.plot([n for n, _ in line], [v for _, v in line], "-", color=color, label=arm)
    axes.set_xscale("log")
    axes.set_xlabel("nodes joining at once (N)")
    axes.set_ylabel("arm process CPU ms per node")
    axes.set_title("CPU per node (flat = no growth with N)")
    axes.set_ylim(bottom=0)
    axes.grid(visible=True, which="both", alpha=0.3)
    axes.legend(fontsize="small")


def plot_cpu_per_node(documents: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    figure, axes = plt.subplots(1, 1, figsize=(6, 4.2))
    _draw_cpu(axes, cpu_points(documents))
    figure.suptitle(title, fontsize="medium")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_time_to_verdict(runs: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    """One line per arm and percentile (p50, p95, max), requests per node and CPU
    per node, N on the x axis (log scale)."""
    figure, (left, right, cpu) = plt.subplots(1, 3, figsize=(16, 4.2))
    for arm, (color, marker) in ARM_STYLE.items():
        rows = sorted((r for r in runs if r["arm"] == arm), key=lambda r: int(r["nodes"]))
        if not rows:
            continue
        xs = [int(r["nodes"]) for r in rows]
        for key, style in (("p50_s", "-"), ("p95_s", "--"), ("max_s", ":")):
            ys = [float(r["latency"][key]) for r in rows]
            left.plot(xs, ys, style, color=color, marker=marker, label=f"{arm} {key[:-2]}")
        right.plot(
            xs,
            [float(r["requests"]["per_node"]) for r in rows],
            "-",
            color=color,
            marker=marker,
            label=arm,
        )
    left.set_xscale("log")
    left.set_xlabel("nodes joining at once (N)")
    left.set_ylabel("node creation → final phase (s)")
    left.set_title("time to verdict")
    left.set_ylim(bottom=0)
    left.grid(visible=True, which="both", alpha=0.3)
    left.legend(fontsize="small")
    right.set_xscale("log")
    right.set_xlabel("nodes joining at once (N)")
    right.set_ylabel("API requests per node (audit log)")
    right.set_title("requests per node")
    right.set_ylim(bottom=0)
    right.grid(visible=True, which="both", alpha=0.3)
    right.legend(fontsize="small")
    _draw_cpu(cpu, cpu_points([{"results": runs}]))
    figure.suptitle(title, fontsize="medium")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plot", description=__doc__)
    parser.add_argument("png", type=Path, help="the plot to write")
    parser.add_argument("results", type=Path, nargs="+", help="results.json files of runs")
    args = parser.parse_args(argv)
    documents = []
    for path in args.results:
        try:
            documents.append(json.loads(path.read_text()))
        except (OSError, ValueError) as error:
            print(f"{path}: results: {error}")
            return 2
    labels = ", ".join(str(d.get("label", "?")) for d in documents)
    plot_cpu_per_node(documents, args.png, f"runs: {labels}")
    print(args.png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
