"""The watch events of the operator's own writes. kopf's index keeps the entry the
executor made of a NodeAcceptance write's answer (the same resourceVersion is the same
object), not a second parse of the same body; any other version is parsed as it is. And
the echo of a write the node's own reconcile made (its status write, its pod create)
wakes no pass: the reconcile passes over the node after each write, reading that very
version; a write nobody follows (the fabric loop's) and any other version still do."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

from kubernetes import client as k8s
from world import BOOT, T0, make_report

from gpuaccept.contracts.nodeacceptance import CheckSummary, NodeAcceptanceStatus, Phase
from gpuaccept.operator.cache import (
    NAS_INDEX,
    NODES_INDEX,
    PODS_INDEX,
    POLICIES_INDEX,
    Cache,
    index_na,
)
from gpuaccept.operator.controller import Controller
from gpuaccept.operator.core import NodeSnapshot, OperatorConfig, PatchNAStatus
from gpuaccept.operator.core.judge import judge
from gpuaccept.operator.core.model import CreateProbePod
from gpuaccept.operator.core.podspec import WATCH_LABEL
from gpuaccept.operator.executor import KubeExecutor
from gpuaccept.operator.handlers import build_registry
from gpuaccept.operator.kube import Kube
from gpuaccept.operator.views import cached_acceptance


def _body(rv: int, *, attempts: int = 1, name: str = "gpu-1") -> dict[str, Any]:
    report = make_report(name, BOOT)
    status = NodeAcceptanceStatus(
        phase=Phase.ACCEPTED,
        checks=[CheckSummary(check=r.check, status=r.status) for r in report.results],
        policy="default",
        attempts=attempts,
        last_probe_time=T0,
        probed_boot_id=BOOT,
        report=report,
    )
    wire = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    # a fresh decoded body, as a watch event's or an API answer's
    return json.loads(
        json.dumps({"metadata": {"name": name, "resourceVersion": str(rv)}, "status": wire})
    )


def _cache() -> Cache:
    cache = Cache()
    cache.attach({NODES_INDEX: {}, NAS_INDEX: {}, POLICIES_INDEX: {}, PODS_INDEX: {}})
    return cache


def _entry(body: dict[str, Any], cache: Cache | None = None) -> Any:
    ((rv, entry),) = index_na(body, cache).values()
    assert rv == int(body["metadata"]["resourceVersion"])
    return entry


def test_the_echo_of_our_own_write_is_indexed_as_the_entry_made_of_its_answer() -> None:
    cache = _cache()
    answer = cached_acceptance(_body(6))  # the executor's entry of the PATCH answer
    cache.write("na", "gpu-1", 6, answer)
    echoed = _entry(_body(6), cache)  # the watch event of that write
    assert echoed is answer
    assert echoed.with_evidence().status == cached_acceptance(_body(6)).with_evidence().status


def test_any_other_version_or_name_is_parsed_from_its_own_body() -> None:
    cache = _cache()
    cache.write("na", "gpu-1", 6, cached_acceptance(_body(6)))
    newer = _entry(_body(7, attempts=2), cache)  # someone else's write after ours
    assert newer.view.status.attempts == 2
    assert newer.view.resource_version == "7"
    other = _entry(_body(6, name="gpu-2"), cache)  # another object at the same number
    assert other.view.name == "gpu-2"
    assert other.with_evidence().status.report is not None
    assert other.with_evidence().status.report.node_name == "gpu-2"


def test_a_deletion_mark_or_no_cache_parses_the_body() -> None:
    cache = _cache()
    cache.write("na", "gpu-1", 6, None)  # deleted by us: nothing to share
    assert _entry(_body(6), cache).view.status.phase == Phase.ACCEPTED
    assert _entry(_body(6)).view.status.phase == Phase.ACCEPTED
    cache.write("na", "gpu-1", 6, cached_acceptance(_body(6)))
    unversioned = _body(6)
    del unversioned["metadata"]["resourceVersion"]
    ((rv, entry),) = index_na(unversioned, cache).values()
    assert rv == 0
    assert entry.view.resource_version == ""


# -- the echo of a write the node's own reconcile made: no pass of its own


def test_a_followed_write_answers_its_echo_once() -> None:
    cache = _cache()
    cache.write("na", "gpu-1", 6, None, followed=True)
    assert cache.echo("na", "gpu-1", 6)
    assert not cache.echo("na", "gpu-1", 6)  # answered once: a second event is news


def test_an_older_version_leaves_the_mark_and_a_newer_one_drops_it() -> None:
    cache = _cache()
    cache.write_pod("gpu-1", "watch-2", 9, None, followed=True)
    assert not cache.echo("pod", "watch-2", 8)  # an earlier version, still to be handled
    assert cache.echo("pod", "watch-2", 9)
    cache.write("na", "gpu-1", 6, None, followed=True)
    assert not cache.echo("na", "gpu-1", 7)  # someone else wrote after us: news
    assert not cache.echo("na", "gpu-1", 6)  # the mark went with it


def test_a_write_nobody_follows_has_no_echo() -> None:
    cache = _cache()
    cache.write("na", "gpu-1", 6, None)  # e.g. the fabric loop's: no pass of the node follows
    assert not cache.echo("na", "gpu-1", 6)
    cache.write("na", "gpu-1", 7, None, followed=True)
    cache.write("na", "gpu-1", 8, None)  # a later write nobody follows replaces the mark
    assert not cache.echo("na", "gpu-1", 7)
    assert not cache.echo("na", "gpu-1", 8)
    cache.write("na", "gpu-2", 0, None, followed=True)  # no version: nothing to match
    assert not cache.echo("na", "gpu-2", 0)
    assert not cache.echo("pod", "gpu-1", 8)  # another kind, the same name


class _Kube:
    """The API server's answers to a status write and a pod create."""

    def patch_na_status(self, name: str, rv: str, status: Any) -> dict[str, Any]:
        return _body(int(rv) + 1)

    def create_pod(self, namespace: str, manifest: Any) -> dict[str, Any]:
        return {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": "21"}}


def _run(loop: str, cache: Cache) -> None:
    executor = KubeExecutor(cast(Kube, _Kube()), cache, namespace="ns", identity="t", loop=loop)
    observed = NodeSnapshot(node_name="gpu-1", now=T0, node=None)
    status = NodeAcceptanceStatus(phase=Phase.ACCEPTED)
    executor.execute(observed, PatchNAStatus("gpu-1", "6", status))
    manifest = {"metadata": {"name": "watch-2", "labels": {WATCH_LABEL: "2"}}, "spec": {}}
    executor.execute(observed, CreateProbePod("watch-2", manifest))


def test_the_reconciles_writes_are_followed_the_fabric_loops_are_not() -> None:
    ours = _cache()
    _run("reconcile", ours)
    assert ours.echo("na", "gpu-1", 7)
    assert ours.echo("pod", "watch-2", 21)
    fabric = _cache()
    _run("fabric", fabric)  # its writes wake the node through their watch events
    assert not fabric.echo("na", "gpu-1", 7)
    assert not fabric.echo("pod", "watch-2", 21)


def _handlers(controller: Controller) -> dict[str, Any]:
    registry = build_registry(controller)
    return {h.fn.__name__: h.fn for h in registry._watching.get_all_handlers()}


def test_the_echo_of_a_followed_write_wakes_no_pass_and_news_does() -> None:
    controller = Controller(Kube(k8s.ApiClient()), OperatorConfig(), judge)
    try:
        handlers = _handlers(controller)
        indexes = {NODES_INDEX: {}, NAS_INDEX: {}, POLICIES_INDEX: {}, PODS_INDEX: {}}
        na_event, pod_event = handlers["na_event"], handlers["pod_event"]

        async def events() -> list[int]:
            depths = []
            controller.cache.write("na", "gpu-1", 6, None, followed=True)
            controller.cache.write_pod("gpu-1", "watch-2", 21, None, followed=True)
            for rv in (6, 7):  # the echo, then someone else's write
                body = _body(rv)
                await na_event(
                    name="gpu-1",
                    spec={"nodeName": "gpu-1"},
                    status=body["status"],
                    type="MODIFIED",
                    body=body,
                    **indexes,
                )
                depths.append(len(controller.queue))
            for rv in (21, 22):  # the create's echo, then the kubelet's status write
                pod = {"metadata": {"name": "watch-2", "resourceVersion": str(rv)}}
                spec = {"nodeName": "gpu-3"}
                await pod_event(
                    name="watch-2", spec=spec, labels={}, type="MODIFIED", body=pod, **indexes
                )
                depths.append(len(controller.queue))
            return depths

        assert asyncio.run(events()) == [0, 1, 1, 2]
    finally:
        controller.executor.shutdown()
