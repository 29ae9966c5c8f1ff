"""The policy status loop (runtime): every few seconds, each policy's counts,
conflicts and conditions are computed by the pure fleet rules
(:mod:`gpuaccept.operator.core.fleet`) from the cache's incremental fleet
count (no walk over the fleet), and written when they changed. It also sets
the policy gauges, publishes the per-node series when a NodeAcceptance
changed, and wakes nodes held by the quarantine limit once there is room.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from gpuaccept.contracts.api import API_VERSION, POLICY_KIND
from gpuaccept.operator import metrics
from gpuaccept.operator.backgroundloop import every, run_loop
from gpuaccept.operator.core import fleet
from gpuaccept.operator.faultlog import FailureLog
from gpuaccept.operator.kube import EventRecord, Kube
from gpuaccept.operator.quarantinelimit import QuarantineLimit
from gpuaccept.operator.views import PolicyEntry

log = logging.getLogger("gpuaccept.operator")


@dataclass(frozen=True)
class StatusWriter:
    """Where policy statuses and their Events go: the API client, the API threads
    (None: the loop's default), this replica's name in Events."""

    kube: Kube
    executor: ThreadPoolExecutor | None = None
    identity: str = "gpuaccept"


class PolicyStatusLoop:
    def __init__(
        self,
        writer: StatusWriter,
        quarantine_limit: QuarantineLimit,
        *,
        wake: Callable[[str], None],
        leading: Callable[[], bool],
        unmatched_grace_seconds: float = 900.0,
    ) -> None:
        self.kube = writer.kube
        self.executor = writer.executor
        self.identity = writer.identity
        self.cache = quarantine_limit.cache
        self.quarantine_limit = quarantine_limit
        self.wake = wake
        self.leading = leading
        self._reported: set[str] = set()
        self._published = -1  # the cache's acceptances_changes last published
        self.failures = FailureLog("policy status update")
        self.unmatched_grace_seconds = unmatched_grace_seconds
        # the operator's --max-unavailable-ceiling (set by the controller): a node the
        # fleet's ceiling holds is not woken
        self.ceiling: int | str = "100%"
        # the operator's --allow-control-plane-nodes (set by the controller)
        self.allow_control_plane = False
        self._unmatched: tuple[str, ...] = ()  # reported in the log, by the leader
        self._calls_logged: tuple[float, dict[str, int]] | None = None  # when, and what

    async def run(self, interval: float) -> None:
        await run_loop(
            self.cache.synced,
            self.failures,
            self.update,
            every(interval),
            wait_turn=self._log_calls,
        )

    async def _log_calls(self) -> bool:
        """Before a pass: the API calls so far, at most once a minute and when they
        changed (counted from the first pass)."""
        if self._calls_logged is None:
            self._calls_logged = (time.monotonic(), dict(self.kube.calls))
        last_logged, last_calls = self._calls_logged
        if time.monotonic() - last_logged >= 60 and dict(self.kube.calls) != last_calls:
            self._calls_logged = (time.monotonic(), dict(self.kube.calls))
            log.info("API calls so far: %s", json.dumps(self._calls_logged[1], sort_keys=True))
        return True

    async def update(self) -> None:
        """Counts, limit and conflicts per policy; patched only when changed."""
        entries = self.cache.policies()
        self.cache.refresh_policies()
        self.cache.settle()
        tallies = self.cache.count.tally()
        if self.cache.acceptances_changes != self._published:
            self._published = self.cache.acceptances_changes
            metrics.publish_nodes(self.cache.acceptances())
        self.report_unmatched(datetime.now(UTC))
        current = {entry.view.name for entry in entries}
        for gone in self._reported - current:  # a deleted policy: drop its series
            metrics.forget_policy(gone)
            self.quarantine_limit.forget(gone)
        self._reported = current
        for entry in entries:
            share = tallies[entry.view.name]
            metrics.record_policy(entry.view.name, share)
            for node in fleet.held_to_release(entry.view, share, self.ceiling):
                self.wake(node)
            if self.leading():
                await self._write(entry, share)

    def report_unmatched(self, now: datetime) -> None:
        """The nodes under a pending taint that no policy matches, past the grace:
        their series, and one log line (on the leader) when a node starts or stops
        being one. O(such nodes): the fleet count keeps them."""
        stuck = fleet.unmatched_past_grace(
            self.cache.count.unmatched_pending(), now, self.unmatched_grace_seconds
        )
        metrics.publish_unmatched(stuck)
        if not self.leading() or stuck == self._unmatched:
            return
        for node in sorted(set(stuck) - set(self._unmatched)):
            log.warning(
                "node %s carries a pending taint and no policy matches it (registered over "
                "%ds ago): it stays out of service and is never probed; label it for a "
                "policy or take the taint off (docs/runbook.md, a node no policy matches)",
                node,
                self.unmatched_grace_seconds,
            )
        for node in sorted(set(self._unmatched) - set(stuck)):
            log.info("node %s: no longer an unmatched node under a pending taint", node)
        self._unmatched = stuck

    async def _write(self, entry: PolicyEntry, share: fleet.PolicyTally) -> None:
        view, old = entry.view, entry.status
        now = datetime.now(UTC)
        status = fleet.policy_status(
            view, share, old, now, allow_control_plane=self.allow_control_plane
        )
        wire = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        if fleet.same_status(old, wire):
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.executor, self.kube.patch_policy_status, view.name, wire)
        if fleet.quarantine_limit_just_reached(old, status):
            reached = next(c for c in status.conditions if c.type == "BreakerOpen")
            await loop.run_in_executor(
                self.executor,
                lambda: self.kube.create_event(
                    EventRecord(
                        kind=POLICY_KIND,
                        api_version=API_VERSION,
                        name=view.name,
                        uid=entry.uid,
                        type="Warning",
                        reason="BreakerOpen",
                        message=reached.message,
                    ),
                    now=now,
                    reporting_instance=self.identity,
                ),
            )
