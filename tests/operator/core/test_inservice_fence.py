"""A fatal in-service finding that belongs to one GPU fences that GPU (issue 40, item 6;
core/inservice/gpufence.py): whose each in-service reason is, as a table; a fenced
GPU's findings left out of the node's verdict (they neither fence it again nor take the
node out); and the whole path through the core on a DRA node under ``fencing: gpu``:
fences accumulate, the node stays Accepted with its watch going on, the bound, dryRun
and ``fencing: node`` quarantine as before, and only a passing probe lifts a fence."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from world import REPO, World, make_report, probed, spec

from gpuaccept.checks.attribution import Attribution
from gpuaccept.contracts.api import FENCE_TAINT_KEY, REPROBE_ANNOTATION
from gpuaccept.contracts.nodeacceptance import GpuVerdict, Phase, Reason
from gpuaccept.contracts.reverify import GpuFence, ReverifyStatus
from gpuaccept.contracts.watch_report import WatchReport, encode_watch_message
from gpuaccept.operator.core.fencerules import HELD_FENCE
from gpuaccept.operator.core.fleet import FleetSnapshot, tally
from gpuaccept.operator.core.inservice.evidence import (
    REASON_CONDITION,
    REASON_ECC_UNCORRECTED,
    REASON_FABRIC,
    REASON_GPU_LOST,
    REASON_NVLINK_DOWN,
    REASON_NVLINK_ERRORS,
    REASON_RECOVERY_ACTION,
    REASON_REMAP_FAILURE,
    REASON_REMAP_PENDING,
    REASON_UNALLOCATABLE,
    REASON_XID_FATAL,
    REASON_XID_REPEATED,
    REASONS,
    Finding,
)
from gpuaccept.operator.core.inservice.gpufence import (
    FENCIBLE_REASONS,
    fenced_uuids,
    in_service_attribution,
)
from gpuaccept.operator.core.model import (
    IN_SERVICE_CHECK,
    DeviceTaintView,
    DraDevice,
    NodeView,
    OperatorConfig,
    PolicyView,
    QuarantineLimitCounts,
    ResourceSliceView,
)
from gpuaccept.probe.hardware.simulated import simulated_uuid

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
UUIDS = [simulated_uuid("gpu-0000", i) for i in range(8)]  # the probed report's GPUs
DRIVER = "gpu.nvidia.com"
IDENTITY = {"node_name", "boot_id", "started_at", "finished_at"}


def finding(reason: str, gpu: str | None = UUIDS[2]) -> Finding:
    return Finding(reason, f"{reason} on {gpu}", reason, T, gpu)


ACCEPTANCE_FENCE = GpuVerdict(index=5, uuid=UUIDS[5], checks=["memory_health"], fenced=True)
NEW_2 = GpuVerdict(index=2, uuid=UUIDS[2], checks=[IN_SERVICE_CHECK])
NEW_6 = GpuVerdict(index=6, uuid=UUIDS[6], checks=[IN_SERVICE_CHECK])


@dataclass(frozen=True)
class Case:
    name: str
    findings: tuple[Finding, ...]
    gpus: tuple[GpuVerdict, ...]  # the per-GPU verdicts fenced ones the status has
    want: tuple[GpuVerdict, ...]  # the attribution's GPUs; () the node's


CASES = [
    Case("a fatal Xid on a GPU: that GPU", (finding(REASON_XID_FATAL),), (), (NEW_2,)),
    Case("a remap failure: the GPU's memory", (finding(REASON_REMAP_FAILURE),), (), (NEW_2,)),
    Case("a remap pending: the GPU's reset", (finding(REASON_REMAP_PENDING),), (), (NEW_2,)),
    Case("an uncorrected ECC error", (finding(REASON_ECC_UNCORRECTED),), (), (NEW_2,)),
    Case("a GPU lost: the node's (no device left)", (finding(REASON_GPU_LOST),), (), ()),
    Case("a recovery action: the node's", (finding(REASON_RECOVERY_ACTION),), (), ()),
    Case("an NVLink down: the node's all-reduce", (finding(REASON_NVLINK_DOWN),), (), ()),
    Case("NVLink errors: the node's", (finding(REASON_NVLINK_ERRORS),), (), ()),
    Case("the fabric: the node's", (finding(REASON_FABRIC, None),), (), ()),
    Case("a repeated Xid (74 NVLink, GSP): the node's", (finding(REASON_XID_REPEATED),), (), ()),
    Case("GPUs unallocatable: the node's", (finding(REASON_UNALLOCATABLE, None),), (), ()),
    Case("a condition: the node's", (finding(REASON_CONDITION, None),), (), ()),
    Case("a fatal Xid that names no GPU", (finding(REASON_XID_FATAL, None),), (), ()),
    Case(
        "a GPU the acceptance report does not name",
        (finding(REASON_XID_FATAL, "GPU-unknown"),),
        (),
        (),
    ),
    Case(
        "a per-GPU and a node-level finding: the node's",
        (finding(REASON_XID_FATAL), finding(REASON_NVLINK_DOWN, UUIDS[6])),
        (),
        (),
    ),
    Case(
        "two GPUs at once: both",
        (finding(REASON_XID_FATAL, UUIDS[6]), finding(REASON_XID_FATAL)),
        (),
        (NEW_2, NEW_6),
    ),
    Case(
        "the acceptance's fence stays beside the new one",
        (finding(REASON_XID_FATAL),),
        (ACCEPTANCE_FENCE,),
        (NEW_2, ACCEPTANCE_FENCE),
    ),
    Case(
        "an in-service fence stays beside the new one",
        (finding(REASON_XID_FATAL, UUIDS[6]),),
        (NEW_2.model_copy(update={"fenced": True}),),
        (NEW_2.model_copy(update={"fenced": True}), NEW_6),
    ),
    Case(
        "a node-level finding beside a fence: the node's, the fence carried",
        (finding(REASON_GPU_LOST),),
        (ACCEPTANCE_FENCE, NEW_6),
        (),
    ),
    Case(
        "a GPU failed but not fenced (a dry run's) is not a fence to keep",
        (finding(REASON_XID_FATAL),),
        (ACCEPTANCE_FENCE.model_copy(update={"fenced": False}),),
        (NEW_2,),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_in_service_attribution(case: Case) -> None:
    got = in_service_attribution(case.findings, case.gpus, UUIDS)
    if case.want:
        assert got.gpus == case.want  # every reason the GPUs' own: none is the node's
        assert IN_SERVICE_CHECK in got.per_gpu_checks
        assert got.per_gpu_checks == frozenset(c for g in case.want for c in g.checks)
    else:  # the node's: no check per-GPU, the fences that stand carried as they are
        assert got == Attribution(gpus=tuple(g for g in case.gpus if g.fenced))
        assert got.per_gpu_checks == frozenset()


def test_every_reason_is_decided() -> None:
    """A new reason is not fenced until someone decides it: the table's rows cover all."""
    decided = {c.findings[0].reason for c in CASES if len(c.findings) == 1}
    assert set(REASONS) <= decided
    assert set(REASONS) > FENCIBLE_REASONS


