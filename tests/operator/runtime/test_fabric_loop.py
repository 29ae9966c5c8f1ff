"""The fabric loop (runtime) over a real cache filled through its index functions,
against a stand-in API client: what a pass writes, and that one bad write or one
policy's failure stalls no other verdict (docs/fabric.md, "The fabric loop")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any, cast

import pytest
from fabric_pods import CONFIG, SPEC, T0, na_uid, owned, pod, report
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from world import make_report

from gpuaccept.contracts.api import GPU_PRESENT_LABEL
from gpuaccept.contracts.nodeacceptance import (
    CheckSummary,
    FabricStatus,
    NodeAcceptanceStatus,
    Phase,
)
from gpuaccept.operator.actionrunner import ActionRunner
from gpuaccept.operator.cache import (
    NAS_INDEX,
    NODES_INDEX,
    PODS_INDEX,
    POLICIES_INDEX,
    Cache,
    index_na,
)
from gpuaccept.operator.controller import Controller
from gpuaccept.operator.core import OperatorConfig
from gpuaccept.operator.core.judge import judge
from gpuaccept.operator.core.model import (
    FabricPassed,
    FabricPodLabels,
    NodeView,
    PodView,
    PolicyView,
)
from gpuaccept.operator.core.podspec import (
    FABRIC_FIRST_ANNOTATION,
    FABRIC_PAIR_LABEL,
    FABRIC_RANK_LABEL,
    FABRIC_SECOND_ANNOTATION,
)
from gpuaccept.operator.executor import KubeExecutor
from gpuaccept.operator.fabricloop import FabricLoop
from gpuaccept.operator.kube import Kube
from gpuaccept.operator.views import PolicyEntry, pod_view


class FabricKube:
    """The calls a fabric pass makes; ``refuse`` names the nodes whose status write
    the API server refuses as invalid, ``broken`` those whose pod creation fails
    with a bug's error (not an API error)."""

    def __init__(self, refuse: frozenset[str] = frozenset(), broken: frozenset[str] = frozenset()):
        self.refuse, self.broken = refuse, broken
        self.statuses: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []
        self.created: list[str] = []

    def patch_na_status(self, name: str, rv: str, status: dict[str, Any]) -> dict[str, Any]:
        if name in self.refuse:
            error = ApiException(status=422, reason="Invalid")
            error.body = json.dumps({"message": "status.fabric: Invalid value"})
            raise error
        self.statuses[name] = status
        return {"metadata": {"name": name, "resourceVersion": "9"}, "status": status}

    def delete_pod(self, namespace: str, name: str, *, force: bool) -> None:
        self.deleted.append(name)

    def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        node = manifest["spec"]["nodeName"]
        if node in self.broken:
            raise RuntimeError(f"cannot build a pod for {node}")
        self.created.append(manifest["metadata"]["name"])


GPU_NODE = {GPU_PRESENT_LABEL: "true"}  # what the default node selector matches


def _na_body(name: str, policy: str, pods: tuple[PodView, ...] = ()) -> dict[str, Any]:
    evidence = make_report(name, f"boot-{name}")
    status = NodeAcceptanceStatus(
        phase=Phase.FABRIC,
        policy=policy,
        policy_generation=1,
        checks=[CheckSummary(check=r.check, status=r.status) for r in evidence.results],
        report=evidence,
        fabric=FabricStatus(waiting_since=T0, summary="waiting"),
        applied_taints=["gpuaccept.io/pending"],
        owned_pods=owned(name, pods),  # the pods on the node are the operator's own
    )
    wire = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    meta = {"name": name, "resourceVersion": "5", "uid": na_uid(name)}
    return {"metadata": meta, "status": wire}


def _cache(
    policies: Mapping[str, str],
    pods: Mapping[str, tuple[PodView, ...]],
    labels: Mapping[str, str] = GPU_NODE,
) -> Cache:
    """``policies``: node -> its policy; every node waits in phase Fabric."""
    cache = Cache()
    nodes = {
        n: [(1, NodeView(name=n, boot_id=f"boot-{n}", gpus=8, gpu_capacity=8, labels=labels))]
        for n in policies
    }
    nas = {n: list(index_na(_na_body(n, p, pods.get(n, ()))).values()) for n, p in policies.items()}
    entries = {p: [(1, PolicyEntry(PolicyView(name=p, spec=SPEC)))] for p in set(policies.values())}
    pod_index = {n: [(1, v) for v in views] for n, views in pods.items()}
    cache.attach(
        {NODES_INDEX: nodes, NAS_INDEX: nas, POLICIES_INDEX: entries, PODS_INDEX: pod_index}
    )
    for name in policies:
        cache.refresh("na", name)
    return cache


