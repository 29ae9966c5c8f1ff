"""Prometheus metrics (served on ``--metrics-port`` at ``/metrics``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