def test_fenced_uuids_are_those_fenced() -> None:
    gpus = (ACCEPTANCE_FENCE, NEW_2, GpuVerdict(index=7, checks=[IN_SERVICE_CHECK], fenced=True))
    assert fenced_uuids(gpus) == frozenset({UUIDS[5]})


# --------------------------------------------------------------------------- the core
def pool(taints: dict[int, tuple[DeviceTaintView, ...]] | None = None) -> tuple[ResourceSliceView]:
    marks = taints or {}
    devices = tuple(
        DraDevice(f"gpu-{i}", uuid=UUIDS[i], kind="gpu", taints=marks.get(i, ())) for i in range(8)
    )
    return (ResourceSliceView("s", DRIVER, "gpu-1", 1, 1, "gpu-1", devices),)


def in_service(max_fenced: int = 2, mode: str = "gpu", **policy: object) -> World:
    """A DRA node accepted on a passing probe, its health in service on its driver's
    taints (no watch pods), under ``fencing.mode`` ``mode``."""
    fencing = {"mode": mode, "maxFencedGpus": max_fenced}
    section = {"enabled": True, "watchPods": False}
    world = World(
        resource_slices=pool(),
        policies=[PolicyView("default", 1, spec(fencing=fencing, inService=section, **policy))],
        config=OperatorConfig(accept_simulated_reports=True, device_taint_rules=True),
    )
    assert world.node is not None
    world.node = dataclasses.replace(world.node, gpus=0, gpu_capacity=0)
    world.settle()
    world.finish_with_report(make_report())
    world.settle()
    assert world.status.phase in (Phase.ACCEPTED, Phase.HELD)
    assert world.status.in_service is not None
    return world


