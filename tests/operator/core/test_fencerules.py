"""A fenced GPU is a DeviceTaintRule (issue 40; core/fencerules.py): the rules a status
wants against the rules that exist, as a table, and the whole path through the core on a
DRA node: accepted with one rule, dryRun a rule of effect None, the limit, an API server
without DeviceTaintRules, a republished pool, a passing re-probe and a deleted node."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
from world import REPO, World, make_report, probed, spec

from gpuaccept.contracts.api import FENCE_TAINT_KEY, REPROBE_ANNOTATION
from gpuaccept.contracts.nodeacceptance import GpuVerdict, NodeAcceptanceStatus, Phase
from gpuaccept.contracts.reverify import ReverifyRound, ReverifyStatus
from gpuaccept.operator.core.fencerules import (
    HELD_FENCE,
    fence_rule_actions,
    fence_targets,
    gone_from_pools,
    resolve_gpu,
    rule_name,
    wanted_fence_rules,
)
from gpuaccept.operator.core.gpupublishing import dra_pools
from gpuaccept.operator.core.model import (
    DeleteFenceRule,
    DraDevice,
    FenceRuleView,
    OperatorConfig,
    PolicyView,
    QuarantineLimitCounts,
    ResourceSliceView,
    WriteFenceRule,
)
from gpuaccept.probe.hardware.simulated import simulated_uuid

DRIVER = "gpu.nvidia.com"
IDENTITY = {"node_name", "boot_id", "started_at", "finished_at"}
REMAP_PENDING = REPO / "profiles" / "faults" / "row-remap-pending.yaml"  # GPU 5
UUIDS = [simulated_uuid("gpu-0000", i) for i in range(8)]  # the probed report's GPUs


def pool(
    names: str = "gpu-{}", generation: int = 1, count: int = 8
) -> tuple[ResourceSliceView, ...]:
    devices = tuple(DraDevice(names.format(i), uuid=UUIDS[i], kind="gpu") for i in range(count))
    return (ResourceSliceView("s", DRIVER, "gpu-1", generation, 1, "gpu-1", devices),)


def half_published() -> tuple[ResourceSliceView, ...]:
    """The pool being republished: the first of its 2 slices seen, GPUs 0 to 3."""
    return (dataclasses.replace(pool(count=4)[0], generation=2, slice_count=2),)


def without_gpu_5() -> tuple[ResourceSliceView, ...]:
    """The pool republished complete with 7 GPUs, GPU 5 gone: the names shifted, so
    ``gpu-5`` is now the GPU that was GPU 6."""
    uuids = [u for i, u in enumerate(UUIDS) if i != 5]
    devices = tuple(DraDevice(f"gpu-{j}", uuid=u, kind="gpu") for j, u in enumerate(uuids))
    return (dataclasses.replace(pool()[0], generation=2, devices=devices),)


def mig_uuid(gpu: int, part: int) -> str:
    return f"MIG-{gpu}{part}" + UUIDS[gpu][6:]


def migs(gpu: int, parent: str | None) -> tuple[DraDevice, ...]:
    """GPU ``gpu`` cut into two MIG devices, as NVIDIA's driver publishes them
    (kubernetes-sigs/dra-driver-nvidia-gpu, cmd/gpu-kubelet-plugin/mig.go
    ``CommonAttributesMig``, ``ToCanonicalName``): type ``mig``, their own uuid, their
    parent GPU's uuid (``parent``; None: a driver that names none)."""
    return tuple(
        DraDevice(
            f"gpu-{gpu}-mig-1g10gb-19-{part}",
            uuid=mig_uuid(gpu, part),
            kind="mig",
            parent_uuid=parent or "",
        )
        for part in range(2)
    )


def repartitioned(gpu: int = 5, parent: str | None = UUIDS[5]) -> tuple[ResourceSliceView, ...]:
    """The pool republished complete with GPU ``gpu`` in MIG mode: its whole-GPU device
    gone, two MIG devices in its place."""
    whole = tuple(d for d in pool()[0].devices if d.name != f"gpu-{gpu}")
    return (dataclasses.replace(pool()[0], generation=2, devices=(*whole, *migs(gpu, parent))),)


