"""The quarantine limit's bookkeeping (runtime): the per-policy locks and counts
(capacity: every node out of service because of gpuaccept, and the rate's window).

The rule itself is pure (:func:`gpuaccept.operator.core.fleet.quarantine_allowed`);
this gives it the counts, from the cache's incremental fleet count
(:class:`~gpuaccept.operator.core.fleetcount.FleetCount`), which follows every
watch event and every write of this process. A plan that quarantines is
re-planned under the policy's lock (:meth:`QuarantineLimit.lock`), and the
cache counts this process's writes before the counts are read
(:meth:`~gpuaccept.operator.cache.Cache.settle`), so under the lock the counts
are exact: every quarantine goes through it.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import datetime

from gpuaccept.operator.cache import Cache
from gpuaccept.operator.core.model import QuarantineLimitCounts


class QuarantineLimit:
    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self._locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def lock(self, policy: str) -> asyncio.Lock:
        return self._locks[policy]

    def counts(self, policy: str, node: str, now: datetime | None = None) -> QuarantineLimitCounts:
        """The nodes of ``policy`` but ``node`` out of service because of gpuaccept, those
        taken out within its rate's window at ``now``, and the nodes it matches:
        O(log n)."""
        self.cache.settle()
        return self.cache.count.limit_counts(policy, node, now)

    def forget(self, policy: str) -> None:
        lock = self._locks.get(policy)
        if lock is not None and not lock.locked():
            del self._locks[policy]
