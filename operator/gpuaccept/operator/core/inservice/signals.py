"""The Node's own signals, debounced (pure).

* Allocatable below capacity: the NVIDIA device plugin marks a GPU unhealthy on
  every Xid but the application ones (allocatable drops, capacity stays) and never
  marks it healthy again; a device-plugin restart drops it for seconds. A timer
  starts when it first falls short and stops when it recovers; past
  ``allocatableGraceSeconds`` it is a verdict, unless a non-fatal Xid the watch saw
  just before explains it (the Xid rules judge that Xid); under watch pods it waits
  for a report that covers the drop (at most a window).
* DRA (:mod:`.dra`): a GPU the node's pool had when the ledger began missing from
  it, or the pool left incomplete, runs the same timer to the same verdict (no Xid
  explains it: NVIDIA's DRA driver taints a device on an Xid, it never withdraws it).
* Other tools' conditions (``unhealthyConditions``): a timer per condition of the
  policy's list that holds now, from its ``lastTransitionTime`` (it restarts at every
  flap); past its ``durationSeconds`` it is a verdict.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuaccept.contracts.inservice import (
    ConditionTimer,
    InService,
    InServiceEvent,
    InServiceStatus,
    UnhealthyCondition,
)
from gpuaccept.operator.core.inservice.dra import baseline, pool_short
from gpuaccept.operator.core.inservice.evidence import (
    REASON_CONDITION,
    REASON_UNALLOCATABLE,
    Finding,
    NodeSignals,
)

# How close before (and, for clock skew, after) the drop an Xid explains it: the
# device plugin marks the GPU unhealthy on the event; the kubelet then updates the
# Node's allocatable and the operator sees it.
EXPLAINED_BEFORE = timedelta(seconds=300)
EXPLAINED_AFTER = timedelta(seconds=30)


def short(signals: NodeSignals, dra_devices: list[str] | None = None) -> bool:
    """Fewer ``nvidia.com/gpu`` allocatable than its capacity (the device plugin marked
    devices unhealthy), or a capacity below the GPUs the acceptance saw while the node
    still offers its GPUs whole or shared under that name.

    Capacity 0 is the node offering its GPUs under other names (MIG mixed:
    ``nvidia.com/mig-*``; sharing with renameByDefault: ``nvidia.com/gpu.shared``), and
    MIG mixed offers only its whole GPUs under ``nvidia.com/gpu``: a repartition, not a
    loss. A GPU gone is still seen by the watch (its NVML count against the
    acceptance's: ``GPULost``). On a DRA node: its pool short of ``dra_devices``
    (:func:`.dra.pool_short`)."""
    if pool_short(dra_devices or [], signals.dra, signals.accepted_gpus) is not None:
        return True
    if signals.gpu_allocatable < signals.gpu_capacity:
        return True
    return 0 < signals.gpu_capacity < signals.accepted_gpus and not signals.partitioned


def _explanation(ledger: InServiceStatus, since: datetime) -> InServiceEvent | None:
    """A non-fatal Xid on record just before allocatable fell short: the device plugin
    marks a GPU unhealthy on every Xid but the application ones it skips, and never
    marks it healthy again (NVIDIA/k8s-device-plugin ``internal/rm/health.go``), so
    the drop is that Xid's, and the Xid rules judge it."""
    low, high = since - EXPLAINED_BEFORE, since + EXPLAINED_AFTER
    for event in ledger.events:
        if event.xid is not None and event.kind != "fatal" and low <= event.time <= high:
            return event
    return None


def _unallocatable(
    ledger: InServiceStatus, policy: InService, signals: NodeSignals, now: datetime
) -> Finding | None:
    """The GPUsUnallocatable verdict, when the drop is past its grace and the watch's
    evidence does not explain it. Under watch pods it waits for a report whose window
    covers the drop (at most a window past the grace)."""
    since, grace = ledger.unallocatable_since, policy.allocatable_grace_seconds
    if since is None or now - since < timedelta(seconds=grace):
        return None
    why = pool_short(ledger.dra_devices, signals.dra, signals.accepted_gpus)
    if why is not None:
        message = (
            f"{why} since {since.isoformat()} (allocatableGraceSeconds {grace}): its DRA "
            "driver no longer publishes the others"
        )
        return Finding(REASON_UNALLOCATABLE, message, REASON_UNALLOCATABLE, since)
    if policy.watch_pods and _explanation(ledger, since) is not None:
        return None
    read = ledger.reported_until is not None and ledger.reported_until >= since
    if policy.watch_pods and not read and now < _read_by(since, policy):
        return None
    have = max(signals.gpu_capacity, signals.accepted_gpus)
    message = (
        f"{signals.gpu_allocatable} of {have} GPUs allocatable since {since.isoformat()} "
        f"(allocatableGraceSeconds {grace}): the device plugin no longer offers the others, "
        "and no Xid the watch saw explains it"
    )
    return Finding(REASON_UNALLOCATABLE, message, REASON_UNALLOCATABLE, since)


def _read_by(since: datetime, policy: InService) -> datetime:
    """When an unexplained drop is judged even if no watch report has covered it."""
    wait = policy.allocatable_grace_seconds + policy.window_seconds
    return since + timedelta(seconds=wait)


def _condition_timer(
    rule: UnhealthyCondition, signals: NodeSignals, old: list[ConditionTimer], now: datetime
) -> ConditionTimer | None:
    seen = next((c for c in signals.conditions if c.type == rule.type), None)
    if seen is None or seen.status != rule.status:
        return None  # the condition does not hold now: its timer stops
    before = next((t for t in old if (t.type, t.status) == (rule.type, rule.status)), None)
    since = seen.since or (before.since if before is not None else now)
    return ConditionTimer(type=rule.type, status=rule.status, since=min(since, now))


def timed(
    ledger: InServiceStatus, policy: InService, signals: NodeSignals, now: datetime
) -> InServiceStatus:
    """``ledger`` with its signal timers brought up to ``signals`` (and, on a DRA node,
    the GPUs its pool began with)."""
    devices = baseline(ledger, signals.dra)
    unallocatable = (ledger.unallocatable_since or now) if short(signals, devices) else None
    timers = [
        t
        for t in (
            _condition_timer(r, signals, ledger.conditions, now)
            for r in policy.unhealthy_conditions
        )
        if t is not None
    ]
    update = {"unallocatable_since": unallocatable, "conditions": timers, "dra_devices": devices}
    return ledger.model_copy(update=update)


def signal_findings(
    ledger: InServiceStatus, policy: InService, signals: NodeSignals, now: datetime
) -> list[Finding]:
    """The verdicts the timers give at ``now``."""
    found: list[Finding] = []
    unallocatable = _unallocatable(ledger, policy, signals, now)
    if unallocatable is not None:
        found.append(unallocatable)
    durations = {(r.type, r.status): r.duration_seconds for r in policy.unhealthy_conditions}
    for timer in ledger.conditions:
        duration = durations.get((timer.type, timer.status))
        if duration is not None and now - timer.since >= timedelta(seconds=duration):
            name = f"{timer.type}={timer.status}"
            message = (
                f"node condition {name} since {timer.since.isoformat()} "
                f"(durationSeconds {duration})"
            )
            found.append(
                Finding(REASON_CONDITION, message, f"{REASON_CONDITION}:{name}", timer.since)
            )
    return found


def next_expiry(ledger: InServiceStatus, policy: InService, now: datetime) -> float | None:
    """Seconds until the earliest running timer reaches its limit (None: none runs):
    when the reconcile must look again without a Node event."""
    due: list[datetime] = []
    since = ledger.unallocatable_since
    if since is not None:
        due.append(since + timedelta(seconds=policy.allocatable_grace_seconds))
        if policy.watch_pods:
            due.append(_read_by(since, policy))
    durations = {(r.type, r.status): r.duration_seconds for r in policy.unhealthy_conditions}
    for timer in ledger.conditions:
        duration = durations.get((timer.type, timer.status))
        if duration is not None:
            due.append(timer.since + timedelta(seconds=duration))
    future = [(d - now).total_seconds() for d in due if d > now]
    return min(future) if future else None