def xid(code: str, world: World) -> DeviceTaintView:
    return DeviceTaintView(f"{DRIVER}/xid", code, "NoSchedule", world.now)


def taint_and_settle(world: World, taints: dict[int, tuple[DeviceTaintView, ...]]) -> None:
    world.resource_slices = pool(taints)
    world.settle()
    world.advance(20)  # past correlation.settleSeconds
    world.settle()


def live_watch_pods(world: World) -> list[str]:
    return [p.name for p in world.pods.values() if p.watch is not None and not p.ended]


def rules(world: World) -> dict[str, str]:
    """The node's fence rules: device -> the taint's value and effect."""
    out = {}
    for body in world.fence_rules.values():
        rule = body["spec"]
        assert rule["taint"]["key"] == FENCE_TAINT_KEY  # type: ignore[index]
        out[rule["deviceSelector"]["device"]] = rule["taint"]["effect"]  # type: ignore[index]
    return out


def test_a_fatal_xid_taint_on_one_gpu_fences_it_and_the_node_stays_accepted() -> None:
    world = in_service()
    x79 = xid("79", world)
    taint_and_settle(world, {2: (x79,)})
    st = world.status
    assert (st.phase, st.reason, st.fenced) == (Phase.ACCEPTED, None, "1/8")
    assert [(g.index, g.fenced, g.checks) for g in st.gpu_verdicts] == [
        (2, True, [IN_SERVICE_CHECK])
    ]
    assert "fenced GPU 2" in (st.message or "")
    assert rules(world) == {"gpu-2": "NoSchedule"}
    assert world.taint_keys() == []  # the node serves on its other GPUs
    assert not world.settle().actions  # a fixed point: the fenced GPU's finding is done

    # a fenced GPU's later findings neither fence again nor take the node out
    world.advance(60)
    taint_and_settle(world, {2: (x79, xid("48", world))})
    assert (world.status.phase, world.status.fenced) == (Phase.ACCEPTED, "1/8")
    assert world.status.in_service is not None
    assert world.status.in_service.verdict is None  # the node's verdict: none

    # another GPU's finding adds its fence beside the first
    world.advance(60)
    taint_and_settle(world, {2: (x79,), 6: (xid("95", world),)})
    st = world.status
    assert (st.phase, st.fenced) == (Phase.ACCEPTED, "2/8")
    assert [(g.index, g.fenced) for g in st.gpu_verdicts] == [(2, True), (6, True)]
    assert rules(world) == {"gpu-2": "NoSchedule", "gpu-6": "NoSchedule"}

    # one more GPU is over maxFencedGpus=2: the node is quarantined as today
    world.advance(60)
    taint_and_settle(world, {2: (x79,), 6: (xid("95", world),), 0: (xid("48", world),)})
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "XidFatal")
    assert "over fencing.maxFencedGpus=2" in (st.message or "")
    assert rules(world) == {}
    assert world.taint_keys() != []


def test_the_watch_goes_on_for_the_other_gpus() -> None:
    """Watch pods keep running on a node with an in-service fence."""
    fencing = {"mode": "gpu"}
    section = {"enabled": True}
    world = World(
        resource_slices=pool(),
        policies=[PolicyView("default", 1, spec(fencing=fencing, inService=section))],
        config=OperatorConfig(accept_simulated_reports=True, device_taint_rules=True),
    )
    assert world.node is not None
    world.node = dataclasses.replace(world.node, gpus=0, gpu_capacity=0)
    world.settle()
    world.finish_with_report(make_report())
    world.settle()
    assert live_watch_pods(world)
    taint_and_settle(world, {3: (xid("79", world),)})
    assert (world.status.phase, world.status.fenced) == (Phase.ACCEPTED, "1/8")
    world.advance(3600)
    world.settle()
    assert live_watch_pods(world)  # a window after the fence: the watch goes on


