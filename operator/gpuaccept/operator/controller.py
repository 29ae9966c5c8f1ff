"""The controller: cache, work queue, workers, plan execution, policy status.

kopf keeps the cache (``@kopf.index`` on Nodes, NodeAcceptances, policies and
probe pods) and calls ``enqueue`` from ``@kopf.on.event`` handlers. A bounded
pool of asyncio workers takes node names from a de-duplicating work queue,
builds the observed state from the cache, runs the pure ``reconcile`` and
executes the plan's writes in a bounded thread pool (the ``kubernetes``
client blocks; the event loop never does). Time-based wake-ups (deadlines,
backoff) go into the queue's single delay heap, rebuilt from NodeAcceptance
status on start because every object is reconciled once after the initial
listing.

Writes are reflected at once in a write-through overlay (by
resourceVersion), so the next pass does not act on a stale cache.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.api import API_VERSION, POLICY_KIND, REPROBE_ANNOTATION
from gpuaccept.contracts.nodeacceptance import (
    Condition,
    ConditionStatus,
    NodeAcceptancePolicyStatus,
    Phase,
    PhaseCounts,
)
from gpuaccept.operator import metrics
from gpuaccept.operator.core.model import (
    Action,
    BreakerCounts,
    CreateNodeAcceptance,
    CreateProbePod,
    DeleteNodeAcceptance,
    DeleteProbePod,
    EmitEvent,
    Judge,
    NAView,
    NodeView,
    Observed,
    OperatorConfig,
    PatchNAStatus,
    PatchNodeCondition,
    PatchNodeTaintsLabels,
    Plan,
    PodView,
    RemoveReprobeAnnotation,
)
from gpuaccept.operator.core.reconcile import REASON_BREAKER, reconcile
from gpuaccept.operator.kube import ConflictError, Kube
from gpuaccept.operator.leader import LeaderElector
from gpuaccept.operator.views import (
    PolicyEntry,
    na_view,
    node_view,
    pod_view,
    policy_entry,
    resource_version,
    selector_matches,
)
from gpuaccept.operator.workqueue import WorkQueue

log = logging.getLogger("gpuaccept.operator")

NODES_INDEX = "gpuaccept_nodes"
NAS_INDEX = "gpuaccept_nodeacceptances"
POLICIES_INDEX = "gpuaccept_policies"
PODS_INDEX = "gpuaccept_probe_pods"
MAX_PASSES = 8


def _index_values(index: Any, key: str) -> list[Any]:
    if index is None:
        return []
    try:
        return list(index[key])
    except KeyError:
        return []


class StaleCacheError(Exception):
    """The cache disagreed with the API server; the plan is dropped and re-made."""


@dataclass
class _Written:
    rv: int
    value: Any  # a view, or None: deleted by us


class Cache:
    """kopf's indexes (the watch cache) plus a write-through overlay of our own writes.

    Read on the event loop; the overlay is also written from the API threads (one
    node's keys by one thread at a time: the work queue gives each node to one
    worker). Every read-then-change of the overlay holds ``_lock``, so a loop-side
    clean-up (``_pick`` dropping an entry the watch has caught up with) can never
    delete a newer entry a thread wrote in between.
    """

    def __init__(self) -> None:
        self.indexes: dict[str, Any] = {}
        self.synced = asyncio.Event()
        self._overlay: dict[tuple[str, str], _Written] = {}
        self._pod_nodes: dict[str, str] = {}  # overlay pod name -> node name
        self._node_pods: dict[str, set[str]] = defaultdict(set)  # node -> overlay pod names
        self._lock = threading.Lock()

    def attach(self, kwargs: Mapping[str, Any]) -> None:
        """Take kopf's live index objects (they exist once the first handler runs)."""
        if self.synced.is_set():
            return
        for name in (NODES_INDEX, NAS_INDEX, POLICIES_INDEX, PODS_INDEX):
            if name not in kwargs:
                raise RuntimeError(f"kopf did not pass the index {name!r}")
            self.indexes[name] = kwargs[name]
        self.synced.set()

    def write(self, kind: str, key: str, rv: int, value: Any) -> None:
        with self._lock:
            self._overlay[(kind, key)] = _Written(rv, value)

    def _pick(self, kind: str, index: str, key: str) -> Any:
        best_rv, best = -1, None
        for rv, view in _index_values(self.indexes.get(index), key):
            if rv > best_rv:
                best_rv, best = rv, view
        with self._lock:
            return self._pick_locked(kind, key, best_rv, best)

    def _pick_locked(self, kind: str, key: str, best_rv: int, best: Any) -> Any:
        written = self._overlay.get((kind, key))
        if written is not None:
            if written.value is None and written.rv >= best_rv and best is not None:
                return None  # deleted by us; the watch has not caught up
            if written.value is not None and written.rv > best_rv:
                return written.value
            if written.rv <= best_rv or best is None:
                del self._overlay[(kind, key)]
        return best

    def node(self, name: str) -> NodeView | None:
        view = self._pick("node", NODES_INDEX, name)
        return view if isinstance(view, NodeView) else None

    def na(self, name: str) -> NAView | None:
        view = self._pick("na", NAS_INDEX, name)
        return view if isinstance(view, NAView) else None

    def pods(self, node: str) -> tuple[PodView, ...]:
        found: dict[str, tuple[int, PodView | None]] = {}
        for rv, view in _index_values(self.indexes.get(PODS_INDEX), node):
            if view.name not in found or rv > found[view.name][0]:
                found[view.name] = (rv, view)
        with self._lock:
            self._merge_pods_locked(node, found)
        return tuple(view for _rv, view in found.values() if view is not None)

    def _merge_pods_locked(self, node: str, found: dict[str, tuple[int, PodView | None]]) -> None:
        for key in list(self._node_pods.get(node, ())):
            written = self._overlay.get(("pod", key))
            if written is None:
                self._forget_pod(key)
                continue
            current = found.get(key)
            if current is None:
                if written.value is not None:
                    found[key] = (written.rv, written.value)
                else:
                    self._forget_pod(key)
            elif written.rv > current[0] or (written.value is None and written.rv >= current[0]):
                found[key] = (written.rv, written.value)
            else:
                self._forget_pod(key)

    def _forget_pod(self, name: str) -> None:
        self._overlay.pop(("pod", name), None)
        node = self._pod_nodes.pop(name, None)
        if node is not None:
            names = self._node_pods.get(node)
            if names is not None:
                names.discard(name)
                if not names:
                    del self._node_pods[node]

    def write_pod(self, node: str, name: str, rv: int, view: PodView | None) -> None:
        with self._lock:
            self._pod_nodes[name] = node
            self._node_pods[node].add(name)
            self._overlay[("pod", name)] = _Written(rv, view)

    def policies(self) -> list[PolicyEntry]:
        index = self.indexes.get(POLICIES_INDEX)
        if index is None:
            return []
        out = []
        for key in list(index):
            values = _index_values(index, key)
            if values:
                out.append(max(values, key=lambda pair: pair[0])[1])
        return out

    def node_names(self) -> list[str]:
        index = self.indexes.get(NODES_INDEX)
        return list(index) if index is not None else []

    def na_names(self) -> list[str]:
        index = self.indexes.get(NAS_INDEX)
        names = set(index) if index is not None else set()
        # A snapshot under the lock: the API threads (``Controller._apply``) add
        # overlay entries meanwhile; iterating the live dict here could raise
        # "dictionary changed size during iteration".
        with self._lock:
            overlay = list(self._overlay)
        names |= {key for kind, key in overlay if kind == "na"}
        return sorted(names)


