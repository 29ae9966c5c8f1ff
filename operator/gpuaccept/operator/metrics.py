"""Prometheus metrics (served on ``--metrics-port`` at ``/metrics``).

Base units (seconds, bytes per second), ``gpuaccept_build_info``, and no
``_created`` series. The per-node series (phase, bus bandwidth, PCIe link) are
not kept between writes: the policy status loop publishes them from the
cache's NodeAcceptance views, every ``--status-interval`` in which one
changed, on the event loop (:func:`publish_nodes`, which samples only the
changed views again); a scrape only reads the last published
tuple (:class:`NodeSeries`). So every replica, a restarted one or a new leader
after a failover, exports them for every node after its first status pass, a
deleted node's series go with it, and a scrape neither walks the fleet nor
reads kopf's indexes from the HTTP thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, Info, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.operator.core.fleet import PolicyTally
from gpuaccept.operator.core.inservice.evidence import REASON_COMMON_CAUSE
from gpuaccept.operator.core.inservice.evidence import REASONS as IN_SERVICE_REASONS
from gpuaccept.operator.core.model import (
    IN_SERVICE_CHECK,
    PUBLISHED_FIGURES,
    Action,
    NAView,
    NodeSnapshot,
    PatchNAStatus,
)
from gpuaccept.operator.core.phases.unknown import REASON_UNKNOWN_PHASE

# Counters and histograms without a `_created` series (a timestamp sample per
# series that doubles the series count and that no rule here uses).
disable_created_metrics()  # type: ignore[no-untyped-call]

BYTES_PER_GB = 1e9
BUSBW_FIGURE, PCIE_GENERATION_FIGURE, PCIE_WIDTH_FIGURE = PUBLISHED_FIGURES


def _version() -> str:
    try:
        return version("gpuaccept")
    except PackageNotFoundError:  # pragma: no cover (a source tree without metadata)
        return "unknown"


BUILD_INFO = Info("gpuaccept_build", "The running gpuaccept version (python_info has Python's).")
BUILD_INFO.info({"version": _version()})

NODES_BY_PHASE = Gauge(
    "gpuaccept_nodes", "NodeAcceptance objects by policy and phase.", ["policy", "phase"]
)
PROBE_DURATION = Histogram(
    "gpuaccept_probe_duration_seconds",
    "From probe pod creation to its verdict or error, per attempt.",
    buckets=(5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600),
)
CHECK_FAILURES = Counter(
    "gpuaccept_check_failures_total", "Verdict reasons by check and reason.", ["check", "reason"]
)
PROBE_ERRORS = Counter(
    "gpuaccept_probe_errors_total", "Probe attempts that ended without a usable report.", ["reason"]
)
# By policy only, and created at 0 for every policy (record_policy): increase()
# sees the first quarantine of a series that exists before it. The reasons are in
# gpuaccept_check_failures_total.
QUARANTINES = Counter(
    "gpuaccept_quarantines_total",
    "Nodes newly quarantined (a transition into phase Quarantined), by policy.",
    ["policy"],
)
# Health in service (policy inService): each in-service verdict recorded, by its reason
# and what became of it (Quarantined; held: DryRun, BreakerOpen, CommonCause). Created
# at 0 per policy for the outcomes the alerts count (record_policy).
INSERVICE_VERDICTS = Counter(
    "gpuaccept_inservice_verdicts_total",
    "In-service verdicts (an accepted node failing in service), by policy, reason and "
    "outcome (Quarantined, DryRun, BreakerOpen, CommonCause).",
    ["policy", "reason", "outcome"],
)
# A watch window that could not read part of what it watches (its report's notRead):
# blind, never quiet. Counted per report counted, by policy and part (xid, nvlinks,
# gpu: a GPU NVML could not open, ...).
INSERVICE_BLIND_WINDOWS = Counter(
    "gpuaccept_inservice_blind_windows_total",
    "In-service watch windows that could not read part of what they watch (notRead), by "
    "policy and part.",
    ["policy", "part"],
)
# The two quarantine limit series keep the names of the policy status field they
# mirror (``breakerOpen``, condition ``BreakerOpen``): dashboards and alerts use them.
QUARANTINE_LIMIT_REACHED = Gauge(
    "gpuaccept_breaker_open",
    "1 while a policy's quarantine limit holds nodes back (status breakerOpen).",
    ["policy"],
)
QUARANTINE_LIMIT = Gauge(
    "gpuaccept_breaker_limit",
    "The policy's quarantine limit (maxQuarantined) as a node count.",
    ["policy"],
)
RECONCILES = Counter("gpuaccept_reconciles_total", "Reconcile passes by outcome.", ["outcome"])
API_CALLS = Counter("gpuaccept_api_writes_total", "Write actions executed, by kind.", ["action"])
QUEUE_DEPTH = Gauge("gpuaccept_workqueue_depth", "Node keys waiting in the work queue.")
LEADER = Gauge("gpuaccept_leader", "1 while this replica holds the leader Lease.")
# One series per node under a pending taint that no policy matches, past the grace
# (--unmatched-grace): normally none, so its cardinality is the problem's size.
UNMATCHED_PENDING = Gauge(
    "gpuaccept_node_unmatched_pending",
    "1 for each node that carries a pending taint and that no policy matches, "
    "after the grace from its registration.",
    ["node"],
)
_UNMATCHED: set[str] = set()


def publish_unmatched(nodes: Iterable[str]) -> None:
    """The unmatched pending nodes from now on (a node no longer one loses its series)."""
    now = set(nodes)
    for gone in _UNMATCHED - now:
        remove_series(UNMATCHED_PENDING, gone)
    for node in now:
        UNMATCHED_PENDING.labels(node).set(1)
    _UNMATCHED.clear()
    _UNMATCHED.update(now)


INSTALLATION_STANDBY = Gauge(
    "gpuaccept_installation_standby",
    "1 while another installation of gpuaccept holds the cluster's installation lock "
    "and this one acts on nothing.",
)


def remove_series(metric: Any, *labels: str) -> None:
    """Drop one labelled series (a deleted node's or policy's), if it exists."""
    try:
        present = tuple(labels) in metric._metrics
    except AttributeError:  # pragma: no cover
        present = False
    if present:
        metric.remove(*labels)


def record_policy(policy: str, share: PolicyTally) -> None:
    """A policy's gauges: nodes by phase, its quarantine limit, whether it holds nodes."""
    counts = share.counts
    by_phase = {
        Phase.PENDING: counts.pending,
        Phase.PROBING: counts.probing,
        Phase.ACCEPTED: counts.accepted,
        Phase.QUARANTINED: counts.quarantined,
        Phase.HELD: counts.held,
        Phase.STALLED: counts.stalled,
        Phase.FABRIC: counts.fabric,
        Phase.WAITING: counts.waiting,
        Phase.RELEASED: counts.released,
    }
    for phase in Phase:
        NODES_BY_PHASE.labels(policy, phase.value).set(by_phase.get(phase, 0))
    QUARANTINES.labels(policy)  # exists at 0 before the first quarantine
    for reason in IN_SERVICE_REASONS:
        INSERVICE_VERDICTS.labels(policy, reason, "Quarantined")
    for reason in IN_SERVICE_REASONS:
        INSERVICE_VERDICTS.labels(policy, reason, REASON_COMMON_CAUSE)
    QUARANTINE_LIMIT.labels(policy).set(share.limit)
    QUARANTINE_LIMIT_REACHED.labels(policy).set(1 if share.held_by_limit else 0)


