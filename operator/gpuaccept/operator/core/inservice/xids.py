"""Watch reports into the ledger, and the Xid rules over it (pure).

* :func:`counted`: a report is counted once (its pod UID and window), only for the
  ledger's boot;
* :func:`with_xid`: one event into the bursts, merged with every burst of the same
  Xid on the same GPU less than ``burstMergeSeconds`` away (single-linkage
  clustering of the event times: the same bursts whatever order the events come in);
* :func:`xid_findings`: fatal on the first event, repeated hardware in bursts,
  memory-state Xids never (their durable state decides: :func:`state_findings`),
  application-class never (:func:`suspects`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from gpuaccept.contracts.inservice import (
    MAX_BURSTS,
    MAX_EVENTS,
    MAX_REPORTS,
    GpuStateRules,
    InServiceEvent,
    InServiceStatus,
    InServiceSuspect,
    XidBurst,
    XidRules,
)
from gpuaccept.operator.core.inservice.evidence import (
    REASON_ECC_UNCORRECTED,
    REASON_FABRIC,
    REASON_GPU_LOST,
    REASON_NVLINK_DOWN,
    REASON_NVLINK_ERRORS,
    REASON_RECOVERY_ACTION,
    REASON_REMAP_FAILURE,
    REASON_REMAP_PENDING,
    REASON_XID_FATAL,
    REASON_XID_REPEATED,
    Finding,
)
from gpuaccept.operator.core.model import GpuStateSeen, WatchEvidence, XidSeen

# The states that always quarantine, whatever the policy: a GPU gone, a remap failed.
STATE_REASONS = {"GPULost": REASON_GPU_LOST, "RowRemapFailure": REASON_REMAP_FAILURE}
# Xid classes the ledger keeps bursts of (the others are history only).
COUNTED = frozenset({"fatal", "repeated", "application"})


def _gap(burst: XidBurst, first: datetime, last: datetime) -> float:
    """Seconds between ``burst`` and the span first..last (0 when they overlap)."""
    if last < burst.first:
        return (burst.first - last).total_seconds()
    if first > burst.last:
        return (first - burst.last).total_seconds()
    return 0.0


def with_xid(bursts: Iterable[XidBurst], seen: XidSeen, merge_seconds: int) -> list[XidBurst]:
    """``bursts`` with ``seen`` merged in: every burst of its GPU and Xid closer than
    ``merge_seconds`` joins the new one (which may bridge two)."""
    merged = XidBurst(gpu=seen.gpu, xid=seen.xid, kind=seen.kind, first=seen.at, last=seen.at)
    kept: list[XidBurst] = []
    for burst in bursts:
        same = (burst.gpu, burst.xid, burst.kind) == (seen.gpu, seen.xid, seen.kind)
        if same and _gap(burst, merged.first, merged.last) < max(merge_seconds, 1e-9):
            merged = XidBurst(
                gpu=burst.gpu,
                xid=burst.xid,
                kind=burst.kind,
                first=min(burst.first, merged.first),
                last=max(burst.last, merged.last),
                events=burst.events + merged.events,
            )
        else:
            kept.append(burst)
    return _order([*kept, merged])


def _order(bursts: Iterable[XidBurst]) -> list[XidBurst]:
    return sorted(bursts, key=lambda b: (b.first, b.gpu, b.xid, b.last, b.events))


def _event(seen: XidSeen) -> InServiceEvent:
    return InServiceEvent(
        what=f"Xid {seen.xid}", kind=seen.kind, time=seen.at, gpu=seen.gpu, xid=seen.xid
    )


def _state_event(state: GpuStateSeen, at: datetime) -> InServiceEvent:
    what = state.what + (f" ({state.detail})" if state.detail else "")
    return InServiceEvent(what=what[:96], kind="state", time=at, gpu=state.gpu)


def history(events: Iterable[InServiceEvent]) -> list[InServiceEvent]:
    """The latest :data:`MAX_EVENTS` events, oldest first, each once."""
    unique = {(e.time, e.what, e.gpu or "", e.kind): e for e in events}
    ordered = sorted(unique.values(), key=lambda e: (e.time, e.what, e.gpu or "", e.kind))
    return ordered[-MAX_EVENTS:]


def _states_once(events: Iterable[InServiceEvent]) -> list[InServiceEvent]:
    """``events`` with each state (the same state of the same GPU) once, at its latest
    sighting: a state that lasts fills one entry of the bounded history, not one per
    window. (The latest, not the first: with the history's bound that gives the same
    history whatever order the reports are counted in.)"""
    latest: dict[tuple[str, str], InServiceEvent] = {}
    others: list[InServiceEvent] = []
    for event in events:
        if event.kind != "state":
            others.append(event)
            continue
        key = (event.what, event.gpu or "")
        if key not in latest or event.time > latest[key].time:
            latest[key] = event
    return [*others, *latest.values()]


def counted(ledger: InServiceStatus, report: WatchEvidence, rules: XidRules) -> InServiceStatus:
    """``ledger`` with ``report`` counted: its Xids in the bursts, its events and
    state in the history, what it could not read. A report already counted, or of
    another boot, changes nothing."""
    if report.key in ledger.reports or report.boot_id != ledger.boot_id:
        return ledger
    bursts = list(ledger.bursts)
    for seen in sorted(report.xids, key=lambda s: (s.at, s.gpu, s.xid)):
        if seen.kind in COUNTED:
            bursts = with_xid(bursts, seen, rules.burst_merge_seconds)
    events = [*ledger.events, *(_event(s) for s in report.xids)]
    events += [_state_event(s, report.end) for s in report.state]
    latest = ledger.reported_until is None or report.end >= ledger.reported_until
    update: dict[str, object] = {
        "bursts": _order(bursts)[-MAX_BURSTS:],
        "events": history(_states_once(events)),
        "reports": sorted({*ledger.reports, report.key})[-MAX_REPORTS:],
    }
    if latest:
        update["reported_until"] = report.end
        update["not_read"] = dict(report.not_read)
    return ledger.model_copy(update=update)


def pruned(ledger: InServiceStatus, rules: XidRules, now: datetime) -> InServiceStatus:
    """``ledger`` without the bursts no rule counts any more (fatal ones stay: the
    evidence of a verdict lasts until a new boot or a new acceptance)."""
    keep = timedelta(seconds=max(rules.repeated_window_seconds, rules.application_window_seconds))
    bursts = [b for b in ledger.bursts if b.kind == "fatal" or b.last >= now - keep]
    return ledger.model_copy(update={"bursts": bursts})


def xid_findings(ledger: InServiceStatus, rules: XidRules, now: datetime) -> list[Finding]:
    """The verdicts the ledger's Xid bursts give now: every fatal Xid, and every
    repeated-hardware Xid with ``repeatedBursts`` bursts on one GPU in the window."""
    findings = [
        Finding(
            REASON_XID_FATAL,
            f"Xid {b.xid} (fatal) on GPU {b.gpu} at {b.first.isoformat()}",
            f"{REASON_XID_FATAL}:{b.xid}",
            b.first,
            b.gpu,
        )
        for b in ledger.bursts
        if b.kind == "fatal"
    ]
    since = now - timedelta(seconds=rules.repeated_window_seconds)
    groups: dict[tuple[str, int], list[XidBurst]] = {}
    for burst in ledger.bursts:
        if burst.kind == "repeated" and burst.last >= since:
            groups.setdefault((burst.gpu, burst.xid), []).append(burst)
    for (gpu, xid), bursts in sorted(groups.items()):
        if len(bursts) >= rules.repeated_bursts:
            first = min(b.first for b in bursts)
            message = (
                f"Xid {xid} in {len(bursts)} bursts on GPU {gpu} within "
                f"{rules.repeated_window_seconds}s (xid.repeatedBursts {rules.repeated_bursts})"
            )
            findings.append(
                Finding(REASON_XID_REPEATED, message, f"{REASON_XID_REPEATED}:{xid}", first, gpu)
            )
    return findings


def _state_reason(what: str, detail: str, rules: GpuStateRules) -> str | None:
    """The reason a durable state quarantines with under ``rules``, or None (recorded)."""
    if what in ("GPULost", "RowRemapFailure"):
        return STATE_REASONS[what]
    if what == "RowRemapPending":
        return REASON_REMAP_PENDING if rules.remap_pending else None
    if what == "RecoveryAction":
        return REASON_RECOVERY_ACTION if detail in rules.recovery_actions else None
    if what == "EccUncorrected":
        return REASON_ECC_UNCORRECTED if rules.ecc_uncorrected else None
    if what == "NVLinkDown":
        return REASON_NVLINK_DOWN if rules.nvlink_down else None
    if what == "NVLinkErrors":
        return REASON_NVLINK_ERRORS if _over(detail, rules) else None
    if what == "Fabric":
        return REASON_FABRIC if _fabric_fails(detail, rules) else None
    return None  # EccContained: recorded


def _fabric_conditions(detail: str) -> set[str]:
    """The watch's fabric text as conditions: ``completed:route_unhealthy,unhealthy``,
    ``completed:status5`` (registration_failed); a state (in_progress, not_started)
    has none."""
    state, _, rest = detail.partition(":")
    if state != "completed" or not rest:
        return set()
    if rest.startswith("status"):
        return {"registration_failed"}
    return set(rest.split(","))


def _fabric_fails(detail: str, rules: GpuStateRules) -> bool:
    return bool(_fabric_conditions(detail) & set(rules.fabric_fail_on))


def _over(detail: str, rules: GpuStateRules) -> bool:
    """NVLink error increases (``replay=2,recovery=1``) over the policy's bounds."""
    for part in detail.split(","):
        name, _, count = part.partition("=")
        bound = rules.nvlink_errors_fail_above.get(name)  # type: ignore[call-overload]
        if bound is not None and count.isdigit() and int(count) > bound:
            return True
    return False