def _now() -> datetime:
    return datetime.now(UTC)


class Controller:
    def __init__(
        self,
        kube: Kube,
        config: OperatorConfig,
        judge: Judge,
        *,
        workers: int = 16,
        status_interval: float = 5.0,
        identity: str = "gpuaccept",
        leader: LeaderElector | None = None,
    ) -> None:
        self.kube = kube
        self.config = config
        self.judge = judge
        self.workers = workers
        self.status_interval = status_interval
        self.identity = identity
        self.leader = leader
        self.cache = Cache()
        self.queue = WorkQueue()
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kube")
        self._breaker_locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._quarantined: dict[str, set[str]] = {}
        self._matched: dict[str, int] = {}
        self._policy_generations: dict[str, int] = {}
        self._failures: Counter[str] = Counter()
        self._create_errors: dict[str, str] = {}  # node -> why its probe pod was refused
        self._reported_policies: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self.started = False
        self.writes: Counter[str] = Counter()

    # ------------------------------------------------------------------ events
    @property
    def leading(self) -> bool:
        return self.leader is None or self.leader.leading

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

    def policy_seen(self, name: str, generation: int | None, deleted: bool) -> None:
        """A policy appeared, changed its spec or went: every node may be affected."""
        if deleted:
            self._policy_generations.pop(name, None)
        elif self._policy_generations.get(name) == generation:
            return  # a status-only update
        else:
            self._policy_generations[name] = generation or 0
        self.enqueue_all()

    # ------------------------------------------------------------------ run
    async def start(self) -> None:
        if self.started:
            return
        self.started = True
        loop = asyncio.get_running_loop()
        loop.set_default_executor(self.executor)
        self._tasks.append(asyncio.create_task(self.queue.run_delayed(), name="delayed-queue"))
        for number in range(self.workers):
            self._tasks.append(asyncio.create_task(self._worker(), name=f"worker-{number}"))
        self._tasks.append(asyncio.create_task(self._policy_loop(), name="policy-status"))
        if self.leader is not None:
            self.leader.on_change = self.on_leadership
            self._tasks.append(asyncio.create_task(self.leader.run(), name="leader-election"))
        else:
            metrics.LEADER.set(1)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.leader is not None:
            try:
                await asyncio.to_thread(self.leader.release)
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
            except ApiException as error:
                log.warning("node=%s API error %s: %s", name, error.status, _api_message(error))
                self._retry_later(name)
            except Exception:
                log.exception("node=%s reconcile failed", name)
                self._retry_later(name)
            finally:
                self.queue.done(name)
                metrics.QUEUE_DEPTH.set(len(self.queue))

    def _retry_later(self, name: str) -> None:
        self._failures[name] += 1
        delay = min(2 ** min(self._failures[name], 6), 60)
        metrics.RECONCILES.labels("error").inc()
        self.queue.add_after(name, delay)

    # ------------------------------------------------------------------ observe
    def observe(self, name: str, now: datetime, *, exact: bool = False) -> Observed:
        node = self.cache.node(name)
        policies = []
        if node is not None:
            for entry in self.cache.policies():
                spec = entry.view.spec
                if spec is not None and selector_matches(spec.node_selector, node.labels):
                    policies.append(entry.view)
        breaker = BreakerCounts()
        if len(policies) == 1:
            breaker = self._breaker(policies[0].name, name, exact=exact)
        return Observed(
            node_name=name,
            now=now,
            node=node,
            na=self.cache.na(name),
            pods=self.cache.pods(name),
            policies=tuple(policies),
            breaker=breaker,
            config=self.config,
            pod_create_error=self._create_errors.get(name),
        )

    def _breaker(self, policy: str, node: str, *, exact: bool) -> BreakerCounts:
        """Quarantined nodes of ``policy`` but ``node``.

        Counted once from the cache, then kept up to date by every status write
        this process makes (``_track``) and recounted by the policy loop. Under
        the policy's breaker lock it is exact: every quarantine goes through it.
        """
        if policy not in self._quarantined:
            self._count_policy(policy)
        quarantined = self._quarantined.get(policy, set())
        return BreakerCounts(
            quarantined=len(quarantined - {node}), matched=self._matched.get(policy, 0)
        )

    def _count_policy(self, policy: str) -> None:
        entry = next((p for p in self.cache.policies() if p.view.name == policy), None)
        quarantined = set()
        for na_name in self.cache.na_names():
            na = self.cache.na(na_name)
            if (
                na is not None
                and na.status.policy == policy
                and na.status.phase == Phase.QUARANTINED
            ):
                quarantined.add(na_name)
        matched = 0
        if entry is not None and entry.view.spec is not None:
            selector = entry.view.spec.node_selector
            for node_name in self.cache.node_names():
                node = self.cache.node(node_name)
                if node is not None and selector_matches(selector, node.labels):
                    matched += 1
        self._quarantined[policy] = quarantined
        self._matched[policy] = matched

    # ------------------------------------------------------------------ reconcile
    async def reconcile_node(self, name: str) -> None:
        for _ in range(MAX_PASSES):
            now = _now()
            observed = self.observe(name, now)
            plan = reconcile(observed, self.judge)
            if plan.needs_breaker and observed.policies:
                async with self._breaker_locks[observed.policies[0].name]:
                    observed = self.observe(name, now, exact=True)
                    plan = reconcile(observed, self.judge)
                    if plan.actions:
                        done = await self._execute(observed, plan)
                    else:
                        done = True
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

    async def _execute(self, observed: Observed, plan: Plan) -> bool:
        """Run the plan's writes in order (in the thread pool); False after a conflict."""
        log.info(
            "node=%s %s: %s",
            observed.node_name,
            plan.note,
            ", ".join(type(a).__name__ for a in plan.actions),
        )
        for action in plan.actions:
            if not self.leading:
                return False
            try:
                await asyncio.get_running_loop().run_in_executor(
                    self.executor, self._apply, observed, action
                )
            except StaleCacheError:
                return False
            except ConflictError:
                log.info(
                    "node=%s conflict on %s; re-reading", observed.node_name, type(action).__name__
                )
                await asyncio.get_running_loop().run_in_executor(
                    self.executor, self._refresh, observed.node_name, action
                )
                return False
            self._track(action)
            self.writes[type(action).__name__] += 1
            metrics.API_CALLS.labels(type(action).__name__).inc()
            self._record_metrics(observed, action)
        return True

    def _refresh(self, node: str, action: Action) -> None:
        if isinstance(action, PatchNAStatus):
            body = self.kube.get_na(action.name)
            if body is not None:
                self.cache.write("na", action.name, resource_version(body), na_view(body))
        else:
            body = self.kube.get_node(node)
            if body is not None:
                self.cache.write("node", node, resource_version(body), node_view(body))

    def _apply(self, observed: Observed, action: Action) -> None:  # runs in a thread
        kube, cache = self.kube, self.cache
        if isinstance(action, CreateNodeAcceptance):
            body = kube.create_na(action.name, action.policy)
            if body:
                cache.write("na", action.name, resource_version(body), na_view(body))
        elif isinstance(action, PatchNAStatus):
            wire = action.status.model_dump(mode="json", by_alias=True, exclude_none=True)
            body = kube.patch_na_status(action.name, action.resource_version, wire)
            cache.write("na", action.name, resource_version(body), na_view(body))
        elif isinstance(action, PatchNodeTaintsLabels):
            body = kube.patch_node(
                action.node, action.resource_version, action.taints, action.labels
            )
            cache.write("node", action.node, resource_version(body), node_view(body))
        elif isinstance(action, PatchNodeCondition):
            body = kube.patch_node_condition(
                action.node, action.status, action.reason, action.message, action.now
            )
            cache.write("node", action.node, resource_version(body), node_view(body))
        elif isinstance(action, RemoveReprobeAnnotation):
            body = kube.remove_node_annotation(action.node, REPROBE_ANNOTATION)
            cache.write("node", action.node, resource_version(body), node_view(body))
        elif isinstance(action, CreateProbePod):
            # Only this attempt's refusal counts: an older one must not turn a later
            # transient failure (a 5xx, a timeout) into a ProbePodError.
            self._create_errors.pop(observed.node_name, None)
            try:
                pod = kube.create_pod(self.config.namespace, action.manifest)
            except ApiException as error:
                if error.status in (400, 403, 404, 422):  # refused, not a hiccup
                    self._create_errors[observed.node_name] = _api_message(error)[:500]
                raise
            if pod is not None:
                cache.write_pod(
                    observed.node_name, action.name, resource_version(pod), pod_view(pod)
                )
        elif isinstance(action, DeleteProbePod):
            known = next((p for p in observed.pods if p.name == action.name), None)
            gone = kube.delete_pod(self.config.namespace, action.name, force=action.force)
            if gone is not None:
                cache.write_pod(
                    observed.node_name, action.name, resource_version(gone), pod_view(gone)
                )
            elif known is not None:
                cache.write_pod(observed.node_name, action.name, 1 << 62, None)
        elif isinstance(action, DeleteNodeAcceptance):
            # The cache says the node is gone; make sure before deleting its record.
            node = kube.get_node(action.name)
            if node is not None:
                log.warning("node=%s is not in the cache but exists; keeping it", action.name)
                cache.write("node", action.name, resource_version(node), node_view(node))
                raise StaleCacheError(action.name)
            kube.delete_na(action.name)
            cache.write("na", action.name, 1 << 62, None)
            self._create_errors.pop(action.name, None)
        elif isinstance(action, EmitEvent):
            kube.create_event(
                kind=action.kind,
                api_version="v1" if action.kind == "Node" else API_VERSION,
                name=action.name,
                uid=action.uid,
                type_=action.type,
                reason=action.reason,
                message=action.message,
                now=_now(),
                reporting_instance=self.identity,
            )
        else:  # pragma: no cover - exhaustive
            raise TypeError(f"unknown action {action!r}")

    def _track(self, action: Action) -> None:
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

    def _record_metrics(self, observed: Observed, action: Action) -> None:
        if isinstance(action, DeleteNodeAcceptance):
            _remove_series(metrics.BUSBW, action.name)
            return
        if not isinstance(action, PatchNAStatus) or observed.na is None:
            return
        old, new = observed.na.status, action.status
        if old.phase == Phase.PROBING and new.phase != Phase.PROBING and old.probe_started_time:
            elapsed = (observed.now - old.probe_started_time).total_seconds()
            metrics.PROBE_DURATION.observe(max(elapsed, 0.0))
            if new.phase == Phase.PENDING and new.reason:
                metrics.PROBE_ERRORS.labels(new.reason).inc()
        if (new.phase, new.reason) != (old.phase, old.reason) and new.phase in (
            Phase.QUARANTINED,
            Phase.HELD,
        ):
            for reason in new.reasons:
                metrics.CHECK_FAILURES.labels(reason.check, reason.reason).inc()
        if new.figures is not None and new.figures.busbw_gbps is not None:
            metrics.BUSBW.labels(action.name).set(new.figures.busbw_gbps)

    # ------------------------------------------------------------------ policy status
    async def _policy_loop(self) -> None:
        await self.cache.synced.wait()
        last_logged, last_calls = time.monotonic(), dict(self.kube.calls)
        while True:
            if time.monotonic() - last_logged >= 60 and dict(self.kube.calls) != last_calls:
                last_logged, last_calls = time.monotonic(), dict(self.kube.calls)
                log.info("API calls so far: %s", json.dumps(last_calls, sort_keys=True))
            try:
                await self.update_policies()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("policy status update failed")
            await asyncio.sleep(self.status_interval)

    async def update_policies(self) -> None:
        """Counts, breaker and conflicts per policy; patched only when changed."""
        entries = self.cache.policies()
        nodes = [n for n in (self.cache.node(x) for x in self.cache.node_names()) if n is not None]
        matches: dict[str, list[str]] = defaultdict(list)
        for node in nodes:
            matching = [
                e.view.name
                for e in entries
                if e.view.spec is not None
                and selector_matches(e.view.spec.node_selector, node.labels)
            ]
            for policy in matching:
                matches[policy].append(node.name if len(matching) == 1 else f"!{node.name}")
        phases: dict[str, Counter[Phase]] = defaultdict(Counter)
        held_breaker: dict[str, list[str]] = defaultdict(list)
        quarantined: dict[str, set[str]] = defaultdict(set)
        for na_name in self.cache.na_names():
            na = self.cache.na(na_name)
            if na is None or na.status.policy is None:
                continue
            phases[na.status.policy][na.status.phase] += 1
            if na.status.phase == Phase.QUARANTINED:
                quarantined[na.status.policy].add(na_name)
            if na.status.phase == Phase.HELD and na.status.reason == REASON_BREAKER:
                held_breaker[na.status.policy].append(na_name)
        current = {entry.view.name for entry in entries}
        for gone in self._reported_policies - current:  # a deleted policy: drop its series
            for phase in Phase:
                _remove_series(metrics.NODES_BY_PHASE, gone, phase.value)
            _remove_series(metrics.QUARANTINE_LIMIT, gone)
            _remove_series(metrics.BREAKER_OPEN, gone)
            self._quarantined.pop(gone, None)
            self._matched.pop(gone, None)
        self._reported_policies = current
        # The breaker's counts, all replaced before the first await below: a
        # quarantine that ``_track`` records while a status write is in flight
        # must not be overwritten by this (then older) snapshot.
        for entry in entries:
            self._quarantined[entry.view.name] = quarantined.get(entry.view.name, set())
            self._matched[entry.view.name] = len(matches.get(entry.view.name, []))
        for entry in entries:
            name = entry.view.name
            matched = len(matches.get(name, []))
            for phase in Phase:
                metrics.NODES_BY_PHASE.labels(name, phase.value).set(phases[name][phase])
            spec = entry.view.spec
            limit = spec.max_quarantined_count(matched) if spec is not None else 0
            metrics.QUARANTINE_LIMIT.labels(name).set(limit)
            metrics.BREAKER_OPEN.labels(name).set(1 if held_breaker.get(name) else 0)
            if spec is not None and held_breaker.get(name) and len(quarantined[name]) < limit:
                for node_name in held_breaker[name]:
                    self.enqueue(node_name)
            if self.leading:
                await self._write_policy_status(
                    entry,
                    counts=phases[name],
                    matched=matched,
                    conflicts=[n[1:] for n in matches.get(name, []) if n.startswith("!")],
                    held=held_breaker.get(name, []),
                    limit=limit,
                )

    async def _write_policy_status(
        self,
        entry: PolicyEntry,
        *,
        counts: Counter[Phase],
        matched: int,
        conflicts: list[str],
        held: list[str],
        limit: int,
    ) -> None:
        view = entry.view
        old = entry.status
        old_conditions = {c.get("type"): c for c in old.get("conditions") or ()}
        now = _now()

        def condition(ctype: str, ok: bool, reason: str, message: str) -> Condition:
            status = ConditionStatus.TRUE if ok else ConditionStatus.FALSE
            previous = old_conditions.get(ctype) or {}
            stamp = now
            if previous.get("status") == status.value and previous.get("lastTransitionTime"):
                stamp = datetime.fromisoformat(
                    str(previous["lastTransitionTime"]).replace("Z", "+00:00")
                )
            return Condition(
                type=ctype,
                status=status,
                reason=reason,
                message=message[:1000],
                last_transition_time=stamp,
                observed_generation=view.generation,
            )

        if view.spec is None:
            ready = condition("Ready", False, "InvalidSpec", view.error or "invalid spec")
        elif conflicts:
            ready = condition(
                "Ready",
                False,
                "PolicyConflict",
                f"{len(conflicts)} node(s) match more than one policy and are left alone: "
                + ", ".join(sorted(conflicts)[:10]),
            )
        else:
            ready = condition("Ready", True, "Reconciling", f"{matched} node(s) matched")
        breaker = condition(
            "BreakerOpen",
            bool(held),
            "QuarantineLimitReached" if held else "BelowLimit",
            (
                f"{len(held)} node(s) held: quarantining them would exceed maxQuarantined "
                f"(limit {limit}); raise spec.maxQuarantined to let them through"
                if held
                else f"quarantine limit {limit}"
            ),
        )
        status = NodeAcceptancePolicyStatus(
            counts=PhaseCounts(
                pending=counts[Phase.PENDING],
                probing=counts[Phase.PROBING],
                accepted=counts[Phase.ACCEPTED],
                quarantined=counts[Phase.QUARANTINED],
                held=counts[Phase.HELD],
            ),
            matched_nodes=matched,
            breaker_open=bool(held),
            conditions=[ready, breaker],
            observed_generation=view.generation,
        )
        wire = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        if _same_status(old, wire):
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.executor, self.kube.patch_policy_status, view.name, wire)
        if held and not old.get("breakerOpen"):
            await loop.run_in_executor(
                self.executor,
                lambda: self.kube.create_event(
                    kind=POLICY_KIND,
                    api_version=API_VERSION,
                    name=view.name,
                    uid=entry.uid,
                    type_="Warning",
                    reason="BreakerOpen",
                    message=breaker.message,
                    now=now,
                    reporting_instance=self.identity,
                ),
            )


