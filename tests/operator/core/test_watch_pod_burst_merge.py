"""The watch pod merges Xid bursts under the policy's ``inService.xid.burstMergeSeconds``,
the gap the operator's ledger merges with (core/inservice/xids.py): the operator passes
it to ``gpuaccept probe watch`` (--burst-merge-s), so that a gap shorter than the
probe's default of 180 s is not lost before the ledger sees the events."""

from __future__ import annotations

from typing import Any

import pytest
from world import World, spec

from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.contracts.probe_invocation import FLAG_BURST_MERGE
from gpuaccept.operator.core import PolicyView


def watch_command(**xid: Any) -> list[str]:
    section: dict[str, Any] = {"enabled": True, "windowSeconds": 60}
    if xid:
        section["xid"] = xid
    world = World(policies=[PolicyView(name="default", generation=1, spec=spec(inService=section))])
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    (pod,) = [p for p in world.pods.values() if p.watch is not None]
    command: list[str] = world.bodies[pod.name]["spec"]["containers"][0]["command"]
    return command


@pytest.mark.parametrize(("xid", "gap"), [({}, "180"), ({"burstMergeSeconds": 60}, "60")])
def test_the_watch_pod_merges_under_the_policys_gap(xid: dict[str, int], gap: str) -> None:
    command = watch_command(**xid)
    at = command.index(FLAG_BURST_MERGE)
    assert command[at + 1] == gap
