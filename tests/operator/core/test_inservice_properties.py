"""The in-service rules over random histories (hypothesis): the same ledger and
verdict whatever order the watch reports come in, however often one is replayed,
after a restart (the ledger read back from its wire form, as from the status), and
nothing of an old boot counted in a new one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaccept.contracts.inservice import InService, InServiceStatus, XidRules
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus
from gpuaccept.operator.core.inservice.evidence import NodeSignals
from gpuaccept.operator.core.inservice.rules import Evaluation, Observed, evaluate
from gpuaccept.operator.core.model import GpuStateSeen, WatchEvidence, XidSeen
from gpuaccept.operator.core.watchreservation import ledger_for

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BOOT = "boot-1"
POLICY = InService(enabled=True, xid=XidRules(repeated_bursts=3, application_suspect_count=2))
SIGNALS = NodeSignals(boot_id=BOOT, gpu_capacity=8, gpu_allocatable=8)
NOW = T0 + timedelta(hours=6)

CLASS = {79: "fatal", 74: "repeated", 63: "memory", 13: "application", 45: "application"}
xid_events = st.builds(
    lambda gpu, xid, at: XidSeen(gpu, xid, CLASS.get(xid, "other"), at),  # type: ignore[arg-type]
    gpu=st.sampled_from(["GPU-a", "GPU-b"]),
    xid=st.sampled_from([79, 74, 63, 13, 45, 999]),
    at=st.integers(0, 5 * 3600).map(lambda n: T0 + timedelta(seconds=n)),
)


# Durable state the default policy records and never judges (DCGM's WARN grades and
# less): the same state in many windows is recorded once, at its onset.
recorded_states = st.builds(
    GpuStateSeen,
    gpu=st.sampled_from(["GPU-a", "GPU-b"]),
    what=st.sampled_from(["RowRemapPending", "Fabric", "EccContained", "RecoveryAction"]),
    detail=st.sampled_from(["", "drain_p2p", "in_progress"]),
)


@st.composite
def reports(draw: st.DrawFn) -> list[WatchEvidence]:
    count = draw(st.integers(1, 6))
    found = []
    for i in range(count):
        xids = tuple(draw(st.lists(xid_events, max_size=5)))
        state = tuple(draw(st.lists(recorded_states, max_size=3)))
        start = T0 + timedelta(minutes=30 * i)
        key = f"pod-{i}/{start.isoformat()}"
        found.append(WatchEvidence(key, BOOT, start, start, xids, state))
    return found


def run(order: list[WatchEvidence], one_by_one: bool) -> Evaluation:
    ledger = ledger_for(None, BOOT, T0)
    if not one_by_one:
        return evaluate(POLICY, ledger, Observed(SIGNALS, NOW, tuple(order), "n1"))
    result = None
    for report in order:
        result = evaluate(POLICY, ledger, Observed(SIGNALS, NOW, (report,), "n1"))
        ledger = result.ledger
    assert result is not None
    return result


def _same(a: Evaluation, b: Evaluation) -> None:
    assert a.verdict == b.verdict
    assert a.suspects == b.suspects
    assert a.ledger.bursts == b.ledger.bursts
    assert a.ledger.events == b.ledger.events


@settings(max_examples=150, deadline=None)
@given(reports(), st.randoms(use_true_random=False))
def test_order_independence(found: list[WatchEvidence], rnd: object) -> None:
    shuffled = list(found)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    _same(run(found, one_by_one=True), run(shuffled, one_by_one=True))
    _same(run(found, one_by_one=True), run(shuffled, one_by_one=False))


@settings(max_examples=150, deadline=None)
@given(reports(), st.data())
def test_replayed_reports_count_once(found: list[WatchEvidence], data: st.DataObject) -> None:
    replays = data.draw(st.lists(st.sampled_from(found), max_size=6))
    _same(run(found, one_by_one=True), run([*found, *replays], one_by_one=True))


@settings(max_examples=100, deadline=None)
@given(reports(), st.integers(0, 5))
def test_a_restart_reads_the_ledger_back(found: list[WatchEvidence], cut: int) -> None:
    """The ledger through the status's wire form (a restart, or another replica)
    between any two reports gives what one process would."""
    ledger = ledger_for(None, BOOT, T0)
    for i, report in enumerate(found):
        if i == cut:
            wire = NodeAcceptanceStatus(in_service=ledger).to_wire()
            restored = NodeAcceptanceStatus.model_validate(wire).in_service
            assert restored == ledger
            ledger = restored or InServiceStatus()
        ledger = evaluate(POLICY, ledger, Observed(SIGNALS, NOW, (report,), "n1")).ledger
    _same(evaluate(POLICY, ledger, Observed(SIGNALS, NOW)), run(found, one_by_one=True))


@settings(max_examples=100, deadline=None)
@given(reports())
def test_a_new_boot_counts_nothing_of_the_old(found: list[WatchEvidence]) -> None:
    old = run(found, one_by_one=True).ledger
    new_boot = NodeSignals(boot_id="boot-2", gpu_capacity=8, gpu_allocatable=8)
    result = evaluate(POLICY, ledger_for(old, "boot-2", T0), Observed(new_boot, NOW, tuple(found)))
    assert result.verdict is None
    assert result.suspects == ()
    assert result.ledger.bursts == []
    assert result.ledger.events == []


@settings(max_examples=150, deadline=None)
@given(reports())
def test_only_fatal_repeated_or_state_convicts(found: list[WatchEvidence]) -> None:
    """Memory-state, application-class and other Xids never make a verdict."""
    verdict = run(found, one_by_one=True).verdict
    kinds = {x.kind for r in found for x in r.xids}
    if verdict is not None:
        assert verdict.reason in ("XidFatal", "XidRepeated")
        assert kinds & {"fatal", "repeated"}
    if "fatal" in kinds:
        assert verdict is not None
        assert verdict.reason == "XidFatal"
