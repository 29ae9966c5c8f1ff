"""The operator's metrics: base units, build info, no `_created` series, per-node
series computed from the cache at scrape time (so a restarted replica or a new
leader exports them before any write), and the quarantine counter that counts
transitions, not quarantined nodes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from prometheus_client import REGISTRY, generate_latest

from gpuaccept.contracts.nodeacceptance import KeyFigures, NodeAcceptanceStatus, Phase
from gpuaccept.operator import metrics
from gpuaccept.operator.core.model import NAView, NodeSnapshot, PatchNAStatus

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _na(name: str, phase: Phase, **figures: float | str) -> NAView:
    status = NodeAcceptanceStatus(
        phase=phase,
        policy="default",
        figures=KeyFigures.model_validate(figures) if figures else None,
    )
    return NAView(name=name, status=status)


@pytest.mark.parametrize(
    ("na", "expected"),
    [
        pytest.param(
            _na("a", Phase.ACCEPTED, busbwGBps=350.5, minPcieGeneration=5, minPcieWidth=16),
            metrics.NodeSamples("a", "default", "Accepted", 350.5e9, 5.0, 16.0),
            id="figures-in-base-units",
        ),
        pytest.param(
            _na("b", Phase.PENDING),
            metrics.NodeSamples("b", "default", "Pending"),
            id="no-figures-yet",
        ),
        pytest.param(
            NAView(
                name="d",
                status=NodeAcceptanceStatus(
                    phase=Phase.QUARANTINED, reason="PcieLinkFailed", policy="default"
                ),
            ),
            metrics.NodeSamples("d", "default", "Quarantined", reason="PcieLinkFailed"),
            id="the-reason-is-a-label",
        ),
        pytest.param(
            _na("c", Phase.QUARANTINED, pcie="Gen4x8"),
            metrics.NodeSamples("c", "default", "Quarantined"),
            id="text-figure-is-no-sample",
        ),
    ],
)
def test_node_samples(na: NAView, expected: metrics.NodeSamples) -> None:
    assert metrics.node_samples(na) == expected


def _scrape() -> str:
    return generate_latest(REGISTRY).decode()


def test_per_node_series_come_from_the_published_snapshot() -> None:
    cache = [_na("gpu-1", Phase.ACCEPTED, busbwGBps=400, minPcieGeneration=5, minPcieWidth=16)]
    metrics.publish_nodes(cache)
    try:
        text = _scrape()
        assert (
            'gpuaccept_node_phase{node="gpu-1",phase="Accepted",policy="default",reason=""} 1.0'
            in text
        )
        assert 'gpuaccept_node_busbw_bytes_per_second{node="gpu-1"} 4e+11' in text
        assert 'gpuaccept_node_pcie_link_generation{node="gpu-1"} 5.0' in text
        assert 'gpuaccept_node_pcie_link_width{node="gpu-1"} 16.0' in text
        cache.clear()  # the node and its NodeAcceptance are gone
        metrics.publish_nodes(cache)
        assert 'node="gpu-1"' not in _scrape()
    finally:
        metrics.publish_nodes(())


def test_build_info_and_no_created_series() -> None:
    text = _scrape()
    assert 'gpuaccept_build_info{version="' in text
    assert "_created" not in text
    assert "gbps" not in text.lower()


def _write(old: Phase, new: Phase, reason: str = "LowBusBandwidth") -> None:
    before = NAView(name="n", status=NodeAcceptanceStatus(phase=old, policy="p"))
    after = NodeAcceptanceStatus(phase=new, policy="p", reason=reason)
    observed = NodeSnapshot(node_name="n", now=NOW, node=None, na=before)
    metrics.record_write(observed, PatchNAStatus("n", "1", after))


def test_quarantines_count_transitions_not_quarantined_nodes() -> None:
    counter = metrics.QUARANTINES.labels("p")
    start = counter._value.get()
    _write(Phase.PROBING, Phase.QUARANTINED)
    _write(Phase.QUARANTINED, Phase.QUARANTINED)  # stays quarantined: not new
    _write(Phase.QUARANTINED, Phase.PENDING)
    assert counter._value.get() - start == 1


def test_drift_is_a_series_per_figure_and_gpu() -> None:
    from gpuaccept.contracts.reverify import DriftFinding, ReverifyStatus  # noqa: PLC0415

    finding = DriftFinding(
        check="gpu_compute",
        figure="bf16Tflops.lowest",
        gpu=3,
        baseline=742.0,
        value=630.7,
        percent=15.0,
        level="fail",
    )
    status = NodeAcceptanceStatus(
        phase=Phase.QUARANTINED, policy="default", reverify=ReverifyStatus(drift=[finding])
    )
    metrics.publish_nodes([NAView(name="gpu-9", status=status)])
    try:
        line = (
            'gpuaccept_node_drift_percent{check="gpu_compute",figure="bf16Tflops.lowest",'
            'gpu="3",node="gpu-9"} 15.0'
        )
        assert line in _scrape()
    finally:
        metrics.publish_nodes(())


def test_in_service_verdicts_count_by_reason_and_outcome() -> None:
    from gpuaccept.contracts.nodeacceptance import Reason  # noqa: PLC0415

    def write(old: NodeAcceptanceStatus, new: NodeAcceptanceStatus) -> None:
        observed = NodeSnapshot(node_name="n", now=NOW, node=None, na=NAView(name="n", status=old))
        metrics.record_write(observed, PatchNAStatus("n", "1", new))

    reason = Reason(check="in_service", reason="GPUsUnallocatable", message="7 of 8")
    accepted = NodeAcceptanceStatus(phase=Phase.ACCEPTED, policy="p")
    held = accepted.model_copy(update={"reason": "BreakerOpen", "reasons": [reason]})
    quarantined = held.model_copy(
        update={"phase": Phase.QUARANTINED, "reason": "GPUsUnallocatable"}
    )
    out = metrics.INSERVICE_VERDICTS.labels("p", "GPUsUnallocatable", "Quarantined")
    limit = metrics.INSERVICE_VERDICTS.labels("p", "GPUsUnallocatable", "BreakerOpen")
    start_out, start_limit = out._value.get(), limit._value.get()
    write(accepted, held)
    write(held, held)  # still held: not new
    write(held, quarantined)
    write(quarantined, quarantined)
    other = quarantined.model_copy(update={"reasons": [Reason(check="gpu_compute", reason="X")]})
    write(accepted, other)  # an acceptance verdict: not in service
    assert (out._value.get() - start_out, limit._value.get() - start_limit) == (1, 1)


def test_a_blind_watch_window_is_counted_by_part() -> None:
    """A counted watch report that could not read part of its window (notRead) is
    counted once per part, never read as a quiet window."""
    from gpuaccept.contracts.inservice import InServiceStatus  # noqa: PLC0415

    def write(old: NodeAcceptanceStatus, new: NodeAcceptanceStatus) -> None:
        observed = NodeSnapshot(node_name="n", now=NOW, node=None, na=NAView(name="n", status=old))
        metrics.record_write(observed, PatchNAStatus("n", "1", new))

    def ledger(until: int, **not_read: str) -> NodeAcceptanceStatus:
        ledger = InServiceStatus(reported_until=NOW.replace(minute=until), not_read=not_read)
        return NodeAcceptanceStatus(phase=Phase.ACCEPTED, policy="p", in_service=ledger)

    xid = metrics.INSERVICE_BLIND_WINDOWS.labels("p", "xid")
    gpu = metrics.INSERVICE_BLIND_WINDOWS.labels("p", "gpu")
    start = (xid._value.get(), gpu._value.get())
    write(ledger(0), ledger(1, xid="MIG: no instance-level Xids", gpu3="NVML: Unknown"))
    write(ledger(1, xid="x"), ledger(1, xid="x"))  # the same report: not counted again
    write(ledger(1, xid="x"), ledger(2, xid="x"))  # the next window, blind again
    write(ledger(2, xid="x"), ledger(3))  # a window that read everything
    assert (xid._value.get() - start[0], gpu._value.get() - start[1]) == (2, 1)