def forget_policy(policy: str) -> None:
    for phase in Phase:
        remove_series(NODES_BY_PHASE, policy, phase.value)
    remove_series(QUARANTINE_LIMIT, policy)
    remove_series(QUARANTINES, policy)
    remove_series(QUARANTINE_LIMIT_REACHED, policy)
    for reason in IN_SERVICE_REASONS:
        for outcome in ("Quarantined", "DryRun", "BreakerOpen", REASON_COMMON_CAUSE):
            remove_series(INSERVICE_VERDICTS, policy, reason, outcome)


def record_write(observed: NodeSnapshot, action: Action) -> None:
    """What a successful write tells: probe durations, errors, failures, bandwidth."""
    if not isinstance(action, PatchNAStatus) or observed.na is None:
        return
    old, new = observed.na.status, action.status
    if old.phase == Phase.PROBING and new.phase != Phase.PROBING and old.probe_started_time:
        elapsed = (observed.now - old.probe_started_time).total_seconds()
        PROBE_DURATION.observe(max(elapsed, 0.0))
        if new.phase == Phase.PENDING and new.reason:
            PROBE_ERRORS.labels(new.reason).inc()
    if (new.phase, new.reason) != (old.phase, old.reason) and new.phase in (
        Phase.QUARANTINED,
        Phase.HELD,
    ):
        for reason in new.reasons:
            CHECK_FAILURES.labels(reason.check, reason.reason).inc()
    if new.phase == Phase.QUARANTINED and old.phase != Phase.QUARANTINED:
        QUARANTINES.labels(new.policy or "").inc()
    _record_in_service(old, new)
    _record_blind(old, new)


def blind_part(key: str) -> str:
    """A notRead key as a metric label: ``gpu3`` is ``gpu`` (bounded cardinality)."""
    return key.rstrip("0123456789") or key


def _record_blind(old: NodeAcceptanceStatus, new: NodeAcceptanceStatus) -> None:
    """A newly counted watch report that could not read part of its window."""
    before, after = old.in_service, new.in_service
    if after is None or not after.not_read or after.reported_until is None:
        return
    if before is not None and before.reported_until == after.reported_until:
        return
    for part in sorted({blind_part(key) for key in after.not_read}):
        INSERVICE_BLIND_WINDOWS.labels(new.policy or "", part).inc()


