"""Which loop and phase a node's plan's requests are counted under (issue 41): the
origin each request names in its User-Agent (kube.py), read by the benchmark's
per-loop accounting (bench/accounting.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.contracts.reverify import ReverifyRound, ReverifyStatus
from gpuaccept.operator.core.model import GpuPodSample, NAView, NodeSnapshot, PolicyView
from gpuaccept.operator.executor import node_origin

NOW = datetime(2026, 12, 5, 17, 0, tzinfo=UTC)
WATCHED = NodeAcceptancePolicySpec.model_validate({"inService": {"enabled": True}})
PLAIN = NodeAcceptancePolicySpec()


def snapshot(
    phase: Phase | None,
    spec: NodeAcceptancePolicySpec = PLAIN,
    reverify: ReverifyStatus | None = None,
    sample: GpuPodSample | None = None,
) -> NodeSnapshot:
    na = (
        None
        if phase is None
        else NAView("n1", status=NodeAcceptanceStatus(phase=phase, reverify=reverify))
    )
    return NodeSnapshot(
        node_name="n1",
        now=NOW,
        node=None,
        na=na,
        policies=(PolicyView("p", spec=spec),),
        gpu_pod_sample=sample,
    )


ROUND = ReverifyStatus(round=ReverifyRound(cause="Idle", started=NOW))
RECORDED = ReverifyStatus(sampled_time=NOW - timedelta(seconds=30))

ROWS = {
    "no NodeAcceptance yet": (snapshot(None), "reconcile/New"),
    "the acceptance probe": (snapshot(Phase.PROBING), "reconcile/Probing"),
    "accepted, not watched in service": (snapshot(Phase.ACCEPTED), "reconcile/Accepted"),
    "accepted, watched in service": (snapshot(Phase.ACCEPTED, WATCHED), "in-service/Accepted"),
    "held, watched in service": (snapshot(Phase.HELD, WATCHED), "in-service/Held"),
    "quarantined under a watching policy": (
        snapshot(Phase.QUARANTINED, WATCHED),
        "reconcile/Quarantined",
    ),
    "a re-verification round under way": (
        snapshot(Phase.PROBING, WATCHED, reverify=ROUND),
        "reverify/Probing",
    ),
    "a fresh list of its pods to record": (
        snapshot(Phase.ACCEPTED, WATCHED, reverify=RECORDED, sample=GpuPodSample(NOW)),
        "reverify/Accepted",
    ),
    "a list already recorded": (
        snapshot(
            Phase.ACCEPTED,
            WATCHED,
            reverify=RECORDED,
            sample=GpuPodSample(NOW - timedelta(seconds=60)),
        ),
        "in-service/Accepted",
    ),
}


@pytest.mark.parametrize(("observed", "origin"), ROWS.values(), ids=list(ROWS))
def test_a_nodes_reconcile_is_counted_under_what_it_is_doing(
    observed: NodeSnapshot, origin: str
) -> None:
    assert node_origin("reconcile", observed) == origin


def test_the_fabric_loops_writes_are_the_fabric_loops() -> None:
    assert node_origin("fabric", snapshot(None)) == "fabric/pass"  # the pass's snapshots
    assert node_origin("fabric", snapshot(Phase.FABRIC)) == "fabric/Fabric"
    assert node_origin("fabric", snapshot(Phase.ACCEPTED, WATCHED)) == "fabric/Accepted"
