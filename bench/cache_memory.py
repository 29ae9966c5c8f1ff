"""What the operator's cache keeps per NodeAcceptance (issue 15: peak RSS).

Builds N decided NodeAcceptance bodies (status with the probe's real report on
the healthy profile, as a verdict writes it), passes each through the NA index
function kopf calls (``cache.index_na``), keeps what it returns, and prints the
bytes (tracemalloc) and gc-tracked objects that stay per node. No cluster.

    python -m bench.cache_memory --nodes 2000

``--nodeacceptances FILE`` (``kubectl get nodeacceptances -o json``, e.g. from a
benchmark's control plane) measures the real bodies instead, and what each status
field the entry keeps parsed costs (the entry's bytes less those without it).
"""

from __future__ import annotations

import argparse
import gc
import json
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import reports
from gpuaccept.contracts.nodeacceptance import CheckSummary, NodeAcceptanceStatus, Phase
from gpuaccept.operator.cache import index_na

GPUS_PER_NODE = 8


def decided_status() -> dict[str, Any]:
    """An Accepted status as a verdict writes it: checks, the report, a condition."""
    healthy, _faulty = reports.default_profiles()
    report = reports.probe_report(healthy, GPUS_PER_NODE)
    status = NodeAcceptanceStatus(
        phase=Phase.ACCEPTED,
        message="all required checks passed",
        checks=[
            CheckSummary(check=result.check, status=result.status, message=result.message[:240])
            for result in report.results
        ][:32],
        policy="default",
        policy_generation=1,
        policy_uid="0" * 36,
        attempts=1,
        pod_serial=1,
        last_probe_time=datetime.now(UTC),
        probed_boot_id=report.boot_id,
        report=report,
    )
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


def kept_bytes(wires: list[str]) -> float:
    """Bytes that stay per body once passed through the index function (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    kept = [index_na(json.loads(wire)) for wire in wires]
    gc.collect()
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del kept
    return (after - before) / max(1, len(wires))


def measure_listed(path: Path) -> None:
    """The real NodeAcceptances of ``path``: bytes per entry, and per parsed field."""
    items = [item for item in json.loads(path.read_text())["items"] if item.get("status")]
    wires = [json.dumps(item) for item in items]
    entry = kept_bytes(wires)
    print(
        f"cache_memory: nodeacceptances={len(items)} "
        f"body_json_bytes={sum(map(len, wires)) / max(1, len(wires)):.0f} "
        f"kept_bytes_per_entry={entry:.0f}"
    )
    fields = sorted({key for item in items for key in item["status"]})
    for name in fields:
        without = [
            json.dumps({**item, "status": {k: v for k, v in item["status"].items() if k != name}})
            for item in items
        ]
        cost = entry - kept_bytes(without)
        if cost >= 100:
            print(f"  status.{name}: {cost:.0f} bytes per entry")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--nodeacceptances", type=Path, help="kubectl get … -o json output")
    args = parser.parse_args()
    if args.nodeacceptances is not None:
        measure_listed(args.nodeacceptances)
        return
    wire = json.dumps(decided_status())
    gc.collect()
    tracemalloc.start()
    objects_before = len(gc.get_objects())
    before, _ = tracemalloc.get_traced_memory()
    kept = []
    for i in range(args.nodes):
        body = {
            "metadata": {"name": f"gpu-{i:05d}", "resourceVersion": str(1000 + i), "uid": f"u{i}"},
            "spec": {"nodeName": f"gpu-{i:05d}"},
            "status": json.loads(wire),  # a fresh decoded body per event, as kopf's
        }
        kept.append(index_na(body))
        del body
    gc.collect()
    after, _ = tracemalloc.get_traced_memory()
    objects_after = len(gc.get_objects())
    tracemalloc.stop()
    per_node_bytes = (after - before) / args.nodes
    per_node_objects = (objects_after - objects_before) / args.nodes
    print(
        f"cache_memory: nodes={args.nodes} status_json_bytes={len(wire)} "
        f"kept_bytes_per_node={per_node_bytes:.0f} "
        f"gc_objects_per_node={per_node_objects:.1f} "
        f"kept_mb={(after - before) / 2**20:.1f}"
    )


if __name__ == "__main__":
    main()
