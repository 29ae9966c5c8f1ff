"""The quarantine limit's bookkeeping (runtime): who is quarantined, per policy.

The rule itself is pure (:func:`gpuaccept.operator.core.fleet.quarantine_allowed`);
this keeps the counts it is applied to. They are counted once from the cache
(:func:`~gpuaccept.operator.core.fleet.tally`), kept in step with every status
write this process makes (:meth:`QuarantineLedger.track`) and replaced by the
policy status loop's recount. A plan that quarantines is re-planned under the
policy's lock (:meth:`QuarantineLedger.lock`), so under it the counts are
exact: every quarantine goes through it.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping

from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.cache import Cache
from gpuaccept.operator.core.fleet import PolicyTally, tally
from gpuaccept.operator.core.model import Action, BreakerCounts, DeleteNodeAcceptance, PatchNAStatus


class QuarantineLedger:
    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self._quarantined: dict[str, set[str]] = {}
        self._matched: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def lock(self, policy: str) -> asyncio.Lock:
        return self._locks[policy]

    def counts(self, policy: str, node: str) -> BreakerCounts:
        """Quarantined nodes of ``policy`` but ``node``, and the nodes it matches."""
        if policy not in self._quarantined:
            share = tally(self.cache.fleet(), only=policy).get(policy, PolicyTally())
            self._quarantined[policy] = set(share.quarantined)
            self._matched[policy] = share.matched
        quarantined = self._quarantined.get(policy, set())
        return BreakerCounts(
            quarantined=len(quarantined - {node}), matched=self._matched.get(policy, 0)
        )

    def track(self, action: Action) -> None:
        """Keep the per-policy quarantined sets in step with our own writes."""
        if isinstance(action, PatchNAStatus):
            name, status = action.name, action.status
            for policy, members in self._quarantined.items():
                if policy != status.policy or status.phase != Phase.QUARANTINED:
                    members.discard(name)
            # An untracked policy is counted in full from the cache when first needed.
            if status.policy in self._quarantined and status.phase == Phase.QUARANTINED:
                self._quarantined[status.policy].add(name)
        elif isinstance(action, DeleteNodeAcceptance):
            for members in self._quarantined.values():
                members.discard(action.name)

    def replace(self, tallies: Mapping[str, PolicyTally]) -> None:
        """The policy loop's recount (done without an await in between)."""
        for name, share in tallies.items():
            self._quarantined[name] = set(share.quarantined)
            self._matched[name] = share.matched

    def forget(self, policy: str) -> None:
        self._quarantined.pop(policy, None)
        self._matched.pop(policy, None)
