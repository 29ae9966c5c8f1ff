"""The operator's cache: kopf's indexes (the watch cache) plus a write-through
overlay of the operator's own writes, keyed by resourceVersion, so the next
pass never acts on a cache that has not caught up with a write.

kopf keeps the indexes (``@kopf.index`` on Nodes, NodeAcceptances, policies
and probe pods, with the ``index_*`` functions below); ``Cache.attach`` takes
them once the first handler runs.

A NodeAcceptance is kept as a
:class:`~gpuaccept.operator.views.CachedAcceptance`: its status without the packed
fields (the evidence: stored probe report, check summaries, baseline, the policy
sections the report was measured under; and the key figures, conditions and
in-service ledger: ``views.PACKED_FIELDS``), which stay compressed JSON until a
decision asks for them (:meth:`Cache.na_with_evidence`), with what the slim view's
readers take of them (``NAView.packed``: the published figures, the in-service
signatures).

The fleet's counts (:class:`~gpuaccept.operator.core.fleetcount.FleetCount`:
phases, matched nodes, the quarantine limit's figures) follow the views the
cache returns, one key at a time: a watch event refreshes its key
(:meth:`Cache.refresh`, from the kopf event handlers), a write of ours marks
its key, and :meth:`Cache.settle` refreshes the marked keys before the counts
are read. No read of the counts walks the fleet.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuaccept.operator.core.capacity import gated, node_gpu_count
from gpuaccept.operator.core.fabric.membership import fabric_candidate_policy
from gpuaccept.operator.core.fleetcount import FleetCount
from gpuaccept.operator.core.gpupublishing import dra_pools
from gpuaccept.operator.core.inservice.correlation import view_signatures
from gpuaccept.operator.core.model import (
    FenceRuleView,
    NAView,
    NodeView,
    PodView,
    ResourceSliceView,
    SignatureSeen,
)
from gpuaccept.operator.core.podidentity import pinned_node
from gpuaccept.operator.views import (
    CachedAcceptance,
    PolicyEntry,
    cached_acceptance,
    fence_rule_view,
    node_view,
    pod_view,
    policy_entry,
    resource_slice_view,
    resource_version,
)

RELIST_QUIET_SECONDS = 10.0
"""How long after the last listing event of a relist its objects are taken as all
listed (kopf does not tell its handlers when a listing ends)."""

NODES_INDEX = "gpuaccept_nodes"
NAS_INDEX = "gpuaccept_nodeacceptances"
POLICIES_INDEX = "gpuaccept_policies"
PODS_INDEX = "gpuaccept_probe_pods"
# ResourceSlices of the configured DRA drivers, by node (registered only when the
# operator has DRA drivers: --dra-driver).
SLICES_INDEX = "gpuaccept_resource_slices"
# gpuaccept's fence DeviceTaintRules, by the node label's value (registered only when
# the API server serves them: core/fencerules.py).
FENCE_RULES_INDEX = "gpuaccept_fence_rules"


def _index_values(index: Any, key: str) -> list[Any]:
    if index is None:
        return []
    try:
        return list(index[key])
    except KeyError:
        return []


@dataclass
class _Written:
    rv: int
    value: Any  # a view, or None: deleted by us


@dataclass
class _Listing:
    """One kind's listings as the event handlers saw them.

    After a watch's 410 Gone, kopf lists the kind again and passes each listed object
    to the handlers as an event of type None; an object deleted while the watch was
    gone is simply not listed, and kopf's indexes, which drop an entry only on a
    DELETED event, keep it. A listing event after streaming ones starts a new
    ``epoch``; once it has been quiet for :data:`RELIST_QUIET_SECONDS`, the entries
    not seen since the epoch began are the ones to verify (:meth:`Cache.unlisted`)."""

    epoch: int = 0
    streaming: bool = False
    last_listed: float = 0.0  # monotonic
    swept: int = 0  # the last epoch whose unlisted entries were handed out
    seen: dict[str, int] = field(default_factory=dict)  # key -> epoch last seen


@dataclass(frozen=True)
class Unlisted:
    """An entry of the cache that the last relist did not show: verified against the
    API server, then dropped (:meth:`Cache.forget`) if it is gone."""

    kind: str  # node | na | pod | policy | slice | rule
    key: str  # the object's name
    rv: int  # the resourceVersion the cache holds
    node: str = ""  # a pod's or a ResourceSlice's node (its index key)


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
        self.count = FleetCount()
        self._counted_kinds = {"node": self._count_node, "na": self._count_na}
        self._unsettled: set[tuple[str, str]] = set()  # our writes not yet counted
        self._acceptances: dict[str, NAView] = {}  # the NodeAcceptances as counted
        # NodeAcceptances with a fabric test (phase Fabric, or status.fabric), by policy:
        # what a fabric pass reads, kept like the counts (O(1) per change)
        self._fabric_names: dict[str, set[str]] = defaultdict(set)
        self._fabric_policy: dict[str, str] = {}
        # In-service signatures (core/inservice/correlation.py) by NodeAcceptance, with
        # their policy: only nodes with an in-service verdict or suspect have any
        self._signatures: dict[str, tuple[str, tuple[SignatureSeen, ...]]] = {}
        self.acceptances_changes = 0  # bumped on every change of ``acceptances()``
        self._listings: dict[str, _Listing] = defaultdict(_Listing)
        # (kind, key) -> the resourceVersion of a write the node's own reconcile made,
        # which it reads again in its next pass: that version's watch event is an echo
        self._followed: dict[tuple[str, str], int] = {}

    def attach(self, kwargs: Mapping[str, Any]) -> None:
        """Take kopf's live index objects (they exist once the first handler runs)."""
        if self.synced.is_set():
            return
        for name in (NODES_INDEX, NAS_INDEX, POLICIES_INDEX, PODS_INDEX):
            if name not in kwargs:
                raise RuntimeError(f"kopf did not pass the index {name!r}")
            self.indexes[name] = kwargs[name]
        self.indexes[SLICES_INDEX] = kwargs.get(SLICES_INDEX)  # absent: no DRA driver
        self.indexes[FENCE_RULES_INDEX] = kwargs.get(FENCE_RULES_INDEX)  # absent: not served
        self.synced.set()

    def write(self, kind: str, key: str, rv: int, value: Any, *, followed: bool = False) -> None:
        """Our write's answer (``value`` None: deleted by us) at ``rv``. ``followed``: the
        node's own reconcile wrote it and passes over the node again after the write,
        reading it from here (:meth:`echo`)."""
        with self._lock:
            self._overlay[(kind, key)] = _Written(rv, value)
            self._unsettled.add((kind, key))
            self._mark_followed(kind, key, rv, followed)

    def _mark_followed(self, kind: str, key: str, rv: int, followed: bool) -> None:
        if followed and rv:
            self._followed[(kind, key)] = rv
        else:
            self._followed.pop((kind, key), None)

    def echo(self, kind: str, key: str, rv: int) -> bool:
        """Whether a watch event of ``key`` at ``rv`` is the echo of a followed write
        (:meth:`write`): the reconcile that made it passed over the node again after it,
        reading that very version (a resourceVersion is one state of the object), so the
        event brings the node nothing new. A mark answers once; a newer version drops it
        (the event is then news), an older one leaves it."""
        with self._lock:
            mark = self._followed.get((kind, key))
            if mark is None or rv < mark:
                return False
            del self._followed[(kind, key)]
            return rv == mark

    # ------------------------------------------------------------------ relists
    def saw(self, kind: str, key: str, event_type: str | None, now: float) -> None:
        """A watch event for ``key`` (type None: a listed object) reached a handler."""
        listing = self._listings[kind]
        if event_type == "DELETED":
            listing.seen.pop(key, None)
            return
        if event_type is None:
            if listing.streaming:  # a listing after streaming: kopf relisted the kind
                listing.epoch += 1
                listing.streaming = False
            listing.last_listed = now
        else:
            listing.streaming = True
        listing.seen[key] = listing.epoch

    def unlisted(self, now: float) -> list[Unlisted]:
        """The entries each quiet relist did not show (each relist's once)."""
        out: list[Unlisted] = []
        for kind, listing in self._listings.items():
            if listing.epoch <= listing.swept or now - listing.last_listed < RELIST_QUIET_SECONDS:
                continue
            listing.swept = listing.epoch
            out += [
                entry
                for entry in self._entries(kind)
                if listing.seen.get(entry.key, -1) < listing.epoch
            ]
        return out

    def _entries(self, kind: str) -> list[Unlisted]:
        """Every entry of ``kind`` in kopf's indexes, at the newest resourceVersion."""
        if kind in ("pod", "slice", "rule"):  # kept by node
            index = self.indexes.get(
                {"pod": PODS_INDEX, "slice": SLICES_INDEX, "rule": FENCE_RULES_INDEX}[kind]
            )
            return [
                Unlisted(kind, view.name, rv, node)
                for node in list(index or ())
                for rv, view in _index_values(index, node)
            ]
        name = {"node": NODES_INDEX, "na": NAS_INDEX, "policy": POLICIES_INDEX}.get(kind)
        index = self.indexes.get(name) if name else None
        return [
            Unlisted(kind, key, max(rv for rv, _ in values))
            for key in list(index or ())
            if (values := _index_values(index, key))
        ]

    def forget(self, entry: Unlisted) -> None:
        """Drop an entry the API server no longer has (the overlay hides that version
        and older ones; an object created again under its name is newer and shows)."""
        if entry.kind == "pod":
            self.write_pod(entry.node, entry.key, entry.rv, None)
        else:
            self.write(entry.kind, entry.key, entry.rv, None)

    # ------------------------------------------------------------------ counts
    def refresh(self, kind: str, key: str) -> None:
        """Count ``key`` as the cache sees it now (on the event loop, after a watch event)."""
        counter = self._counted_kinds.get(kind)
        if counter is not None:
            counter(key)

    def refresh_policies(self) -> None:
        self.count.set_policies(entry.view for entry in self.policies())

    def settle(self) -> None:
        """Count the keys our own writes changed (on the event loop): O(keys written)."""
        with self._lock:
            if not self._unsettled:
                return
            keys, self._unsettled = self._unsettled, set()
        for kind, key in keys:
            self.refresh(kind, key)

    def _count_node(self, name: str) -> None:
        view = self.node(name)
        labels = view.labels if view is not None else None
        gpus = (node_gpu_count(view) or self._dra_gpu_count(name)) if view is not None else 0
        self.count.set_node_gpus(name, gpus)
        self.count.set_node(
            name,
            labels,
            node_gated=view is not None and gated(view),
            taint_keys=frozenset(t.key for t in view.taints) if view is not None else frozenset(),
            created=view.created if view is not None else None,
        )

    def _dra_gpu_count(self, name: str) -> int:
        """The GPUs of the node's complete DRA pools (0: none): a DRA node's size in
        the limit's GPU counts, as capacity nvidia.com/gpu is a device-plugin node's."""
        slices = self.resource_slices(name)
        pools = dra_pools(slices, {view.driver for view in slices})
        return sum(len(pool.gpus) for pool in pools if pool.complete)

    def _count_na(self, name: str) -> None:
        view = self.na(name)
        self._note_fabric(name, view)
        self._note_signatures(name, view)
        if view is None:
            if self._acceptances.pop(name, None) is not None:
                self.acceptances_changes += 1
            self.count.set_acceptance(name, None)
            return
        if self._acceptances.get(name) is not view:
            self._acceptances[name] = view
            self.acceptances_changes += 1
        self.count.set_acceptance(name, view.status)

    def _note_fabric(self, name: str, view: NAView | None) -> None:
        old = self._fabric_policy.pop(name, None)
        if old is not None:
            self._fabric_names[old].discard(name)
        policy = fabric_candidate_policy(view.status if view is not None else None)
        if policy is not None:  # a superset of the members (core.fabric.membership)
            self._fabric_policy[name] = policy
            self._fabric_names[policy].add(name)

    def _note_signatures(self, name: str, view: NAView | None) -> None:
        seen = view_signatures(view) if view is not None else ()
        if seen and view is not None and view.status.policy:
            self._signatures[name] = (view.status.policy, seen)
        else:
            self._signatures.pop(name, None)

    def in_service_signatures(self, policy: str, node: str) -> tuple[SignatureSeen, ...]:
        """The in-service signatures of ``policy``'s other nodes, as last counted."""
        return tuple(
            seen
            for name, (owner, found) in self._signatures.items()
            if owner == policy and name != node
            for seen in found
        )

    def fabric_names(self, policy: str) -> list[str]:
        """The NodeAcceptances of ``policy`` with a fabric test, as last counted (call
        :meth:`settle` first)."""
        return sorted(self._fabric_names.get(policy, ()))

    def acceptances(self) -> tuple[NAView, ...]:
        """Every NodeAcceptance as last counted (call :meth:`settle` first)."""
        return tuple(self._acceptances.values())

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
        """The NodeAcceptance slim: without its packed fields (``views.PACKED_FIELDS``:
        ``status.report``, ``figures``, ``in_service``, ``probed_sections`` None, no
        ``checks`` or ``conditions``), with ``packed`` holding what is read of them."""
        cached = self._pick("na", NAS_INDEX, name)
        return cached.view if isinstance(cached, CachedAcceptance) else None

    def written_acceptance(self, name: str, rv: int) -> CachedAcceptance | None:
        """The entry this process made of its own write's answer at ``rv``, while the
        overlay holds it (None otherwise). A resourceVersion is one state of the object,
        so the watch event of that write shows what the answer showed: its index entry
        can be this one rather than a second parse of the same body."""
        with self._lock:
            written = self._overlay.get(("na", name))
        if written is None or written.rv != rv or not isinstance(written.value, CachedAcceptance):
            return None
        return written.value

    def na_with_evidence(self, name: str) -> NAView | None:
        """The NodeAcceptance with its packed fields parsed into the status (the status
        whole, ``packed`` None): for a decision, and for any status written."""
        cached = self._pick("na", NAS_INDEX, name)
        return cached.with_evidence() if isinstance(cached, CachedAcceptance) else None

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
                # A pod we created that the watch has not shown yet is ours to see; one
                # we were deleting that the watch no longer has is gone (its DELETED
                # event can come before our write of the delete's answer lands here).
                if written.value is not None and not written.value.deleting:
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

    def write_pod(
        self, node: str, name: str, rv: int, view: PodView | None, *, followed: bool = False
    ) -> None:
        with self._lock:
            self._pod_nodes[name] = node
            self._node_pods[node].add(name)
            self._overlay[("pod", name)] = _Written(rv, view)
            self._mark_followed("pod", name, rv, followed)

    def resource_slices(self, node: str) -> tuple[ResourceSliceView, ...]:
        """The node's ResourceSlices of the configured DRA drivers (kopf's index holds
        each slice once, at its last watched version), by name; a slice a relist showed
        gone (:meth:`forget`) is left out unless a newer one took its name."""
        views = []
        for rv, view in _index_values(self.indexes.get(SLICES_INDEX), node):
            with self._lock:
                gone = self._overlay.get(("slice", view.name))
            if gone is None or gone.rv < rv:
                views.append(view)
        return tuple(sorted(views, key=lambda view: view.name))

    def fence_rules(self, node: str) -> tuple[FenceRuleView, ...]:
        """gpuaccept's fence rules of ``node`` (kopf's index, at their last watched
        version), by name; a rule a relist showed gone (:meth:`forget`) is left out
        unless a newer one took its name."""
        views = []
        for rv, view in _index_values(self.indexes.get(FENCE_RULES_INDEX), node):
            with self._lock:
                gone = self._overlay.get(("rule", view.name))  # a relist showed it gone
            if gone is None or gone.rv < rv:
                views.append(view)
        return tuple(sorted(views, key=lambda view: view.name))

    def policies(self) -> list[PolicyEntry]:
        index = self.indexes.get(POLICIES_INDEX)
        if index is None:
            return []
        out = []
        for key in list(index):
            values = _index_values(index, key)
            if values:
                rv, entry = max(values, key=lambda pair: pair[0])
                gone = self._overlay.get(("policy", key))  # a relist showed it gone
                if gone is None or gone.value is not None or gone.rv < rv:
                    out.append(entry)
        return out

    def node_names(self) -> list[str]:
        index = self.indexes.get(NODES_INDEX)
        return list(index) if index is not None else []

    def na_names(self) -> list[str]:
        index = self.indexes.get(NAS_INDEX)
        names = set(index) if index is not None else set()
        # A snapshot under the lock: the API threads (the executor) add
        # overlay entries meanwhile; iterating the live dict here could raise
        # "dictionary changed size during iteration".
        with self._lock:
            overlay = list(self._overlay)
        names |= {key for kind, key in overlay if kind == "na"}
        return sorted(names)


