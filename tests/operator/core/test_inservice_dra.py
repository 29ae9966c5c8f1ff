"""Health in service on DRA nodes (core/inservice/dra.py), one row per branch: a GPU
gone from the node's pool past the grace (a republish that keeps the uuids, one in
progress, a pool withdrawn whole or repartitioned are no loss), and the taints
NVIDIA's DRA driver puts on its devices (a fatal Xid quarantines, an application
one never, a lost GPU always, an unmonitored one is evidence not read), each
recorded once however often it is seen."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from gpuaccept.contracts.inservice import InService, InServiceStatus
from gpuaccept.contracts.nodeacceptance import GpuPublishing
from gpuaccept.operator.core.gpupublishing import node_gpus
from gpuaccept.operator.core.inservice.dra import dra_seen, new_driver_taints, unmonitored
from gpuaccept.operator.core.inservice.evidence import DeviceSeen, DraSeen, NodeSignals
from gpuaccept.operator.core.inservice.rules import Observed, evaluate
from gpuaccept.operator.core.model import (
    DeviceTaintView,
    DraDevice,
    NodeView,
    ResourceSliceView,
)
from gpuaccept.operator.core.watchreservation import ledger_for

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BOOT = "boot-1"
DRIVER = "gpu.nvidia.com"
GPUS = ("GPU-0", "GPU-1", "GPU-2", "GPU-3")
POLICY = InService(enabled=True, allocatable_grace_seconds=300, watch_pods=False)


def s(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def taint(key: str, value: str = "", effect: str = "NoSchedule", at: float = 0) -> DeviceTaintView:
    return DeviceTaintView(f"{DRIVER}/{key}", value, effect, s(at))


def pool(
    gpus: tuple[str, ...] = GPUS,
    *,
    complete: bool = True,
    taints: dict[str, tuple[DeviceTaintView, ...]] | None = None,
    repartitioned: bool = False,
    accepted_gpus: int = 0,
) -> NodeSignals:
    marks = taints or {}
    devices = tuple(DeviceSeen(g, DRIVER, marks.get(g, ())) for g in gpus)
    seen = DraSeen(
        complete=complete,
        gpus=gpus if complete else (),
        devices=devices,
        repartitioned=repartitioned,
        describe="pool n1 of driver gpu.nvidia.com",
    )
    return NodeSignals(
        boot_id=BOOT, gpu_capacity=0, gpu_allocatable=0, dra=seen, accepted_gpus=accepted_gpus
    )


NO_POOL = NodeSignals(boot_id=BOOT, gpu_capacity=0, gpu_allocatable=0)


def accepted() -> InServiceStatus:
    """The ledger after the first pass at acceptance: the pool's four GPUs recorded."""
    return evaluate(POLICY, ledger_for(None, BOOT, T0), Observed(pool(), s(0), node="n1")).ledger


@dataclass(frozen=True)
class Case:
    name: str
    signals: NodeSignals
    at: float
    reason: str | None = None
    before: InServiceStatus = field(default_factory=accepted)
    since: float | None = None  # the ledger's unallocatableSince afterwards (seconds)


