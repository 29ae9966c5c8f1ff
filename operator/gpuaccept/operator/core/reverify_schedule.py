"""Who is re-verified now (pure): idle time, period, the limit and the rate, suspects first.

An accepted node is *due* for re-verification once its period has passed since its
last probe or re-verification (``reverify.periodSeconds``), or at once when it is
a suspect (an open suspicion, newer than its last suspect round). A due node is
re-probed only in an *idle window*: two lists of its pods (by ``spec.nodeName``,
the same one list the executor makes before every probe pod) ``idleSeconds``
apart, both without a pod requesting ``nvidia.com/gpu``, the first of them
starting the streak and none in between finding one. No watch on the cluster's
pods: a due node costs one list per ``sampleSeconds`` while busy, two for an idle
window; a node that is not due costs nothing.

:func:`select_for_sampling` is the fleet's decision, per policy: of the due
nodes whose next list is due, at most ``room`` (what the limit and the rate let
gpuaccept take out now, :func:`room`) are listed in a pass, less the nodes in an
idle streak waiting for their confirming list, suspects first (oldest suspicion
first), then the nodes verified longest ago. So the lists a pass makes are bounded
by what could be taken out, and at a reached limit nothing is listed.

:func:`after_sample` is the node's decision on a fresh list: record it, and start
the round when the idle window is complete. The round itself is started by the
node's reconcile under the policy's lock (``take_out_allowed``), as every action
that takes a node out of service.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.contracts.reverify import Reverification, ReverifyStatus, Suspicion
from gpuaccept.operator.core.capacity import (
    REASON_QUARANTINE_LIMIT,
    fleet_limit,
    rate_limit,
    standing_limit,
)
from gpuaccept.operator.core.model import GpuPodSample, QuarantineLimitCounts

__all__ = ["GpuPodSample"]

CAUSE_IDLE = "Idle"
CAUSE_SUSPECT = "Suspect"


@dataclass(frozen=True)
class Candidate:
    """What the schedule reads of one accepted node (plain data)."""

    node: str
    verified: datetime | None  # its last probe, or the start of its last re-verification
    sampled: datetime | None = None  # its pods last listed
    idle_since: datetime | None = None  # the idle streak's first list (None: none)
    suspicion: Suspicion | None = None  # the open suspicion, if any


def open_suspicion(rv: ReverifyStatus | None, policy: Reverification) -> Suspicion | None:
    """The oldest suspicion newer than the node's last suspect round (None: none, or
    suspects are not re-probed under this policy)."""
    if rv is None or not policy.suspects:
        return None
    confirmed = max(
        (r.started for r in (rv.round, rv.last) if r is not None and r.cause == CAUSE_SUSPECT),
        default=None,
    )
    pending = [s for s in rv.suspicions if confirmed is None or s.since > confirmed]
    return min(pending, key=lambda s: s.since, default=None)


def last_verified(st: NodeAcceptanceStatus) -> datetime | None:
    """The node's last probe, or the start of its last re-verification: the period
    counts from the later (a re-verification that gave up counts too: at most one
    try per period)."""
    rv = st.reverify
    times = [t for t in (st.last_probe_time,) if t is not None]
    if rv is not None:
        times += [r.started for r in (rv.round, rv.last) if r is not None]
    return max(times, default=None)


def reverifiable(st: NodeAcceptanceStatus, spec: NodeAcceptancePolicySpec) -> bool:
    """An accepted node in service under a policy that re-verifies: not held by the
    limit (its deferred action comes first), not in a dry run or paused."""
    return (
        spec.reverify.enabled
        and not spec.dry_run
        and not spec.paused
        and st.phase == Phase.ACCEPTED
        and st.reason != REASON_QUARANTINE_LIMIT
    )


def candidate(node: str, st: NodeAcceptanceStatus, policy: Reverification) -> Candidate:
    rv = st.reverify
    return Candidate(
        node=node,
        verified=last_verified(st),
        sampled=rv.sampled_time if rv is not None else None,
        idle_since=rv.idle_since if rv is not None else None,
        suspicion=open_suspicion(rv, policy),
    )


def due_at(c: Candidate, policy: Reverification) -> datetime | None:
    """When the node is due (None: at once, never verified)."""
    if c.suspicion is not None:
        return c.suspicion.since
    if c.verified is None:
        return None
    return c.verified + timedelta(seconds=policy.period_seconds)


def next_sample_at(c: Candidate, policy: Reverification) -> datetime | None:
    """When its pods are to be listed next (None: now). In an idle streak, once the
    streak is ``idleSeconds`` long (the confirming list); else ``sampleSeconds`` after
    the last list."""
    if c.sampled is None:
        return None
    if c.idle_since is not None:
        confirm = c.idle_since + timedelta(seconds=policy.idle_seconds)
        if c.sampled < confirm:
            return confirm
    return c.sampled + timedelta(seconds=policy.sample_seconds)


def ready_at(c: Candidate, policy: Reverification) -> datetime | None:
    """When the node's next list is to be made (None: now)."""
    times = [t for t in (due_at(c, policy), next_sample_at(c, policy)) if t is not None]
    return max(times, default=None)


