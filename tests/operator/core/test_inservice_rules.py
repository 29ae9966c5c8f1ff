"""The in-service rules (core/inservice), one row per branch: the Node's signals
(allocatable past its grace, other tools' conditions held or flapping), the Xid
rules (fatal, repeated bursts, memory state, application suspects), correlation,
and the ledger's resets (a new boot, a new acceptance)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from gpuaccept.contracts.inservice import InService, InServiceStatus, UnhealthyCondition
from gpuaccept.operator.core.inservice.correlation import Fleet, bar, signatures
from gpuaccept.operator.core.inservice.evidence import NodeSignals
from gpuaccept.operator.core.inservice.rules import Observed, evaluate
from gpuaccept.operator.core.inservice.xids import with_xid
from gpuaccept.operator.core.model import (
    ConditionSeen,
    GpuStateSeen,
    SignatureSeen,
    WatchEvidence,
    XidSeen,
)
from gpuaccept.operator.core.watchreservation import ledger_for

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BOOT = "boot-1"
GPU = "GPU-0a1b"
OTHER_GPU = "GPU-9f8e"
NPD = UnhealthyCondition(type="KernelDeadlock", status="True", duration_seconds=60)
POLICY = InService(enabled=True, allocatable_grace_seconds=300, unhealthy_conditions=[NPD])


def s(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def healthy(**change: object) -> NodeSignals:
    base: dict[str, object] = {"boot_id": BOOT, "gpu_capacity": 8, "gpu_allocatable": 8}
    return NodeSignals(**{**base, **change})  # type: ignore[arg-type]


def report(
    key: str, *xids: tuple[float, int, str], state: tuple[GpuStateSeen, ...] = ()
) -> WatchEvidence:
    seen = tuple(
        XidSeen(gpu=GPU, xid=xid, kind=kind, at=s(at))  # type: ignore[arg-type]
        for at, xid, kind in xids
    )
    return WatchEvidence(key, BOOT, s(0), s(1800), seen, state)


def ledger() -> InServiceStatus:
    return ledger_for(None, BOOT, T0)


@dataclass(frozen=True)
class Case:
    name: str
    signals: NodeSignals
    reports: tuple[WatchEvidence, ...] = ()
    at: float = 0
    before: InServiceStatus = field(default_factory=ledger)
    reason: str | None = None
    suspects: int = 0
    pending: bool = False


SHORT = healthy(gpu_allocatable=7)
# the watch has read up to 400 s: a report covers a drop that began at 0
READ = {"unallocatable_since": s(0), "reported_until": s(400)}
CASES = [
    Case("healthy node: no verdict", healthy(), at=10_000),
    Case("allocatable short, within its grace", SHORT, at=0, reason=None),
    Case(
        "allocatable short past its grace, a report covers it, nothing explains it",
        SHORT,
        at=401,
        before=ledger().model_copy(update=READ),
        reason="GPUsUnallocatable",
    ),
    Case(
        "allocatable short past its grace: waits for a watch report that covers the drop",
        SHORT,
        at=301,
        before=ledger().model_copy(update={"unallocatable_since": s(0)}),
    ),
    Case(
        "allocatable short, no report covered it within a window past the grace",
        SHORT,
        at=300 + 1800,
        before=ledger().model_copy(update={"unallocatable_since": s(0)}),
        reason="GPUsUnallocatable",
    ),
    Case(
        "allocatable short, explained by an Xid 92 the watch saw (the device plugin's)",
        SHORT,
        (report("a", (-20, 92, "memory")),),
        at=1801,
        before=ledger().model_copy(update={"unallocatable_since": s(0)}),
    ),
    Case(
        "allocatable short, explained by a single Xid 74 (not yet repeated)",
        SHORT,
        (report("a", (-5, 74, "repeated")),),
        at=1801,
        before=ledger().model_copy(update={"unallocatable_since": s(0)}),
    ),
    Case(
        "allocatable short, an Xid long before it explains nothing",
        SHORT,
        (report("a", (-900, 92, "memory")),),
        at=1801,
        before=ledger().model_copy(update={"unallocatable_since": s(0)}),
        reason="GPUsUnallocatable",
    ),
    Case(
        "MIG mixed or renamed sharing after acceptance: capacity 0 is a repartition",
        healthy(gpu_capacity=0, gpu_allocatable=0, accepted_gpus=8),
        at=10_000,
        before=ledger().model_copy(update={"unallocatable_since": s(0)}),
    ),
    Case(
        "MIG mixed: nvidia.com/gpu counts only the whole GPUs left",
        healthy(gpu_capacity=4, gpu_allocatable=4, accepted_gpus=8, partitioned=True),
        at=10_000,
        before=ledger().model_copy(update=READ),
    ),
    Case(
        "time-sliced after acceptance: 32 replicas of 8 GPUs, all allocatable",
        healthy(gpu_capacity=32, gpu_allocatable=32, accepted_gpus=8),
        at=10_000,
    ),
    Case(
        "time-sliced: one GPU's 4 replicas unhealthy, past the grace, unexplained",
        healthy(gpu_capacity=32, gpu_allocatable=28, accepted_gpus=8),
        at=401,
        before=ledger().model_copy(update=READ),
        reason="GPUsUnallocatable",
    ),
    Case(
        "allocatable back: the timer stops, no verdict",
        healthy(),
        at=1000,
        before=ledger().model_copy(update={"unallocatable_since": s(0)}),
    ),
    Case(
        "capacity dropped below the accepted GPUs counts as short",
        healthy(gpu_capacity=7, gpu_allocatable=7, accepted_gpus=8),
        at=401,
        before=ledger().model_copy(update=READ),
        reason="GPUsUnallocatable",
    ),
    Case(
        "condition held past its duration",
        healthy(conditions=(ConditionSeen("KernelDeadlock", "True", s(0)),)),
        at=61,
        reason="UnhealthyCondition",
    ),
    Case(
        "condition flapped: its last transition restarts the timer",
        healthy(conditions=(ConditionSeen("KernelDeadlock", "True", s(50)),)),
        at=61,
    ),
    Case(
        "condition in another status",
        healthy(conditions=(ConditionSeen("KernelDeadlock", "False", s(0)),)),
        at=1000,
    ),
    Case(
        "a condition the policy does not list",
        healthy(conditions=(ConditionSeen("ReadonlyFilesystem", "True", s(0)),)),
        at=1000,
    ),
    Case(
        "fatal Xid on first occurrence, settled",
        healthy(),
        (report("a", (40, 79, "fatal")),),
        55,
        reason="XidFatal",
    ),
    Case(
        "repeated hardware Xid: 4 bursts are not enough",
        healthy(),
        (report("a", *((i * 200.0, 74, "repeated") for i in range(4))),),
        1000,
    ),
    Case(
        "repeated hardware Xid: 5 bursts",
        healthy(),
        (report("a", *((i * 200.0, 74, "repeated") for i in range(5))),),
        1000,
        reason="XidRepeated",
    ),
    Case(
        "repeated hardware Xid: 10 events under 180 s apart are one burst",
        healthy(),
        (report("a", *((i * 100.0, 74, "repeated") for i in range(10))),),
        1000,
    ),
    Case(
        "memory-state Xid never convicts on the event",
        healthy(),
        (report("a", (1, 63, "memory")),),
        10,
    ),
    Case(
        "remap failure in the report's state",
        healthy(),
        (report("a", state=(GpuStateSeen(GPU, "RowRemapFailure"),)),),
        1815,  # the state at the window's end, settled
        reason="RowRemapFailure",
    ),
    Case(
        "remap pending in the report's state: recorded (DCGM judges a failed remap)",
        healthy(),
        (report("a", (15, 63, "memory"), state=(GpuStateSeen(GPU, "RowRemapPending"),)),),
        1815,
    ),
    Case(
        "a recovery action DCGM fails on",
        healthy(),
        (report("a", state=(GpuStateSeen(GPU, "RecoveryAction", "node_reboot"),)),),
        1815,  # the state at the window's end, settled
        reason="GPURecoveryAction",
    ),
    Case(
        "drain_p2p: DCGM only warns, recorded",
        healthy(),
        (report("a", state=(GpuStateSeen(GPU, "RecoveryAction", "drain_p2p"),)),),
        1815,
    ),
    Case(
        "uncorrected ECC errors with no Xid",
        healthy(),
        (report("a", state=(GpuStateSeen(GPU, "EccUncorrected", "2"),)),),
        1815,
        reason="EccUncorrected",
    ),
    Case(
        "uncorrected ECC errors the report explains by a contained Xid 94: recorded",
        healthy(),
        (report("a", (15, 94, "memory"), state=(GpuStateSeen(GPU, "EccContained", "1"),)),),
        1815,
    ),
    Case(
        "an NVLink down in the window",
        healthy(),
        (report("a", state=(GpuStateSeen(GPU, "NVLinkDown", "7"),)),),
        1815,
        reason="NVLinkDown",
    ),
    Case(
        "an NVLink recovery in the window",
        healthy(),
        (report("a", state=(GpuStateSeen(GPU, "NVLinkErrors", "recovery=1,replay=3"),)),),
        1815,
        reason="NVLinkErrors",
    ),
    Case(
        "NVLink replays and CRC only: recorded",
        healthy(),
        (report("a", state=(GpuStateSeen(GPU, "NVLinkErrors", "crc=14,replay=2"),)),),
        1815,
    ),
    Case(
        "a fabric still registering: recorded (DCGM warns)",
        healthy(),
        (report("a", state=(GpuStateSeen(GPU, "Fabric", "in_progress"),)),),
        1815,
    ),
    Case(
        "a fabric not started: recorded (a board without NVSwitch may report it)",
        healthy(),
        (report("a", state=(GpuStateSeen(GPU, "Fabric", "not_started"),)),),
        1815,
    ),
    Case(
        "a fabric route unhealthy",
        healthy(),
        (report("a", state=(GpuStateSeen(GPU, "Fabric", "completed:route_unhealthy,unhealthy"),)),),
        1815,
        reason="FabricDegraded",
    ),
    Case(
        "a fabric registration that failed",
        healthy(),
        (report("a", state=(GpuStateSeen(GPU, "Fabric", "completed:status5"),)),),
        1815,
        reason="FabricDegraded",
    ),
    Case(
        "a fabric route recovery in progress: recorded",
        healthy(),
        (report("a", state=(GpuStateSeen(GPU, "Fabric", "completed:route_recovery"),)),),
        1815,
    ),
    Case(
        "a GPU lost",
        healthy(),
        (report("a", state=(GpuStateSeen(GPU, "GPULost"),)),),
        1815,  # the state at the window's end, settled
        reason="GPULost",
    ),
    Case("application Xid once: nothing", healthy(), (report("a", (1, 13, "application")),), 10),
    Case(
        "application Xid twice on one GPU: a suspect, no verdict",
        healthy(),
        (report("a", (1, 13, "application")), report("b", (500, 13, "application"))),
        600,
        suspects=1,
    ),
    Case(
        "a report of another boot is not counted",
        healthy(),
        (WatchEvidence("x", "boot-0", s(0), s(10), (XidSeen(GPU, 79, "fatal", s(1)),)),),
        20,
    ),
    Case(
        "fatal beats the signals: strongest reason first",
        SHORT,
        (report("a", (40, 79, "fatal")),),
        1000,
        before=ledger().model_copy(update={"unallocatable_since": s(0)}),
        reason="XidFatal",
    ),
    Case(
        "fatal Xid newer than the settle delay: pending",
        healthy(),
        (report("a", (40, 79, "fatal")),),
        54,
        reason="XidFatal",
        pending=True,
    ),
    Case(
        "a timer's verdict is older than the settle delay: applied at once",
        SHORT,
        at=401,
        before=ledger().model_copy(update=READ),
        reason="GPUsUnallocatable",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rules(case: Case) -> None:
    result = evaluate(POLICY, case.before, Observed(case.signals, s(case.at), case.reports, "n1"))
    assert (result.verdict.reason if result.verdict else None) == case.reason
    assert len(result.suspects) == case.suspects
    assert result.ledger.verdict == result.verdict
    if result.verdict is not None:
        assert result.verdict.window_start <= result.verdict.window_end == s(case.at)
        assert not result.verdict.common_cause
        assert result.verdict.pending == case.pending


def test_grace_timer_starts_then_wakes_at_expiry() -> None:
    """Without watch pods the Node's signal is all there is: a verdict at the grace."""
    signals_only = POLICY.model_copy(update={"watch_pods": False})
    first = evaluate(signals_only, ledger(), Observed(SHORT, s(10)))
    assert first.verdict is None
    assert first.ledger.unallocatable_since == s(10)
    assert first.wake_in == 300
    later = evaluate(signals_only, first.ledger, Observed(SHORT, s(310)))
    assert later.verdict is not None
    assert later.verdict.reason == "GPUsUnallocatable"
    assert later.verdict.window_start == s(10)


