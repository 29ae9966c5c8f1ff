"""``evaluate``: an accepted node's in-service ledger, verdict and suspects (pure).

From the policy section, the ledger as stored, the Node's signals, the new watch
reports and the time, :func:`evaluate` gives the new ledger, the verdict (or none)
and the suspects, the same whatever order the reports come in, however often one
is replayed, and after a restart (the ledger is all it remembers, in the status).

A new boot (a repair) or a new acceptance starts a new ledger: the node came back
through the acceptance probe, and what happened before does not count again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpuaccept.contracts.inservice import (
    InService,
    InServiceEvent,
    InServiceStatus,
    InServiceSuspect,
    InServiceVerdict,
)
from gpuaccept.operator.core.inservice.correlation import Fleet, common_cause, suspect_signature
from gpuaccept.operator.core.inservice.dra import (
    new_driver_taints,
    taint_findings,
    with_driver_taints,
)
from gpuaccept.operator.core.inservice.evidence import REPORTED, Finding, NodeSignals
from gpuaccept.operator.core.inservice.signals import next_expiry, signal_findings, timed
from gpuaccept.operator.core.inservice.xids import (
    counted,
    history,
    pruned,
    state_findings,
    suspects,
    xid_findings,
)
from gpuaccept.operator.core.model import SignatureSeen, WatchEvidence


@dataclass(frozen=True)
class Observed:
    """What the rules read besides the ledger: the Node's signals, the new watch
    reports, the time, this node's name, the fleet it is correlated with, and the GPUs
    fenced already (their findings are left out: core/inservice/gpufence.py)."""

    signals: NodeSignals
    now: datetime
    reports: tuple[WatchEvidence, ...] = ()
    node: str = ""
    fleet: Fleet = field(default_factory=Fleet)
    fenced: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Evaluation:
    ledger: InServiceStatus  # the new ledger (its verdict and suspects included)
    verdict: InServiceVerdict | None  # None: the node stays in service
    suspects: tuple[InServiceSuspect, ...]
    wake_in: float | None  # seconds until a running timer expires or a verdict settles
    # every finding the verdict rests on (its main one first), the fenced GPUs' left out
    findings: tuple[Finding, ...] = ()


def _signal_events(ledger: InServiceStatus) -> list[InServiceEvent]:
    """A history entry for each running signal timer, at its start."""
    events = []
    if ledger.unallocatable_since is not None:
        events.append(
            InServiceEvent(what="GPUsUnallocatable", kind="signal", time=ledger.unallocatable_since)
        )
    for timer in ledger.conditions:
        events.append(
            InServiceEvent(
                what=f"condition {timer.type}={timer.status}", kind="signal", time=timer.since
            )
        )
    return events


def _kept(old: InServiceVerdict | None, findings: list[Finding]) -> list[Finding]:
    """A reported verdict stays (what happened stays true until a new boot or
    acceptance) even when its evidence has left the bounded history."""
    if old is None or old.reason not in REPORTED:
        return findings
    if any((f.reason, f.signature) == (old.reason, old.signature) for f in findings):
        return findings
    return [*findings, Finding(old.reason, old.message, old.signature, old.window_start, old.gpu)]


def _verdict(
    findings: list[Finding], old: InServiceVerdict | None, obs: Observed, policy: InService
) -> InServiceVerdict | None:
    if not findings:
        return None
    ordered = sorted(findings, key=lambda f: f.rank)
    main = ordered[0]
    message = "; ".join(f.message for f in ordered)[:512]
    seen = SignatureSeen(obs.node, main.signature, main.start)
    shared = common_cause(seen, obs.fleet, policy.correlation)
    pending = shared is None and obs.now < settles(main.start, policy)
    if shared is not None:
        message = f"common cause: {main.signature} on {shared} nodes; {message}"[:512]
    elif pending:
        message = f"settling (correlation): {message}"[:512]
    # the same verdict keeps its window_end: a pending one too, else every pass while
    # it settles would write a new status (and wake the next pass at once)
    same = old is not None and (old.reason, old.signature, old.window_start, old.pending) == (
        main.reason,
        main.signature,
        main.start,
        pending,
    )
    return InServiceVerdict(
        reason=main.reason,
        message=message,
        signature=main.signature,
        window_start=main.start,
        window_end=old.window_end if same and old is not None else obs.now,
        gpu=main.gpu,
        common_cause=shared is not None,
        pending=pending,
    )


def settles(onset: datetime, policy: InService) -> datetime:
    """When a verdict resting on evidence from ``onset`` is applied: after
    ``correlation.settleSeconds``, once the other nodes' reports of a simultaneous
    event have arrived (no wait when correlation is off)."""
    wait = policy.correlation.settle_seconds if policy.correlation.enabled else 0
    return onset + timedelta(seconds=wait)


def _wake_in(
    verdict: InServiceVerdict | None, timer: float | None, now: datetime, policy: InService
) -> float | None:
    """The earlier of a running timer's expiry and a pending verdict's settling."""
    if verdict is None or not verdict.pending:
        return timer
    settling = (settles(verdict.window_start, policy) - now).total_seconds()
    return settling if timer is None else min(timer, settling)


def _suspects(
    found: Iterable[InServiceSuspect], obs: Observed, policy: InService
) -> list[InServiceSuspect]:
    marked = []
    for suspect in found:
        seen = SignatureSeen(obs.node, suspect_signature(suspect.xid), suspect.since)
        shared = common_cause(seen, obs.fleet, policy.correlation)
        marked.append(suspect.model_copy(update={"common_cause": shared is not None}))
    return marked


def evaluate(policy: InService, ledger: InServiceStatus, obs: Observed) -> Evaluation:
    """The new ledger, the verdict and the suspects of a node in service at ``obs.now``."""
    now, signals = obs.now, obs.signals
    for report in sorted(obs.reports, key=lambda r: (r.start, r.key)):
        ledger = counted(ledger, report, policy.xid)
    ledger = timed(pruned(ledger, policy.xid, now), policy, signals, now)
    ledger = with_driver_taints(ledger, new_driver_taints(ledger, signals.dra, now))
    ledger = ledger.model_copy(
        update={"events": history([*ledger.events, *_signal_events(ledger)])}
    )
    findings = xid_findings(ledger, policy.xid, now) + state_findings(ledger, policy.gpu_state)
    findings += signal_findings(ledger, policy, signals, now) + taint_findings(ledger)
    # A fenced GPU is out of service already: its findings neither fence it again nor
    # take the node out (only a passing probe ends its fence).
    live = [f for f in _kept(ledger.verdict, findings) if f.gpu not in obs.fenced]
    verdict = _verdict(live, ledger.verdict, obs, policy)
    unfenced = [s for s in suspects(ledger, policy.xid, now) if s.gpu not in obs.fenced]
    found = _suspects(unfenced, obs, policy)
    ledger = ledger.model_copy(update={"verdict": verdict, "suspects": found})
    wake_in = _wake_in(verdict, next_expiry(ledger, policy, now), now, policy)
    ordered = tuple(sorted(live, key=lambda f: f.rank))
    return Evaluation(ledger, verdict, tuple(found), wake_in, ordered)