def _api_message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except (ValueError, AttributeError):
        return str(error.reason)


def _same_status(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    def strip(status: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(status)
        out["conditions"] = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"}
            for c in status.get("conditions") or ()
        ]
        return out

    return strip(old) == strip(new)


def _remove_series(metric: Any, *labels: str) -> None:
    if _has_label(metric, *labels):
        metric.remove(*labels)


def _has_label(gauge: Any, *labels: str) -> bool:
    try:
        return tuple(labels) in gauge._metrics
    except AttributeError:  # pragma: no cover
        return False


def index_node(body: Mapping[str, Any]) -> dict[str, tuple[int, NodeView]]:
    view = node_view(body)
    return {view.name: (resource_version(body), view)}


def index_na(body: Mapping[str, Any]) -> dict[str, tuple[int, NAView]]:
    view = na_view(body)
    return {view.name: (resource_version(body), view)}


def index_pod(body: Mapping[str, Any]) -> dict[str, tuple[int, PodView]]:
    node = (body.get("spec") or {}).get("nodeName") or ""
    return {node: (resource_version(body), pod_view(body))} if node else {}


def index_policy(body: Mapping[str, Any]) -> dict[str, tuple[int, PolicyEntry]]:
    entry = policy_entry(body)
    return {entry.view.name: (resource_version(body), entry)}
