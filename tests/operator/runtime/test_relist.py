"""The cache drops what a relist no longer shows (issue 28, item 7).

After a watch's 410 Gone, kopf lists the kind again and hands each listed object to
the event handlers as an event of type None; an object deleted while the watch was
gone is simply not listed, and kopf's indexes drop an entry only on a DELETED event
(kopf/_core/engines/indexing.py ``index_resource``). Here the cache is fed as kopf
feeds it: its indexes (kept as kopf keeps them, the stale entry included) and the
handlers' ``saw`` calls, and the controller checks the unlisted entries against a
stand-in API server before it drops them.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.operator.cache import (
    FENCE_RULES_INDEX,
    NAS_INDEX,
    NODES_INDEX,
    PODS_INDEX,
    POLICIES_INDEX,
    RELIST_QUIET_SECONDS,
    SLICES_INDEX,
    Cache,
)
from gpuaccept.operator.controller import Controller
from gpuaccept.operator.core import OperatorConfig
from gpuaccept.operator.core.judge import judge
from gpuaccept.operator.core.model import (
    FenceRuleView,
    NAView,
    NodeView,
    PodView,
    PolicyView,
    ResourceSliceView,
)
from gpuaccept.operator.kube import Kube
from gpuaccept.operator.views import CachedAcceptance, PolicyEntry

LABELS = {"nvidia.com/gpu.present": "true"}


class ApiServer(Kube):
    """What exists now: the objects deleted while the watch was gone are not here."""

    def __init__(
        self,
        nodes: set[str],
        pods: set[str],
        policies: set[str],
        slices: frozenset[str] = frozenset(),
        rules: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(k8s.ApiClient())
        self.nodes, self.pods, self.policies, self.slices = nodes, pods, policies, slices
        self.rules = rules

    def get_node(self, name: str) -> dict[str, Any] | None:
        return {"metadata": {"name": name}} if name in self.nodes else None

    def get_na(self, name: str) -> dict[str, Any] | None:
        return {"metadata": {"name": name}} if name in self.nodes else None

    def list_probe_pod_names(self, namespace: str, selector: str) -> set[str]:
        return set(self.pods)

    def list_policy_names(self) -> set[str]:
        return set(self.policies)

    def list_resource_slice_names(self, drivers: Any) -> set[str]:
        return set(self.slices)

    def list_fence_rule_names(self) -> set[str]:
        return set(self.rules)


def _indexes(nodes: list[str]) -> dict[str, Any]:
    """kopf's indexes as they stand after the watch's gap: every object once listed."""
    status = NodeAcceptanceStatus(phase=Phase.ACCEPTED, policy="p")
    return {
        NODES_INDEX: {n: [(5, NodeView(name=n, labels=LABELS))] for n in nodes},
        NAS_INDEX: {n: [(6, CachedAcceptance(NAView(name=n, status=status)))] for n in nodes},
        PODS_INDEX: {n: [(7, PodView(name=f"probe-{n}"))] for n in nodes},
        POLICIES_INDEX: {
            p: [(8, PolicyEntry(PolicyView(name=p, spec=None, error="x")))] for p in ("p", "q")
        },
    }


def _listed(cache: Cache, names: list[str], policies: list[str], now: float) -> None:
    """One listing of every kind, as kopf hands it to the handlers (type None)."""
    for name in names:
        cache.saw("node", name, None, now)
        cache.saw("na", name, None, now)
        cache.saw("pod", f"probe-{name}", None, now)
    for policy in policies:
        cache.saw("policy", policy, None, now)


def _controller(api: ApiServer, nodes: list[str]) -> Controller:
    controller = Controller(api, OperatorConfig(), judge)
    controller.cache.attach(_indexes(nodes))
    return controller


def _relisted(api: ApiServer) -> Controller:
    """Listed at start, then streaming, then b and policy q deleted in a watch gap
    and the kinds listed again without them."""
    controller = _controller(api, ["a", "b"])
    cache = controller.cache
    _listed(cache, ["a", "b"], ["p", "q"], now=0.0)
    for kind, key in (("node", "a"), ("na", "a"), ("pod", "probe-a"), ("policy", "p")):
        cache.saw(kind, key, "MODIFIED", 1.0)  # streaming
    _listed(cache, ["a"], ["p"], now=100.0)  # the relist after a 410 Gone
    return controller


def test_an_object_deleted_during_a_watch_gap_leaves_the_cache() -> None:
    api = ApiServer(nodes={"a"}, pods={"probe-a"}, policies={"p"})
    controller = _relisted(api)
    cache = controller.cache
    assert cache.node("b") is not None  # kopf's index still has it
    assert cache.unlisted(100.0 + RELIST_QUIET_SECONDS / 2) == []  # the listing may go on
    unlisted = cache.unlisted(100.0 + RELIST_QUIET_SECONDS)
    assert sorted((u.kind, u.key) for u in unlisted) == [
        ("na", "b"), ("node", "b"), ("pod", "probe-b"), ("policy", "q")
    ]  # fmt: skip
    controller.forget(controller._gone(unlisted))
    assert cache.node("b") is None
    assert cache.na("b") is None
    assert cache.pods("b") == ()
    assert [e.view.name for e in cache.policies()] == ["p"]
    assert cache.node("a") is not None
    assert [p.name for p in cache.pods("a")] == ["probe-a"]
    assert "b" in controller.queue._queued  # its reconcile deletes its NodeAcceptance
    assert cache.unlisted(1000.0) == []  # each relist is checked once


def test_an_unlisted_object_the_api_server_still_has_stays() -> None:
    """A listing event still queued in kopf when the check runs: the API decides."""
    api = ApiServer(nodes={"a", "b"}, pods={"probe-a", "probe-b"}, policies={"p", "q"})
    controller = _relisted(api)
    unlisted = controller.cache.unlisted(200.0)
    assert controller._gone(unlisted) == []
    assert controller.cache.node("b") is not None


def test_an_object_created_again_under_its_name_shows() -> None:
    api = ApiServer(nodes={"a"}, pods={"probe-a"}, policies={"p"})
    controller = _relisted(api)
    controller.forget(controller._gone(controller.cache.unlisted(200.0)))
    index = controller.cache.indexes[NODES_INDEX]
    index["b"] = [(50, NodeView(name="b", labels=LABELS))]  # a newer object named b
    assert controller.cache.node("b") is not None


def test_no_relist_no_check() -> None:
    controller = _controller(ApiServer(set(), set(), set()), ["a", "b"])
    _listed(controller.cache, ["a", "b"], ["p", "q"], now=0.0)
    controller.cache.saw("node", "a", "MODIFIED", 1.0)
    controller.cache.saw("node", "b", "DELETED", 2.0)
    assert controller.cache.unlisted(1000.0) == []


def _slice(node: str, generation: int) -> ResourceSliceView:
    return ResourceSliceView(
        name=f"{node}-g{generation}", driver="gpu.nvidia.com", pool=node,
        generation=generation, slice_count=1, node_name=node,
    )  # fmt: skip


def test_a_resource_slice_deleted_during_a_watch_gap_leaves_the_node_pool() -> None:
    """The driver republished the pool (generation 2) and withdrew generation 1 while
    the watch was gone: the relist shows only the new slice, the old one is dropped and
    its node reconciled."""
    api = ApiServer(nodes={"a"}, pods={"probe-a"}, policies={"p"}, slices=frozenset({"a-g2"}))
    controller = _controller(api, ["a"])
    cache = controller.cache
    cache.indexes[SLICES_INDEX] = {"a": [(9, _slice("a", 1)), (10, _slice("a", 2))]}
    cache.saw("slice", "a-g1", None, 0.0)
    cache.saw("slice", "a-g1", "MODIFIED", 1.0)
    cache.saw("slice", "a-g2", None, 100.0)  # the relist after a 410 Gone
    unlisted = cache.unlisted(100.0 + RELIST_QUIET_SECONDS)
    assert [(u.kind, u.key, u.node) for u in unlisted] == [("slice", "a-g1", "a")]
    controller.forget(controller._gone(unlisted))
    assert [s.name for s in cache.resource_slices("a")] == ["a-g2"]
    assert "a" in controller.queue._queued


def _rule(node: str, name: str) -> FenceRuleView:
    return FenceRuleView(
        name, node, "U5", "gpu.nvidia.com", node, "gpu-5", "gpuaccept.io/fenced", "x",
        "NoSchedule",
    )  # fmt: skip


def test_a_fence_rule_deleted_during_a_watch_gap_is_dropped_and_its_node_reconciled() -> None:
    """A fence rule deleted while the watch was gone (only the exempt groups may): the
    relist does not show it, the check finds it gone, the index forgets it and its node
    is reconciled, so that the operator makes it again."""
    api = ApiServer(nodes={"a"}, pods={"probe-a"}, policies={"p"}, rules=frozenset({"r2"}))
    controller = _controller(api, ["a"])
    cache = controller.cache
    cache.indexes[FENCE_RULES_INDEX] = {"a": [(9, _rule("a", "r1")), (10, _rule("a", "r2"))]}
    cache.saw("rule", "r1", None, 0.0)
    cache.saw("rule", "r1", "MODIFIED", 1.0)
    cache.saw("rule", "r2", None, 100.0)  # the relist after a 410 Gone
    unlisted = cache.unlisted(100.0 + RELIST_QUIET_SECONDS)
    assert [(u.kind, u.key, u.node) for u in unlisted] == [("rule", "r1", "a")]
    controller.forget(controller._gone(unlisted))
    assert [r.name for r in cache.fence_rules("a")] == ["r2"]
    assert "a" in controller.queue._queued
