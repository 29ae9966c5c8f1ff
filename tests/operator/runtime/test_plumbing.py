"""The operator's plumbing without a server: views, cache overlay, work queue, leader election."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import kopf
import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.cache import (
    FENCE_RULES_INDEX,
    SLICES_INDEX,
    index_fence_rule,
    index_resource_slice,
)
from gpuaccept.operator.controller import (
    NAS_INDEX,
    NODES_INDEX,
    PODS_INDEX,
    POLICIES_INDEX,
    Cache,
    Controller,
    index_na,
    index_node,
    index_pod,
)
from gpuaccept.operator.core import OperatorConfig, Taint
from gpuaccept.operator.core.fencerules import fence_rule_manifest
from gpuaccept.operator.core.judge import judge
from gpuaccept.operator.core.model import FenceRuleView
from gpuaccept.operator.handlers import (
    LIST_PAGE,
    NoDiffBaseStorage,
    NoProgressStorage,
    build_registry,
    configure,
)
from gpuaccept.operator.kube import ConflictError, Kube, _failed_test_op
from gpuaccept.operator.leader import LeaderElector, LeaseSettings
from gpuaccept.operator.quarantinelimit import QuarantineLimit
from gpuaccept.operator.views import node_view, pod_view, policy_entry
from gpuaccept.operator.workqueue import WorkQueue

NODE: dict[str, Any] = {
    "metadata": {
        "name": "gpu-1",
        "resourceVersion": "5",
        "uid": "u",
        "labels": {"a": "b"},
        "annotations": {"gpuaccept.io/reprobe": "x", "kubeadm.alpha.kubernetes.io/cri-socket": "s"},
    },
    "spec": {"taints": [{"key": "k", "effect": "NoSchedule", "value": "v"}], "unschedulable": True},
    "status": {
        "nodeInfo": {"bootID": "boot"},
        "allocatable": {"nvidia.com/gpu": "8"},
        "conditions": [{"type": "GPUAcceptance", "status": "True", "reason": "Accepted"}],
    },
}


def test_node_view() -> None:
    view = node_view(NODE)
    assert view.name == "gpu-1"
    assert view.annotations == {"gpuaccept.io/reprobe": "x"}  # others' are not kept
    assert view.taints == (Taint("k", "NoSchedule", "v"),)
    assert view.boot_id == "boot"
    assert view.gpus == 8
    assert view.unschedulable
    assert view.condition is not None
    assert view.condition.reason == "Accepted"


def test_node_view_keeps_other_tools_conditions_without_their_messages() -> None:
    """What policy inService reads: type, status and last transition, nothing more
    (a heartbeat's lastHeartbeatTime changes no view)."""
    npd = {
        "type": "KernelDeadlock",
        "status": "True",
        "reason": "DockerHung",
        "message": "task docker:7 blocked for more than 300 seconds",
        "lastTransitionTime": "2026-12-01T12:00:00Z",
        "lastHeartbeatTime": "2026-12-01T12:05:00Z",
    }
    status = {**NODE["status"], "conditions": [*NODE["status"]["conditions"], npd]}
    view = node_view({**NODE, "status": status})
    assert [(c.type, c.status) for c in view.conditions] == [("KernelDeadlock", "True")]
    assert view.conditions[0].since is not None
    assert view.conditions[0].since.isoformat() == "2026-12-01T12:00:00+00:00"
    beat = {**npd, "lastHeartbeatTime": "2026-12-01T12:10:00Z"}
    later = node_view({**NODE, "status": {**status, "conditions": [beat]}})
    assert later.conditions == view.conditions


def test_node_views_share_their_label_strings() -> None:
    """Each watch event is a fresh decoded body; the cache keeps one string per label
    key and value, not one per node."""
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "kubernetes.io/os": "linux"}
    first, second = (
        node_view(
            json.loads(json.dumps({**NODE, "metadata": {**NODE["metadata"], "labels": labels}}))
        )
        for _ in range(2)
    )
    assert first.labels == second.labels == labels
    for (key1, value1), (key2, value2) in zip(
        first.labels.items(), second.labels.items(), strict=True
    ):
        assert key1 is key2
        assert value1 is value2
    assert node_view({**NODE, "metadata": {**NODE["metadata"], "labels": None}}).labels == {}