def state_detail(what: str) -> tuple[str, str]:
    """A state event's ``what`` split into the state and its detail."""
    name, _, rest = what.partition(" ")
    return name, rest.removeprefix("(").removesuffix(")")


def state_findings(ledger: InServiceStatus, rules: GpuStateRules) -> list[Finding]:
    """The verdicts the durable state in the ledger's history gives under ``rules``
    (``inService.gpuState``): a remap failed, a GPU lost, and what the policy says of
    a pending remap, a recovery action, uncorrected ECC errors and NVLinks."""
    found: dict[tuple[str, str], Finding] = {}
    for event in ledger.events:
        if event.kind != "state":
            continue
        reason = _state_reason(*state_detail(event.what), rules)
        if reason is None:
            continue
        finding = Finding(reason, f"{event.what} on GPU {event.gpu}", reason, event.time, event.gpu)
        key = (reason, event.gpu or "")
        if key not in found or finding.start < found[key].start:
            found[key] = finding
    return list(found.values())


def suspects(ledger: InServiceStatus, rules: XidRules, now: datetime) -> list[InServiceSuspect]:
    """Application-class Xids repeated on one GPU: ``applicationSuspectCount`` events
    of one Xid on one GPU within the window. Never a verdict."""
    since = now - timedelta(seconds=rules.application_window_seconds)
    counts: dict[tuple[str, int], tuple[int, datetime]] = {}
    for burst in ledger.bursts:
        if burst.kind == "application" and burst.last >= since:
            events, first = counts.get((burst.gpu, burst.xid), (0, burst.first))
            counts[(burst.gpu, burst.xid)] = (events + burst.events, min(first, burst.first))
    return [
        InServiceSuspect(gpu=gpu, xid=xid, count=events, since=first)
        for (gpu, xid), (events, first) in sorted(counts.items())
        if events >= rules.application_suspect_count
    ]
