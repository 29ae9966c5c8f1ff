"""The re-verification loop (runtime): lists the pods of the accepted nodes the
schedule picks, and hands each list to its node's reconcile.

Every pass (every ``--status-interval`` seconds), per policy with ``reverify.enabled``:
the room the limit and the rate leave (``reverify_schedule.room``, from the
cache's fleet count), and nothing else: the policy's limits bound how many rounds
start, never the loop (a pass lists as many nodes as there is room for, less the
idle streaks waiting for their confirming list; issue 41);
the policy's accepted nodes as candidates (the slim NodeAcceptance views the cache keeps: O(nodes of
the policy) in memory, no request); :func:`select_for_sampling` picks at most that
many; each picked node's running pods are listed once by ``spec.nodeName``
(``Kube.list_running_pods_on_node``, the call the executor makes before every probe
pod), the GPU pods among them kept as a :class:`GpuPodSample`, and the node is
woken. Its reconcile records the list in its status and starts its round when an
idle window is complete (``core/phases/reverifying.py``), under the policy's lock.

A list not yet recorded is not repeated; a list that fails is dropped (the node is
picked again in a later pass). Nothing here is state: the samples are recorded in
the statuses, so a restarted operator picks up where the last one stopped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from kubernetes.client.exceptions import ApiException

from gpuaccept.operator.backgroundloop import every, run_loop
from gpuaccept.operator.cache import Cache
from gpuaccept.operator.core.model import GpuPodSample, OperatorConfig
from gpuaccept.operator.core.reverify_schedule import (
    candidate,
    fresh,
    reverifiable,
    room,
    select_for_sampling,
)
from gpuaccept.operator.executor import gpu_pods
from gpuaccept.operator.faultlog import FailureLog
from gpuaccept.operator.kube import Kube
from gpuaccept.operator.quarantinelimit import QuarantineLimit

log = logging.getLogger("gpuaccept.operator")


class ReverifyLoop:
    def __init__(
        self,
        kube: Kube,
        quarantine_limit: QuarantineLimit,
        config: OperatorConfig,
        *,
        wake: Callable[[str], None],
        leading: Callable[[], bool],
    ) -> None:
        self.kube = kube
        self.quarantine_limit = quarantine_limit
        self.cache: Cache = quarantine_limit.cache
        self.config = config
        self.wake = wake
        self.leading = leading
        self.samples: dict[str, GpuPodSample] = {}
        self.failures = FailureLog("re-verification")

    def sample(self, node: str) -> GpuPodSample | None:
        """The latest list of ``node``'s pods (None: none)."""
        return self.samples.get(node)

    async def run(self, interval: float) -> None:
        await run_loop(self.cache.synced, self.failures, self._pass, every(interval))

    async def _pass(self) -> None:
        if self.leading():
            await self.run_once(datetime.now(UTC))

    def picked(self, now: datetime) -> list[str]:
        """The nodes to list in this pass, over every re-verifying policy."""
        self.cache.settle()
        acceptances = self.cache.acceptances()
        out: list[str] = []
        for entry in self.cache.policies():
            view, spec = entry.view, entry.view.spec
            if spec is None or not spec.reverify.enabled:
                continue
            counts = self.quarantine_limit.counts(view.name, "", now)
            ceiling = self.config.max_unavailable_ceiling
            slots = room(spec, counts, ceiling)
            if slots <= 0:
                continue
            candidates = [
                candidate(na.name, na.status, spec.reverify)
                for na in acceptances
                if na.status.policy == view.name
                and reverifiable(na.status, spec)
                and not fresh(self.samples.get(na.name), na.status.reverify)  # not yet recorded
            ]
            out += select_for_sampling(candidates, spec.reverify, slots, now)
        return out

    async def run_once(self, now: datetime) -> None:
        loop = asyncio.get_running_loop()
        for node in self.picked(now):
            try:
                pods = await loop.run_in_executor(
                    None,
                    self.kube.list_running_pods_on_node,
                    node,  # the API threads
                )
            except ApiException as error:
                log.warning("node=%s cannot list its pods (%s): not sampled", node, error.status)
                continue
            self.samples[node] = GpuPodSample(now, tuple(gpu_pods(pods)))
            self.wake(node)

    def forget(self, node: str) -> None:
        self.samples.pop(node, None)