def test_pod_view_prefers_pod_reason_and_reads_termination() -> None:
    pod = {
        "metadata": {"name": "p", "labels": {"gpuaccept.io/attempt": "3"}},
        "status": {
            "phase": "Failed",
            "reason": "DeadlineExceeded",
            "containerStatuses": [
                {
                    "name": "probe",
                    "state": {"terminated": {"exitCode": 137, "reason": "Error", "message": "m"}},
                }
            ],
        },
    }
    view = pod_view(pod)
    assert view.serial == 3
    assert view.terminated
    assert view.exit_code == 137
    assert view.reason == "DeadlineExceeded"
    assert view.message == "m"


def test_policy_entry_invalid_names_the_field() -> None:
    entry = policy_entry(
        {
            "metadata": {"name": "p", "generation": 2},
            "spec": {"pendingTaintKey": "a/b", "quarantine": {"taintKey": "a/b"}},
        }
    )
    assert entry.view.spec is None
    assert entry.view.error is not None
    assert "differ" in entry.view.error


def test_policy_entry_with_an_empty_version_range_is_invalid() -> None:
    entry = policy_entry(
        {
            "metadata": {"name": "p"},
            "spec": {
                "probe": {"driverLibraries": {"driverVersions": {"min": "600", "max": "500"}}}
            },
        }
    )
    assert entry.view.spec is None
    assert entry.view.error is not None
    assert entry.view.error.startswith("spec.probe.driverLibraries.driverVersions: ")
    assert "min 600 is above max 500" in entry.view.error


def test_unreadable_na_status_starts_over() -> None:
    ((_, cached),) = index_na({"metadata": {"name": "n"}, "status": {"attempts": -1}}).values()
    assert cached.view.status.phase == Phase.PENDING
    assert cached.with_evidence().status.phase == Phase.PENDING
    assert cached.view.unknown_phase is None


def test_an_unknown_na_phase_is_kept_beside_the_rest_of_the_status() -> None:
    """core/phases/unknown.py decides; the rest of the status is read as it is."""
    status = {"phase": "Bogus", "podSerial": 3}
    ((_, cached),) = index_na({"metadata": {"name": "n"}, "status": status}).values()
    assert cached.view.unknown_phase == "Bogus"
    assert cached.with_evidence().unknown_phase == "Bogus"
    assert (cached.view.status.phase, cached.view.status.pod_serial) == (Phase.PENDING, 3)


def _cache(**indexes: dict[str, list[Any]]) -> Cache:
    cache = Cache()
    kwargs: dict[str, dict[str, list[Any]]] = {
        NODES_INDEX: {},
        NAS_INDEX: {},
        POLICIES_INDEX: {},
        PODS_INDEX: {},
    }
    kwargs.update(indexes)
    cache.attach(kwargs)
    return cache


def test_cache_overlay_wins_until_the_watch_catches_up() -> None:
    old = index_node(NODE)
    cache = _cache(**{NODES_INDEX: {"gpu-1": list(old.values())}})
    assert cache.node("gpu-1") is not None
    newer = {**NODE, "metadata": {**NODE["metadata"], "resourceVersion": "9", "labels": {}}}
    cache.write("node", "gpu-1", 9, node_view(newer))
    view = cache.node("gpu-1")
    assert view is not None
    assert view.labels == {}
    # the watch delivers rv 9: the overlay entry is dropped, the index answers
    cache.indexes[NODES_INDEX]["gpu-1"] = list(index_node(newer).values())
    assert cache.node("gpu-1") == node_view(newer)
    assert ("node", "gpu-1") not in cache._overlay


def _na_body(name: str, rv: int, phase: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": str(rv)},
        "status": {"phase": phase, "policy": "default"},
    }