def mig_rule(part: int) -> FenceRuleView:
    return dataclasses.replace(
        rule(f"gpu-5-mig-1g10gb-19-{part}"), name=rule_name("gpu-1", mig_uuid(5, part))
    )


# --------------------------------------------------------------------------- the table
GPU5 = GpuVerdict(index=5, uuid=UUIDS[5], checks=["memory_health"], fenced=True)
GPU5_UNFENCED = GpuVerdict(index=5, uuid=UUIDS[5], checks=["memory_health"])


def rule(device: str = "gpu-5", effect: str = "NoSchedule", uuid: str = UUIDS[5]) -> FenceRuleView:
    return FenceRuleView(
        rule_name("gpu-1", uuid),
        "gpu-1",
        uuid,
        DRIVER,
        "gpu-1",
        device,
        FENCE_TAINT_KEY,
        "memory_health",
        effect,
    )


@dataclass(frozen=True)
class Case:
    name: str
    status: NodeAcceptanceStatus | None
    slices: tuple[ResourceSliceView, ...]
    existing: tuple[FenceRuleView, ...]
    writes: tuple[tuple[str, bool], ...]  # (device, exists)
    deletes: int


ACCEPTED = NodeAcceptanceStatus(phase=Phase.ACCEPTED, gpu_verdicts=[GPU5], fenced="1/8")
DRY = NodeAcceptanceStatus(phase=Phase.HELD, held_action=HELD_FENCE, gpu_verdicts=[GPU5_UNFENCED])
PASSED = NodeAcceptanceStatus(phase=Phase.ACCEPTED)
QUARANTINED = NodeAcceptanceStatus(phase=Phase.QUARANTINED, gpu_verdicts=[GPU5_UNFENCED])
PROBING = ACCEPTED.model_copy(update={"phase": Phase.PROBING})
GPU3_HELD = GpuVerdict(index=3, uuid=UUIDS[3], checks=["pcie_link"])
# dryRun turned on after GPU 5 was fenced, then a fence of GPU 3 held
DRY_AFTER_FENCE = DRY.model_copy(update={"gpu_verdicts": [GPU3_HELD, GPU5], "fenced": "1/8"})