def test_a_drop_waits_for_the_report_that_covers_it_then_its_xid_explains_it() -> None:
    """Under watch pods the drop waits past its grace for the window that covers it
    (woken at the latest a window later); an Xid 92 in that report explains it."""
    first = evaluate(POLICY, ledger(), Observed(SHORT, s(10)))
    assert first.wake_in == 300
    waiting = evaluate(POLICY, first.ledger, Observed(SHORT, s(310)))
    assert waiting.verdict is None
    assert waiting.wake_in == 1800
    xid92 = WatchEvidence("w", BOOT, s(-600), s(900), (XidSeen(GPU, 92, "memory", s(2)),))
    read = evaluate(POLICY, waiting.ledger, Observed(SHORT, s(900), (xid92,)))
    assert read.verdict is None
    assert read.ledger.reported_until == s(900)
    assert evaluate(POLICY, read.ledger, Observed(SHORT, s(5000))).verdict is None


def test_device_plugin_restart_rides_out_the_grace() -> None:
    """A 20 s drop of allocatable, seen at each Node event: never a verdict."""
    state = ledger()
    for at, signals in [(0, healthy()), (5, SHORT), (15, SHORT), (25, healthy()), (400, healthy())]:
        result = evaluate(POLICY, state, Observed(signals, s(at)))
        assert result.verdict is None
        state = result.ledger
    assert state.unallocatable_since is None
    assert [e.what for e in state.events] == ["GPUsUnallocatable"]