def test_a_node_level_finding_quarantines_the_node() -> None:
    world = in_service()
    lost = DeviceTaintView(f"{DRIVER}/gpu-lost", "", "NoSchedule", world.now)
    taint_and_settle(world, {4: (lost,)})
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "GPULost")
    assert rules(world) == {}


def test_fencing_node_quarantines_as_before() -> None:
    world = in_service(mode="node")
    taint_and_settle(world, {2: (xid("79", world),)})
    st = world.status
    assert (st.phase, st.reason, st.fenced) == (Phase.QUARANTINED, "XidFatal", None)
    assert st.gpu_verdicts == []
    assert rules(world) == {}


def test_dry_run_holds_the_fence_with_a_rule_of_effect_none() -> None:
    world = in_service(dryRun=True)
    taint_and_settle(world, {2: (xid("79", world),)})
    st = world.status
    assert (st.phase, st.reason, st.held_action) == (Phase.HELD, "DryRun", HELD_FENCE)
    assert st.fenced is None
    assert "dry run: would fence GPU 2" in (st.message or "")
    assert rules(world) == {"gpu-2": "None"}


def test_only_a_passing_probe_lifts_an_in_service_fence() -> None:
    world = in_service()
    taint_and_settle(world, {2: (xid("79", world),)})
    assert world.status.fenced == "1/8"
    world.advance(3600)
    world.settle()
    assert rules(world) == {"gpu-2": "NoSchedule"}  # time alone lifts nothing
    world.resource_slices = pool()  # the driver restarted: its taint gone
    world.settle()
    assert rules(world) == {"gpu-2": "NoSchedule"}  # nor does the driver's taint going
    assert world.node is not None
    world.node = dataclasses.replace(world.node, annotations={REPROBE_ANNOTATION: "1"})
    world.settle()
    world.finish_with_report(make_report())
    world.settle()
    st = world.status
    assert (st.phase, st.fenced, st.gpu_verdicts) == (Phase.ACCEPTED, None, [])
    assert rules(world) == {}


def test_a_re_judge_of_the_stored_report_keeps_the_in_service_fence() -> None:
    """A changed policy re-judges the acceptance report, which knows nothing of the
    in-service finding: the fence stands through every step (no probe passed)."""
    world = in_service()
    taint_and_settle(world, {2: (xid("79", world),)})
    assert rules(world) == {"gpu-2": "NoSchedule"}
    (policy,) = world.policies
    world.policies = [dataclasses.replace(policy, generation=2)]
    for _ in range(10):
        world.apply(world.plan())
        assert rules(world) == {"gpu-2": "NoSchedule"}
    st = world.status
    assert (st.phase, st.fenced, st.policy_generation) == (Phase.ACCEPTED, "1/8", 2)


def test_the_limit_holds_an_in_service_fence_in_service_until_its_gpu_fits() -> None:
    world = in_service(maxQuarantined=1)
    # 2 nodes of 8 GPUs: a limit of 1 node is 8 GPUs; 8 already out, 1 more asked
    world.limit_counts = QuarantineLimitCounts(
        quarantined=1, matched=2, matched_gpus=16, unavailable_gpus=8
    )
    taint_and_settle(world, {2: (xid("79", world),)})
    st = world.status
    assert (st.phase, st.reason, st.held_action) == (Phase.ACCEPTED, "BreakerOpen", HELD_FENCE)
    assert "8 GPU(s) of limit 8 out of service, 1 more asked" in (st.message or "")
    assert (st.fenced, rules(world)) == (None, {})  # held: nothing out of service
    world.limit_counts = QuarantineLimitCounts(
        quarantined=0, matched=2, matched_gpus=16, unavailable_gpus=7
    )  # room for one GPU
    world.advance(30)
    world.settle()
    assert (world.status.phase, world.status.reason, world.status.fenced) == (
        Phase.ACCEPTED,
        None,
        "1/8",
    )
    assert rules(world) == {"gpu-2": "NoSchedule"}