CASES = [
    Case("a fenced GPU, no rule: created", ACCEPTED, pool(), (), (("gpu-5", False),), 0),
    Case("its rule as wanted: nothing", ACCEPTED, pool(), (rule(),), (), 0),
    Case("re-probed, still fenced: kept", PROBING, pool(), (rule(),), (), 0),
    Case(
        "the pool republished under other names: patched",
        ACCEPTED,
        pool("dev-{}", generation=2),
        (rule(),),
        (("dev-5", True),),
        0,
    ),
    Case("the pool incomplete: kept as it is", ACCEPTED, half_published(), (rule(),), (), 0),
    Case("no pool published now: kept as it is", ACCEPTED, (), (rule(),), (), 0),
    Case(
        "the pool complete without the GPU (gone; gpu-5 now another GPU): deleted",
        ACCEPTED,
        without_gpu_5(),
        (rule(),),
        (),
        1,
    ),
    Case(
        "the fenced GPU cut into MIG devices: a rule on each, the GPU's rule deleted",
        ACCEPTED,
        repartitioned(),
        (rule(),),
        (("gpu-5-mig-1g10gb-19-0", False), ("gpu-5-mig-1g10gb-19-1", False)),
        1,
    ),
    Case(
        "its MIG devices' rules as wanted: nothing",
        ACCEPTED,
        repartitioned(),
        (mig_rule(0), mig_rule(1)),
        (),
        0,
    ),
    Case(
        "whole again: the GPU's rule, the MIG devices' deleted",
        ACCEPTED,
        pool(generation=3),
        (mig_rule(0), mig_rule(1)),
        (("gpu-5", False),),
        2,
    ),
    Case(
        "another GPU cut into MIG devices, the fenced one gone: deleted",
        ACCEPTED,
        (
            dataclasses.replace(
                without_gpu_5()[0], devices=(*without_gpu_5()[0].devices, *migs(2, UUIDS[2]))
            ),
        ),
        (rule(),),
        (),
        1,
    ),
    Case(
        "MIG devices that name no parent: the GPU not found (deleted, as gone)",
        ACCEPTED,
        repartitioned(parent=None),
        (rule(),),
        (),
        1,
    ),
    Case("dryRun: effect None", DRY, pool(), (), (("gpu-5", False),), 0),
    Case(
        "dryRun after a fence: the fence keeps its effect, the held one None",
        DRY_AFTER_FENCE,
        pool(),
        (rule(),),
        (("gpu-3", False),),
        0,
    ),
    Case("a passing probe: deleted", PASSED, pool(), (rule(),), (), 1),
    Case("the node quarantined: deleted", QUARANTINED, pool(), (rule(),), (), 1),
    Case("no NodeAcceptance: deleted", None, pool(), (rule(),), (), 1),
    Case(
        "another key under the operator's labels: left alone",
        PASSED,
        pool(),
        (dataclasses.replace(rule(), key="example.com/other"),),
        (),
        0,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_fence_rule_plan(case: Case) -> None:
    pools = dra_pools(case.slices, (DRIVER,))
    wanted, unresolved = wanted_fence_rules("gpu-1", case.status, pools, "NoSchedule")
    writes, deletes = fence_rule_actions(wanted, unresolved, case.existing, lambda r: {"r": r})
    got = tuple((a.manifest["r"].device, a.exists) for a in writes if isinstance(a, WriteFenceRule))
    assert got == case.writes
    assert len(deletes) == case.deletes
    assert all(isinstance(a, DeleteFenceRule) for a in deletes)
    if case.status is DRY:
        assert [r.effect for r in wanted] == ["None"]
    if case.status is DRY_AFTER_FENCE:
        assert [(r.device, r.effect) for r in wanted] == [
            ("gpu-3", "None"),
            ("gpu-5", "NoSchedule"),
        ]


def test_a_gpu_cut_into_mig_devices_resolves_to_them_in_a_complete_pool() -> None:
    pools = dra_pools(repartitioned(), (DRIVER,))
    assert resolve_gpu(UUIDS[5], pools) is None  # no whole-GPU device
    assert fence_targets(UUIDS[5], pools) == (
        (DRIVER, "gpu-1", "gpu-5-mig-1g10gb-19-0", mig_uuid(5, 0)),
        (DRIVER, "gpu-1", "gpu-5-mig-1g10gb-19-1", mig_uuid(5, 1)),
    )
    assert fence_targets(UUIDS[4], pools) == ((DRIVER, "gpu-1", "gpu-4", UUIDS[4]),)
    assert not gone_from_pools(UUIDS[5], pools)
    half = (dataclasses.replace(repartitioned()[0], slice_count=2),)
    assert fence_targets(UUIDS[5], dra_pools(half, (DRIVER,))) == ()  # not complete


def test_a_gpu_is_resolved_only_in_a_complete_pool_and_only_once() -> None:
    assert resolve_gpu(UUIDS[5], dra_pools(pool(), (DRIVER,))) == (DRIVER, "gpu-1", "gpu-5")
    assert resolve_gpu(UUIDS[5], dra_pools(pool(count=4), (DRIVER,))) is None  # not in it
    twice = (*pool(), dataclasses.replace(pool()[0], name="t", pool="other"))
    assert resolve_gpu(UUIDS[5], dra_pools(twice, (DRIVER,))) is None  # ambiguous


# --------------------------------------------------------------------------- the core
def dra_world(**policy: object) -> World:
    world = World(
        resource_slices=pool(),
        policies=[PolicyView("default", 1, spec(**{"fencing": {"mode": "gpu"}, **policy}))],
        config=OperatorConfig(accept_simulated_reports=True, device_taint_rules=True),
    )
    assert world.node is not None
    world.node = dataclasses.replace(world.node, gpus=0, gpu_capacity=0)
    return world


def probe(world: World, profile: object = REMAP_PENDING) -> None:
    world.settle()
    report = probed(REMAP_PENDING) if profile is REMAP_PENDING else make_report()
    world.finish_with_report(report.model_copy(update=make_report().model_dump(include=IDENTITY)))
    world.settle()


def the_rule(world: World) -> dict[str, object]:
    (body,) = world.fence_rules.values()
    return body


def test_one_bad_gpu_of_eight_on_a_dra_node_is_fenced_and_the_node_accepted() -> None:
    world = dra_world()
    probe(world)
    st = world.status
    assert (st.phase, st.reason, st.fenced) == (Phase.ACCEPTED, None, "1/8")
    (gpu,) = st.gpu_verdicts
    assert (gpu.index, gpu.uuid, gpu.fenced) == (5, UUIDS[5], True)
    assert "fenced GPU 5" in (st.message or "")
    assert world.taint_keys() == []  # the node is in service, its bad GPU is not
    body = the_rule(world)
    assert body["spec"] == {
        "deviceSelector": {"driver": DRIVER, "pool": "gpu-1", "device": "gpu-5"},
        "taint": {"key": FENCE_TAINT_KEY, "value": "memory_health", "effect": "NoSchedule"},
    }
    assert not world.settle().actions  # a fixed point


def test_a_fence_is_planned_under_the_limit_s_lock() -> None:
    """Two workers must not both fence into the last share of the limit: the plan that
    fences is re-made under the policy's lock, as a quarantine's is."""
    world = dra_world()
    world.settle()
    report = probed(REMAP_PENDING)
    world.finish_with_report(report.model_copy(update=make_report().model_dump(include=IDENTITY)))
    for _ in range(10):
        plan = world.plan()
        if any(isinstance(a, WriteFenceRule) for a in plan.actions):
            assert plan.needs_limit_lock
            return
        world.apply(plan)
    raise AssertionError("no fence rule written")


def test_the_rule_is_written_before_the_node_s_pending_taint_comes_off() -> None:
    world = dra_world()
    world.settle()
    report = probed(REMAP_PENDING)
    world.finish_with_report(report.model_copy(update=make_report().model_dump(include=IDENTITY)))
    for _ in range(10):
        plan = world.plan()
        kinds = [type(a).__name__ for a in plan.actions]
        if "WriteFenceRule" in kinds:
            assert kinds[0] == "WriteFenceRule", kinds
            return
        world.apply(plan)
    raise AssertionError("no fence rule written")


def test_no_execute_when_the_policy_says_so() -> None:
    world = dra_world()
    world.policies = [
        PolicyView("default", 1, spec(fencing={"mode": "gpu", "effect": "NoExecute"}))
    ]
    probe(world)
    assert the_rule(world)["spec"]["taint"]["effect"] == "NoExecute"  # type: ignore[index]


def test_dry_run_makes_a_rule_of_effect_none_and_holds_the_fence() -> None:
    world = dra_world(dryRun=True)
    probe(world)
    st = world.status
    assert (st.phase, st.reason, st.held_action) == (Phase.HELD, "DryRun", HELD_FENCE)
    assert st.fenced is None  # nothing out of service
    assert "dry run: would fence GPU 5" in (st.message or "")
    assert the_rule(world)["spec"]["taint"]["effect"] == "None"  # type: ignore[index]


def test_an_api_server_without_device_taint_rules_quarantines_the_node() -> None:
    world = dra_world()
    world.config = OperatorConfig(accept_simulated_reports=True, device_taint_rules=False)
    probe(world)
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "FencingUnavailable")
    assert "does not serve resource.k8s.io/v1 devicetaintrules" in (st.message or "")
    assert world.fence_rules == {}
    assert [g.fenced for g in st.gpu_verdicts] == [False]


def test_a_gpu_the_pool_does_not_publish_quarantines_the_node() -> None:
    world = dra_world()
    world.resource_slices = (dataclasses.replace(pool()[0], devices=tuple(
        dataclasses.replace(d, uuid=f"GPU-other-{i}") for i, d in enumerate(pool()[0].devices)
    )),)  # fmt: skip
    probe(world)
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "FencingUnavailable")
    assert "is not one device of the node's ResourceSlices" in (st.message or "")


