"""The controller: feeds observed state to the pure reconcile core and executes plans.

kopf keeps the cache (:mod:`.cache`) and calls ``enqueue`` from
``@kopf.on.event`` handlers. A bounded pool of asyncio workers takes node
names from a de-duplicating work queue (:mod:`.workqueue`), builds the
observed state from the cache, runs the pure ``reconcile`` and executes the
plan's writes through the action interpreter (:mod:`.executor`) in a bounded
thread pool (the ``kubernetes`` client blocks; the event loop never does).
Time-based wake-ups (deadlines, backoff) go into the queue's single delay
heap, rebuilt from NodeAcceptance status on start because every object is
reconciled once after the initial listing.

A plan that quarantines is re-planned and executed under its policy's lock
with exact counts (:mod:`.quarantinelimit`); the policy status loop
(:mod:`.policystatus`) writes each policy's status. Writes are reflected at
once in the cache's write-through overlay, so the next pass does not act on a
stale cache.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from kubernetes.client.exceptions import ApiException

from gpuaccept.operator import metrics
from gpuaccept.operator.actionrunner import ActionRunner, RunResult
from gpuaccept.operator.cache import (
    NAS_INDEX,
    NODES_INDEX,
    PODS_INDEX,
    POLICIES_INDEX,
    Cache,
    Unlisted,
    index_na,
    index_node,
    index_pod,
    index_policy,
)
from gpuaccept.operator.core.fleet import matching_policies
from gpuaccept.operator.core.model import (
    Judge,
    NodeSnapshot,
    OperatorConfig,
    Plan,
    PolicyView,
    QuarantineLimitCounts,
    SignatureSeen,
)
from gpuaccept.operator.core.podspec import PROBE_SELECTOR
from gpuaccept.operator.core.reconcile import reconcile
from gpuaccept.operator.executor import KubeExecutor, api_message
from gpuaccept.operator.fabricloop import FabricLoop
from gpuaccept.operator.faultlog import FailureLog, log_failure, log_recovery
from gpuaccept.operator.kube import (
    ORIGIN_INSTALLATION_LOCK,
    ORIGIN_LEADER_ELECTION,
    ORIGIN_POLICY_STATUS,
    ORIGIN_RELIST_CHECK,
    ORIGIN_REVERIFY_LIST,
    Kube,
    request_origin,
)
from gpuaccept.operator.leader import InstallationLock, LeaderElector, LeaseSettings
from gpuaccept.operator.policystatus import PolicyStatusLoop, StatusWriter
from gpuaccept.operator.quarantinelimit import QuarantineLimit
from gpuaccept.operator.reverifyloop import ReverifyLoop
from gpuaccept.operator.workqueue import WorkQueue

__all__ = [
    "NAS_INDEX",
    "NODES_INDEX",
    "PODS_INDEX",
    "POLICIES_INDEX",
    "Cache",
    "Controller",
    "RuntimeSettings",
    "index_na",
    "index_node",
    "index_pod",
    "index_policy",
]

log = logging.getLogger("gpuaccept.operator")

MAX_PASSES = 8
RELIST_CHECK_SECONDS = 5.0  # how often a quiet relist's unlisted entries are looked for


@dataclass(frozen=True)
class RuntimeSettings:
    """How the controller runs (never what it decides)."""

    workers: int = 16
    status_interval: float = 5.0  # seconds between policy status passes
    identity: str = "gpuaccept"  # this replica, as Events and the Lease name it
    # A node under a pending taint that no policy matches is reported after this long
    # from its registration (--unmatched-grace).
    unmatched_grace_seconds: float = 900.0
    # The cluster-wide Lease only one installation may hold (leader.InstallationLock).
    installation_lock: LeaseSettings | None = None


class Controller:
    def __init__(
        self,
        kube: Kube,
        config: OperatorConfig,
        judge: Judge,
        *,
        runtime: RuntimeSettings | None = None,
        lease: LeaseSettings | None = None,
    ) -> None:
        runtime = runtime or RuntimeSettings()
        self.kube = kube
        self.config = config
        self.judge = judge
        self.runtime = runtime
        # None: standalone, always leading.
        self.leader = (
            LeaderElector(
                kube.for_origin(ORIGIN_LEADER_ELECTION), lease, on_change=self.on_leadership
            )
            if lease is not None
            else None
        )
        # None: no lock (one installation assumed); else only while it holds it.
        self.installation_lock = self._installation_lock(runtime.installation_lock)
        # The seed of the nonces of this process's creates (core/creationintent.py):
        # drawn once, so a watch pod's intent recorded a window before its create
        # matches it (core/inservice/phase.py); never stored.
        self.nonce_seed = secrets.token_hex(32)
        self.cache = Cache()
        self.queue = WorkQueue()
        self.executor = ThreadPoolExecutor(max_workers=runtime.workers, thread_name_prefix="kube")
        self.actions = KubeExecutor(
            kube, self.cache, namespace=config.namespace, identity=runtime.identity
        )
        self.runner = ActionRunner(self.actions, self.executor, leading=lambda: self.leading)
        self.quarantine_limit = QuarantineLimit(self.cache)
        self.policy_status = self._policy_status_loop()
        self.fabric = self._fabric_loop()
        self.reverify = ReverifyLoop(
            kube.for_origin(ORIGIN_REVERIFY_LIST),
            self.quarantine_limit,
            config,
            wake=self.enqueue,
            leading=lambda: self.leading,
        )
        self._failures: Counter[str] = Counter()
        self.failures = FailureLog("reconcile")
        self._tasks: list[asyncio.Task[None]] = []
        self.started = False

    def _installation_lock(self, lock: LeaseSettings | None) -> InstallationLock | None:
        if lock is None:
            return None
        return InstallationLock(
            self.kube.for_origin(ORIGIN_INSTALLATION_LOCK),
            lock,
            leads_installation=lambda: self.leader is None or self.leader.leading,
            on_change=self.on_installation_lock,
        )

    def _policy_status_loop(self) -> PolicyStatusLoop:
        loop = PolicyStatusLoop(
            StatusWriter(
                self.kube.for_origin(ORIGIN_POLICY_STATUS), self.executor, self.runtime.identity
            ),
            self.quarantine_limit,
            wake=self.enqueue,
            leading=lambda: self.leading,
            unmatched_grace_seconds=self.runtime.unmatched_grace_seconds,
        )
        loop.allow_control_plane = self.config.allow_control_plane
        loop.ceiling = self.config.max_unavailable_ceiling
        return loop

    def _fabric_loop(self) -> FabricLoop:
        """The fabric loop, with its own executor on the same API client: the refusals it
        remembers per node (create_errors, status_errors) are the probing phase's
        evidence against a node's own attempt, never to be set or cleared by a
        partner's fabric pod."""
        fabric_actions = KubeExecutor(
            self.kube,
            self.cache,
            namespace=self.config.namespace,
            identity=self.runtime.identity,
            loop="fabric",
        )
        return FabricLoop(
            self.cache,
            ActionRunner(
                fabric_actions, self.executor, leading=lambda: self.leading, who="fabric: "
            ),
            self.config,
            wake=self.enqueue,
        )

    # ------------------------------------------------------------------ events
    @property
    def leading(self) -> bool:
        """This replica leads its installation, and its installation holds the lock."""
        lock = self.installation_lock
        return (self.leader is None or self.leader.leading) and (lock is None or lock.held)

    def on_installation_lock(self, held: bool) -> None:
        if held:
            self.enqueue_all()

    def on_leadership(self, leader: bool) -> None:
        metrics.LEADER.set(1 if leader else 0)
        if leader:
            self.enqueue_all()

    def enqueue(self, name: str) -> None:
        if name:
            self.queue.add(name)

    def enqueue_all(self) -> None:
        for name in {*self.cache.node_names(), *self.cache.na_names()}:
            self.queue.add(name)

    def policy_seen(self) -> None:
        """A policy appeared, changed or went: the nodes it matches, before or after (the
        fleet count found them, by label), are reconciled again; no other node can be
        affected. A policy that selects no node wakes none (issue 42 item 10)."""
        for name in self.cache.count.take_affected():
            self.queue.add(name)

    # ------------------------------------------------------------------ run
    async def start(self) -> None:
        if self.started:
            return
        self.started = True
        loop = asyncio.get_running_loop()
        loop.set_default_executor(self.executor)
        self._tasks.append(asyncio.create_task(self.queue.run_delayed(), name="delayed-queue"))
        for number in range(self.runtime.workers):
            self._tasks.append(asyncio.create_task(self._worker(), name=f"worker-{number}"))
        self._tasks.append(
            asyncio.create_task(
                self.policy_status.run(self.runtime.status_interval), name="policy-status"
            )
        )
        self._tasks.append(
            asyncio.create_task(self.fabric.run(self.runtime.status_interval), name="fabric")
        )
        self._tasks.append(
            asyncio.create_task(self.reverify.run(self.runtime.status_interval), name="reverify")
        )
        self._tasks.append(asyncio.create_task(self._relists(), name="relists"))
        if self.installation_lock is not None:
            lock = self.installation_lock.run()
            self._tasks.append(asyncio.create_task(lock, name="installation-lock"))
        if self.leader is not None:
            self._tasks.append(asyncio.create_task(self.leader.run(), name="leader-election"))
        else:
            metrics.LEADER.set(1)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for held in (self.installation_lock, self.leader):
            if held is None:
                continue
            try:
                await asyncio.to_thread(held.release)
            except Exception as error:
                log.warning("lease release failed: %s", error)
        self.executor.shutdown(wait=False, cancel_futures=True)

    def healthy(self) -> bool:
        return self.started and all(not t.done() for t in self._tasks)

    async def _worker(self) -> None:
        await self.cache.synced.wait()
        while True:
            name = await self.queue.get()
            try:
                if self.leading:
                    await self.reconcile_node(name)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self._log_failure(name, error)
                self._retry_later(name)
            finally:
                self.queue.done(name)
                metrics.QUEUE_DEPTH.set(len(self.queue))

    def _log_failure(self, name: str, error: Exception) -> None:
        """One line per failure kind with backoff (an outage fails every pass)."""
        detail = api_message(error) if isinstance(error, ApiException) else str(error)
        log_failure(log, self.failures, error, f"node={name} {detail}")

    def _retry_later(self, name: str) -> None:
        self._failures[name] += 1
        delay = min(2 ** min(self._failures[name], 6), 60)
        metrics.RECONCILES.labels("error").inc()
        self.queue.add_after(name, delay)

    # ------------------------------------------------------------------ relists
    async def _relists(self) -> None:
        """After kopf relisted a kind (a watch's 410 Gone), the cache entries the listing
        did not show are checked with the API server and dropped when gone: kopf's
        indexes keep them (they drop an entry only on a DELETED event, cache.py)."""
        await self.cache.synced.wait()
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(RELIST_CHECK_SECONDS)
            unlisted = self.cache.unlisted(time.monotonic())
            if not unlisted:
                continue
            try:
                gone = await loop.run_in_executor(self.executor, self._gone, unlisted)
            except ApiException as error:  # checked again after the next relist
                log.warning("relist check failed: %s", api_message(error))
                continue
            self.forget(gone)

    def forget(self, gone: list[Unlisted]) -> None:
        """Drop entries the API server no longer has; their nodes are reconciled."""
        for entry in gone:
            log.info("%s %s is gone (not relisted, not in the API): dropped", entry.kind, entry.key)
            self.cache.forget(entry)
        self.cache.refresh_policies()
        self.cache.settle()
        for entry in gone:
            self.enqueue(entry.node if entry.kind in ("pod", "slice", "rule") else entry.key)
        self.policy_seen()  # a policy gone: the nodes it matched

    def _gone(self, unlisted: list[Unlisted]) -> list[Unlisted]:
        """Which of ``unlisted`` the API server no longer has (in the API threads)."""
        with request_origin(ORIGIN_RELIST_CHECK):
            return self._not_found(unlisted)

    def _not_found(self, unlisted: list[Unlisted]) -> list[Unlisted]:
        kinds = {entry.kind for entry in unlisted}
        pods = (
            self.kube.list_probe_pod_names(self.config.namespace, PROBE_SELECTOR)
            if "pod" in kinds
            else set()
        )
        policies = self.kube.list_policy_names() if "policy" in kinds else set()
        slices = (
            self.kube.list_resource_slice_names(self.config.dra_drivers)
            if "slice" in kinds
            else set()
        )
        rules = self.kube.list_fence_rule_names() if "rule" in kinds else set()
        exists = {
            "node": lambda name: self.kube.get_node(name) is not None,
            "na": lambda name: self.kube.get_na(name) is not None,
            "pod": lambda name: name in pods,
            "policy": lambda name: name in policies,
            "slice": lambda name: name in slices,
            "rule": lambda name: name in rules,
        }
        return [entry for entry in unlisted if not exists[entry.kind](entry.key)]

    # ------------------------------------------------------------------ observe
    def observe(self, name: str, now: datetime) -> NodeSnapshot:
        """The node's snapshot for the core: its objects, its policies, the limit's counts."""
        self.cache.settle()
        node = self.cache.node(name)
        policies = matching_policies(self.cache_policies(), node.labels) if node else ()
        limit_counts = QuarantineLimitCounts()
        if len(policies) == 1:
            limit_counts = self.quarantine_limit.counts(policies[0].name, name, now)
        na = self.cache.na_with_evidence(name)
        fabric = na.status.fabric if na is not None else None
        return NodeSnapshot(
            node_name=name,
            now=now,
            node=node,
            na=na,
            pods=self.cache.pods(name),
            policies=policies,
            limit_counts=limit_counts,
            config=self.config,
            pod_create_error=self.actions.create_errors.get(name),
            # the fabric loop's creates too: a fabric pod on this node it just made is
            # the operator's own, not a crash window's (core/creationintent.py)
            created_pods={
                **self.fabric.runner.actions.created_pods(name),
                **self.actions.created_pods(name),
            },
            pod_name_taken=self.actions.name_taken.get(name),
            pod_creates_unanswered=self.actions.pod_creates_unanswered(name),
            drain=self.actions.drains.get(name),
            status_write_error=self.actions.status_error(name),
            fence_rule_write_error=self.actions.fence_rule_error(name),
            fabric_verdict=self.fabric.verdict(name, fabric.waiting_since) if fabric else None,
            gpu_pod_sample=self.reverify.sample(name),
            in_service_fleet=self._in_service_fleet(policies, name),
            resource_slices=self.cache.resource_slices(name),
            fence_rules=self.cache.fence_rules(name),
            nonce_seed=self.nonce_seed,  # never stored: core/creationintent.py
        )

    def _in_service_fleet(
        self, policies: tuple[PolicyView, ...] | list[PolicyView], name: str
    ) -> tuple[SignatureSeen, ...]:
        """The other nodes' in-service signatures under the node's policy (correlation)."""
        if len(policies) != 1:
            return ()
        spec = policies[0].spec
        if spec is None or not spec.in_service.enabled:
            return ()
        return self.cache.in_service_signatures(policies[0].name, name)

    def cache_policies(self) -> list[PolicyView]:
        return [entry.view for entry in self.cache.policies()]

    # ------------------------------------------------------------------ reconcile
    async def reconcile_node(self, name: str) -> None:
        for _ in range(MAX_PASSES):
            now = datetime.now(UTC)
            observed = self.observe(name, now)
            plan = reconcile(observed, self.judge)
            if plan.needs_limit_lock and observed.policies:
                async with self.quarantine_limit.lock(observed.policies[0].name):
                    observed = self.observe(name, now)
                    plan = reconcile(observed, self.judge)
                    done = await self._execute(observed, plan) if plan.actions else True
            elif plan.actions:
                done = await self._execute(observed, plan)
            else:
                done = True
            if not plan.actions:
                self._failures.pop(name, None)
                metrics.RECONCILES.labels("idle").inc()
                if plan.requeue_after is not None:
                    self.queue.add_after(name, plan.requeue_after)
                return
            metrics.RECONCILES.labels("acted" if done else "conflict").inc()
            if not self.leading:
                return
        log.warning("node=%s no steady state after %d passes; retrying later", name, MAX_PASSES)
        self._retry_later(name)

    async def _execute(self, observed: NodeSnapshot, plan: Plan) -> bool:
        """Run the plan's writes in order (in the thread pool); False after a conflict."""
        log.info(
            "node=%s %s: %s",
            observed.node_name,
            plan.note,
            ", ".join(type(a).__name__ for a in plan.actions),
        )
        for action in plan.actions:
            ran = await self.runner.run(observed, action)
            if ran.error is not None:  # an outage or a refusal: the worker retries later
                raise ran.error
            if ran.result is not RunResult.DONE:
                return False  # re-planned at once from what the cache holds now
            log_recovery(log, self.failures)  # a write went through
            metrics.record_write(observed, action)
        return True
