"""Before a probe pod is created, the node's running pods are listed once (field
selector on spec.nodeName): GPU pods that are not gpuaccept's make the create a
NodeBusy refusal the core turns into a wait; and a refused status write is held
off for a while, then tried again."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.operator.cache import NAS_INDEX, Cache
from gpuaccept.operator.core import CreateProbePod, NodeSnapshot, PatchNAStatus
from gpuaccept.operator.core.phases.startfailure import NODE_BUSY_PREFIX, create_refused
from gpuaccept.operator.core.reconcile import STATUS_REFUSED_RETRY_SECONDS
from gpuaccept.operator.executor import KubeExecutor, StaleCacheError, StatusRefusedError
from gpuaccept.operator.kube import Kube
from gpuaccept.operator.views import cached_acceptance

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def pod(name: str, *, gpus: str | None = "8", ours: bool = False, ns: str = "team") -> Any:
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus is not None else {}
    labels = {"app.kubernetes.io/managed-by": "gpuaccept"} if ours else {}
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "c", "resources": resources}]},
    }


class NodeKube:
    def __init__(self, on_node: list[Any], list_error: int | None = None) -> None:
        self.on_node = on_node
        self.list_error = list_error
        self.listed: list[str] = []
        self.created: list[str] = []
        self.status_error: ApiException | None = None

    def list_running_pods_on_node(self, node: str) -> list[Any]:
        self.listed.append(node)
        if self.list_error is not None:
            raise ApiException(status=self.list_error, reason="Forbidden")
        return self.on_node

    def create_pod(self, namespace: str, manifest: Any) -> None:
        self.created.append(manifest["metadata"]["name"])

    def patch_na_status(self, name: str, rv: str, status: Any) -> dict[str, Any]:
        if self.status_error is not None:
            raise self.status_error
        return {"metadata": {"name": name, "resourceVersion": "8"}, "status": status}


def create(kube: NodeKube, labels: dict[str, str] | None = None) -> KubeExecutor:
    executor = KubeExecutor(cast(Kube, kube), Cache(), namespace="ns", identity="test")
    manifest = {"metadata": {"name": "probe-gpu-1-1", "labels": labels or {}}}
    executor.execute(
        NodeSnapshot(node_name="gpu-1", now=NOW, node=None),
        CreateProbePod("probe-gpu-1-1", manifest),
    )
    return executor


def test_gpu_pods_on_the_node_refuse_the_create_as_node_busy() -> None:
    kube = NodeKube([pod("train-0"), pod("web", gpus=None), pod("probe-x", ours=True)])
    executor = create(kube)
    assert kube.listed == ["gpu-1"]
    assert kube.created == []
    refusal = executor.create_errors["gpu-1"]
    assert refusal == NODE_BUSY_PREFIX + "team/train-0"
    failure = create_refused(refusal)
    assert (failure.reason, failure.blocked) == ("NodeBusy", True)
    # the node's status names the blocking pod with its namespace: whose pod it is
    assert failure.message == "GPU pods still run on the node: team/train-0"


@pytest.mark.parametrize(
    "on_node",
    [[], [pod("web", gpus=None)], [pod("zero", gpus="0")], [pod("probe-x", ours=True)]],
    ids=["empty", "no-gpu-pod", "zero-gpus", "our-own-pod"],
)
def test_a_node_without_other_gpu_pods_gets_its_probe_pod(on_node: list[Any]) -> None:
    kube = NodeKube(on_node)
    executor = create(kube)
    assert kube.created == ["probe-gpu-1-1"]
    assert "gpu-1" not in executor.create_errors


def test_without_permission_to_list_the_kubelet_decides() -> None:
    kube = NodeKube([], list_error=403)
    create(kube)
    assert kube.created == ["probe-gpu-1-1"]


def test_a_fabric_pod_is_not_held_back_by_the_list() -> None:
    kube = NodeKube([pod("train-0")])
    create(kube, labels={"gpuaccept.io/fabric-pair": "p1"})
    assert kube.listed == []
    assert kube.created == ["probe-gpu-1-1"]


def test_a_refused_status_write_is_held_off_then_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    kube = NodeKube([])
    error = ApiException(status=422, reason="Invalid")
    error.body = json.dumps({"message": "status.message: Too long"})
    kube.status_error = error
    executor = KubeExecutor(cast(Kube, kube), Cache(), namespace="ns", identity="test")
    with pytest.raises(StatusRefusedError):
        executor.execute(
            NodeSnapshot(node_name="gpu-1", now=NOW, node=None),
            PatchNAStatus("gpu-1", "7", NodeAcceptanceStatus(phase=Phase.ACCEPTED)),
        )
    assert executor.status_error("gpu-1") == "422 status.message: Too long"
    clock[0] += STATUS_REFUSED_RETRY_SECONDS - 1
    assert executor.status_error("gpu-1") is not None
    clock[0] += 1
    assert executor.status_error("gpu-1") is None  # forgotten: the write is tried again


# ---------------------------------------------------------------- a 404 on a write


class GoneKube(NodeKube):
    def patch_na_status(self, name: str, rv: str, status: Any) -> dict[str, Any]:
        error = ApiException(status=404, reason="Not Found")
        error.body = json.dumps({"message": f'nodeacceptances "{name}" not found'})
        raise error


def test_a_404_on_a_status_write_means_deleted_and_a_newer_object_shows() -> None:
    cache = Cache()
    stale = cached_acceptance({"metadata": {"name": "gpu-1", "resourceVersion": "5"}})
    # an entry a relist after a 410 left behind: the object is gone on the server
    cache.indexes[NAS_INDEX] = {"gpu-1": [(5, stale)]}
    executor = KubeExecutor(cast(Kube, GoneKube([])), cache, namespace="ns", identity="test")
    with pytest.raises(StaleCacheError):
        executor.execute(
            NodeSnapshot(node_name="gpu-1", now=NOW, node=None),
            PatchNAStatus("gpu-1", "5", NodeAcceptanceStatus(phase=Phase.ACCEPTED)),
        )
    assert cache.na("gpu-1") is None  # no longer patched forever
    fresh = cached_acceptance({"metadata": {"name": "gpu-1", "resourceVersion": "9"}})
    cache.indexes[NAS_INDEX] = {"gpu-1": [(5, stale), (9, fresh)]}
    view = cache.na("gpu-1")
    assert view is not None
    assert view.resource_version == "9"
