"""Fence the GPU or quarantine the node (issue 40): the pure decision, as a table, and
what a verdict records through the core on a device-plugin node."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from world import REPO, World, make_report, probed, spec

from gpuaccept.checks.attribution import Attribution
from gpuaccept.checks.fencing_policy import FencingMode, FencingPolicy
from gpuaccept.checks.verdict import Verdict
from gpuaccept.contracts.nodeacceptance import (
    GpuPublishing,
    GpuVerdict,
    KeyFigures,
    Phase,
    Reason,
)
from gpuaccept.operator.core import PolicyView
from gpuaccept.operator.core.fencing import fencing_decision, with_standing_fences

IDENTITY = {"node_name", "boot_id", "started_at", "finished_at"}

PCIE = Reason(check="pcie_link", reason="PcieLinkFailed", message="GPU 3 below max width")
MEMORY = Reason(check="memory_health", reason="MemoryHealthFailed", message="GPU 5: remap")
GOVERNOR = Reason(check="cpu_governor", reason="CpuGovernorFailed", message="powersave")
GPU3 = GpuVerdict(index=3, uuid="GPU-3", checks=["pcie_link"])
GPU5 = GpuVerdict(index=5, uuid="GPU-5", checks=["memory_health"])


def verdict(reasons: tuple[Reason, ...], gpus: tuple[GpuVerdict, ...]) -> Verdict:
    per_gpu = frozenset(c for g in gpus for c in g.checks)
    return Verdict(
        accepted=not reasons,
        reasons=reasons,
        warnings=(),
        checks=(),
        figures=KeyFigures(),
        results=(),
        attribution=Attribution(gpus=gpus, per_gpu_checks=per_gpu),
    )


GPU_MODE = FencingPolicy(mode=FencingMode.GPU)
DRA = GpuPublishing.DRA
DP = GpuPublishing.DEVICE_PLUGIN


@dataclass(frozen=True)
class Case:
    name: str
    verdict: Verdict
    fencing: FencingPolicy
    publishing: GpuPublishing | None
    fence: tuple[int, ...]
    why: str  # a part of why the node's verdict stands ("" when it is not said)


CASES = [
    Case("accepted: nothing", verdict((), ()), GPU_MODE, DRA, (), ""),
    Case("mode node: the node, unsaid", verdict((PCIE,), (GPU3,)), FencingPolicy(), DRA, (), ""),
    Case("gpu, DRA, one GPU: fenced", verdict((PCIE,), (GPU3,)), GPU_MODE, DRA, (3,), ""),
    Case(
        "a node-level reason beside it",
        verdict((PCIE, GOVERNOR), (GPU3,)),
        GPU_MODE,
        DRA,
        (),
        "cpu_governor (CpuGovernorFailed) is the node's",
    ),
    Case(
        "a failing check that named no GPU",
        verdict((PCIE,), ()),
        GPU_MODE,
        DRA,
        (),
        "pcie_link (PcieLinkFailed) is the node's",
    ),
    Case(
        "over maxFencedGpus",
        verdict((PCIE, MEMORY), (GPU3, GPU5)),
        GPU_MODE,
        DRA,
        (),
        "2 GPUs failed, over fencing.maxFencedGpus=1",
    ),
    Case(
        "within a larger bound",
        verdict((PCIE, MEMORY), (GPU3, GPU5)),
        FencingPolicy(mode=FencingMode.GPU, max_fenced_gpus=2),
        DRA,
        (3, 5),
        "",
    ),
    Case(
        "a check not in fencing.checks",
        verdict((MEMORY,), (GPU5,)),
        FencingPolicy(mode=FencingMode.GPU, checks=["pcie_link"]),
        DRA,
        (),
        "checks not in fencing.checks: memory_health",
    ),
    Case(
        "a device-plugin node: the node, the GPU named",
        verdict((PCIE,), (GPU3,)),
        GPU_MODE,
        DP,
        (),
        "DevicePlugin node: a GPU is fenced only through DRA (GPU 3 (GPU-3))",
    ),
    Case(
        "both ways of publishing",
        verdict((PCIE,), (GPU3,)),
        GPU_MODE,
        GpuPublishing.BOTH,
        (),
        "Both node",
    ),
    Case(
        "no publishing seen",
        verdict((PCIE,), (GPU3,)),
        GPU_MODE,
        None,
        (),
        "no GPU publishing seen",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_fencing_decision(case: Case) -> None:
    decision = fencing_decision(case.verdict, case.fencing, case.publishing)
    assert tuple(g.index for g in decision.fence) == case.fence
    if case.why:
        assert case.why in decision.why_node
    else:  # accepted, mode node (today's message), or fenced: nothing to say
        assert decision.why_node == ""
    if not case.verdict.accepted and case.fencing.mode is FencingMode.GPU:
        assert bool(decision.fence) != bool(decision.why_node)  # one or the other, said


FENCED_5 = GPU5.model_copy(update={"fenced": True})
XID_5 = GpuVerdict(index=5, uuid="GPU-5", checks=["xid_errors"])
JOIN_CASES = [
    # (name, the new verdict's GPUs, the status's gpuVerdicts, the joined (index, checks, fenced))
    ("no fence stands: the verdict's own", (GPU3,), (GPU5,), ((3, ["pcie_link"], False),)),
    (
        "a standing fence joins the new GPU",
        (GPU3,),
        (FENCED_5,),
        ((3, ["pcie_link"], False), (5, ["memory_health"], True)),
    ),
    (
        "a fenced GPU failing again keeps its fence, checks added",
        (XID_5,),
        (FENCED_5,),
        ((5, ["memory_health", "xid_errors"], True),),
    ),
    ("a node verdict: the fences alone", (), (FENCED_5,), ((5, ["memory_health"], True),)),
]


@pytest.mark.parametrize(
    ("name", "new", "status", "want"), JOIN_CASES, ids=[c[0] for c in JOIN_CASES]
)
def test_with_standing_fences(
    name: str,
    new: tuple[GpuVerdict, ...],
    status: tuple[GpuVerdict, ...],
    want: tuple[tuple[int, list[str], bool], ...],
) -> None:
    own = verdict((PCIE,), new).attribution
    joined = with_standing_fences(own, status)
    assert tuple((g.index, g.checks, g.fenced) for g in joined.gpus) == want, name
    assert joined.per_gpu_checks == own.per_gpu_checks  # whose a failure is: the new report's


def quarantined(**policy: object) -> dict[str, object]:
    """A device-plugin node probed on row-remap-pending (GPU 5) under ``policy``."""
    world = World(policies=[PolicyView("default", 1, spec(**policy))])
    world.settle()
    report = probed(REPO / "profiles" / "faults" / "row-remap-pending.yaml")
    world.finish_with_report(report.model_copy(update=make_report().model_dump(include=IDENTITY)))
    world.settle()
    status = world.status
    assert status.phase == Phase.QUARANTINED
    assert status.reason == "MemoryHealthFailed"
    (bad,) = status.gpu_verdicts
    assert (bad.index, bad.checks, bad.fenced) == (5, ["memory_health"], False)
    assert bad.uuid is not None
    assert bad.uuid.startswith("GPU-")
    assert status.fenced is None
    return {"message": status.message}


def test_a_device_plugin_node_under_gpu_fencing_is_quarantined_naming_the_gpu() -> None:
    out = quarantined(fencing={"mode": "gpu"})
    assert "not fenced: DevicePlugin node: a GPU is fenced only through DRA (GPU 5 (GPU-" in str(
        out["message"]
    )


def test_node_fencing_records_the_gpu_and_says_nothing_more() -> None:
    out = quarantined()
    assert "not fenced" not in str(out["message"])