def test_cache_counts_follow_watch_events_and_our_writes() -> None:
    policy = policy_entry(
        {
            "metadata": {"name": "default", "resourceVersion": "1"},
            "spec": {"nodeSelector": {"a": "b"}, "maxQuarantined": 5},
        }
    )
    cache = _cache(
        **{
            POLICIES_INDEX: {"default": [(1, policy)]},
            NODES_INDEX: {"gpu-1": list(index_node(NODE).values())},
            NAS_INDEX: {"gpu-1": list(index_na(_na_body("gpu-1", 6, "Probing")).values())},
        }
    )
    cache.refresh_policies()
    cache.refresh("node", "gpu-1")  # the watch events, as the kopf handlers pass them on
    cache.refresh("na", "gpu-1")
    share = cache.count.tally()["default"]
    assert (share.matched, share.counts.probing, share.quarantined) == (1, 1, frozenset())
    # our own write counts once settled, before the watch delivers it
    ((rv, quarantined),) = index_na(_na_body("gpu-1", 7, "Quarantined")).values()
    cache.write("na", "gpu-1", rv, quarantined)
    assert cache.count.limit_counts("default", "gpu-2").quarantined == 0
    cache.settle()
    assert cache.count.limit_counts("default", "gpu-2").quarantined == 1
    assert [na.status.phase for na in cache.acceptances()] == [Phase.QUARANTINED]
    # the NodeAcceptance and the node are deleted: the watch events uncount them
    cache.indexes[NAS_INDEX].pop("gpu-1")
    cache.write("na", "gpu-1", 1 << 62, None)
    cache.settle()
    cache.indexes[NODES_INDEX].pop("gpu-1")
    cache.refresh("node", "gpu-1")
    share = cache.count.tally()["default"]
    assert (share.matched, share.counts.quarantined, cache.acceptances()) == (0, 0, ())


