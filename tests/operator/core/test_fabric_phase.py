"""Phase Fabric in one node's reconcile: entered after the single-node checks under a
policy with fabric.enabled, left with the verdict the pair planning gives the node
(docs/fabric.md), under dryRun, the quarantine limit and paused like any verdict."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from world import PENDING, T0, World, spec

from gpuaccept.checks.fabric_allreduce import NoPartnerAction
from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.core import PodView, PolicyView, QuarantineLimitCounts, Taint
from gpuaccept.operator.core.model import (
    FabricNoPartner,
    FabricPassed,
    FabricPodLabels,
    FabricQuarantined,
    FabricVerdict,
    PairOutcome,
    PartnerFigure,
)

QUARANTINE = Taint("gpuaccept.io/quarantined", "NoSchedule", "true")
FABRIC = {"enabled": True, "minBusbwGBps": 300}


def fabric_world(**spec_kwargs: object) -> World:
    policy = PolicyView(name="default", generation=1, spec=spec(fabric=FABRIC, **spec_kwargs))
    world = World(policies=[policy])
    world.settle()
    world.finish_with_report()
    world.settle()
    return world


def test_a_node_that_passed_the_single_node_checks_enters_fabric_keeping_the_pending_taint() -> (
    None
):
    world = fabric_world()
    st = world.status
    assert st.phase == Phase.FABRIC
    assert st.reason == "FabricPending"
    assert st.fabric is not None
    assert st.fabric.waiting_since == T0
    assert st.fabric.summary == "waiting"
    assert st.report is not None  # the single-node evidence is kept
    assert world.node is not None
    assert PENDING in world.node.taints
    assert world.node.labels.get("gpuaccept.io/acceptance") is None


def test_without_fabric_enabled_the_node_is_accepted_as_before() -> None:
    world = World()
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.status.fabric is None


def test_waiting_keeps_fabric_pods_and_deletes_any_other_probe_pod() -> None:
    world = fabric_world()
    labels = FabricPodLabels("p1", 0, "gpu-1", "gpu-2")
    world.place_pods(
        PodView(name="fab", phase="Running", fabric=labels),
        PodView(name="stray", phase="Running", serial=9),
    )
    world.settle()
    assert set(world.pods) == {"fab"}
    assert world.status.phase == Phase.FABRIC


FAILED_WITH = (
    PartnerFigure("gpu-2", PairOutcome.FAILED, 120.0, T0),
    PartnerFigure("gpu-3", PairOutcome.FAILED, 118.0, T0),
)
CASES: list[tuple[str, FabricVerdict, Phase, str | None, str, bool, bool]] = [
    # name, verdict, phase, reason, FABRIC column, pending taint, quarantine taint
    ("passed", FabricPassed("gpu-2", 390.0, T0), Phase.ACCEPTED, None, "passed 390.0 GB/s",
     False, False),
    ("quarantined", FabricQuarantined(FAILED_WITH, ("gpu-4", "gpu-5"), T0), Phase.QUARANTINED,
     "FabricAllreduceFailed", "failed 118.0 GB/s", False, True),
    ("no partner, hold", FabricNoPartner(NoPartnerAction.HOLD, ()), Phase.FABRIC,
     "FabricNoPartner", "no partner (hold)", True, False),
    ("no partner, accept", FabricNoPartner(NoPartnerAction.ACCEPT, FAILED_WITH[:1]),
     Phase.ACCEPTED, None, "no partner (accept)", False, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("verdict", "expected"), [(c[1], c[2:]) for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_fabric_verdict_is_recorded(
    verdict: FabricVerdict, expected: tuple[Phase, str | None, str, bool, bool]
) -> None:
    phase, reason, column, pending, quarantine = expected
    world = fabric_world()
    world.fabric_verdict = verdict
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (phase, reason)
    assert st.fabric is not None
    assert st.fabric.summary == column
    assert world.node is not None
    assert (PENDING in world.node.taints, QUARANTINE in world.node.taints) == (pending, quarantine)
    assert st.report is not None  # the single-node report stays the evidence of record


def test_a_conviction_names_the_partners_figures_and_witnesses() -> None:
    world = fabric_world()
    world.fabric_verdict = FabricQuarantined(FAILED_WITH, ("gpu-4", "gpu-5"), T0)
    world.settle()
    (reason,) = world.status.reasons
    assert (reason.check, reason.reason) == ("fabric_allreduce", "FabricAllreduceFailed")
    assert "gpu-2 (120.0 GB/s; it passed with gpu-4)" in reason.message
    assert "gpu-3 (118.0 GB/s; it passed with gpu-5)" in reason.message
    assert any(e.reason == "Quarantined" and e.kind == "Node" for e in world.events)


def test_a_quarantine_verdict_asks_for_the_quarantine_limit_lock() -> None:
    world = fabric_world()
    world.fabric_verdict = FabricQuarantined(FAILED_WITH, ("gpu-4", "gpu-5"), T0)
    assert world.plan().needs_limit_lock


def test_the_quarantine_limit_holds_a_fabric_conviction() -> None:
    world = fabric_world(maxQuarantined=1)
    world.limit_counts = QuarantineLimitCounts(quarantined=1, matched=10)
    world.fabric_verdict = FabricQuarantined(FAILED_WITH, ("gpu-4", "gpu-5"), T0)
    world.settle()
    assert (world.status.phase, world.status.reason) == (Phase.HELD, "BreakerOpen")
    assert world.node is not None
    assert QUARANTINE not in world.node.taints


def test_dry_run_enters_fabric_and_records_the_verdict_without_touching_the_node() -> None:
    world = fabric_world(dryRun=True)
    assert world.status.phase == Phase.FABRIC
    taints = world.node.taints if world.node else ()
    world.fabric_verdict = FabricQuarantined(FAILED_WITH, ("gpu-4", "gpu-5"), T0)
    world.settle()
    assert (world.status.phase, world.status.reason) == (Phase.HELD, "DryRun")
    assert world.status.held_action == "Quarantine"
    assert world.node is not None
    assert world.node.taints == taints


def test_paused_records_no_fabric_verdict() -> None:
    world = fabric_world()
    world.policies = [dataclasses.replace(world.policies[0], spec=spec(fabric=FABRIC, paused=True))]
    world.fabric_verdict = FabricPassed("gpu-2", 390.0, T0)
    world.settle()
    assert world.status.phase == Phase.FABRIC


def test_fabric_disabled_while_waiting_accepts_on_the_single_node_checks() -> None:
    world = fabric_world()
    world.policies = [dataclasses.replace(world.policies[0], spec=spec(), generation=2)]
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.status.fabric is not None
    assert world.status.fabric.summary == "not tested"


def test_a_reboot_while_waiting_starts_a_new_round() -> None:
    world = fabric_world()
    assert world.node is not None
    world.node = dataclasses.replace(world.node, boot_id="boot-2")
    world.now = T0 + timedelta(minutes=1)
    world.apply(world.plan())
    assert (world.status.phase, world.status.reason) == (Phase.PENDING, "BootIDChanged")
    assert world.status.fabric is None  # the old round's pairs are not this round's


def test_an_accepted_partner_keeps_its_fabric_pod() -> None:
    world = fabric_world()
    world.fabric_verdict = FabricPassed("gpu-2", 390.0, T0)
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    labels = FabricPodLabels("p2", 0, "gpu-1", "gpu-9")
    world.place_pods(PodView(name="fab", phase="Running", fabric=labels))
    world.settle()
    assert set(world.pods) == {"fab"}


def test_a_reprobe_request_while_waiting_starts_a_new_round() -> None:
    world = fabric_world()
    assert world.node is not None
    annotations = {"gpuaccept.io/reprobe": "now"}
    world.node = dataclasses.replace(world.node, annotations=annotations)
    world.apply(world.plan())
    assert (world.status.phase, world.status.reason) == (Phase.PENDING, "ReprobeRequested")
    assert world.node is not None
    assert "gpuaccept.io/reprobe" not in world.node.annotations


@pytest.mark.parametrize("held", [False, True], ids=["quarantined", "held by the limit"])
def test_a_policy_change_rejudges_the_report_but_keeps_a_fabric_conviction(held: bool) -> None:
    world = fabric_world(maxQuarantined=1)
    if held:
        world.limit_counts = QuarantineLimitCounts(quarantined=1, matched=10)
    world.fabric_verdict = FabricQuarantined(FAILED_WITH, ("gpu-4", "gpu-5"), T0)
    world.settle()
    before = world.status.phase
    assert before == (Phase.HELD if held else Phase.QUARANTINED)
    world.policies = [
        dataclasses.replace(world.policies[0], spec=spec(fabric=FABRIC, maxQuarantined=1),
                            generation=2)
    ]  # fmt: skip
    world.settle()
    assert world.status.phase == before
    assert [r.reason for r in world.status.reasons] == ["FabricAllreduceFailed"]
    assert world.status.rejudged


TIGHTER = {"driverLibraries": {"driverVersions": {"min": "999.0.0"}}}


@pytest.mark.parametrize("fabric", [FABRIC, {}], ids=["fabric still on", "fabric turned off"])
def test_a_policy_tightened_while_waiting_rejudges_the_report(fabric: dict[str, object]) -> None:
    world = fabric_world()
    world.policies = [PolicyView("default", 2, spec(fabric=fabric, probe=TIGHTER))]
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "DriverLibrariesFailed")
    assert st.rejudged
    assert st.policy_generation == 2


def test_a_policy_change_the_report_still_passes_keeps_waiting_under_the_new_policy() -> None:
    world = fabric_world()
    world.policies = [PolicyView("default", 2, spec(fabric=FABRIC, maxQuarantined=3))]
    world.settle()
    st = world.status
    assert (st.phase, st.policy_generation) == (Phase.FABRIC, 2)
    assert st.fabric is not None
    assert st.fabric.waiting_since == T0  # the deadline still counts from the start


def test_a_policy_change_with_on_policy_change_reprobe_starts_a_new_round() -> None:
    world = fabric_world()
    reprobe = {"onPolicyChange": "Reprobe"}
    world.policies = [PolicyView("default", 2, spec(fabric=FABRIC, reprobe=reprobe))]
    world.apply(world.plan())
    assert (world.status.phase, world.status.reason) == (Phase.PENDING, "PolicyChanged")
