"""The quarantine limit's bookkeeping (runtime): its lock and counts (capacity:
every node out of service because of gpuaccept, and the rate's window).

The rule itself is pure (:func:`gpuaccept.operator.core.fleet.quarantine_allowed`);
this gives it the counts, from the cache's incremental fleet count
(:class:`~gpuaccept.operator.core.fleetcount.FleetCount`), which follows every
watch event and every write of this process. A plan that quarantines is
re-planned under the limit's lock (:meth:`QuarantineLimit.lock`), and the
cache counts this process's writes before the counts are read
(:meth:`~gpuaccept.operator.cache.Cache.settle`), so under the lock the counts
are exact: every quarantine goes through it. The lock is one for the whole fleet,
not one per policy: the operator's ceiling counts every policy's nodes together,
so two policies' take-outs must not both read the fleet's count before either
writes (with a lock per policy, two policies' workers could each see room for the
fleet's last slot and both take it).
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from gpuaccept.operator.cache import Cache
from gpuaccept.operator.core.model import QuarantineLimitCounts


class QuarantineLimit:
    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self._lock = asyncio.Lock()

    def lock(self, policy: str) -> asyncio.Lock:
        """The lock a take-out of a node of ``policy`` is re-planned under: the fleet's
        one lock, whatever the policy (the ceiling is fleet-wide)."""
        del policy
        return self._lock

    def counts(self, policy: str, node: str, now: datetime | None = None) -> QuarantineLimitCounts:
        """The nodes of ``policy`` but ``node`` out of service because of gpuaccept, those
        taken out within its rate's window at ``now``, and the nodes it matches:
        O(log n)."""
        self.cache.settle()
        return self.cache.count.limit_counts(policy, node, now)

    def forget(self, policy: str) -> None:
        """A policy is gone: nothing of it is kept here (the lock is the fleet's)."""
        del policy
