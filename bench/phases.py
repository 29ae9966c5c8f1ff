"""Where a node's time to verdict goes, read from the audit log of a run.

For every node, the moments (kube-apiserver's own timestamps) at which:

- ``registered``: the stand-in's ``create nodes`` completed;
- ``na``: the arm's ``create nodeacceptances`` completed (it noticed the node);
- ``pod``: the arm's ``create pods`` for the node completed;
- ``done``: the stand-in's last ``patch pods/status`` (the probe pod terminated);
- ``verdict``: the arm's last ``patch nodeacceptances/status`` completed.

and the gaps between them (p50/p95 over the nodes), plus the API server's own
latency (received → completed) of the arm's requests by call. ``python -m
bench.phases OUT/<label>`` prints them for every arm of a run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path

from bench.audit import Request, read_requests

NODE = re.compile(r"(?:operator|floor)-\d+-\d{5}")
STEPS = ("registered", "na", "pod", "done", "verdict")


def _t(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered)) - 1))]


def timeline(requests: Iterable[Request], arm: str, standin: str) -> dict[str, dict[str, float]]:
    moments: dict[str, dict[str, float]] = defaultdict(dict)
    for r in requests:
        if r.code >= 400 or not r.completed:
            continue
        match = NODE.search(r.name)
        if match is None:
            continue
        node, when = match.group(0), _t(r.completed)
        step = None
        if r.user == standin and r.verb == "create" and r.kind == "nodes":
            step = "registered"
        elif r.user == arm and r.verb == "create" and r.kind == "nodeacceptances":
            step = "na"
        elif r.user == arm and r.verb == "create" and r.kind == "pods":
            step = "pod"
        elif r.user == standin and r.verb == "patch" and r.kind == "pods/status":
            step = "done"
        elif r.user == arm and r.verb == "patch" and r.kind == "nodeacceptances/status":
            step = "verdict"
        if step is not None:
            keep_last = step in ("done", "verdict")
            if keep_last or step not in moments[node]:
                moments[node][step] = when
    return moments


def latency_by_call(requests: Iterable[Request], user: str) -> dict[str, tuple[int, float, float]]:
    """``verb resource`` → (count, p50 ms, p95 ms) of the API server's own latency."""
    spans: dict[str, list[float]] = defaultdict(list)
    for r in requests:
        if r.user == user and r.verb != "watch" and r.completed and r.received:
            spans[f"{r.verb} {r.kind}"].append(1000 * (_t(r.completed) - _t(r.received)))
    return {k: (len(v), _pct(v, 50), _pct(v, 95)) for k, v in sorted(spans.items())}


def report(run_dir: Path) -> str:
    results = json.loads((run_dir / "results.json").read_text())
    requests, _ = read_requests(run_dir / "audit" / "audit.log")
    lines = []
    for result in results["results"]:
        tag = f"{result['arm']}-n{result['nodes']}"
        arm = f"system:serviceaccount:gpuaccept-bench:{tag}"
        standin = f"system:serviceaccount:gpuaccept-bench:standin-{tag}"
        moments = timeline(requests, arm, standin)
        lines.append(f"== {tag}: {len(moments)} nodes")
        for a, b in itertools.pairwise(STEPS):
            gaps = [m[b] - m[a] for m in moments.values() if a in m and b in m]
            if gaps:
                lines.append(
                    f"  {a:>10} → {b:<8} p50 {_pct(gaps, 50):7.2f} s  p95 {_pct(gaps, 95):7.2f} s"
                )
        for call, (count, p50, p95) in latency_by_call(requests, arm).items():
            if count >= 10:
                lines.append(f"  api {call:<34} n={count:<6} p50 {p50:6.1f} ms  p95 {p95:7.1f} ms")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.phases", description=__doc__)
    parser.add_argument("run_dir", type=Path, help="OUT/<label> of a fleet_bench run")
    print(report(parser.parse_args(argv).run_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