def test_a_node_level_verdict_the_limit_holds_keeps_the_fences_that_stand() -> None:
    """The node's quarantine held in service (the limit) leaves it as it is: its fenced
    GPU stays fenced (only the quarantine itself, or a passing probe, ends a fence)."""
    world = in_service(maxQuarantined=1)
    taint_and_settle(world, {2: (xid("79", world),)})
    assert rules(world) == {"gpu-2": "NoSchedule"}
    world.limit_counts = QuarantineLimitCounts(
        quarantined=1, matched=2, matched_gpus=16, unavailable_gpus=8
    )
    world.advance(60)
    lost = DeviceTaintView(f"{DRIVER}/gpu-lost", "", "NoSchedule", world.now)
    taint_and_settle(world, {2: (xid("79", world), lost), 4: (lost,)})
    st = world.status
    assert (st.phase, st.reason) == (Phase.ACCEPTED, "BreakerOpen")
    assert "would quarantine" in (st.message or "")
    assert (st.fenced, rules(world)) == ("1/8", {"gpu-2": "NoSchedule"})
    world.limit_counts = QuarantineLimitCounts(
        quarantined=0, matched=2, matched_gpus=16, unavailable_gpus=0
    )
    world.advance(30)
    world.settle()
    assert (world.status.phase, world.status.reason) == (Phase.QUARANTINED, "GPULost")
    assert rules(world) == {}  # the node's taint keeps every GPU out


def test_an_in_service_hold_keeps_the_acceptance_s_fence() -> None:
    """A node accepted with GPU 5 fenced (a pending row remap at the door): a node-level
    in-service verdict the limit holds, or a common cause, leaves GPU 5 fenced."""
    fencing = {"mode": "gpu"}
    section = {"enabled": True, "watchPods": False}
    world = World(
        resource_slices=pool(),
        policies=[
            PolicyView("default", 1, spec(fencing=fencing, inService=section, maxQuarantined=1))
        ],
        config=OperatorConfig(accept_simulated_reports=True, device_taint_rules=True),
    )
    assert world.node is not None
    world.node = dataclasses.replace(world.node, gpus=0, gpu_capacity=0)
    world.settle()
    report = probed(REPO / "profiles" / "faults" / "row-remap-pending.yaml")
    world.finish_with_report(report.model_copy(update=make_report().model_dump(include=IDENTITY)))
    world.settle()
    assert (world.status.phase, world.status.fenced) == (Phase.ACCEPTED, "1/8")
    assert rules(world) == {"gpu-5": "NoSchedule"}
    world.limit_counts = QuarantineLimitCounts(
        quarantined=1, matched=2, matched_gpus=16, unavailable_gpus=8
    )
    world.advance(60)
    lost = DeviceTaintView(f"{DRIVER}/gpu-lost", "", "NoSchedule", world.now)
    taint_and_settle(world, {i: (lost,) for i in range(8)})
    st = world.status
    assert (st.phase, st.reason) == (Phase.ACCEPTED, "BreakerOpen")
    assert (st.fenced, rules(world)) == ("1/8", {"gpu-5": "NoSchedule"})


