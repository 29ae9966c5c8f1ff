"""The chart's RBAC on the real API server, as the operator's ServiceAccount.

A TokenRequest token for the chart's ServiceAccount (no impersonation, no admin
certificate) drives the operator's own API adapter (``gpuaccept.operator.kube.Kube``)
through every call it makes, plus the list/watch requests kopf makes for the
operator's indexes: all allowed. Everything else is Forbidden. Removing one verb
from the rendered role turns the exact call that needs it into a 403.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.api import ACCEPTANCE_PLURAL, GROUP, POLICY_PLURAL, VERSION
from gpuaccept.operator.core.model import Taint
from gpuaccept.operator.kube import EventRecord, Kube
from gpuaccept.testsupport.chart_rbac import (
    ChartRelease,
    OperatorIdentity,
    apply_chart_rbac,
    remove_chart_rbac,
)
from gpuaccept.testsupport.controlplane import ControlPlane

pytestmark = pytest.mark.integration

NAMESPACE = "gpuaccept-rbac-test"
RELEASE = "rbactest"
LEASE = f"{RELEASE}-gpuaccept"  # the chart's default lease name: the release's full name
PROBE_SELECTOR = "app.kubernetes.io/managed-by=gpuaccept,app.kubernetes.io/component=probe"


def _kube(identity: OperatorIdentity) -> Any:
    api = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(identity.kubeconfig)
    )
    return Kube(api)


@pytest.fixture(scope="module")
def identity(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorIdentity]:
    applied = apply_chart_rbac(
        control_plane,
        workdir=tmp_path_factory.mktemp("rbac"),
        release=ChartRelease(RELEASE, NAMESPACE),
    )
    yield applied
    remove_chart_rbac(control_plane, applied)
    control_plane.kubectl("-n", NAMESPACE, "delete", "lease", LEASE, "--ignore-not-found")


@pytest.fixture(scope="module")
def admin(control_plane: ControlPlane) -> Iterator[k8s.ApiClient]:
    with control_plane.api_client() as api:
        yield api


@pytest.fixture
def node(admin: k8s.ApiClient) -> Iterator[str]:
    name = f"rbac-node-{uuid.uuid4().hex[:6]}"
    core = k8s.CoreV1Api(admin)
    core.create_node(
        k8s.V1Node(metadata=k8s.V1ObjectMeta(name=name, labels={"nvidia.com/gpu.present": "true"}))
    )
    yield name
    core.delete_node(name)
    custom = k8s.CustomObjectsApi(admin)
    status = _status(
        lambda: custom.delete_cluster_custom_object(GROUP, VERSION, ACCEPTANCE_PLURAL, name)
    )
    assert status in {200, 404}


def _status(fn: Callable[[], Any]) -> int:
    try:
        fn()
    except ApiException as exc:
        return int(exc.status)
    return 200


def test_the_token_is_the_service_account(identity: OperatorIdentity) -> None:
    kube = _kube(identity)
    review = kube.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert review["status"]["userInfo"]["username"] == identity.username


def test_kopf_index_watches_are_allowed(identity: OperatorIdentity) -> None:
    """kopf lists, then watches, each indexed kind (probe pods: release namespace only)."""
    kube = _kube(identity)
    paths = [
        "/api/v1/nodes",
        f"/apis/{GROUP}/{VERSION}/{ACCEPTANCE_PLURAL}",
        f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
    ]
    for path in paths:
        listed = kube.request("GET", path, query=[("labelSelector", PROBE_SELECTOR)])
        rv = listed["metadata"]["resourceVersion"]
        kube.request(
            "GET",
            path,
            query=[("watch", "true"), ("resourceVersion", rv), ("timeoutSeconds", "1")],
        )


def test_every_operator_call_is_allowed(identity: OperatorIdentity, node: str) -> None:
    kube = _kube(identity)
    now = datetime.now(UTC)
    observed = kube.get_node(node)
    assert observed is not None
    rv = observed["metadata"]["resourceVersion"]
    patched = kube.patch_node(
        node,
        rv,
        (Taint(key=f"{GROUP}/pending", effect="NoSchedule", value="true"),),
        {f"{GROUP}/acceptance": "pending"},
    )
    assert patched["spec"]["taints"][0]["key"] == f"{GROUP}/pending"
    kube.remove_node_annotation(node, f"{GROUP}/reprobe")
    kube.patch_node_condition(node, "Unknown", "Probing", "probe pod created", now)

    na = kube.create_na(node, "default")
    assert na["spec"]["nodeName"] == node
    assert kube.create_na(node, "default")["metadata"]["name"] == node  # exists: read back
    na = kube.get_na(node)
    assert na is not None
    kube.patch_na_status(node, na["metadata"]["resourceVersion"], {"phase": "Probing"})

    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"gpuaccept-probe-{node}-1",
            "labels": {
                "app.kubernetes.io/managed-by": "gpuaccept",
                "app.kubernetes.io/component": "probe",
            },
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "serviceAccountName": f"{RELEASE}-gpuaccept-probe",  # the chart's probe account
            "automountServiceAccountToken": False,
            "containers": [{"name": "probe", "image": "probe:test"}],
        },
    }
    assert kube.create_pod(NAMESPACE, pod) is not None
    assert kube.create_pod(NAMESPACE, pod) is None  # AlreadyExists: already started
    kube.delete_pod(NAMESPACE, pod["metadata"]["name"], force=True)

    kube.list_running_pods_on_node(node)  # the busy-node check: list, cluster-wide

    kube.create_event(
        EventRecord(
            kind="Node",
            api_version="v1",
            name=node,
            uid=observed["metadata"]["uid"],
            type="Normal",
            reason="Probing",
            message="probe pod created",
        ),
        now=now,
        reporting_instance="rbac-test",
    )
    kube.patch_policy_status("does-not-exist", {"matchedNodes": 0})  # 404 is tolerated

    lease: dict[str, Any] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE, "namespace": NAMESPACE},
        "spec": {"holderIdentity": "rbac-test", "leaseDurationSeconds": 15},
    }
    if kube.get_lease(NAMESPACE, LEASE) is None:
        kube.create_lease(NAMESPACE, lease)
    current = kube.get_lease(NAMESPACE, LEASE)
    assert current is not None
    lease["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    kube.replace_lease(NAMESPACE, LEASE, lease)

    kube.delete_na(node)
    assert kube.get_na(node) is None


@pytest.mark.parametrize(
    ("what", "method", "path"),
    [
        ("secrets anywhere", "GET", "/api/v1/secrets"),
        ("secrets in its namespace", "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets"),
        # Listing pods cluster-wide is allowed: the busy-node check lists a node's
        # running pods (field selector spec.nodeName) before it creates a probe pod
        # (docs/install.md). Reading one by name is not.
        ("one pod by name (not needed)", "GET", f"/api/v1/namespaces/{NAMESPACE}/pods/x"),
        ("configmaps", "GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps"),
        ("service accounts", "GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts"),
        ("namespaces", "GET", "/api/v1/namespaces"),
        ("node delete", "DELETE", "/api/v1/nodes/x"),
        ("node proxy", "GET", "/api/v1/nodes/x/proxy/"),
        ("CRDs", "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),
        ("policy create", "POST", f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}"),
        ("policy delete", "DELETE", f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}/x"),
        ("another Lease", "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/x"),
        ("events elsewhere", "POST", f"/api/v1/namespaces/{NAMESPACE}/events"),
        ("RBAC", "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles"),
    ],
)
def test_everything_else_is_forbidden(
    identity: OperatorIdentity, what: str, method: str, path: str
) -> None:
    kube = _kube(identity)
    body = {"metadata": {"name": "x"}} if method == "POST" else None
    assert _status(lambda: kube.request(method, path, body)) == 403, what


def _drop_verb(
    group: str, resource: str, verb: str
) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    def transform(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for obj in objs:
            for rule in obj.get("rules", []):
                if group in rule["apiGroups"] and resource in rule["resources"]:
                    rule["verbs"] = [v for v in rule["verbs"] if v != verb]
        return objs

    return transform


def test_a_missing_verb_fails_the_exact_call(
    control_plane: ControlPlane, tmp_path: Path, node: str, request: pytest.FixtureRequest
) -> None:
    """Without ``patch`` on nodes, the operator's taint patch (Kube.patch_node) is a 403."""
    crippled = apply_chart_rbac(
        control_plane,
        workdir=tmp_path,
        release=ChartRelease("rbacmissing", NAMESPACE + "-missing"),
        transform=_drop_verb("", "nodes", "patch"),
        crds=False,
    )
    request.addfinalizer(lambda: remove_chart_rbac(control_plane, crippled))
    kube = _kube(crippled)
    observed = kube.get_node(node)  # still allowed
    assert observed is not None
    with pytest.raises(ApiException) as excinfo:
        kube.patch_node(
            node,
            observed["metadata"]["resourceVersion"],
            (Taint(key=f"{GROUP}/pending", effect="NoSchedule", value="true"),),
            {},
        )
    assert excinfo.value.status == 403
    message = json.loads(str(excinfo.value.body))["message"]
    assert 'cannot patch resource "nodes"' in message, message
    assert crippled.username in message
