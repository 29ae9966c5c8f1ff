"""The PNG plot: time from node creation to verdict against fleet size."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # the backend must be chosen first

ARM_STYLE = {"operator": ("tab:blue", "o"), "floor": ("tab:gray", "s")}


def plot_time_to_verdict(runs: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    """One line per arm and percentile (p50, p95, max), N on the x axis (log scale)."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
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
    figure.suptitle(title, fontsize="medium")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