def test_a_fatal_xid_in_a_watch_report_fences_its_gpu() -> None:
    """The watch pod's report of Xid 79 on GPU 3 (by its UUID) fences GPU 3; the next
    window's watch pod starts (the watch goes on)."""
    window = 60
    fencing = {"mode": "gpu"}
    section = {"enabled": True, "windowSeconds": window}
    world = World(
        resource_slices=pool(),
        policies=[PolicyView("default", 1, spec(fencing=fencing, inService=section))],
        config=OperatorConfig(accept_simulated_reports=True, device_taint_rules=True),
    )
    assert world.node is not None
    world.node = dataclasses.replace(world.node, gpus=0, gpu_capacity=0)
    world.settle()
    world.finish_with_report(make_report())
    world.settle()
    (pod,) = [p for p in world.pods.values() if p.watch is not None]
    world.advance(window)
    body = {
        "node_name": "gpu-1",
        "boot_id": "boot-1",
        "probe_version": "0.1.0",
        "simulated": True,
        "started_at": world.now - timedelta(seconds=window),
        "ended_at": world.now,
        "window_s": float(window),
        "watched_s": float(window),
        "end_reason": "window",
        "ended_early": False,
        "gpus_expected": 8,
        "gpus_seen": 8,
        "xids": [{"gpu": 3, "uuid": UUIDS[3], "xid": 79, "firstS": 30.0, "lastS": 30.0}],
    }
    message = encode_watch_message(WatchReport.model_validate(body))
    world.pods[pod.name] = dataclasses.replace(
        pod, phase="Succeeded", terminated=True, exit_code=0, message=message, finished=world.now
    )
    world.settle()
    world.advance(20)  # past correlation.settleSeconds
    world.settle()
    st = world.status
    assert (st.phase, st.reason, st.fenced) == (Phase.ACCEPTED, None, "1/8")
    assert "Xid 79 (fatal) on GPU " + UUIDS[3] in (st.message or "")
    assert rules(world) == {"gpu-3": "NoSchedule"}
    world.advance(window)
    world.settle()
    assert live_watch_pods(world)  # the next window watches the other GPUs
    assert world.status.fenced == "1/8"


def test_a_fenced_gpu_gone_from_its_pool_loses_its_rule_and_the_node_is_judged() -> None:
    """GPU 2 fenced; the driver republishes its pool complete without it, the names
    shifted (``gpu-2`` is now the GPU that was GPU 3): the rule goes at once, so that it
    fences no healthy GPU, and past the grace the GPU gone quarantines the node."""
    world = in_service()
    taint_and_settle(world, {2: (xid("79", world),)})
    assert rules(world) == {"gpu-2": "NoSchedule"}
    rest = [u for i, u in enumerate(UUIDS) if i != 2]
    devices = tuple(DraDevice(f"gpu-{j}", uuid=u, kind="gpu") for j, u in enumerate(rest))
    world.resource_slices = (ResourceSliceView("s", DRIVER, "gpu-1", 2, 1, "gpu-1", devices),)
    world.settle()
    assert rules(world) == {}
    world.advance(301)  # past inService.allocatableGraceSeconds
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "GPUsUnallocatable")
    assert UUIDS[2] in (st.message or "")


# --------------------------------------------------------------- the rate (issue 40 item 4)
def test_an_in_service_fence_counts_in_the_rate_as_its_gpus() -> None:
    """A fence of a GPU in service takes capacity out as a quarantine does: it is
    recorded in the rate's window (``takenOutTime``) as the GPUs it took out
    (``takenOutGpus``), a later fence within the window adding its own; the fleet's
    counts then see one GPU taken out, or one node where the limit counts nodes."""
    world = in_service()
    assert world.status.taken_out_time is None  # a new node's acceptance took nothing out
    taint_and_settle(world, {2: (xid("79", world),)})
    st = world.status
    assert (st.fenced, st.taken_out_time, st.taken_out_gpus) == ("1/8", world.now, 1)
    fenced_at = world.now
    world.advance(60)
    taint_and_settle(world, {2: (xid("79", world),), 6: (xid("95", world),)})
    st = world.status
    assert (st.fenced, st.taken_out_time, st.taken_out_gpus) == ("2/8", world.now, 2)
    assert world.na is not None
    assert world.node is not None
    for gpus in (8, 0):  # counted in GPUs; a node of unknown size: in nodes
        node = NodeView(name="gpu-1", labels=dict(world.node.labels), gpu_capacity=gpus)
        other = NodeView(name="gpu-2", labels=dict(world.node.labels), gpu_capacity=gpus)
        snapshot = FleetSnapshot((world.policies[0],), (node, other), (world.na,))
        counts = tally(snapshot)["default"].limit_counts("gpu-2", world.now)
        assert counts.taken_out_recently == 1
        assert counts.taken_out_recently_gpus == (2 if gpus else None)
        late = tally(snapshot)["default"].limit_counts("gpu-2", fenced_at + timedelta(seconds=400))
        assert late.taken_out_recently == 0