def test_the_verdict_window_stays_put_across_passes() -> None:
    first = evaluate(
        POLICY, ledger(), Observed(healthy(), s(60), (report("a", (40, 79, "fatal")),))
    )
    again = evaluate(POLICY, first.ledger, Observed(healthy(), s(90)))
    assert again.verdict == first.verdict
    assert again.ledger == first.ledger


def test_a_reported_verdict_outlives_its_evidence_in_the_history() -> None:
    """A remap failure stays the verdict after 20 newer events pushed it out."""
    failed = report("a", state=(GpuStateSeen(GPU, "RowRemapFailure"),))
    first = evaluate(POLICY, ledger(), Observed(healthy(), s(1800), (failed,)))
    noise = report("b", *((2000.0 + i, 92, "memory") for i in range(25)))
    later = evaluate(POLICY, first.ledger, Observed(healthy(), s(3000), (noise,)))
    assert len(later.ledger.events) == 20
    assert later.verdict is not None
    assert later.verdict.reason == "RowRemapFailure"


def test_a_new_boot_starts_a_new_ledger() -> None:
    fatal = evaluate(
        POLICY, ledger(), Observed(healthy(), s(50), (report("a", (40, 79, "fatal")),))
    )
    fresh = ledger_for(fatal.ledger, "boot-2", T0)
    assert fresh == InServiceStatus(boot_id="boot-2", accepted_time=T0)
    result = evaluate(POLICY, fresh, Observed(healthy(boot_id="boot-2"), s(100)))
    assert result.verdict is None