def index_node(body: Mapping[str, Any]) -> dict[str, tuple[int, NodeView]]:
    view = node_view(body)
    return {view.name: (resource_version(body), view)}


def index_na(
    body: Mapping[str, Any], cache: Cache | None = None
) -> dict[str, tuple[int, CachedAcceptance]]:
    """The NodeAcceptance's cache entry; with ``cache``, the entry of this process's own
    write when the body is that write's version (:meth:`Cache.written_acceptance`)."""
    rv = resource_version(body)
    name = str((body.get("metadata") or {}).get("name", ""))
    known = cache.written_acceptance(name, rv) if cache is not None and rv else None
    cached = known if known is not None else cached_acceptance(body)
    return {cached.view.name: (rv, cached)}


def index_pod(body: Mapping[str, Any]) -> dict[str, tuple[int, PodView]]:
    # a DRA node's probe pod is the node's before the scheduler binds it
    node = pinned_node(body.get("spec") or {})
    return {node: (resource_version(body), pod_view(body))} if node else {}


def index_policy(
    body: Mapping[str, Any], owned_prefixes: tuple[str, ...]
) -> dict[str, tuple[int, PolicyEntry]]:
    entry = policy_entry(body, owned_prefixes)
    return {entry.view.name: (resource_version(body), entry)}


def index_fence_rule(body: Mapping[str, Any]) -> dict[str, tuple[int, FenceRuleView]]:
    """One of gpuaccept's fence rules under its node's label value; any other rule is
    not kept."""
    view = fence_rule_view(body)
    return {view.node: (resource_version(body), view)} if view is not None else {}


def slice_node(view: ResourceSliceView) -> str:
    """The node a slice is about: its ``spec.nodeName``, or, for a slice that names
    none, its pool (NVIDIA's driver names the pool after the node)."""
    return view.node_name or view.pool


def index_resource_slice(
    body: Mapping[str, Any], drivers: frozenset[str]
) -> dict[str, tuple[int, ResourceSliceView]]:
    """A slice of a configured driver under its node; any other slice is not kept."""
    view = resource_slice_view(body)
    if view.driver not in drivers or not slice_node(view):
        return {}
    return {slice_node(view): (resource_version(body), view)}