def test_the_limit_counts_the_fenced_gpus_and_holds_a_fence_over_it() -> None:
    world = dra_world(maxQuarantined=1)
    # 2 nodes of 8 GPUs: a limit of 1 node is 8 GPUs; 8 already out, 1 more asked
    world.limit_counts = QuarantineLimitCounts(
        quarantined=1, matched=2, matched_gpus=16, unavailable_gpus=8
    )
    probe(world)
    st = world.status
    assert (st.reason, st.held_action) == ("BreakerOpen", HELD_FENCE)
    assert "8 GPU(s) of limit 8 out of service, 1 more asked" in (st.message or "")
    assert st.phase == Phase.HELD
    assert the_rule(world)["spec"]["taint"]["effect"] == "None"  # type: ignore[index]
    world.settle()
    assert world.status.held_action == HELD_FENCE  # still no room: held, not re-judged
    world.limit_counts = QuarantineLimitCounts(
        quarantined=0, matched=2, matched_gpus=16, unavailable_gpus=7
    )  # room for one GPU: the held verdict now fences, without a new probe
    world.settle()
    assert (world.status.phase, world.status.fenced) == (Phase.ACCEPTED, "1/8")
    assert the_rule(world)["spec"]["taint"]["effect"] == "NoSchedule"  # type: ignore[index]