def test_a_new_acceptance_starts_new_evidence() -> None:
    fatal = evaluate(
        POLICY, ledger(), Observed(healthy(), s(50), (report("a", (40, 79, "fatal")),))
    )
    assert ledger_for(fatal.ledger, BOOT, T0) == fatal.ledger
    assert ledger_for(fatal.ledger, BOOT, s(60)).verdict is None


def test_common_cause_holds_instead_of_convicting() -> None:
    others = tuple(SignatureSeen(f"n{i}", "XidFatal:79", s(30 + i)) for i in range(2, 4))
    fleet = Fleet(others, matched=100)
    obs = Observed(healthy(), s(50), (report("a", (40, 79, "fatal")),), "n1", fleet)
    result = evaluate(POLICY, ledger(), obs)
    assert result.verdict is not None
    assert result.verdict.common_cause
    assert "3 nodes" in result.verdict.message


def test_correlation_needs_onsets_within_the_window() -> None:
    far = tuple(SignatureSeen(f"n{i}", "XidFatal:79", s(40 + 601 + i)) for i in range(2, 5))
    obs = Observed(healthy(), s(50), (report("a", (40, 79, "fatal")),), "n1", Fleet(far, 100))
    result = evaluate(POLICY, ledger(), obs)
    assert result.verdict is not None
    assert not result.verdict.common_cause