def test_a_fence_the_rate_holds_waits_in_service() -> None:
    """One 8-GPU node's worth per window (``maxPerWindow: 1`` of 2 nodes): 8 GPUs taken
    out elsewhere within it hold the fence, the node in service as it is."""
    world = in_service(quarantineRate={"maxPerWindow": 1})
    world.limit_counts = QuarantineLimitCounts(
        quarantined=0, matched=2, matched_gpus=16, unavailable_gpus=0, taken_out_recently_gpus=8
    )
    taint_and_settle(world, {2: (xid("79", world),)})
    st = world.status
    assert (st.phase, st.reason, st.held_action) == (Phase.ACCEPTED, "BreakerOpen", HELD_FENCE)
    assert "quarantineRate=1/300s: 8 GPU(s) of limit 8" in (st.message or "")
    assert (st.fenced, st.taken_out_time) == (None, None)


def test_a_dry_run_fence_is_not_counted_in_the_rate() -> None:
    world = in_service(dryRun=True)
    taint_and_settle(world, {2: (xid("79", world),)})
    st = world.status
    assert (st.phase, st.held_action) == (Phase.HELD, HELD_FENCE)
    assert (st.taken_out_time, st.taken_out_gpus) == (None, None)


# ------------------------------------------------ repeat offenders (issue 40 item 5)
def reprobe_passes(world: World) -> None:
    """The driver restarted (its taints gone) and a person asked for a re-probe, which
    passes on every GPU."""
    world.resource_slices = pool()
    world.settle()
    assert world.node is not None
    world.node = dataclasses.replace(world.node, annotations={REPROBE_ANNOTATION: "1"})
    world.settle()
    world.finish_with_report(make_report())
    world.settle()


def test_a_gpu_fenced_again_and_again_escalates_to_the_node() -> None:
    """``repeatOffenders`` (3 within 7 days) per GPU: GPU 2 fenced in service, its fence
    lifted by a passing probe, fenced again, lifted again: its third fence quarantines
    the node (``RepeatedFence``, remedy a person) instead, and a passing probe keeps it
    quarantined until a person releases it."""
    world = in_service()
    for _ in range(2):
        world.advance(3600)
        taint_and_settle(world, {2: (xid("79", world),)})
        st = world.status
        assert (st.phase, st.fenced) == (Phase.ACCEPTED, "1/8"), st.message
        world.advance(3600)
        reprobe_passes(world)
        assert (world.status.phase, world.status.fenced) == (Phase.ACCEPTED, None)
    assert world.status.reverify is not None
    assert [f.uuid for f in world.status.reverify.gpu_fences] == [UUIDS[2], UUIDS[2]]
    world.advance(3600)
    taint_and_settle(world, {2: (xid("79", world),)})
    st = world.status
    assert (st.phase, st.reason, st.fenced) == (Phase.QUARANTINED, "RepeatedFence", None)
    assert f"GPU {UUIDS[2]} fenced 3 times within 7 days" in (st.message or "")
    assert st.reasons[0].check == "repeat_offenders"
    assert rules(world) == {}
    assert world.taint_keys() != []
    world.advance(3600)
    reprobe_passes(world)  # the repair passes the probe, and still:
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "RepeatedFence")
    assert "a person must look at it and release it" in (st.message or "")


def test_fences_of_different_gpus_do_not_add_up() -> None:
    """Each GPU's fences are its own history: GPUs 2, 6 and 0 fenced once each (a passing
    probe between) leave the node accepted with the last one fenced."""
    world = in_service()
    for gpu in (2, 6, 0):
        world.advance(3600)
        taint_and_settle(world, {gpu: (xid("79", world),)})
        assert (world.status.phase, world.status.fenced) == (Phase.ACCEPTED, "1/8")
        if gpu != 0:
            world.advance(3600)
            reprobe_passes(world)
    assert rules(world) == {"gpu-0": "NoSchedule"}


def test_a_dry_run_records_no_fence_in_the_history() -> None:
    world = in_service(dryRun=True)
    taint_and_settle(world, {2: (xid("79", world),)})
    assert world.status.held_action == HELD_FENCE
    assert world.status.reverify is None or world.status.reverify.gpu_fences == []


