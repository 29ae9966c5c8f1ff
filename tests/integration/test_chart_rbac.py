"""The chart's RBAC on the real API server, as the operator's ServiceAccount.

A TokenRequest token for the chart's ServiceAccount (no impersonation, no admin
certificate) makes each kind of call the operator makes: allowed where the code
needs it, Forbidden everywhere else. Removing one verb from the rendered role
turns the exact call that needs it into a 403.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.api import ACCEPTANCE_PLURAL, GROUP, POLICY_PLURAL, VERSION
from gpuaccept.testsupport.chart_rbac import (
    OperatorIdentity,
    apply_chart_rbac,
    remove_chart_rbac,
)
from gpuaccept.testsupport.controlplane import ControlPlane

pytestmark = pytest.mark.integration

NAMESPACE = "gpuaccept-rbac-test"
RELEASE = "rbactest"
MERGE = "application/merge-patch+json"


def _api(identity: OperatorIdentity) -> k8s.ApiClient:
    return k8s_config.new_client_from_config(config_file=str(identity.kubeconfig))


@pytest.fixture(scope="module")
def identity(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorIdentity]:
    applied = apply_chart_rbac(
        control_plane,
        workdir=tmp_path_factory.mktemp("rbac"),
        release=RELEASE,
        namespace=NAMESPACE,
    )
    # The peering object the chart would create (the operator patches only it).
    control_plane.kubectl(
        "apply",
        "-f",
        "-",
        input='{"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",'
        f' "metadata": {{"name": "{RELEASE}-gpuaccept"}}}}',
    )
    yield applied
    remove_chart_rbac(control_plane, applied)
    control_plane.kubectl(
        "delete", "clusterkopfpeering", f"{RELEASE}-gpuaccept", "--ignore-not-found"
    )


@pytest.fixture(scope="module")
def admin(control_plane: ControlPlane) -> Iterator[k8s.ApiClient]:
    with control_plane.api_client() as api:
        yield api


@pytest.fixture
def node(admin: k8s.ApiClient) -> Iterator[str]:
    name = f"rbac-node-{uuid.uuid4().hex[:6]}"
    k8s.CoreV1Api(admin).create_node(
        k8s.V1Node(metadata=k8s.V1ObjectMeta(name=name, labels={"nvidia.com/gpu.present": "true"}))
    )
    yield name
    k8s.CoreV1Api(admin).delete_node(name)


def _status(fn: Callable[[], Any]) -> int:
    try:
        fn()
    except ApiException as exc:
        return int(exc.status)
    return 200


def test_the_token_is_the_service_account(identity: OperatorIdentity) -> None:
    with _api(identity) as api:
        review = k8s.AuthenticationV1Api(api).create_self_subject_review(k8s.V1SelfSubjectReview())
    assert review.status.user_info.username == identity.username


def test_operator_calls_are_allowed(identity: OperatorIdentity, node: str) -> None:
    with _api(identity) as api:
        core = k8s.CoreV1Api(api)
        custom = k8s.CustomObjectsApi(api)
        assert core.list_node().items
        core.read_node(node)
        core.patch_node(
            node,
            {"spec": {"taints": [{"key": f"{GROUP}/pending", "effect": "NoSchedule"}]}},
        )
        core.patch_node_status(
            node,
            {
                "status": {
                    "conditions": [
                        {"type": "GPUAcceptance", "status": "Unknown", "reason": "Probing"}
                    ]
                }
            },
        )
        na = custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            ACCEPTANCE_PLURAL,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "NodeAcceptance",
                "metadata": {"name": node},
                "spec": {"nodeName": node},
            },
        )
        assert na["metadata"]["name"] == node
        custom.patch_cluster_custom_object_status(
            GROUP, VERSION, ACCEPTANCE_PLURAL, node, {"status": {"phase": "Probing"}}
        )
        custom.list_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL)
        pod = core.create_namespaced_pod(
            NAMESPACE,
            k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(name=f"probe-{node}"),
                spec=k8s.V1PodSpec(
                    node_name=node,
                    restart_policy="Never",
                    automount_service_account_token=False,
                    containers=[k8s.V1Container(name="probe", image="probe:test")],
                ),
            ),
        )
        core.list_namespaced_pod(NAMESPACE)
        core.read_namespaced_pod(pod.metadata.name, NAMESPACE)
        core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)
        core.create_namespaced_event(
            "default",
            k8s.CoreV1Event(
                metadata=k8s.V1ObjectMeta(generate_name="gpuaccept-"),
                involved_object=k8s.V1ObjectReference(kind="Node", name=node),
                reason="Probing",
                message="probe pod created",
                type="Normal",
            ),
        )
        custom.delete_cluster_custom_object(GROUP, VERSION, ACCEPTANCE_PLURAL, node)
        k8s.ApiextensionsV1Api(api).list_custom_resource_definition()
        custom.get_cluster_custom_object(
            "kopf.dev", "v1", "clusterkopfpeerings", RELEASE + "-gpuaccept"
        )


@pytest.mark.parametrize(
    ("what", "call"),
    [
        ("secrets anywhere", lambda c: c.list_secret_for_all_namespaces()),
        ("secrets in its namespace", lambda c: c.list_namespaced_secret(NAMESPACE)),
        ("pods cluster-wide", lambda c: c.list_pod_for_all_namespaces()),
        ("pods in another namespace", lambda c: c.list_namespaced_pod("default")),
        ("configmaps", lambda c: c.list_namespaced_config_map(NAMESPACE)),
        ("node delete", lambda c: c.delete_node("nonexistent")),
        ("node proxy", lambda c: c.connect_get_node_proxy("nonexistent")),
        ("service accounts", lambda c: c.list_namespaced_service_account(NAMESPACE)),
        ("namespaces", lambda c: c.list_namespace()),
    ],
)
def test_everything_else_is_forbidden(identity: OperatorIdentity, what: str, call: Any) -> None:
    with _api(identity) as api:
        assert _status(lambda: call(k8s.CoreV1Api(api))) == 403, what


def test_policies_are_read_only(identity: OperatorIdentity) -> None:
    with _api(identity) as api:
        custom = k8s.CustomObjectsApi(api)
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeAcceptancePolicy",
            "metadata": {"name": "rbac-test"},
            "spec": {},
        }
        assert (
            _status(
                lambda: custom.create_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL, body)
            )
            == 403
        )
        assert (
            _status(lambda: custom.delete_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL, "x"))
            == 403
        )


def test_other_peering_objects_are_not_writable(identity: OperatorIdentity) -> None:
    with _api(identity) as api:
        custom = k8s.CustomObjectsApi(api)
        patch = {"status": {"x": None}}
        assert (
            _status(
                lambda: custom.patch_cluster_custom_object(
                    "kopf.dev", "v1", "clusterkopfpeerings", "someone-else", patch
                )
            )
            == 403
        )


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
    """Without ``patch`` on nodes, the operator's taint patch is Forbidden."""
    crippled = apply_chart_rbac(
        control_plane,
        workdir=tmp_path,
        release="rbacmissing",
        namespace=NAMESPACE + "-missing",
        transform=_drop_verb("", "nodes", "patch"),
        crds=False,
    )
    request.addfinalizer(lambda: remove_chart_rbac(control_plane, crippled))
    with _api(crippled) as api:
        core = k8s.CoreV1Api(api)
        core.read_node(node)  # still allowed
        taint = {"spec": {"taints": [{"key": f"{GROUP}/pending", "effect": "NoSchedule"}]}}
        with pytest.raises(ApiException) as excinfo:
            core.patch_node(node, taint)
    assert excinfo.value.status == 403
    assert 'cannot patch resource "nodes"' in str(excinfo.value.body)