def _record_in_service(old: NodeAcceptanceStatus, new: NodeAcceptanceStatus) -> None:
    """An in-service verdict newly recorded (its phase or reason changed)."""
    if not new.reasons or new.reasons[0].check != IN_SERVICE_CHECK:
        return
    if (new.phase, new.reason) == (old.phase, old.reason):
        return
    outcome = "Quarantined" if new.phase == Phase.QUARANTINED else (new.reason or "")
    if outcome:
        INSERVICE_VERDICTS.labels(new.policy or "", new.reasons[0].reason, outcome).inc()


# ----------------------------------------------------------------- per-node series
@dataclass(frozen=True)
class NodeSamples:
    """One node's per-node series, from its NodeAcceptance (pure)."""

    node: str
    policy: str
    phase: str
    busbw_bytes_per_second: float | None = None
    pcie_generation: float | None = None
    pcie_width: float | None = None
    # the node's drift below its baseline: (check, figure, GPU or "", percent), worst first
    drift: tuple[tuple[str, str, str, float], ...] = ()
    reason: str = ""  # the status's reason word (the REASON column); "" without one


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _figures(na: NAView) -> Mapping[str, object]:
    """The node's check figures: those a slim view (the cache's) carries, or the whole
    status's."""
    if na.packed is not None:
        return dict(na.packed.figures)
    figures = na.status.figures
    return figures.check_figures if figures is not None else {}


def node_samples(na: NAView) -> NodeSamples:
    status = na.status
    figure = _figures(na).get
    busbw = _number(figure(BUSBW_FIGURE))
    return NodeSamples(
        node=na.name,
        policy=status.policy or "",
        phase=na.unknown_phase or status.phase.value,
        reason=REASON_UNKNOWN_PHASE if na.unknown_phase else status.reason or "",
        busbw_bytes_per_second=None if busbw is None else busbw * BYTES_PER_GB,
        pcie_generation=_number(figure(PCIE_GENERATION_FIGURE)),
        pcie_width=_number(figure(PCIE_WIDTH_FIGURE)),
        drift=tuple(
            (f.check, f.figure, "" if f.gpu is None else str(f.gpu), f.percent)
            for f in (status.reverify.drift if status.reverify else [])
        ),
    )


class NodeSeries(Collector):
    """The per-node series, from the samples last published."""

    def __init__(self) -> None:
        self.samples: tuple[NodeSamples, ...] = ()

    def collect(self) -> Iterator[Metric]:
        phase = GaugeMetricFamily(
            "gpuaccept_node_phase",
            "1 for each node's current phase and reason (its NodeAcceptance), by policy.",
            labels=["node", "policy", "phase", "reason"],
        )
        busbw = GaugeMetricFamily(
            "gpuaccept_node_busbw_bytes_per_second",
            "NCCL all-reduce bus bandwidth of each node's last probe.",
            labels=["node"],
        )
        generation = GaugeMetricFamily(
            "gpuaccept_node_pcie_link_generation",
            "PCIe generation of each node's weakest GPU link under load, last probe.",
            labels=["node"],
        )
        width = GaugeMetricFamily(
            "gpuaccept_node_pcie_link_width",
            "PCIe lane width of each node's weakest GPU link under load, last probe.",
            labels=["node"],
        )
        drift = GaugeMetricFamily(
            "gpuaccept_node_drift_percent",
            "How far each figure of a node's last probe fell below its baseline (its "
            "figures at acceptance), percent; only figures beyond reverify.drift.warnPercent.",
            labels=["node", "check", "figure", "gpu"],
        )
        for sample in self.samples:  # one read of an immutable tuple: no lock needed
            phase.add_metric([sample.node, sample.policy, sample.phase, sample.reason], 1.0)
            for check, name, gpu, percent in sample.drift:
                drift.add_metric([sample.node, check, name, gpu], percent)
            for family, value in (
                (busbw, sample.busbw_bytes_per_second),
                (generation, sample.pcie_generation),
                (width, sample.pcie_width),
            ):
                if value is not None:
                    family.add_metric([sample.node], value)
        yield from (phase, busbw, generation, width, drift)


NODE_SERIES = NodeSeries()
REGISTRY.register(NODE_SERIES)


_SAMPLED: dict[str, tuple[NAView, NodeSamples]] = {}  # the last published, by node


def publish_nodes(acceptances: Iterable[NAView]) -> None:
    """The per-node series from now on: one sample per NodeAcceptance.

    A NodeAcceptance view unchanged since the last call keeps its samples
    (views are immutable; a change is a new view), so a call costs a
    look-up per node and :func:`node_samples` only for the changed ones.
    """
    sampled: dict[str, tuple[NAView, NodeSamples]] = {}
    for na in acceptances:
        last = _SAMPLED.get(na.name)
        sampled[na.name] = last if last is not None and last[0] is na else (na, node_samples(na))
    _SAMPLED.clear()
    _SAMPLED.update(sampled)
    NODE_SERIES.samples = tuple(samples for _na, samples in sampled.values())
