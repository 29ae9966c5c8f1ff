"""Repeat offenders (pure): a node that keeps coming back from quarantine needs a person.

In the shape of NVSentinel's ``MultipleRemediations`` rule (a node remediated
more than once within 7 days is sent to a person, and the condition is cleared
by a person only): a node quarantined ``repeatOffenders.count`` times within
``windowSeconds`` (``status.reverify.quarantines``) is not accepted again by a
passing probe, whatever repaired it (a reboot, a re-probe): it stays quarantined
with reason ``RepeatedQuarantine``, whose remedy is a person. A person's release
(``kubectl gpuaccept release``, recorded in ``status.release``: who and when) after
those quarantines lets the next passing probe accept it, and starts the count over.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus
from gpuaccept.contracts.reverify import MAX_HISTORY, RepeatOffenders

REASON_REPEATED_QUARANTINE = "RepeatedQuarantine"
REPEAT_CHECK = "repeat_offenders"


def last_release(status: NodeAcceptanceStatus) -> datetime | None:
    """When a person last released the node (``status.release``), if ever."""
    return status.release.released_time if status.release is not None else None


def counted_quarantines(
    quarantines: Sequence[datetime],
    released: datetime | None,
    policy: RepeatOffenders,
    now: datetime,
) -> list[datetime]:
    """The quarantines the rule counts: within the window, after the last release
    by a person."""
    since = now - timedelta(seconds=policy.window_seconds)
    return sorted(q for q in quarantines if q >= since and (released is None or q > released))


def repeat_offence(
    quarantines: Sequence[datetime],
    released: datetime | None,
    policy: RepeatOffenders,
    now: datetime,
) -> str | None:
    """Why a passing probe may not accept the node (None: it may)."""
    if not policy.enabled:
        return None
    counted = counted_quarantines(quarantines, released, policy, now)
    if len(counted) < policy.count:
        return None
    days = policy.window_seconds / 86400
    return (
        f"quarantined {len(counted)} times within {days:g} days (repeatOffenders.count "
        f"{policy.count}), the last at {counted[-1].isoformat()}: whatever repaired it did "
        "not last; a person must look at it and release it"
    )


def with_quarantine(quarantines: Sequence[datetime], at: datetime) -> list[datetime]:
    """The history with one more quarantine at ``at`` (the latest ones kept)."""
    return sorted([*quarantines, at])[-MAX_HISTORY:]