NEVER = datetime.min.replace(tzinfo=UTC)


def _rank(c: Candidate) -> tuple[int, datetime, str]:
    if c.suspicion is not None:
        return (0, c.suspicion.since, c.node)
    return (1, c.verified or NEVER, c.node)


def room(spec: NodeAcceptancePolicySpec, counts: QuarantineLimitCounts, ceiling: int | str) -> int:
    """How many more in-service nodes of the policy the limit and the rate let
    gpuaccept take out now (``counts`` for the whole policy)."""
    matched = counts.matched
    standing = standing_limit(spec, matched, ceiling) - counts.unavailable
    fleet = fleet_limit(counts, ceiling) - counts.fleet_out
    rate = rate_limit(spec, matched, ceiling) - counts.taken_out_recently
    return max(min(standing, fleet, rate), 0)


def select_for_sampling(
    candidates: Iterable[Candidate], policy: Reverification, slots: int, now: datetime
) -> list[str]:
    """The nodes whose pods are listed in this pass: at most ``slots``, of those due
    whose next list is due, suspects first (oldest suspicion first), then the
    nodes verified longest ago (then by name). A node in an idle streak whose
    confirming list is not due yet holds one of the slots: its round comes first,
    and a list that opened another streak in its place would wait for room."""
    if not policy.enabled:
        return []
    ready = []
    waiting = 0
    for c in candidates:
        at = ready_at(c, policy)
        if at is None or at <= now:
            ready.append(c)
        elif c.idle_since is not None:
            waiting += 1
    ready.sort(key=_rank)
    return [c.node for c in ready[: max(slots - waiting, 0)]]


@dataclass(frozen=True)
class SampleOutcome:
    """What a fresh list makes of the node's status, and whether its idle window is
    complete (the round may start)."""

    status: ReverifyStatus
    start: bool


def after_sample(
    rv: ReverifyStatus | None, sample: GpuPodSample, policy: Reverification
) -> SampleOutcome:
    """Record ``sample``: a GPU pod ends the idle streak; none starts one (or goes
    on with it), and a streak ``idleSeconds`` long completes the idle window."""
    rv = rv or ReverifyStatus()
    if not sample.idle:
        busy = rv.model_copy(
            update={
                "sampled_time": sample.at,
                "idle_since": None,
                "busy_pods": list(sample.gpu_pods[:5]),
            }
        )
        return SampleOutcome(busy, start=False)
    since = rv.idle_since or sample.at
    idle = rv.model_copy(update={"sampled_time": sample.at, "idle_since": since, "busy_pods": []})
    complete = sample.at - since >= timedelta(seconds=policy.idle_seconds)
    return SampleOutcome(idle, start=complete)


def fresh(sample: GpuPodSample | None, rv: ReverifyStatus | None) -> bool:
    """A list newer than the one the status records."""
    if sample is None:
        return False
    recorded = rv.sampled_time if rv is not None else None
    return recorded is None or sample.at > recorded


def targeted_checks(suspicion: Suspicion, enabled: Sequence[str]) -> list[str]:
    """The checks a suspect round runs: the suspicion's, of those the policy runs
    (empty: none of them is enabled; the whole probe then runs)."""
    return [c for c in suspicion.checks if c in enabled]
