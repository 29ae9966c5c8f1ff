"""Prometheus metrics (served on ``--metrics-port`` at ``/metrics``)."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from gpuaccept.checks.nccl_allreduce import BUSBW_FIGURE
from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.core.fleet import PolicyTally
from gpuaccept.operator.core.model import Action, DeleteNodeAcceptance, Observed, PatchNAStatus

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
BUSBW = Gauge("gpuaccept_node_busbw_gbps", "NCCL all-reduce bus bandwidth per node.", ["node"])
BREAKER_OPEN = Gauge(
    "gpuaccept_breaker_open", "1 while a policy's quarantine breaker holds nodes back.", ["policy"]
)
QUARANTINE_LIMIT = Gauge(
    "gpuaccept_breaker_limit", "The policy's maxQuarantined as a node count.", ["policy"]
)
RECONCILES = Counter("gpuaccept_reconciles_total", "Reconcile passes by outcome.", ["outcome"])
API_CALLS = Counter("gpuaccept_api_writes_total", "Write actions executed, by kind.", ["action"])
QUEUE_DEPTH = Gauge("gpuaccept_workqueue_depth", "Node keys waiting in the work queue.")
LEADER = Gauge("gpuaccept_leader", "1 while this replica holds the leader Lease.")


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
    }
    for phase in Phase:
        NODES_BY_PHASE.labels(policy, phase.value).set(by_phase.get(phase, 0))
    QUARANTINE_LIMIT.labels(policy).set(share.limit)
    BREAKER_OPEN.labels(policy).set(1 if share.held_by_breaker else 0)


def forget_policy(policy: str) -> None:
    for phase in Phase:
        remove_series(NODES_BY_PHASE, policy, phase.value)
    remove_series(QUARANTINE_LIMIT, policy)
    remove_series(BREAKER_OPEN, policy)


def record_write(observed: Observed, action: Action) -> None:
    """What a successful write tells: probe durations, errors, failures, bandwidth."""
    if isinstance(action, DeleteNodeAcceptance):
        remove_series(BUSBW, action.name)
        return
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
    busbw = new.figures.figure(BUSBW_FIGURE) if new.figures is not None else None
    if isinstance(busbw, int | float):
        BUSBW.labels(action.name).set(busbw)
