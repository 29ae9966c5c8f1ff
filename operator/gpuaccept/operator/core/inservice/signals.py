"""The Node's own signals, debounced (pure).

* Allocatable below capacity: the NVIDIA device plugin marks a GPU unhealthy on a
  critical Xid (allocatable drops, capacity stays); a device-plugin restart drops it
  for seconds. A timer starts when it first falls short and stops when it recovers;
  past ``allocatableGraceSeconds`` it is a verdict.
* Other tools' conditions (``unhealthyConditions``): a timer per condition of the
  policy's list that holds now, from its ``lastTransitionTime`` (it restarts at every
  flap); past its ``durationSeconds`` it is a verdict.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuaccept.contracts.inservice import (
    ConditionTimer,
    InService,
    InServiceStatus,
    UnhealthyCondition,
)
from gpuaccept.operator.core.inservice.evidence import (
    REASON_CONDITION,
    REASON_UNALLOCATABLE,
    Finding,
    NodeSignals,
)


def short(signals: NodeSignals) -> bool:
    """Fewer GPUs allocatable than the node has (its capacity, or the GPUs its
    acceptance covered)."""
    return signals.gpu_allocatable < max(signals.gpu_capacity, signals.accepted_gpus)


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
    """``ledger`` with its signal timers brought up to ``signals``."""
    unallocatable = (ledger.unallocatable_since or now) if short(signals) else None
    timers = [
        t
        for t in (
            _condition_timer(r, signals, ledger.conditions, now)
            for r in policy.unhealthy_conditions
        )
        if t is not None
    ]
    return ledger.model_copy(update={"unallocatable_since": unallocatable, "conditions": timers})


def signal_findings(
    ledger: InServiceStatus, policy: InService, signals: NodeSignals, now: datetime
) -> list[Finding]:
    """The verdicts the timers give at ``now``."""
    found: list[Finding] = []
    since = ledger.unallocatable_since
    grace = policy.allocatable_grace_seconds
    if since is not None and now - since >= timedelta(seconds=grace):
        have = max(signals.gpu_capacity, signals.accepted_gpus)
        message = (
            f"{signals.gpu_allocatable} of {have} GPUs allocatable since {since.isoformat()} "
            f"(allocatableGraceSeconds {grace}): the device plugin no longer offers the others"
        )
        found.append(Finding(REASON_UNALLOCATABLE, message, REASON_UNALLOCATABLE, since))
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
    if ledger.unallocatable_since is not None:
        due.append(ledger.unallocatable_since + timedelta(seconds=policy.allocatable_grace_seconds))
    durations = {(r.type, r.status): r.duration_seconds for r in policy.unhealthy_conditions}
    for timer in ledger.conditions:
        duration = durations.get((timer.type, timer.status))
        if duration is not None:
            due.append(timer.since + timedelta(seconds=duration))
    future = [(d - now).total_seconds() for d in due if d > now]
    return min(future) if future else None