def test_a_node_relabelled_away_from_the_policy_is_no_member() -> None:
    """Under onPolicyChange: Ignore its status keeps the old policy's name; the
    pass must not pair it (its own reconcile deletes fabric pods on it)."""
    cache = _cache({"a": "fab", "b": "fab"}, {}, labels={"team": "other"})
    loop = _loop(cache, FabricKube())
    assert loop.observe(PolicyView(name="fab", spec=SPEC), T0).members == ()


def _finished_pair() -> dict[str, tuple[PodView, ...]]:
    """A pair a-b whose pods both ended with a pass."""
    return {"a": (pod(0, message=report("a", 390.0)),), "b": (pod(1, message=report("b", 390.0)),)}


def _loop(cache: Cache, kube: FabricKube) -> FabricLoop:
    actions = KubeExecutor(cast(Kube, kube), cache, namespace="ns", identity="test")
    runner = ActionRunner(actions, None, leading=lambda: True, who="fabric: ")
    return FabricLoop(cache, runner, CONFIG, wake=lambda _node: None)


def _run(cache: Cache, kube: FabricKube) -> FabricLoop:
    loop = _loop(cache, kube)
    asyncio.run(loop.run_once())
    return loop


def test_a_pass_writes_each_status_whole_with_its_report_and_checks() -> None:
    kube = FabricKube()
    loop = _run(_cache({"a": "fab", "b": "fab"}, _finished_pair()), kube)
    assert set(kube.statuses) == {"a", "b"}
    for node in ("a", "b"):
        written = NodeAcceptanceStatus.model_validate(kube.statuses[node])
        assert written.report == make_report(node, f"boot-{node}")
        assert [c.check for c in written.checks] == [r.check for r in written.report.results]
        assert written.fabric is not None
        assert [r.outcome for r in written.fabric.pairs] == ["passed"]
    assert isinstance(loop.verdict("a", T0), FabricPassed)


def test_a_refused_status_write_stalls_no_verdict_and_loses_no_result() -> None:
    kube = FabricKube(refuse=frozenset({"a"}))
    loop = _run(_cache({"a": "fab", "b": "fab"}, _finished_pair()), kube)
    assert set(kube.statuses) == {"b"}  # the writes after the refused one go on
    assert kube.deleted == []  # the pods keep a's result until it is recorded
    assert isinstance(loop.verdict("a", T0), FabricPassed)
    assert isinstance(loop.verdict("b", T0), FabricPassed)


def test_the_fabric_loop_keeps_its_refusals_apart_from_the_nodes_own() -> None:
    """The probing phase reads the controller's executor's refusals as its own
    attempt's: a partner's fabric pod must never set or clear them."""
    controller = Controller(Kube(k8s.ApiClient()), OperatorConfig(), judge)
    try:
        assert controller.fabric.runner.actions is not controller.actions
        assert controller.fabric.runner.actions.kube is controller.actions.kube
    finally:
        controller.executor.shutdown()


def test_one_policys_failing_pass_stalls_no_other_policys_verdicts() -> None:
    kube = FabricKube(broken=frozenset({"c", "d"}))
    policies = {"a": "fab", "b": "fab", "c": "other", "d": "other"}
    loop = _run(_cache(policies, _finished_pair()), kube)
    assert isinstance(loop.verdict("a", T0), FabricPassed)
    results = {n for n, st in kube.statuses.items() if (st.get("fabric") or {}).get("pairs")}
    assert results == {"a", "b"}
    # the other policy's pass wrote only the intent of the pod it then failed to create
    assert set(kube.statuses) - results <= {"c", "d"}
    assert all(kube.statuses[n].get("creationIntents") for n in set(kube.statuses) - results)


@pytest.mark.parametrize(
    ("first", "second", "fabric"),
    [("a", "b", True), ("a", "a", False), ("", "b", False)],
    ids=["a pair", "a node with itself", "no first node"],
)
def test_a_pod_is_a_fabric_pod_only_with_two_different_nodes(
    first: str, second: str, fabric: bool
) -> None:
    body = {
        "metadata": {
            "name": "p",
            "labels": {FABRIC_PAIR_LABEL: "p1", FABRIC_RANK_LABEL: "0"},
            "annotations": {FABRIC_FIRST_ANNOTATION: first, FABRIC_SECOND_ANNOTATION: second},
        }
    }
    view = pod_view(body)
    assert (view.fabric is not None) is fabric
    if fabric:
        assert view.fabric == FabricPodLabels("p1", 0, "a", "b")


def test_a_pass_reads_the_members_slim_parsing_no_evidence() -> None:
    cache = _cache({"a": "fab", "b": "fab"}, _finished_pair())
    loop = _loop(cache, FabricKube())
    observed = loop.observe(PolicyView(name="fab", spec=SPEC), T0)
    assert [m.node.name for m in observed.members] == ["a", "b"]
    assert all((m.na.status.report, m.na.status.checks) == (None, []) for m in observed.members)