def test_application_suspects_shared_by_many_nodes_are_a_common_cause() -> None:
    twice = (report("a", (1, 45, "application")), report("b", (5, 45, "application")))
    others = tuple(SignatureSeen(f"n{i}", "XidApplication:45", s(2)) for i in range(2, 9))
    result = evaluate(POLICY, ledger(), Observed(healthy(), s(10), twice, "n1", Fleet(others, 8)))
    assert result.verdict is None
    assert [x.common_cause for x in result.suspects] == [True]


@pytest.mark.parametrize(
    ("matched", "expected"), [(1, 3), (100, 3), (300, 3), (301, 4), (5000, 50)]
)
def test_the_correlation_bar(matched: int, expected: int) -> None:
    assert bar(POLICY.correlation, matched) == expected


def test_correlation_off() -> None:
    """No correlation: no common cause, and no settle delay either."""
    policy = POLICY.model_copy(
        update={"correlation": POLICY.correlation.model_copy(update={"enabled": False})}
    )
    others = tuple(SignatureSeen(f"n{i}", "XidFatal:79", s(40)) for i in range(2, 9))
    obs = Observed(healthy(), s(50), (report("a", (40, 79, "fatal")),), "n1", Fleet(others, 8))
    result = evaluate(policy, ledger(), obs)
    assert result.verdict is not None
    assert not result.verdict.common_cause
    assert not result.verdict.pending


# ----------------------------------------------------------- the settle delay

FATAL_ONSET = 40.0  # each node's Xid 79; the settle delay (15 s) ends at 55


@dataclass(frozen=True)
class Settle:
    name: str
    onsets: dict[str, float]  # node -> onset of its Xid 79 (its report arrives then)
    at: float  # when every node is evaluated again (no new report)
    expected: str  # per node: "pending", "quarantine" or "common"


SETTLE = [
    Settle("one node alone, within the delay", {"n1": 40}, 50, "pending"),
    Settle("one node alone, settled: quarantined", {"n1": 40}, 55, "quarantine"),
    Settle(
        "3 nodes within the delay: none quarantined", {"n1": 40, "n2": 43, "n3": 47}, 62, "common"
    ),
    Settle(
        "3 nodes, the first settles when the others have reported",
        {"n1": 40, "n2": 50, "n3": 54},
        55,
        "common",
    ),
    Settle("2 nodes: under the bar, each quarantined", {"n1": 40, "n2": 41}, 56, "quarantine"),
]


def _fleet_of(node: str, ledgers: dict[str, InServiceStatus], matched: int) -> Fleet:
    seen = tuple(
        x for other, kept in ledgers.items() if other != node for x in signatures(other, kept)
    )
    return Fleet(seen, matched)


def _play(onsets: dict[str, float], at: float) -> dict[str, InServiceStatus]:
    """Each node's report arrives at its onset (the watch exits early on a fatal Xid)
    and is evaluated against the others' ledgers as recorded then; then each node is
    evaluated again at ``at``. The ledgers go through the status's JSON between passes
    (what a restart resumes from)."""
    ledgers: dict[str, InServiceStatus] = {}
    for node, onset in sorted(onsets.items(), key=lambda kv: kv[1]):
        fatal = report(f"{node}-w1", (onset, 79, "fatal"))
        fleet = _fleet_of(node, ledgers, matched=100)
        result = evaluate(POLICY, ledger(), Observed(healthy(), s(onset), (fatal,), node, fleet))
        assert result.verdict is not None
        # pending; or, from the bar on, held as a common cause at once
        assert result.verdict.pending != result.verdict.common_cause
        assert result.wake_in == (15 if result.verdict.pending else None)
        ledgers[node] = InServiceStatus.model_validate(result.ledger.model_dump(by_alias=True))
    for node in sorted(onsets):
        fleet = _fleet_of(node, ledgers, matched=100)
        result = evaluate(POLICY, ledgers[node], Observed(healthy(), s(at), (), node, fleet))
        ledgers[node] = result.ledger
    return ledgers


