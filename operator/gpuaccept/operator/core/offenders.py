"""Repeat offenders (pure): a node that keeps coming back from quarantine needs a person.

In the shape of NVSentinel's ``MultipleRemediations`` rule (a node remediated
more than once within 7 days is sent to a person, and the condition is cleared
by a person only): a node quarantined ``repeatOffenders.count`` times within
``windowSeconds`` (``status.reverify.quarantines``) is not accepted again by a
passing probe, whatever repaired it (a reboot, a re-probe): it stays quarantined
with reason ``RepeatedQuarantine``, whose remedy is a person. A person's release
(``kubectl gpuaccept release``, recorded in ``status.release``: who and when) after
those quarantines lets the next passing probe accept it, and starts the count over.

The same rule per GPU, for ``fencing.mode: gpu``: a GPU fenced (by the
acceptance probe or in service) whose fence was lifted by a passing probe, and that is
to be fenced again, is a repeat offender when this fence would be its ``count``-th within
``windowSeconds`` after the last release (``status.reverify.gpuFences``, by UUID): the
node is quarantined instead, reason ``RepeatedFence`` (:func:`repeat_fence`), and, as
``RepeatedQuarantine``, no passing probe accepts it until a person releases it
(:func:`fence_offence`). A fence that stands (the GPU still fenced when a verdict names
it again) is not a new fence. Fences of different GPUs are each their own GPU's
history: they do not add up (a node whose GPUs fail one after another is bounded by
``maxFencedGpus`` at once, and by its own quarantines over time).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus
from gpuaccept.contracts.reverify import (
    MAX_FENCE_HISTORY,
    MAX_HISTORY,
    GpuFence,
    RepeatOffenders,
)

REASON_REPEATED_QUARANTINE = "RepeatedQuarantine"
REASON_REPEATED_FENCE = "RepeatedFence"
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


def _fences_of(
    uuid: str,
    fences: Iterable[GpuFence],
    released: datetime | None,
    policy: RepeatOffenders,
    now: datetime,
) -> list[datetime]:
    """The fences of GPU ``uuid`` the rule counts (within the window, after the last
    release by a person)."""
    return counted_quarantines([f.time for f in fences if f.uuid == uuid], released, policy, now)


def _days(policy: RepeatOffenders) -> str:
    return f"{policy.window_seconds / 86400:g}"


def repeat_fence(
    uuids: Iterable[str],
    fences: Sequence[GpuFence],
    released: datetime | None,
    policy: RepeatOffenders,
    now: datetime,
) -> str | None:
    """Why fencing the GPUs ``uuids`` now quarantines the node instead (None: they may be
    fenced): for one of them this fence is its ``count``-th within the window."""
    if not policy.enabled:
        return None
    for uuid in uuids:
        counted = _fences_of(uuid, fences, released, policy, now)
        if len(counted) + 1 >= policy.count:
            return (
                f"GPU {uuid} fenced {len(counted) + 1} times within {_days(policy)} days "
                f"(repeatOffenders.count {policy.count}), this time included: whatever "
                "lifted its fence did not last, so the node is quarantined; a person must "
                "look at it and release it"
            )
    return None


def fence_offence(
    fences: Sequence[GpuFence],
    released: datetime | None,
    policy: RepeatOffenders,
    now: datetime,
) -> str | None:
    """Why a passing probe may not accept the node (None: it may): one of its GPUs was
    fenced ``count`` times within the window (the last one escalated to the node)."""
    if not policy.enabled:
        return None
    for uuid in sorted({f.uuid for f in fences}):
        counted = _fences_of(uuid, fences, released, policy, now)
        if len(counted) >= policy.count:
            return (
                f"GPU {uuid} fenced {len(counted)} times within {_days(policy)} days "
                f"(repeatOffenders.count {policy.count}), the last at "
                f"{counted[-1].isoformat()}: whatever repaired it did not last; a person "
                "must look at it and release it"
            )
    return None


def with_fences(fences: Sequence[GpuFence], uuids: Iterable[str], at: datetime) -> list[GpuFence]:
    """The history with a fence of each of ``uuids`` at ``at`` (the latest ones kept)."""
    added = [*fences, *(GpuFence(uuid=u, time=at) for u in uuids)]
    return sorted(added, key=lambda f: (f.time, f.uuid))[-MAX_FENCE_HISTORY:]