def _dra_slice(node: str, count: int, *, generation: int = 1) -> dict[str, Any]:
    devices = [
        {"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": f"U{i}"}}}
        for i in range(count)
    ]
    return {
        "metadata": {"name": f"{node}-s", "resourceVersion": "3"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def test_a_dra_node_counts_its_pool_s_gpus_and_a_fenced_gpu_as_one() -> None:
    """The limit in GPUs (issue 40) on a DRA node: its size is its complete pool's GPUs
    (nothing on the Node says it), and a fenced GPU (status.fenced) is one GPU out."""
    policy = policy_entry(
        {
            "metadata": {"name": "default", "resourceVersion": "1"},
            "spec": {"nodeSelector": {"a": "b"}, "maxQuarantined": 5},
        }
    )
    dra_node = {**NODE, "status": {**NODE["status"], "allocatable": {}}}
    fenced = _na_body("gpu-1", 6, "Accepted")
    fenced["status"]["fenced"] = "1/8"
    drivers = frozenset({"gpu.nvidia.com"})
    pool = list(index_resource_slice(_dra_slice("gpu-1", 8), drivers).values())
    cache = _cache(
        **{
            POLICIES_INDEX: {"default": [(1, policy)]},
            NODES_INDEX: {"gpu-1": list(index_node(dra_node).values())},
            NAS_INDEX: {"gpu-1": list(index_na(fenced).values())},
            SLICES_INDEX: {"gpu-1": pool},
        }
    )
    cache.refresh_policies()
    cache.refresh("node", "gpu-1")
    cache.refresh("na", "gpu-1")
    counts = cache.count.limit_counts("default", "gpu-2")
    assert (counts.matched_gpus, counts.unavailable_gpus) == (8, 1)
    # the pool incomplete (a second slice announced, not there): size unknown, nodes counted
    cache.indexes[SLICES_INDEX]["gpu-1"] = list(
        index_resource_slice(
            {**_dra_slice("gpu-1", 8), "spec": {**_dra_slice("gpu-1", 8)["spec"], "pool": {
                "name": "gpu-1", "generation": 1, "resourceSliceCount": 2}}},
            drivers,
        ).values()
    )  # fmt: skip
    cache.refresh("node", "gpu-1")
    assert cache.count.limit_counts("default", "gpu-2").matched_gpus is None


def test_the_fence_rule_index_keeps_the_operator_s_rules_by_node() -> None:
    ours = fence_rule_manifest(
        FenceRuleView("r1", "gpu-1", "U5", "gpu.nvidia.com", "gpu-1", "gpu-5",
                      "gpuaccept.io/fenced", "memory_health", "NoSchedule"),
        {"app.kubernetes.io/managed-by": "gpuaccept",
         "app.kubernetes.io/component": "gpu-fence", "gpuaccept.io/node": "gpu-1"},
        None,
    )  # fmt: skip
    ours["metadata"]["resourceVersion"] = "4"
    theirs = {**ours, "metadata": {"name": "r2", "labels": {"team": "ml"}}}
    assert index_fence_rule(theirs) == {}
    cache = _cache(**{FENCE_RULES_INDEX: {"gpu-1": list(index_fence_rule(ours).values())}})
    (view,) = cache.fence_rules("gpu-1")
    assert (view.name, view.node, view.gpu_uuid, view.device, view.effect) == (
        "r1", "gpu-1", "U5", "gpu-5", "NoSchedule",
    )  # fmt: skip
    assert cache.fence_rules("gpu-2") == ()


def test_cache_keeps_the_nodeacceptances_with_a_fabric_test_by_policy() -> None:
    """What a fabric pass reads, kept per watch event and write (no fleet walk)."""
    waiting = _na_body("gpu-1", 6, "Fabric")
    waiting["status"]["fabric"] = {"summary": "waiting"}
    cache = _cache(**{NAS_INDEX: {"gpu-1": list(index_na(waiting).values())}})
    cache.refresh("na", "gpu-1")
    cache.refresh("na", "gpu-2")  # no such object: nothing
    assert cache.fabric_names("default") == ["gpu-1"]
    # accepted after its pair: still a member (a partner and a witness)
    accepted = {**waiting, "status": {**waiting["status"], "phase": "Accepted"}}
    accepted["metadata"] = {"name": "gpu-1", "resourceVersion": "7"}
    ((rv, view),) = index_na(accepted).values()
    cache.write("na", "gpu-1", rv, view)
    cache.settle()
    assert cache.fabric_names("default") == ["gpu-1"]
    # a new round without fabric state, then deleted: gone
    ((rv, view),) = index_na(_na_body("gpu-1", 8, "Pending")).values()
    cache.write("na", "gpu-1", rv, view)
    cache.settle()
    assert cache.fabric_names("default") == []
    assert cache.fabric_names("other") == []


def test_cache_pods_and_tombstones() -> None:
    pod = {
        "metadata": {"name": "p1", "resourceVersion": "3", "labels": {"gpuaccept.io/attempt": "1"}},
        "spec": {"nodeName": "gpu-1"},
        "status": {"phase": "Succeeded"},
    }
    cache = _cache(**{PODS_INDEX: {"gpu-1": list(index_pod(pod).values())}})
    assert [p.name for p in cache.pods("gpu-1")] == ["p1"]
    cache.write_pod("gpu-1", "p1", 1 << 62, None)  # force-deleted by us
    assert cache.pods("gpu-1") == ()
    cache.indexes[PODS_INDEX]["gpu-1"] = []  # the watch saw the deletion
    assert cache.pods("gpu-1") == ()
    assert not cache._overlay


def test_a_pod_deleted_before_our_write_of_the_delete_landed_is_gone() -> None:
    """The delete's answer (the pod, terminating) is written to the overlay after the
    watch may already have shown the DELETED event: it must not linger as a pod being
    deleted forever (the node would wait for it to go, and never be probed again)."""
    pod = {
        "metadata": {"name": "p1", "resourceVersion": "3", "labels": {"gpuaccept.io/attempt": "1"}},
        "spec": {"nodeName": "gpu-1"},
        "status": {"phase": "Pending"},
    }
    cache = _cache(**{PODS_INDEX: {"gpu-1": []}})  # the watch saw it created and deleted
    terminating = {
        **pod,
        "metadata": {
            **pod["metadata"],
            "resourceVersion": "5",
            "deletionTimestamp": "2026-12-02T05:55:04Z",
        },
    }
    ((rv, view),) = index_pod(terminating).values()
    assert view.deleting
    cache.write_pod("gpu-1", "p1", rv, view)  # the delete's answer, written late
    assert cache.pods("gpu-1") == ()
    assert not cache._overlay
    created = index_pod(pod)  # a pod we created that the watch has not shown yet
    ((rv, view),) = created.values()
    cache.write_pod("gpu-1", "p1", rv, view)
    assert [p.name for p in cache.pods("gpu-1")] == ["p1"]


def test_workqueue_dedups_and_requeues_dirty_keys() -> None:
    async def scenario() -> list[str]:
        queue = WorkQueue()
        queue.add("a")
        queue.add("a")
        queue.add("b")
        assert len(queue) == 2
        first = await queue.get()
        queue.add(first)  # changed while being processed
        assert len(queue) == 1
        queue.done(first)
        assert len(queue) == 2
        return [await queue.get(), await queue.get()]

    assert sorted(asyncio.run(scenario())) == ["a", "b"]


def test_workqueue_delay_heap_keeps_the_earliest() -> None:
    async def scenario() -> str:
        queue = WorkQueue()
        runner = asyncio.create_task(queue.run_delayed())
        queue.add_after("late", 30)
        queue.add_after("soon", 0.05)
        queue.add_after("soon", 10)  # a later wake-up does not postpone the earlier one
        key = await asyncio.wait_for(queue.get(), 5)
        runner.cancel()
        return key

    assert asyncio.run(scenario()) == "soon"


class FakeLeases:
    """The Lease calls of Kube, in memory, with resourceVersion checks: only a
    transport between electors. The tests judge the electors by what they
    return, never by what this stored (the real Lease: tests/integration)."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None if self.lease is None else {**self.lease}

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.lease is not None:
            raise ConflictError(status=409, reason="AlreadyExists")
        return self._store(body)

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self.lease is not None
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise ConflictError(status=409, reason="Conflict")
        return self._store(body)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.rv)}}
        return self.lease


def _elector(fake: FakeLeases, identity: str, duration: float = 15) -> LeaderElector:
    return LeaderElector(
        fake,  # type: ignore[arg-type]
        LeaseSettings(namespace="ns", name="lease", identity=identity, lease_duration=duration),
    )


def test_only_one_replica_holds_the_lease() -> None:
    fake = FakeLeases()
    a, b = _elector(fake, "a"), _elector(fake, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.try_acquire_or_renew()  # renew
    assert not b.try_acquire_or_renew()


def test_standby_takes_over_an_expired_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeLeases()
    a, b = _elector(fake, "a", 10), _elector(fake, "b", 10)
    clock = [1000.0]
    monkeypatch.setattr("gpuaccept.operator.leader.time.monotonic", lambda: clock[0])
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b starts observing the record
    clock[0] += 11  # a stopped renewing
    assert b.try_acquire_or_renew()
    assert not a.try_acquire_or_renew()  # a, back, finds b holding a live lease
    assert b.try_acquire_or_renew()  # renew
    assert not a.try_acquire_or_renew()


def test_a_record_of_years_is_believed_for_our_own_duration_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 42 item 4: someone who may write the Lease sets a holder of their own and
    a duration of 2**31 - 1 seconds, once. The operator waited that long; it now waits
    for its own duration without a renewal, as for any holder that stopped."""
    fake = FakeLeases()
    a = _elector(fake, "a", 15)
    clock = [1000.0]
    monkeypatch.setattr("gpuaccept.operator.leader.time.monotonic", lambda: clock[0])
    fake.create_lease("ns", {"metadata": {"name": "lease", "namespace": "ns"},
                             "spec": {"holderIdentity": "tenant", "leaseDurationSeconds": 2**31 - 1,
                                      "renewTime": "2026-12-05T00:00:00.000000Z"}})  # fmt: skip
    assert not a.try_acquire_or_renew()
    clock[0] += 14
    assert not a.try_acquire_or_renew()
    clock[0] += 2
    assert a.try_acquire_or_renew()


def test_a_renewal_after_a_gap_hands_the_work_back() -> None:
    """A renewal slower than 80 % of the lease: ``leading`` is False for a while
    (the workers drop what they take), then the renewal succeeds with no change of
    holder. The controller must hear "leader" again, or dropped keys stay lost."""

    class SlowOnce(FakeLeases):
        slow = False

        def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
            if self.slow:  # a renewal is the update alone (LeaderElector._renew)
                self.slow = False
                time.sleep(1.0)
            return super().replace_lease(namespace, name, body)

    fake = SlowOnce()
    heard: list[bool] = []
    elector = LeaderElector(
        fake,  # type: ignore[arg-type]
        LeaseSettings(
            namespace="ns", name="lease", identity="a", lease_duration=1.0, renew_period=0.05
        ),
        on_change=heard.append,
    )

    async def until(done: Callable[[], bool]) -> None:
        for _ in range(200):  # up to 10 s on a slow machine
            if done():
                return
            await asyncio.sleep(0.05)

    async def scenario() -> tuple[int, list[bool]]:
        task = asyncio.create_task(elector.run())
        try:
            await until(lambda: bool(heard))
            before = len(heard)  # 1 (more only if this machine stalled a renewal)
            fake.slow = True  # the next renewal takes 1 s, 100 % of the lease
            await until(lambda: len(heard) > before)
            return before, heard
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    before, heard_then = asyncio.run(scenario())
    assert before >= 1
    assert len(heard_then) > before  # told "leader" again after the gap
    assert all(heard_then)  # and never "not leader": the lease was never lost


def test_a_renewal_after_someone_else_wrote_the_lease_reads_it_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A holder renews by updating the Lease its own last write returned (no read
    first, issue 41). When another replica took the Lease meanwhile (this one stalled
    past its duration), that update is refused (409) and the round reads the Lease:
    the other holds it, live, and this replica does not lead."""
    fake = FakeLeases()
    a, b = _elector(fake, "a", 10), _elector(fake, "b", 10)
    clock = [1000.0]
    monkeypatch.setattr("gpuaccept.operator.leader.time.monotonic", lambda: clock[0])
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.try_acquire_or_renew()  # renewed by its update alone
    clock[0] += 11  # a stalls
    assert not b.try_acquire_or_renew()  # b sees a's last renewal only now
    clock[0] += 11  # and no renewal for its duration since
    assert b.try_acquire_or_renew()
    assert not a.try_acquire_or_renew()  # its update refused: it reads, b holds it
    assert a.holder == "b"
    assert b.try_acquire_or_renew()
    assert not a.try_acquire_or_renew()


def test_released_lease_is_taken_at_once() -> None:
    fake = FakeLeases()
    a, b = _elector(fake, "a"), _elector(fake, "b")
    assert a.try_acquire_or_renew()
    a.is_leader = True
    a.release()
    assert b.try_acquire_or_renew()


def test_failed_json_patch_test_op_is_told_from_a_schema_error() -> None:
    bare = ApiException(status=422)
    bare.body = (
        '{"message":"the server rejected our request due to an error in our request",'
        '"reason":"Invalid","details":{},"code":422}'
    )
    schema = ApiException(status=422)
    schema.body = (
        '{"message":"NodeAcceptance.gpuaccept.io \\"optest\\" is invalid: status.phase",'
        '"details":{"causes":[{"field":"status.phase"}]},"code":422}'
    )
    assert _failed_test_op(bare)
    assert not _failed_test_op(schema)


def test_kopf_handlers_run_on_the_event_loop() -> None:
    """kopf runs a sync handler in a thread pool; ours touch the asyncio work queue.

    ``WorkQueue.add`` from another thread is a race (a key can be dropped between
    the "processing" check and the "dirty" mark) and does not wake the loop, so
    every index, event and lifecycle handler must be ``async def``.
    """
    controller = Controller(Kube(k8s.ApiClient()), OperatorConfig(), judge)
    try:
        registry: kopf.OperatorRegistry = build_registry(controller)
        handlers = [
            *registry._indexing.get_all_handlers(),
            *registry._watching.get_all_handlers(),
            *registry._activities.get_all_handlers(),
        ]
        assert len(handlers) == 12  # with the default DRA driver: the slice index and event
        sync = [h.id for h in handlers if not inspect.iscoroutinefunction(h.fn)]
        assert sync == []
    finally:
        controller.executor.shutdown()


def test_na_names_while_api_threads_write_the_overlay() -> None:
    """The executor (``KubeExecutor``) writes the overlay from the API threads while the loop
    lists names (a policy change, a new leader). Iterating the live dict raised
    "dictionary changed size during iteration" here in every trial."""
    cache = Cache()
    for i in range(10_000):
        cache.write("na", f"gpu-{i}", 1, None)

    def api_thread() -> None:
        for i in range(20_000):
            cache.write("pod", f"probe-{i}", 1, None)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: the race shows at once
    writer = threading.Thread(target=api_thread)
    writer.start()
    try:
        rounds = 0
        while writer.is_alive() or rounds == 0:
            assert len(cache.na_names()) == 10_000
            rounds += 1
    finally:
        writer.join()
        sys.setswitchinterval(interval)


def test_kopf_settings_persist_nothing_and_let_idle_workers_go_soon() -> None:
    settings = kopf.OperatorSettings()
    configure(settings)
    assert isinstance(settings.persistence.diffbase_storage, NoDiffBaseStorage)
    assert isinstance(settings.persistence.progress_storage, NoProgressStorage)
    assert not settings.posting.enabled
    # an idle per-object worker keeps its object's last body alive until it exits
    assert settings.queueing.idle_timeout <= 1.0
    # a relist comes in pages: never the whole fleet's bodies decoded at once
    assert settings.watching.chunk_size == LIST_PAGE
    assert 0 < LIST_PAGE <= 1000


def test_the_limit_lock_is_one_for_the_whole_fleet() -> None:
    """The ceiling counts every policy's nodes, so take-outs of two policies are
    re-planned under one lock: else each could see room for the fleet's last slot."""
    limit = QuarantineLimit(Cache())
    assert limit.lock("a") is limit.lock("b")
    limit.forget("a")
    assert limit.lock("a") is limit.lock("b")
