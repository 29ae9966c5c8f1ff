"""What policies that select no node cost the fleet count (issue 42 item 10).

Registers N labelled nodes in a :class:`FleetCount`, then adds P policies one at a
time whose selector no node carries, as the operator's policy events do, and prints
the CPU seconds (``time.process_time``) and the nodes matched again. No cluster.

    python -m bench.empty_policies --nodes 50 --policies 2000
"""

from __future__ import annotations

import argparse
import json
import time

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.operator.core.fleetcount import FleetCount
from gpuaccept.operator.core.model import PolicyView


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--policies", type=int, default=2000)
    args = parser.parse_args(argv)
    count = FleetCount()
    for number in range(args.nodes):
        count.set_node(f"node-{number}", {"nvidia.com/gpu.present": "true"})
    matched = count.nodes_matched
    policies: list[PolicyView] = []
    started = time.process_time()
    for number in range(args.policies):
        spec = NodeAcceptancePolicySpec.model_validate({"nodeSelector": {"pool": "nobody"}})
        policies.append(PolicyView(f"empty-{number}", 1, spec))
        count.set_policies(policies)
    result = {
        "nodes": args.nodes,
        "policies": args.policies,
        "cpu_seconds": round(time.process_time() - started, 2),
        "nodes_matched_again": count.nodes_matched - matched,
        "nodes_to_reconcile": len(count.take_affected()),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