def test_a_republished_pool_moves_the_rule_to_the_device_the_gpu_is_now() -> None:
    world = dra_world()
    probe(world)
    world.resource_slices = pool("dev-{}", generation=2)
    world.settle()
    assert the_rule(world)["spec"]["deviceSelector"]["device"] == "dev-5"  # type: ignore[index]
    assert world.status.fenced == "1/8"


def test_a_passing_re_probe_deletes_the_rule_and_only_then() -> None:
    world = dra_world()
    probe(world)
    assert world.node is not None
    world.node = dataclasses.replace(world.node, annotations={REPROBE_ANNOTATION: "1"})
    world.settle()
    assert world.status.phase == Phase.PROBING
    assert len(world.fence_rules) == 1  # the fence stands while the GPU is re-tested
    (claim,) = world.claims.values()
    tolerations = claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"]
    assert tolerations == [{"key": FENCE_TAINT_KEY, "operator": "Exists"}]
    world.finish_with_report(make_report())
    world.settle()
    st = world.status
    assert (st.phase, st.fenced, st.gpu_verdicts) == (Phase.ACCEPTED, None, [])
    assert world.fence_rules == {}


def test_a_deleted_node_and_a_deleted_node_acceptance_take_their_rules() -> None:
    world = dra_world()
    probe(world)
    world.na = None  # its NodeAcceptance deleted
    plan = world.plan()
    assert [a for a in plan.actions if isinstance(a, DeleteFenceRule)]
    world = dra_world()
    probe(world)
    world.node = None
    world.settle()
    assert world.fence_rules == {}


PCIE_X8 = REPO / "profiles" / "faults" / "pcie-x8.yaml"  # GPU 3's link at x8: pcie_link


def targeted_round_fails_on_gpu_3(world: World) -> None:
    """A targeted re-verification of ``pcie_link`` alone (a suspect's round) whose
    report fails it on GPU 3."""
    assert world.na is not None
    round_ = ReverifyRound(cause="Suspect", started=world.now, checks=["pcie_link"])
    st = world.status.model_copy(
        update={
            "phase": Phase.PENDING,
            "was_in_service": True,
            "reverify": ReverifyStatus(round=round_),
        }
    )
    world.na = dataclasses.replace(world.na, status=st)
    world.settle()
    assert world.status.phase == Phase.PROBING
    report = probed(PCIE_X8)
    world.finish_with_report(report.model_copy(update=make_report().model_dump(include=IDENTITY)))
    world.settle()


