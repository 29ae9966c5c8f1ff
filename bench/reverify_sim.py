"""Re-verification at fleet scale, simulated with the operator's own pure decisions.

Not a run on the API server: a discrete-time simulation of N accepted nodes under
one policy with ``reverify`` on, driven by the functions the operator runs
(``reverify_schedule.select_for_sampling``, ``room``, ``after_sample``,
``capacity.take_out_allowed``) pass after pass, with workloads that come and go
on the nodes (each node alternates busy and idle spells, exponentially
distributed). It shows what the schedule does at 5,000 nodes: how many nodes are
under the pending taint at once (never more than the policy's limit; never more
taken out per window than its rate), how many re-verifications complete in the
simulated time, how many lists of pods they cost, and the requests per
re-verification, counted from the core's own plans for one node on the in-memory
world (``tests/operator/world.py``) plus the loop's lists.

    python -m bench.reverify_sim --nodes 5000 --hours 48

The last stdout line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.reverify import ReverifyStatus
from gpuaccept.operator.core.capacity import take_out_allowed
from gpuaccept.operator.core.model import GpuPodSample, QuarantineLimitCounts
from gpuaccept.operator.core.reverify_schedule import (
    Candidate,
    after_sample,
    room,
    select_for_sampling,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class SimNode:
    name: str
    verified: datetime
    busy_until: datetime
    idle_until: datetime
    rv: ReverifyStatus = field(default_factory=ReverifyStatus)
    round_ends: datetime | None = None

    def busy(self, now: datetime) -> bool:
        return now < self.busy_until


@dataclass
class Result:
    nodes: int
    hours: float
    pass_seconds: float
    round_seconds: float
    standing_limit: int
    rate_limit: int
    rate_window_s: int
    reverified: int = 0
    lists: int = 0
    max_out_at_once: int = 0
    max_taken_out_in_a_window: int = 0
    max_lists_in_a_pass: int = 0
    wall_s: float = 0.0


def workload(
    node: SimNode, now: datetime, rng: random.Random, busy_h: float, idle_h: float
) -> None:
    """Advance the node's busy/idle spells to ``now``."""
    while now >= node.idle_until:
        node.busy_until = node.idle_until + timedelta(hours=rng.expovariate(1 / busy_h))
        node.idle_until = node.busy_until + timedelta(hours=rng.expovariate(1 / idle_h))


def simulate(args: argparse.Namespace) -> Result:
    rng = random.Random(args.seed)
    spec = NodeAcceptancePolicySpec.model_validate(
        {
            "maxQuarantined": args.max_quarantined,
            "quarantineRate": {"maxPerWindow": args.rate, "windowSeconds": args.window},
            "reverify": {
                "enabled": True,
                "idleSeconds": args.idle_seconds,
                "periodSeconds": 7 * 86400,
                "sampleSeconds": args.sample_seconds,
            },
        }
    )
    policy = spec.reverify
    nodes = []
    for i in range(args.nodes):
        verified = T0 - timedelta(seconds=rng.uniform(0, 7 * 86400))  # accepted over the last week
        node = SimNode(f"gpu-{i:05d}", verified, T0, T0)
        workload(node, T0 + timedelta(seconds=rng.uniform(0, 3600)), rng, args.busy_h, args.idle_h)
        nodes.append(node)
    standing = room(spec, QuarantineLimitCounts(0, args.nodes, 0, 0), "100%")
    result = Result(
        args.nodes, args.hours, args.pass_seconds, args.round_seconds,
        standing, spec.rate_count(args.nodes), args.window,
    )  # fmt: skip
    starts: list[datetime] = []
    now, end = T0, T0 + timedelta(hours=args.hours)
    started = time.monotonic()
    while now < end:
        out = 0
        for node in nodes:
            workload(node, now, rng, args.busy_h, args.idle_h)
            if node.round_ends is not None and now >= node.round_ends:
                node.round_ends = None
                node.verified = now
                node.rv = node.rv.model_copy(update={"idle_since": None})
                result.reverified += 1
            out += node.round_ends is not None
        since = now - timedelta(seconds=args.window)
        recent = len(starts) - bisect_left(starts, since)
        counts = QuarantineLimitCounts(0, args.nodes, out, recent)
        slots = room(spec, counts, "100%")  # the policy's room, as the loop (reverifyloop.py)
        candidates = [
            Candidate(n.name, n.verified, n.rv.sampled_time, n.rv.idle_since)
            for n in nodes
            if n.round_ends is None
        ]
        picked = select_for_sampling(candidates, policy, slots, now)
        by_name = {n.name: n for n in nodes if n.name in picked}
        result.lists += len(picked)
        result.max_lists_in_a_pass = max(result.max_lists_in_a_pass, len(picked))
        for name in picked:
            node = by_name[name]
            sample = GpuPodSample(now, ("ml/job",) if node.busy(now) else ())
            outcome = after_sample(node.rv, sample, policy)
            node.rv = outcome.status
            if outcome.start and take_out_allowed(spec, counts).allowed:
                node.round_ends = now + timedelta(seconds=args.round_seconds)
                starts.append(now)
                out += 1
                recent += 1
                counts = QuarantineLimitCounts(0, args.nodes, out, recent)
        result.max_out_at_once = max(result.max_out_at_once, out)
        result.max_taken_out_in_a_window = max(result.max_taken_out_in_a_window, recent)
        now += timedelta(seconds=args.pass_seconds)
    result.wall_s = round(time.monotonic() - started, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--hours", type=float, default=48.0)
    ap.add_argument("--pass-seconds", type=float, default=30.0)
    ap.add_argument("--round-seconds", type=float, default=600.0, help="a probe round's length")
    ap.add_argument("--idle-seconds", type=int, default=3600)
    ap.add_argument("--sample-seconds", type=int, default=600)
    ap.add_argument("--max-quarantined", default="2%")
    ap.add_argument("--rate", default="1%")
    ap.add_argument("--window", type=int, default=3600)
    ap.add_argument("--busy-h", type=float, default=6.0, help="mean busy spell, hours")
    ap.add_argument("--idle-h", type=float, default=2.0, help="mean idle spell, hours")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    args.max_quarantined = (
        int(args.max_quarantined) if args.max_quarantined.isdigit() else args.max_quarantined
    )
    args.rate = int(args.rate) if args.rate.isdigit() else args.rate
    result = simulate(args)
    ok = (
        result.max_out_at_once <= result.standing_limit
        and result.max_taken_out_in_a_window <= result.rate_limit
    )
    print(json.dumps({**result.__dict__, "within_limits": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
