"""A simulated fleet for the fabric pairing tests: rounds of pairs, each run at
once; a pair passes exactly when both of its nodes are good (the model of
docs/fabric.md: a bad node's NIC, cable or port slows every pair it is in)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from gpuaccept.checks.fabric_allreduce import NoPartnerAction
from gpuaccept.operator.core.fabric.pairing import (
    FabricPairingParams,
    FabricPlan,
    FabricSituation,
    NodePair,
    PairResult,
    WaitingNode,
    plan_fabric,
)
from gpuaccept.operator.core.model import FabricNoPartner, FabricPassed, FabricVerdict, PairOutcome

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
GOOD_BUSBW = 390.0
BAD_BUSBW = 180.0
ROUND = timedelta(minutes=1)
"""One round: the pairs planned together run together and all finish within it."""


@dataclass
class FleetRun:
    rounds: int = 0
    verdicts: dict[str, FabricVerdict] = field(default_factory=dict)
    results: list[PairResult] = field(default_factory=list)
    plans: list[FabricPlan] = field(default_factory=list)
    still_waiting: set[str] = field(default_factory=set)


def pair_result(
    pair: NodePair, bad: frozenset[str], at: datetime, flaky_pass: bool = False
) -> PairResult:
    """The pair's result; ``flaky_pass``: it passes even with a bad node in it."""
    good = flaky_pass or not pair.members & bad
    return PairResult(
        pair,
        PairOutcome.PASSED if good else PairOutcome.FAILED,
        GOOD_BUSBW if good else BAD_BUSBW,
        at,
    )


@dataclass(frozen=True)
class Fleet:
    """New nodes (all waiting from T0), which are bad, and the idle accepted nodes
    (good). ``passes_anyway``: a pair with a bad node that passes all the same (a
    flapping link)."""

    new_nodes: tuple[str, ...]
    bad: frozenset[str] = frozenset()
    idle_accepted: tuple[str, ...] = ()
    passes_anyway: Callable[[NodePair], bool] = lambda pair: False


def run_fleet(
    fleet: Fleet, params: FabricPairingParams | None = None, max_rounds: int = 100
) -> FleetRun:
    """Run rounds until the plan has no pairs left to start. A node with a final
    verdict leaves the waiting set; one that passed joins the idle accepted nodes."""
    params = params or FabricPairingParams(deadline=timedelta(days=1))
    waiting = {name: WaitingNode(name, T0) for name in fleet.new_nodes}
    idle = set(fleet.idle_accepted)
    run = FleetRun()
    for number in range(max_rounds + 1):
        now = T0 + number * ROUND
        situation = FabricSituation(
            tuple(waiting.values()), frozenset(idle), tuple(run.results), (), now
        )
        plan = plan_fabric(situation, params)
        run.plans.append(plan)
        for name, verdict in plan.verdicts.items():
            run.verdicts[name] = verdict
            if isinstance(verdict, FabricNoPartner) and verdict.action is NoPartnerAction.HOLD:
                continue  # held: it stays pending and may still be paired
            waiting.pop(name)
            if isinstance(verdict, FabricPassed):
                idle.add(name)
        if not plan.next_pairs:
            break
        run.rounds += 1
        finished = now + ROUND / 2
        run.results.extend(
            pair_result(pair, fleet.bad, finished, fleet.passes_anyway(pair))
            for pair in plan.next_pairs
        )
    run.still_waiting = set(waiting)
    return run
