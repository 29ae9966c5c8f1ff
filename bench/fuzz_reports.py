"""Fuzz the operator's report trust and judging with mutated probe reports.

``python -m bench.fuzz_reports --reports 20000`` takes the real probe's reports of
simulated nodes (the healthy 8-GPU H100 and 16-GPU H200 profiles as their
termination messages carry them, and the full, uncondensed form of a 4-GPU H100
node), applies 1 to 3 mutations to each copy, each of which makes the report
inconsistent with its node (:mod:`gpuaccept.testsupport.report_mutations`, built from
the check registry; plus a number given as a JSON string or boolean), and decides each
through the operator's own functions (trusted_report, evaluate, outcome_problem) as a
probe pod that exited 0 would be. It prints how many were decided and how many were
accepted; any accepted one is listed and the exit code is 1. Deterministic (``--seed``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core.model import NodeView, PodView
from gpuaccept.probe.compact import fit_report
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.inputs import load_policy
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.measure.context import NodeGpuCounts
from gpuaccept.probe.runner import RunSetup, run_probe
from gpuaccept.testsupport.report_mutations import Mutation, apply, mutations, operator_accepts

REPO = Path(__file__).resolve().parents[1]
POLICY_FILE = REPO / "policies" / "default-h100-h200.yaml"
BASES = (
    ("h100-sxm-8gpu-healthy", True),
    ("h200-16gpu-healthy", True),
    ("h100-sxm-4gpu-hgx-no-nvswitch", False),  # the full form
)
NODE, BOOT = "gpu-fuzz-1", "boot-fuzz"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Base:
    name: str
    wire: dict[str, Any]
    mutations: tuple[Mutation, ...]
    node: NodeView


def default_policy() -> ProbePolicy:
    return load_policy(POLICY_FILE)


def probed(profile: str, policy: ProbePolicy, *, fitted: bool) -> ProbeReport:
    loaded = load_profile(REPO / "profiles" / f"{profile}.yaml")
    hardware = SimulatedBackend(loaded)
    try:
        counts = NodeGpuCounts(
            allocatable=loaded.node.allocatable,
            capacity=loaded.node.gpu_capacity,
            labelled=loaded.node.gfd_gpu_count,
            replicas=loaded.node.gfd_gpu_replicas,
        )
        run = RunSetup(node_name=NODE, boot_id=BOOT, context=ProbeContext(node_gpus=counts))
        report = run_probe(hardware, policy, run)
    finally:
        hardware.close()
    report = report.model_copy(update={"started_at": T0, "finished_at": T0})
    return fit_report(report) if fitted else report


def bases(policy: ProbePolicy) -> list[Base]:
    out = []
    for profile, fitted in BASES:
        report = probed(profile, policy, fitted=fitted)
        gpus = report.summary.gpu_count
        node = NodeView(name=NODE, boot_id=BOOT, gpus=gpus, gpu_capacity=gpus)
        wire = json.loads(report.model_dump_json(by_alias=True, exclude_none=True))
        out.append(Base(profile, wire, tuple(mutations(report, CHECKS)), node))
    return out


POD = PodView(
    name="probe-fuzz",
    phase="Succeeded",
    terminated=True,
    exit_code=0,
    created=T0 - timedelta(seconds=5),
    finished=T0 + timedelta(seconds=5),
)


def _as_string(wire: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], str]:
    """One number of one observed value given as a JSON string or boolean."""
    results = [r for r in wire["results"] if isinstance(r.get("observed"), dict)]
    result = rng.choice(results)
    numbers = [k for k, v in result["observed"].items() if type(v) in (int, float)]
    if not numbers:
        return wire, ""
    key = rng.choice(numbers)
    value = result["observed"][key]
    new: Any = rng.choice(
        [str(value), f"{value:_}" if isinstance(value, int) else str(value), True]
    )
    changed = {**result, "observed": {**result["observed"], key: new}}
    wire = {**wire, "results": [changed if r is result else r for r in wire["results"]]}
    return wire, f"{result['check']}.{key} as {json.dumps(new)}"


def fuzz(count: int, seed: int) -> tuple[Counter[str], list[str]]:
    policy = default_policy()
    rng = random.Random(seed)
    found = bases(policy)
    for base in found:  # the trap: each base itself is accepted
        accepted, why = operator_accepts(json.dumps(base.wire), base.node, policy, POD)
        assert accepted, f"{base.name}: {why}"
    tally: Counter[str] = Counter()
    accepted_ones: list[str] = []
    for _ in range(count):
        base = rng.choice(found)
        wire, what = base.wire, []
        for mutation in rng.sample(base.mutations, rng.randint(1, 3)):
            wire = apply(wire, mutation)
            what.append(mutation.describe())
        if rng.random() < 0.1:
            wire, described = _as_string(wire, rng)
            what.append(described)
        text = json.dumps(wire, separators=(",", ":"))
        accepted, why = operator_accepts(text, base.node, policy, POD)
        tally["decided"] += 1
        tally[why.split(":", 1)[0] if not accepted else "accepted"] += 1
        if accepted:
            accepted_ones.append(f"{base.name}: {'; '.join(what)}")
    return tally, accepted_ones


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=30)
    args = parser.parse_args(argv)
    started = time.monotonic()
    tally, accepted = fuzz(args.reports, args.seed)
    seconds = time.monotonic() - started
    print(
        f"{tally['decided']} mutated reports decided in {seconds:.1f} s; accepted: {len(accepted)}"
    )
    for reason, n in tally.most_common():
        if reason != "decided":
            print(f"  {reason}: {n}")
    for line in accepted[:20]:
        print(f"ACCEPTED {line}")
    return 1 if accepted else 0


if __name__ == "__main__":
    sys.exit(main())