LOST = {"unallocatable_since": s(10)}
CASES = [
    Case("the whole pool: no verdict", pool(), 10_000),
    Case("a GPU gone, within the grace", pool(GPUS[:3]), 10, since=10),
    Case(
        "a GPU gone past the grace",
        pool(GPUS[:3]),
        400,
        "GPUsUnallocatable",
        accepted().model_copy(update=LOST),
        since=10,
    ),
    Case(
        "back within the grace: the timer stops",
        pool(),
        200,
        None,
        accepted().model_copy(update=LOST),
    ),
    Case("a republish in progress, within the grace", pool(complete=False), 10, since=10),
    Case(
        "a pool left incomplete past the grace",
        pool(complete=False),
        400,
        "GPUsUnallocatable",
        accepted().model_copy(update=LOST),
        since=10,
    ),
    Case(
        "the pool withdrawn whole (the driver stopped): not judged",
        NO_POOL,
        10_000,
        None,
        accepted().model_copy(update=LOST),
    ),
    Case(
        "a GPU repartitioned into MIG devices: not a loss",
        pool(GPUS[:3], repartitioned=True),
        10_000,
        None,
        accepted().model_copy(update=LOST),
    ),
    Case("another GPU added: no loss", pool((*GPUS, "GPU-4")), 10_000),
    Case(
        "fewer GPUs than the acceptance saw from the start (the pool began short)",
        pool(accepted_gpus=5),
        400,
        "GPUsUnallocatable",
        accepted().model_copy(update=LOST),
        since=10,
    ),
    Case("as many GPUs as the acceptance saw", pool(accepted_gpus=4), 10_000),
    Case(
        "a fatal Xid taint (79, NoSchedule): quarantined",
        pool(taints={"GPU-2": (taint("xid", "79", at=5),)}),
        100,
        "XidFatal",
    ),
    Case(
        "an application Xid taint (13, None): never",
        pool(taints={"GPU-2": (taint("xid", "13", "None", at=5),)}),
        100,
    ),
    Case(
        "a fatal Xid taint the driver was told to skip (None): the class decides",
        pool(taints={"GPU-2": (taint("xid", "48", "None", at=5),)}),
        100,
        "XidFatal",
    ),
    Case(
        "a repeated-hardware Xid taint (74): one occurrence, recorded",
        pool(taints={"GPU-2": (taint("xid", "74", at=5),)}),
        100,
    ),
    Case(
        "an unclassified Xid taint (8): recorded, never judged",
        pool(taints={"GPU-2": (taint("xid", "8", at=5),)}),
        100,
    ),
    Case(
        "an Xid taint whose value is no Xid code: recorded, never judged",
        pool(taints={"GPU-2": (taint("xid", "x79", at=5),)}),
        100,
    ),
    Case(
        "gpu-lost on every device: quarantined",
        pool(taints={g: (taint("gpu-lost", at=5),) for g in GPUS}),
        100,
        "GPULost",
    ),
    Case(
        "unmonitored (None): evidence not read, never a verdict",
        pool(taints={"GPU-1": (taint("unmonitored", effect="None", at=5),)}),
        100,
    ),
    Case(
        "another driver's key of the same name: not this driver's taint",
        pool(taints={"GPU-2": (DeviceTaintView("example.com/xid", "79", "NoSchedule", s(5)),)}),
        100,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_dra_rules(case: Case) -> None:
    result = evaluate(POLICY, case.before, Observed(case.signals, s(case.at), node="n1"))
    assert (result.verdict.reason if result.verdict else None) == case.reason
    assert result.ledger.dra_devices == list(GPUS)
    expected = s(case.since) if case.since is not None else None
    assert result.ledger.unallocatable_since == expected
    if result.verdict is not None:
        assert not result.verdict.pending


def test_the_pool_the_ledger_begins_with_is_recorded_once_complete() -> None:
    """A ledger that begins while a republish is under way waits for a complete pool
    to record its GPUs (nothing to compare with until then: no timer runs)."""
    start = evaluate(POLICY, ledger_for(None, BOOT, T0), Observed(pool(complete=False), s(0)))
    assert start.ledger.dra_devices == []
    assert start.ledger.unallocatable_since is None
    then = evaluate(POLICY, start.ledger, Observed(pool(), s(5)))
    assert then.ledger.dra_devices == list(GPUS)
    later = evaluate(POLICY, then.ledger, Observed(pool(GPUS[1:]), s(10)))
    assert later.ledger.dra_devices == list(GPUS)  # kept: the loss is judged against it
    assert later.ledger.unallocatable_since == s(10)
    assert later.wake_in == 300


def test_a_republish_with_the_same_uuids_is_no_loss() -> None:
    """Generation 1, then 2 in progress (incomplete) for 20 s, then 2 complete with the
    same uuids: the timer runs and stops, no verdict, ever."""
    state = accepted()
    for at, signals in [(10, pool(complete=False)), (30, pool()), (10_000, pool())]:
        result = evaluate(POLICY, state, Observed(signals, s(at)))
        assert result.verdict is None
        state = result.ledger
    assert state.unallocatable_since is None
    assert [e.what for e in state.events] == ["GPUsUnallocatable"]


def test_the_message_names_the_gpu_gone() -> None:
    result = evaluate(POLICY, accepted().model_copy(update=LOST), Observed(pool(GPUS[:3]), s(400)))
    assert result.verdict is not None
    assert "3 of the 4 GPUs it published through DRA when accepted" in result.verdict.message
    assert "GPU-3 gone" in result.verdict.message


def test_a_taint_seen_at_every_pass_is_recorded_once() -> None:
    tainted = pool(taints={"GPU-2": (taint("xid", "13", "None", at=5),)})
    state = accepted()
    for at in (10, 20, 30):
        state = evaluate(POLICY, state, Observed(tainted, s(at))).ledger
    assert [(r.gpu, r.key, r.value, r.since) for r in state.driver_taints] == [
        ("GPU-2", f"{DRIVER}/xid", "13", s(5))
    ]
    assert [(e.what, e.kind, e.xid) for e in state.events] == [("Xid 13", "application", 13)]
    assert state.suspects == []  # one occurrence is no suspect


def test_a_fatal_xid_taint_replaced_by_the_next_xid_stays_judged() -> None:
    """NVIDIA's driver keeps one taint per key on a device: an application Xid after
    Xid 79 replaces the taint. The ledger keeps what it saw: still XidFatal."""
    first = evaluate(
        POLICY, accepted(), Observed(pool(taints={"GPU-2": (taint("xid", "79", at=5),)}), s(10))
    )
    assert first.verdict is not None
    assert first.verdict.reason == "XidFatal"
    replaced = pool(taints={"GPU-2": (taint("xid", "13", "None", at=50),)})
    later = evaluate(POLICY, first.ledger, Observed(replaced, s(60)))
    assert later.verdict is not None
    assert (later.verdict.reason, later.verdict.gpu) == ("XidFatal", "GPU-2")
    assert later.verdict.window_start == s(5)
    assert len(later.ledger.driver_taints) == 2
    gone = evaluate(POLICY, later.ledger, Observed(pool(), s(90)))  # the driver restarted
    assert gone.verdict is not None
    assert gone.verdict.reason == "XidFatal"


def test_a_fatal_xid_taint_on_many_nodes_is_a_common_cause_as_the_watch_s() -> None:
    """The taint's signature is the watch's (XidFatal:79): correlation compares them."""
    from_taint = evaluate(
        POLICY, accepted(), Observed(pool(taints={"GPU-0": (taint("xid", "79", at=5),)}), s(30))
    )
    assert from_taint.verdict is not None
    assert from_taint.verdict.signature == "XidFatal:79"


def test_a_new_boot_forgets_the_driver_s_taints() -> None:
    first = evaluate(
        POLICY, accepted(), Observed(pool(taints={"GPU-0": (taint("gpu-lost", at=5),)}), s(30))
    )
    assert first.verdict is not None
    fresh = ledger_for(first.ledger, "boot-2", T0)
    assert fresh.driver_taints == []
    assert fresh.dra_devices == []


def test_unmonitored_names_the_gpus_not_read() -> None:
    tainted = pool(taints={"GPU-1": (taint("unmonitored", effect="None", at=5),)})
    result = evaluate(POLICY, accepted(), Observed(tainted, s(10)))
    assert unmonitored(result.ledger.driver_taints) == ["GPU-1"]
    assert result.verdict is None


def test_a_taint_without_time_added_is_dated_at_its_first_sighting() -> None:
    untimed = DeviceTaintView(f"{DRIVER}/gpu-lost", "", "NoSchedule", None)
    state = accepted()
    for at in (10, 20):
        state = evaluate(POLICY, state, Observed(pool(taints={"GPU-0": (untimed,)}), s(at))).ledger
    assert [r.since for r in state.driver_taints] == [s(10)]


def test_dra_seen_from_the_node_s_slices() -> None:
    """The runtime's view: the pool's GPUs by uuid, every device with its taints, MIG
    devices marking a repartition; a device-plugin node has no DRA view."""
    lost = DeviceTaintView(f"{DRIVER}/gpu-lost", "", "NoSchedule", s(1))
    devices = (
        DraDevice("gpu-0", uuid="GPU-0", kind="gpu", taints=(lost,)),
        DraDevice("gpu-1", uuid="GPU-1", kind="gpu"),
        DraDevice("gpu-2-mig-1g", uuid="MIG-2", kind="mig"),
        DraDevice("gpu-3-mig-1g", uuid="MIG-3", kind="mig", parent_uuid="GPU-3"),
    )
    slices = [ResourceSliceView("s", DRIVER, "n1", 1, 1, "n1", devices)]
    gpus = node_gpus(NodeView(name="n1"), slices, [DRIVER])
    assert gpus.mode == GpuPublishing.DRA
    seen = dra_seen(gpus)
    assert seen is not None
    assert (seen.complete, seen.gpus, seen.repartitioned) == (True, ("GPU-0", "GPU-1"), True)
    assert seen.devices[0] == DeviceSeen("GPU-0", DRIVER, (lost,))
    # a MIG device's taints are its GPU's (parentUUID), where the driver names it
    assert [d.gpu for d in seen.devices] == ["GPU-0", "GPU-1", "MIG-2", "GPU-3"]
    plugin = node_gpus(NodeView(name="n1", gpu_capacity=8, gpus=8), [], [DRIVER])
    assert dra_seen(plugin) is None


def test_the_same_taint_added_again_later_is_a_new_occurrence() -> None:
    """The driver restarted (its taints gone) and the same Xid tainted the GPU again:
    a new timeAdded, a second record."""
    state = accepted()
    for at, added in [(10, 5), (20, None), (300, 250)]:
        marks = {"GPU-2": (taint("xid", "13", "None", at=added),)} if added is not None else {}
        state = evaluate(POLICY, state, Observed(pool(taints=marks), s(at))).ledger
    assert [r.since for r in state.driver_taints] == [s(5), s(250)]


def test_a_taint_from_before_the_acceptance_is_not_new_evidence() -> None:
    """The driver keeps its taints until it restarts: a node accepted again (a re-probe
    without a reboot) after an Xid 79 taint is not convicted by it again; an unmonitored
    GPU is a standing state, said whenever it was tainted."""
    marks = {
        "GPU-2": (taint("xid", "79", at=-60),),
        "GPU-0": (taint("gpu-lost", at=-60),),
        "GPU-1": (taint("unmonitored", effect="None", at=-3600),),
    }
    result = evaluate(POLICY, accepted(), Observed(pool(taints=marks), s(30)))
    assert result.verdict is None
    assert [(r.gpu, r.key) for r in result.ledger.driver_taints] == [
        ("GPU-1", f"{DRIVER}/unmonitored")
    ]


@pytest.mark.parametrize(
    ("added", "judged"),
    [
        (-0.4, True),  # the API server's whole second, truncated: the acceptance's second
        (-1.9, True),  # within the slack: a second of clock skew on top
        (-2.5, False),  # older than the slack: from before the acceptance
        (0, True),
    ],
)
def test_a_taint_dated_in_the_acceptance_s_second_is_judged(added: float, judged: bool) -> None:
    """timeAdded is whole seconds by the API server's clock, the acceptance microseconds
    by the operator's: a fatal Xid tainted right after the acceptance may read as a
    fraction of a second older. It is judged, not dropped as old."""
    ledger = accepted()
    result = evaluate(
        POLICY, ledger, Observed(pool(taints={"GPU-2": (taint("xid", "79", at=added),)}), s(1))
    )
    assert bool(result.ledger.driver_taints) is judged


def test_a_fatal_xid_on_a_mig_device_is_recorded_against_its_gpu() -> None:
    """NVIDIA's DRA driver publishes a MIG device with attribute parentUUID: an Xid 79
    tainted on it is evidence about that GPU, and is recorded and judged as the GPU's
    (so that under ``fencing: gpu`` the GPU, not the node, is fenced)."""
    xid = DeviceTaintView(f"{DRIVER}/xid", "79", "NoSchedule", s(5))
    devices = (
        DraDevice("gpu-0", uuid="GPU-0", kind="gpu"),
        DraDevice("gpu-1-mig-3g-1-0", uuid="MIG-1a", kind="mig", parent_uuid="GPU-1"),
        DraDevice(
            "gpu-1-mig-3g-2-4", uuid="MIG-1b", kind="mig", parent_uuid="GPU-1", taints=(xid,)
        ),
    )
    slices = [ResourceSliceView("s", DRIVER, "n1", 1, 1, "n1", devices)]
    seen = dra_seen(node_gpus(NodeView(name="n1"), slices, [DRIVER]))
    assert seen is not None
    found = new_driver_taints(accepted(), seen, s(10))
    assert [(r.gpu, r.value) for r in found] == [("GPU-1", "79")]