def test_a_repeat_offender_s_quarantine_the_limit_holds_is_counted_when_applied() -> None:
    """The limit holds the escalated quarantine in service (its would-be action
    recorded); applied once there is room, the GPU's third fence is in its history, so
    a passing probe still does not bring the node back."""
    world = in_service(maxQuarantined=1)
    for _ in range(2):
        world.advance(3600)
        taint_and_settle(world, {2: (xid("79", world),)})
        world.advance(3600)
        reprobe_passes(world)
    world.limit_counts = QuarantineLimitCounts(
        quarantined=1, matched=2, matched_gpus=16, unavailable_gpus=8
    )
    world.advance(3600)
    taint_and_settle(world, {2: (xid("79", world),)})
    st = world.status
    assert (st.phase, st.reason, st.held_action) == (Phase.ACCEPTED, "BreakerOpen", "Quarantine")
    assert st.reasons[0].reason == "RepeatedFence"
    assert st.fenced is None  # nor fenced: its fence is what escalated
    world.limit_counts = QuarantineLimitCounts(
        quarantined=0, matched=2, matched_gpus=16, unavailable_gpus=0
    )
    world.advance(30)
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "RepeatedFence")
    assert st.reverify is not None
    assert [f.uuid for f in st.reverify.gpu_fences] == [UUIDS[2]] * 3
    world.advance(3600)
    reprobe_passes(world)
    assert (world.status.phase, world.status.reason) == (Phase.QUARANTINED, "RepeatedFence")


def test_a_held_repeat_fence_applied_from_its_status_is_counted() -> None:
    """The same held quarantine applied from the status alone (its finding gone by then:
    the driver restarted): the GPUs the held verdict would have fenced go into the
    history, so that the node stays a repeat offender."""
    world = in_service(maxQuarantined=1)
    assert world.na is not None
    held = world.status.model_copy(
        update={
            "reason": "BreakerOpen",
            "held_action": "Quarantine",
            "reasons": [
                Reason(check="repeat_offenders", reason="RepeatedFence", message="GPU 2 ..."),
                Reason(check=IN_SERVICE_CHECK, reason=REASON_XID_FATAL, message="Xid 79"),
            ],
            "gpu_verdicts": [NEW_2],
            "reverify": ReverifyStatus(
                gpu_fences=[
                    GpuFence(uuid=UUIDS[2], time=world.now - timedelta(hours=h)) for h in (1, 2)
                ]
            ),
        }
    )
    world.na = dataclasses.replace(world.na, status=held)
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "RepeatedFence")
    assert st.reverify is not None
    assert [f.uuid for f in st.reverify.gpu_fences] == [UUIDS[2]] * 3


# ------------------------------------------------ a fenced GPU cut into MIG devices
def test_a_fenced_gpu_cut_into_mig_devices_stays_fenced_on_them() -> None:
    """GPU 2 fenced; the GPU is put in MIG mode and the driver republishes its pool with
    two MIG devices naming GPU 2 their parent (``parentUUID``) instead of ``gpu-2``: the
    fence moves onto both MIG devices, the node stays Accepted with GPU 2 fenced, and a
    GPU back to whole gets its own rule again."""
    world = in_service()
    taint_and_settle(world, {2: (xid("79", world),)})
    assert rules(world) == {"gpu-2": "NoSchedule"}
    whole = tuple(d for d in pool()[0].devices if d.name != "gpu-2")
    cut = tuple(
        DraDevice(f"gpu-2-mig-3g40gb-9-{p}", uuid=f"MIG-{p}", kind="mig", parent_uuid=UUIDS[2])
        for p in (0, 4)
    )
    world.resource_slices = (ResourceSliceView("s", DRIVER, "gpu-1", 2, 1, "gpu-1", whole + cut),)
    world.settle()
    assert rules(world) == {
        "gpu-2-mig-3g40gb-9-0": "NoSchedule",
        "gpu-2-mig-3g40gb-9-4": "NoSchedule",
    }
    world.advance(301)  # past inService.allocatableGraceSeconds: a repartition is no loss
    world.settle()
    st = world.status
    assert (st.phase, st.fenced) == (Phase.ACCEPTED, "1/8"), st.message
    world.resource_slices = pool()
    world.settle()
    assert rules(world) == {"gpu-2": "NoSchedule"}