def _outcome(kept: InServiceStatus) -> str:
    assert kept.verdict is not None
    if kept.verdict.pending:
        assert not kept.verdict.common_cause
        return "pending"
    return "common" if kept.verdict.common_cause else "quarantine"


@pytest.mark.parametrize("case", SETTLE, ids=lambda c: c.name)
def test_the_settle_delay(case: Settle) -> None:
    ledgers = _play(case.onsets, case.at)
    assert {node: _outcome(kept) for node, kept in ledgers.items()} == {
        node: case.expected for node in case.onsets
    }


def test_a_pending_verdict_wakes_the_node_when_it_settles() -> None:
    first = evaluate(
        POLICY, ledger(), Observed(healthy(), s(45), (report("a", (40, 79, "fatal")),))
    )
    assert first.verdict is not None
    assert first.verdict.pending
    assert first.wake_in == 10
    assert "settling" in first.verdict.message


def test_a_pending_verdict_is_the_same_ledger_at_each_pass_while_it_settles() -> None:
    """A pass while the verdict settles changes nothing: the ledger a pass later is the
    one on record (no status write), so the written status does not wake the next pass
    at once; only the settling changes it."""
    first = evaluate(
        POLICY, ledger(), Observed(healthy(), s(41), (report("a", (40, 79, "fatal")),))
    )
    assert first.verdict is not None
    assert first.verdict.pending
    for at in (41.5, 47, 54.9):
        again = evaluate(POLICY, first.ledger, Observed(healthy(), s(at)))
        assert again.ledger == first.ledger, at
    settled = evaluate(POLICY, first.ledger, Observed(healthy(), s(55)))
    assert settled.verdict is not None
    assert not settled.verdict.pending


def test_a_restart_during_the_settle_delay_resumes_from_the_status() -> None:
    """The operator restarts: the ledger read back from the status is all it has; the
    verdict is still pending until its onset plus the delay, then applied once."""
    first = evaluate(
        POLICY, ledger(), Observed(healthy(), s(41), (report("a", (40, 79, "fatal")),))
    )
    stored = InServiceStatus.model_validate(first.ledger.model_dump(by_alias=True, mode="json"))
    assert stored.verdict is not None
    assert stored.verdict.pending
    resumed = evaluate(POLICY, stored, Observed(healthy(), s(50)))
    assert resumed.verdict is not None
    assert resumed.verdict.pending
    assert resumed.wake_in == 5
    settled = evaluate(POLICY, resumed.ledger, Observed(healthy(), s(55)))
    assert settled.verdict is not None
    assert not settled.verdict.pending
    assert settled.verdict.reason == "XidFatal"
    assert settled.verdict.window_end == s(55)
    again = evaluate(POLICY, settled.ledger, Observed(healthy(), s(90)))
    assert again.verdict == settled.verdict


def test_no_settle_delay() -> None:
    policy = POLICY.model_copy(
        update={"correlation": POLICY.correlation.model_copy(update={"settle_seconds": 0})}
    )
    obs = Observed(healthy(), s(40), (report("a", (40, 79, "fatal")),))
    result = evaluate(policy, ledger(), obs)
    assert result.verdict is not None
    assert not result.verdict.pending


def test_a_burst_bridging_two_merges_them() -> None:
    one = with_xid([], XidSeen(GPU, 74, "repeated", s(0)), 180)
    two = with_xid(one, XidSeen(GPU, 74, "repeated", s(300)), 180)
    assert len(two) == 2
    bridged = with_xid(two, XidSeen(GPU, 74, "repeated", s(150)), 180)
    assert [(b.first, b.last, b.events) for b in bridged] == [(s(0), s(300), 3)]
    other_gpu = with_xid(bridged, XidSeen(OTHER_GPU, 74, "repeated", s(150)), 180)
    assert len(other_gpu) == 2
