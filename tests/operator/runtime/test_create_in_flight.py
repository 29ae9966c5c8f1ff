"""A pod create in flight, seen by another loop before its answer (issue 42 item 9):
the executor remembers the create (no UID yet) before it sends it, so a reconcile of
the node that sees the new pod first never takes it for a crash window's pod
(core/creationintent.py); without an answer the memory goes, and a pod made all the
same is then the crash window's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import pytest

from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, OwnedPod
from gpuaccept.operator.cache import Cache
from gpuaccept.operator.core import CreateProbePod, NodeSnapshot, PodView
from gpuaccept.operator.core.creationintent import intended_create
from gpuaccept.operator.core.model import CreatedPod, PatchNAStatus
from gpuaccept.operator.core.podidentity import split_pods
from gpuaccept.operator.executor import KubeExecutor
from gpuaccept.operator.kube import Kube

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NAME = "probe-gpu-1-1"
LABELS = {"gpuaccept.io/fabric-pair": "p1"}  # no list of the node's pods first


class CreatingKube:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.seen_in_flight: dict[str, CreatedPod] = {}
        self.executor: KubeExecutor | None = None

    def create_pod(self, namespace: str, manifest: Any) -> dict[str, Any]:
        assert self.executor is not None
        self.seen_in_flight = self.executor.created_pods("gpu-1")  # what another loop sees
        if self.error is not None:
            raise self.error
        return {"metadata": {"name": NAME, "uid": "u-1", "resourceVersion": "5"}}


def _create(kube: CreatingKube) -> KubeExecutor:
    executor = KubeExecutor(cast(Kube, kube), Cache(), namespace="ns", identity="test")
    kube.executor = executor
    manifest = {"metadata": {"name": NAME, "labels": LABELS}, "spec": {"nodeName": "gpu-1"}}
    executor.execute(
        NodeSnapshot(node_name="gpu-1", now=NOW, node=None), CreateProbePod(NAME, manifest)
    )
    return executor


def test_a_create_is_remembered_in_flight_then_by_its_answer() -> None:
    kube = CreatingKube()
    executor = _create(kube)
    assert kube.seen_in_flight[NAME].uid == ""
    assert executor.created_pods("gpu-1")[NAME].uid == "u-1"


def test_a_create_without_an_answer_is_forgotten() -> None:
    kube = CreatingKube(error=ConnectionError("reset"))
    with pytest.raises(ConnectionError):
        _create(kube)
    assert kube.seen_in_flight[NAME].uid == ""
    assert kube.executor is not None
    assert NAME not in kube.executor.created_pods("gpu-1")


def test_a_pod_seen_while_its_create_is_in_flight_is_not_a_crash_windows() -> None:
    status, create = intended_create(NodeAcceptanceStatus(), "seed", NAME, {"metadata": {}})
    nonce = create.manifest["metadata"]["annotations"]["gpuaccept.io/creation-nonce"]
    pod = PodView(name=NAME, uid="u-1", node_name="gpu-1", owner_uid="na", nonce=nonce)
    in_flight = {NAME: CreatedPod(uid="", shape="")}
    seen = split_pods([pod], status, in_flight, node="gpu-1", owner="na")
    assert seen.crashed == ()
    assert seen.ours == ()  # not read before its answer
    after = split_pods([pod], status, {}, node="gpu-1", owner="na")  # no answer, ever
    assert after.crashed == (pod,)


class RecordingKube(CreatingKube):
    """Creates pods (each its own UID) and answers status writes."""

    def create_pod(self, namespace: str, manifest: Any) -> dict[str, Any]:
        name = manifest["metadata"]["name"]
        return {"metadata": {"name": name, "uid": f"u-{name}", "resourceVersion": "5"}}

    def patch_na_status(self, name: str, rv: str, wire: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": name, "resourceVersion": "6"}, "status": wire}


def _written(executor: KubeExecutor, *owned: OwnedPod) -> None:
    status = NodeAcceptanceStatus(owned_pods=list(owned))
    executor.execute(
        NodeSnapshot(node_name="gpu-1", now=NOW, node=None), PatchNAStatus("gpu-1", "5", status)
    )


def test_a_creates_answer_is_kept_until_a_status_written_records_its_pod() -> None:
    """One pod a window in service: the answers of the creates would pile up (the
    newest few per node) though each pod's record, once written, is what identifies it."""
    kube = RecordingKube()
    executor = KubeExecutor(cast(Kube, kube), Cache(), namespace="ns", identity="test")
    for window in (1, 2, 3):
        name = f"watch-gpu-1-{window}"
        manifest = {"metadata": {"name": name, "labels": LABELS}, "spec": {"nodeName": "gpu-1"}}
        executor.execute(
            NodeSnapshot(node_name="gpu-1", now=NOW, node=None), CreateProbePod(name, manifest)
        )
        answer = executor.created_pods("gpu-1")[name]
        _written(executor)  # a write that records nothing keeps the answer
        _written(executor, OwnedPod(name=name, uid="another", shape=answer.shape))  # nor another's
        assert name in executor.created_pods("gpu-1")
        _written(executor, OwnedPod(name=name, uid=answer.uid, shape=answer.shape))
        assert executor.created_pods("gpu-1") == {}
    assert "gpu-1" not in executor.created