def test_a_failing_targeted_round_keeps_the_fences_it_did_not_re_test() -> None:
    """GPU 5 fenced at acceptance (memory_health); a targeted round of pcie_link fails
    on GPU 3: GPU 5 was not re-tested, so its fence stands beside GPU 3's."""
    world = dra_world(fencing={"mode": "gpu", "maxFencedGpus": 2})
    probe(world)
    targeted_round_fails_on_gpu_3(world)
    st = world.status
    assert (st.phase, st.fenced) == (Phase.ACCEPTED, "2/8")
    assert [(g.index, g.checks, g.fenced) for g in st.gpu_verdicts] == [
        (3, ["pcie_link"], True),
        (5, ["memory_health"], True),
    ]
    devices = sorted(r["spec"]["deviceSelector"]["device"] for r in world.fence_rules.values())  # type: ignore[index]
    assert devices == ["gpu-3", "gpu-5"]


def test_a_failing_targeted_round_counts_the_standing_fences_in_the_bound() -> None:
    """maxFencedGpus 1, GPU 5 fenced: a second bad GPU is over the bound, the node is
    quarantined (its taint takes over from the fences)."""
    world = dra_world()
    probe(world)
    targeted_round_fails_on_gpu_3(world)
    st = world.status
    assert (st.phase, st.fenced) == (Phase.QUARANTINED, None)
    assert "2 GPUs failed, over fencing.maxFencedGpus=1" in (st.message or "")
    assert [(g.index, g.fenced) for g in st.gpu_verdicts] == [(3, False), (5, False)]
    assert world.fence_rules == {}


def test_a_held_quarantine_on_a_re_judge_keeps_the_acceptance_fence() -> None:
    """GPU 5 fenced; the policy turned to ``mode: node`` while the limit is full: the
    node's quarantine is held in service, and a held verdict changes no fence."""
    world = dra_world(maxQuarantined=1)
    probe(world)
    world.limit_counts = QuarantineLimitCounts(quarantined=1, matched=2)
    world.policies = [PolicyView("default", 2, spec(fencing={"mode": "node"}, maxQuarantined=1))]
    world.settle()
    st = world.status
    assert (st.phase, st.reason, st.held_action) == (Phase.ACCEPTED, "BreakerOpen", "Quarantine")
    assert st.fenced == "1/8"
    assert [(g.index, g.fenced) for g in st.gpu_verdicts] == [(5, True)]
    assert the_rule(world)["spec"]["taint"]["effect"] == "NoSchedule"  # type: ignore[index]
    assert world.taint_keys() == []


def test_a_held_probe_error_keeps_the_fence() -> None:
    """Under dryRun a re-probe of the fenced node that errors (its retries spent) is a
    quarantine held: the fence stands, as the node would keep a taint it has."""
    world = dra_world()
    probe(world)
    world.policies = [PolicyView("default", 2, spec(fencing={"mode": "gpu"}, dryRun=True))]
    world.settle()
    assert world.node is not None
    world.node = dataclasses.replace(world.node, annotations={REPROBE_ANNOTATION: "1"})
    world.settle()
    while world.pods:
        world.finish_pod(None, exit_code=2, phase="Failed")
        world.settle()
        world.advance(600)
        world.settle()
    st = world.status
    assert (st.phase, st.reason, st.held_action) == (Phase.HELD, "DryRun", "Quarantine")
    assert [(g.index, g.fenced) for g in st.gpu_verdicts] == [(5, True)]
    assert (st.fenced, len(world.fence_rules)) == ("1/8", 1)


def test_dry_run_turned_on_after_a_fence_leaves_the_fence_as_it_is() -> None:
    """dryRun changes nothing it already did (a quarantined node keeps its taint): the
    re-judge under dryRun holds the fence it would make, and the rule already made
    keeps its effect, the bad GPU out of service."""
    world = dra_world()
    probe(world)
    world.policies = [PolicyView("default", 2, spec(fencing={"mode": "gpu"}, dryRun=True))]
    world.settle()
    st = world.status
    assert (st.phase, st.reason, st.held_action) == (Phase.HELD, "DryRun", HELD_FENCE)
    assert st.fenced == "1/8"
    assert the_rule(world)["spec"]["taint"]["effect"] == "NoSchedule"  # type: ignore[index]
