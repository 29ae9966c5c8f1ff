"""The chart's admission rules (templates/admission.yaml) on the real API server.

Each attack is made twice with the same credentials: before the release's
ValidatingAdmissionPolicies are applied it is admitted (what the RBAC alone
allows), after it is refused by the API server. The operator's own writes, made
through its API adapter (``gpuaccept.operator.kube.Kube``) with a TokenRequest token
of the chart's ServiceAccount, are admitted under the policies. Identities: the
operator's ServiceAccount, an ``intruder`` ServiceAccount granted exactly the
verbs an attacker would need, and the admin (``system:masters``, exempt).
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.api import (
    ACCEPTANCE_PLURAL,
    CREATION_NONCE_ANNOTATION,
    FENCE_TAINT_KEY,
    GROUP,
    REMEDY_CONDITION_TYPE,
    REPROBE_ANNOTATION,
    VERSION,
)
from gpuaccept.operator.core import NodeView, OperatorConfig
from gpuaccept.operator.core.creationintent import with_nonce
from gpuaccept.operator.core.fencerules import FENCE_COMPONENT, fence_rule_manifest, rule_name
from gpuaccept.operator.core.model import DraDevice, FabricPodLabels, FenceRuleView, Taint
from gpuaccept.operator.core.podspec import (
    FabricPodRequest,
    ProbeAttempt,
    WatchPodRequest,
    fabric_claim_manifest,
    fabric_pair_nonce,
    fabric_pod_manifest,
    fabric_pod_name,
    probe_claim_manifest,
    probe_pod_manifest,
    probe_pod_name,
    watch_pod_manifest,
    watch_pod_name,
)
from gpuaccept.operator.kube import EVENT_NAMESPACE, EventRecord, Kube
from gpuaccept.testsupport.chart_rbac import (
    ChartRelease,
    OperatorIdentity,
    apply_chart_rbac,
    apply_manifests,
    operator_config,
    remove_chart_rbac,
    write_token_kubeconfig,
)
from gpuaccept.testsupport.controlplane import ControlPlane
from gpuaccept.testsupport.kubelet_standin import KubeletStandIn
from gpuaccept.testsupport.legacy_token import sign_legacy_token
from gpuaccept.testsupport.standin_behaviours import Hang
from gpuaccept.testsupport.standin_nodes import SimNode

pytestmark = pytest.mark.integration

NAMESPACE = "gpuaccept-admission-test"
RELEASE = "admtest"
VALUES = {
    # The control plane has no RuntimeClass "nvidia" (its admission plugin would refuse the pod).
    "probe.runtimeClassName": "",
    "fabric.capabilities": "{IPC_LOCK}",
    "probe.tolerations[0].key": "dedicated",
    "probe.tolerations[0].operator": "Exists",
    # adapted to the cluster (issue 25): still admitted by the probe pod rules
    "probe.podLabels.team": "ml-platform",
    "probe.podAnnotations.example\\.com/owner": "gpu-team",
    "probe.env.HTTPS_PROXY": "http://proxy.example.com:3128",
}
ADMISSION_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
DRY_RUN = "All"
SETTLE_S = 30.0  # policies and bindings reach the admission plugin through informers


def _release() -> ChartRelease:
    return ChartRelease(RELEASE, NAMESPACE, set_values=VALUES)


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return _release().render()


@pytest.fixture(scope="module")
def identity(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorIdentity]:
    applied = apply_chart_rbac(
        control_plane, workdir=tmp_path_factory.mktemp("admission"), release=_release()
    )
    yield applied
    remove_chart_rbac(control_plane, applied)


@pytest.fixture(scope="module")
def admin(control_plane: ControlPlane) -> Iterator[k8s.ApiClient]:
    with control_plane.api_client() as api:
        yield api


@pytest.fixture(scope="module")
def operator_api(
    control_plane: ControlPlane, identity: OperatorIdentity
) -> Iterator[k8s.ApiClient]:
    with control_plane.api_client(token=identity.token) as api:
        yield api


INTRUDER = "intruder"


@pytest.fixture(scope="module")
def intruder(control_plane: ControlPlane, identity: OperatorIdentity) -> Iterator[k8s.ApiClient]:
    """A ServiceAccount with what the attacks need: write NodeAcceptance status, and
    create, delete and patch (status too) pods in the release namespace, request
    ServiceAccount tokens there, and write ResourceClaims there."""
    user = f"system:serviceaccount:{NAMESPACE}:{INTRUDER}"
    rbac = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": INTRUDER, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": f"{RELEASE}-intruder"},
         "rules": [{"apiGroups": [GROUP], "resources": [f"{ACCEPTANCE_PLURAL}/status"],
                    "verbs": ["get", "patch", "update"]},
                   {"apiGroups": ["resource.k8s.io"], "resources": ["devicetaintrules"],
                    "verbs": ["get", "create", "patch", "delete"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{RELEASE}-intruder"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": f"{RELEASE}-intruder"},
         "subjects": [{"kind": "User", "name": user}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "intruder", "namespace": NAMESPACE},
         "rules": [{"apiGroups": [""], "resources": ["pods", "pods/status"],
                    "verbs": ["get", "create", "delete", "patch"]},
                   {"apiGroups": [""], "resources": ["serviceaccounts/token"],
                    "verbs": ["create"]},
                   {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"],
                    "verbs": ["get", "create", "update", "patch", "delete"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "intruder", "namespace": NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "intruder"},
         "subjects": [{"kind": "User", "name": user}]},
    ]  # fmt: skip
    apply_manifests(control_plane, rbac)
    with control_plane.api_client(impersonate_user=user) as api:
        yield api
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": rbac})
    control_plane.kubectl("delete", "--ignore-not-found", "-f", "-", input=body)


class Admission:
    """The release's admission objects, applied and removed within one test."""

    def __init__(self, cp: ControlPlane, rendered: list[dict[str, Any]]) -> None:
        self.cp = cp
        self.objects = [obj for obj in rendered if obj.get("kind") in ADMISSION_KINDS]
        assert len(self.objects) == 22, [o["metadata"]["name"] for o in self.objects]
        self.applied = False

    def install(self) -> None:
        apply_manifests(self.cp, self.objects)
        self.applied = True

    def remove(self) -> None:
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": self.objects})
        self.cp.kubectl("delete", "--ignore-not-found", "-f", "-", input=body)
        self.applied = False


@pytest.fixture
def admission(control_plane: ControlPlane, rendered: list[dict[str, Any]]) -> Iterator[Admission]:
    guard = Admission(control_plane, rendered)
    yield guard
    if guard.applied:
        guard.remove()


def _refusal(call: Callable[[], object]) -> ApiException | None:
    try:
        call()
    except ApiException as error:
        return error
    return None


def eventually_refused(call: Callable[[], object], message: str, *also: str) -> ApiException:
    """``call`` (a dry run) refused with ``message`` (or one of ``also``: where several
    rules refuse it, the API server names one of them), once the policies are loaded."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        error = _refusal(call)
        if (
            error is not None
            and error.status in (403, 422)
            and any(m in str(error.body) for m in (message, *also))
        ):
            return error
        if time.monotonic() > deadline:
            raise AssertionError(f"not refused with {message!r}: {error and error.body}")
        time.sleep(0.5)


def admitted(call: Callable[[], object]) -> None:
    error = _refusal(call)
    assert error is None, error.body


def eventually_admitted(call: Callable[[], object]) -> None:
    """``call`` admitted once the policies are gone (or once they are loaded)."""
    deadline = time.monotonic() + SETTLE_S
    while (error := _refusal(call)) is not None:
        if time.monotonic() > deadline:
            raise AssertionError(error.body)
        time.sleep(0.5)


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def node(admin: k8s.ApiClient) -> Iterator[str]:
    name = f"adm-node-{uuid.uuid4().hex[:6]}"
    core = k8s.CoreV1Api(admin)
    core.create_node(
        k8s.V1Node(
            metadata=k8s.V1ObjectMeta(
                name=name,
                labels={"nvidia.com/gpu.present": "true", "team": "ml"},
                annotations={REPROBE_ANNOTATION: "now"},
            ),
            spec=k8s.V1NodeSpec(
                taints=[
                    k8s.V1Taint(key="dedicated", value="gpu", effect="NoSchedule"),
                    k8s.V1Taint(key="gpuaccept.io/pending", value="true", effect="NoSchedule"),
                ]
            ),
        )
    )
    core.patch_node_status(
        name,
        {
            "status": {
                "capacity": {"nvidia.com/gpu": "8", "cpu": "4", "memory": "1Gi", "pods": "10"},
                "allocatable": {"nvidia.com/gpu": "8", "cpu": "4", "memory": "1Gi", "pods": "10"},
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady",
                     "message": "ok", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"}
                ],
            }
        },
    )  # fmt: skip
    yield name
    core.delete_node(name)


def _config(rendered: list[dict[str, Any]]) -> OperatorConfig:
    return operator_config(rendered)


def _probe_pod(rendered: list[dict[str, Any]], node: str, serial: int = 1) -> dict[str, Any]:
    config = _config(rendered)
    attempt = ProbeAttempt(
        name=probe_pod_name(config.pod_prefix, node, serial),
        serial=serial,
        node=NodeView(name=node, gpus=8, gpu_capacity=8, boot_id="b"),
        policy_name="default",
        spec=NodeAcceptancePolicySpec.model_validate({}),
    )
    return probe_pod_manifest(attempt, config)


def _fabric_pod(rendered: list[dict[str, Any]], node: str) -> dict[str, Any]:
    config = _config(rendered)
    request = FabricPodRequest(
        labels=FabricPodLabels(pair="abc123", rank=0, first=node, second="other"),
        node=NodeView(name=node, gpus=8, gpu_capacity=8, boot_id="b"),
        policy_name="default",
        spec=NodeAcceptancePolicySpec.model_validate({"fabric": {"enabled": True}}),
        rendezvous_address=None,
        nonce=fabric_pair_nonce(bytes(32), "abc123"),  # the pair's secret (rule 3 admits it)
    )
    return fabric_pod_manifest(request, config)


def _watch_pod(rendered: list[dict[str, Any]], node: str) -> dict[str, Any]:
    config = _config(rendered)
    request = WatchPodRequest(
        name=watch_pod_name(config.pod_prefix, node, 1),
        serial=1,
        node=NodeView(name=node, gpus=8, gpu_capacity=8, boot_id="b"),
        policy_name="default",
        spec=NodeAcceptancePolicySpec.model_validate({"inService": {"enabled": True}}),
    )
    return watch_pod_manifest(request, config)


def _create(
    api: k8s.ApiClient, pod: dict[str, Any], *, dry_run: bool = True
) -> Callable[[], object]:
    core = k8s.CoreV1Api(api)
    if dry_run:
        return lambda: core.create_namespaced_pod(NAMESPACE, pod, dry_run=DRY_RUN)
    return lambda: core.create_namespaced_pod(NAMESPACE, pod)


def _delete_pod(admin: k8s.ApiClient, name: str) -> None:
    try:
        k8s.CoreV1Api(admin).delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    except ApiException as error:
        if error.status != 404:
            raise


# --------------------------------------------------------------------------- NodeAcceptance status


def test_forged_acceptance_status_is_refused(
    admin: k8s.ApiClient,
    intruder: k8s.ApiClient,
    operator_api: k8s.ApiClient,
    admission: Admission,
    node: str,
) -> None:
    custom = k8s.CustomObjectsApi(admin)
    custom.create_cluster_custom_object(
        GROUP, VERSION, ACCEPTANCE_PLURAL,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeAcceptance",
         "metadata": {"name": node}, "spec": {"nodeName": node}},
    )  # fmt: skip
    forged = {"status": {"phase": "Accepted", "policy": "default"}}
    as_intruder = k8s.CustomObjectsApi(intruder)

    def forge(dry_run: bool = True) -> object:
        return as_intruder.patch_cluster_custom_object_status(
            GROUP, VERSION, ACCEPTANCE_PLURAL, node, forged,
            **({"dry_run": DRY_RUN} if dry_run else {}),
        )  # fmt: skip

    try:
        # Without the rules: the RBAC grant alone lets anyone holding it accept a node.
        eventually_admitted(lambda: forge(dry_run=False))
        stored = custom.get_cluster_custom_object_status(GROUP, VERSION, ACCEPTANCE_PLURAL, node)
        assert stored["status"]["phase"] == "Accepted"

        admission.install()
        error = eventually_refused(forge, "only the gpuaccept operator")
        assert error.status == 403
        # The operator's own status write (its adapter: a JSON patch) is admitted.
        kube = Kube(operator_api)
        current = custom.get_cluster_custom_object(GROUP, VERSION, ACCEPTANCE_PLURAL, node)
        kube.patch_na_status(
            node, current["metadata"]["resourceVersion"], {"phase": "Pending", "policy": "default"}
        )
        # The admin (system:masters) is exempt.
        admitted(lambda: custom.patch_cluster_custom_object_status(
            GROUP, VERSION, ACCEPTANCE_PLURAL, node, forged, dry_run=DRY_RUN))  # fmt: skip
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, ACCEPTANCE_PLURAL, node)


# --------------------------------------------------------------------------- release requests

REQUESTER = "alice@example.com"


@pytest.fixture
def requester(control_plane: ControlPlane) -> Iterator[k8s.ApiClient]:
    """A person who may annotate NodeAcceptances (as the aggregated edit role grants)."""
    rbac = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": f"{RELEASE}-requester"},
         "rules": [{"apiGroups": [GROUP], "resources": [ACCEPTANCE_PLURAL],
                    "verbs": ["get", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{RELEASE}-requester"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": f"{RELEASE}-requester"},
         "subjects": [{"kind": "User", "name": REQUESTER}]},
    ]  # fmt: skip
    apply_manifests(control_plane, rbac)
    with control_plane.api_client(impersonate_user=REQUESTER) as api:
        yield api
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": rbac})
    control_plane.kubectl("delete", "--ignore-not-found", "-f", "-", input=body)


def test_a_release_request_names_its_requester(
    identity: OperatorIdentity,  # the chart's CRDs and RBAC applied
    admin: k8s.ApiClient,
    requester: k8s.ApiClient,
    admission: Admission,
    node: str,
) -> None:
    custom = k8s.CustomObjectsApi(admin)
    custom.create_cluster_custom_object(
        GROUP, VERSION, ACCEPTANCE_PLURAL,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeAcceptance",
         "metadata": {"name": node}, "spec": {"nodeName": node}},
    )  # fmt: skip
    as_requester = k8s.CustomObjectsApi(requester)

    def ask(by: str, at: str = "2026-12-02T10:00:00Z") -> Callable[[], object]:
        body = {
            "metadata": {
                "annotations": {"gpuaccept.io/release-by": by, "gpuaccept.io/release-at": at}
            }
        }
        return lambda: as_requester.patch_cluster_custom_object(
            GROUP, VERSION, ACCEPTANCE_PLURAL, node, body, dry_run=DRY_RUN
        )

    try:
        # Without the rules anyone who may annotate it can name someone else.
        eventually_admitted(ask("bob@example.com"))
        admission.install()
        error = eventually_refused(ask("bob@example.com"), "a release request names its requester")
        assert error.status == 403
        assert REQUESTER in str(error.body)
        admitted(ask(REQUESTER))
        # A request already there (someone else's) may stay while other fields change,
        # and be removed; the admin is exempt.
        custom.patch_cluster_custom_object(
            GROUP, VERSION, ACCEPTANCE_PLURAL, node,
            {"metadata": {"annotations": {"gpuaccept.io/release-by": "bob@example.com",
                                          "gpuaccept.io/release-at": "2026-12-02T09:00:00Z"}}},
        )  # fmt: skip
        admitted(
            lambda: as_requester.patch_cluster_custom_object(
                GROUP, VERSION, ACCEPTANCE_PLURAL, node,
                {"metadata": {"labels": {"team": "ml"}}}, dry_run=DRY_RUN,
            )
        )  # fmt: skip
        admitted(
            lambda: as_requester.patch_cluster_custom_object(
                GROUP, VERSION, ACCEPTANCE_PLURAL, node,
                {"metadata": {"annotations": {"gpuaccept.io/release-by": None,
                                              "gpuaccept.io/release-at": None}}},
                dry_run=DRY_RUN,
            )
        )  # fmt: skip
        eventually_refused(ask("bob@example.com", "2026-12-02T11:00:00Z"), "names its requester")
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, ACCEPTANCE_PLURAL, node)


# --------------------------------------------------------------------------- probe pods: who


def test_probe_pods_of_another_identity_are_refused(  # noqa: PLR0913, PLR0917
    control_plane: ControlPlane,
    admin: k8s.ApiClient,
    intruder: k8s.ApiClient,
    operator_api: k8s.ApiClient,
    rendered: list[dict[str, Any]],
    admission: Admission,
    node: str,
) -> None:
    squatted = _probe_pod(rendered, node, serial=7)  # the attempt's own name and labels
    unlabelled = _probe_pod(rendered, node, serial=8)
    unlabelled["metadata"]["labels"] = {}
    operators = _probe_pod(rendered, node, serial=9)
    as_intruder = k8s.CoreV1Api(intruder)
    names = [p["metadata"]["name"] for p in (squatted, unlabelled, operators)]
    try:
        # Without the rules: the intruder squats the attempt's pod (with the
        # probe's labels, or its name alone) and deletes the operator's pod.
        eventually_admitted(_create(intruder, squatted))
        admitted(_create(intruder, unlabelled))
        admitted(_create(operator_api, operators, dry_run=False))
        admitted(
            lambda: as_intruder.patch_namespaced_pod_status(
                names[2], NAMESPACE, {"status": {"message": "forged"}}, dry_run=DRY_RUN
            )
        )
        admitted(lambda: as_intruder.delete_namespaced_pod(names[2], NAMESPACE, dry_run=DRY_RUN))
        admitted(
            lambda: as_intruder.patch_namespaced_pod(
                names[2], NAMESPACE, {"metadata": {"labels": {"gpuaccept.io/node": "x"}}},
                dry_run=DRY_RUN,
            )
        )  # fmt: skip

        admission.install()
        eventually_refused(_create(intruder, squatted), "only the gpuaccept operator")
        eventually_refused(_create(intruder, unlabelled), "only the gpuaccept operator")
        eventually_refused(
            lambda: as_intruder.delete_namespaced_pod(names[2], NAMESPACE, dry_run=DRY_RUN),
            "only the gpuaccept operator, the pod's kubelet",
        )
        eventually_refused(
            lambda: as_intruder.patch_namespaced_pod_status(
                names[2], NAMESPACE, {"status": {"message": "forged"}}, dry_run=DRY_RUN
            ),
            "probe pods are not changed after creation",
        )
        eventually_refused(
            lambda: as_intruder.patch_namespaced_pod(
                names[2], NAMESPACE, {"metadata": {"labels": {"gpuaccept.io/node": "x"}}},
                dry_run=DRY_RUN,
            ),
            "probe pods are not changed after creation",
        )  # fmt: skip
        # A pod of the intruder's own, not a probe pod, is none of the rules' business.
        other = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "intruder-own"},
                 "spec": {"serviceAccountName": INTRUDER,
                          "containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip
        admitted(_create(intruder, other))
        # The pod's kubelet writes its status; the operator deletes it.
        kubelet = _kubelet_client(admin, node)
        admitted(
            lambda: k8s.CoreV1Api(kubelet).patch_namespaced_pod_status(
                names[2], NAMESPACE, {"status": {"message": "from the kubelet"}}, dry_run=DRY_RUN
            )
        )
        # Pod garbage collection (a kube-system controller, its bootstrap role) too.
        collector = "system:serviceaccount:kube-system:pod-garbage-collector"
        with control_plane.api_client(impersonate_user=collector) as gc:
            admitted(
                lambda: k8s.CoreV1Api(gc).delete_namespaced_pod(
                    names[2], NAMESPACE, dry_run=DRY_RUN
                )
            )
        kube = Kube(operator_api)
        assert kube.delete_pod(NAMESPACE, names[2], force=True) is None
    finally:
        kubelet_api = locals().get("kubelet")
        if isinstance(kubelet_api, k8s.ApiClient):
            kubelet_api.close()
        for name in names:
            _delete_pod(admin, name)


def _kubelet_client(admin: k8s.ApiClient, node: str) -> k8s.ApiClient:
    """The admin impersonating the node's kubelet (user system:node:<node>, group system:nodes)."""
    api = k8s.ApiClient(admin.configuration)
    api.set_default_header("Impersonate-User", f"system:node:{node}")
    api.set_default_header("Impersonate-Group", "system:nodes")
    return api


# --------------------------------------------------------------------------- probe pods: shape


def _variant(pod: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    copy = json.loads(json.dumps(pod))
    change(copy)
    return copy


def _privileged(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}


def _host_path(pod: dict[str, Any]) -> None:
    pod["spec"]["volumes"].append({"name": "root", "hostPath": {"path": "/"}})
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "root", "mountPath": "/host"})


def _token(pod: dict[str, Any]) -> None:
    pod["spec"]["automountServiceAccountToken"] = True


def _other_image(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["image"] = "registry.example/shell:latest"


def _other_command(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["command"] = ["sh", "-c", "id"]


def _host_network(pod: dict[str, Any]) -> None:
    pod["spec"]["hostNetwork"] = True


def _sys_admin(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]


def _unpinned(pod: dict[str, Any]) -> None:
    del pod["spec"]["nodeName"]


def _tolerate_everything(pod: dict[str, Any]) -> None:
    pod["spec"]["tolerations"].append({"operator": "Exists"})


def _not_a_probe(pod: dict[str, Any]) -> None:
    pod["metadata"]["name"] = "gpuaccept-operator-helper"


def _no_node_affinity(pod: dict[str, Any]) -> None:
    del pod["spec"]["affinity"]


def _control_plane_allowed(pod: dict[str, Any]) -> None:
    """The base selector kept, the control-plane DoesNotExist requirements dropped."""
    (term,) = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
    term["matchExpressions"] = [
        e for e in term["matchExpressions"] if e["operator"] != "DoesNotExist"
    ]


def _any_gpu_node_or_else(pod: dict[str, Any]) -> None:
    """A second term, ORed with the first: any node at all that has a hostname."""
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
    terms.append({"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "Exists"}]})


def _exec_hook(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["lifecycle"] = {
        "postStart": {"exec": {"command": ["sh", "-c", "id"]}}
    }


def _exec_probe(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["livenessProbe"] = {"exec": {"command": ["sh", "-c", "id"]}}


def _node_critical(pod: dict[str, Any]) -> None:
    pod["spec"]["priorityClassName"] = "system-node-critical"


def _preload(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["env"].append({"name": "LD_PRELOAD", "value": "/dev/shm/x.so"})


def _simulated(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["env"].append({"name": "GPUACCEPT_PROFILE", "value": "h100"})


def _env_twice(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["env"].append({"name": "GPUACCEPT_EXPECTED_GPUS", "value": "0"})


def _env_from(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "anything"}}]


def _extra_arg(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["command"] += ["--profile", "h100"]


def _unconfined_pod(pod: dict[str, Any]) -> None:
    pod["spec"]["securityContext"] = {"seccompProfile": {"type": "Unconfined"}}


def _unconfined_container(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["securityContext"]["seccompProfile"] = {"type": "Unconfined"}


SHAPE_ATTACKS: list[tuple[Callable[[dict[str, Any]], None], str]] = [
    (_privileged, "a probe pod's container is unprivileged"),
    (_host_path, "emptyDir volumes only"),
    (_token, "without an API token"),
    (_other_image, "from the chart's probe image"),
    (_other_command, "from the chart's probe image"),
    (_host_network, "no host network"),
    (_sys_admin, "a probe pod's container is unprivileged"),
    (_unpinned, "pinned to its node"),
    (_tolerate_everything, "tolerates gpuaccept's own taint keys"),
    (_not_a_probe, "is a probe pod"),
    (_no_node_affinity, "requires exactly the operator's reach as its node affinity"),
    (_control_plane_allowed, "requires exactly the operator's reach as its node affinity"),
    (_any_gpu_node_or_else, "requires exactly the operator's reach as its node affinity"),
    # issue 42 item 8: what rule 3 admitted before
    (_exec_hook, "no lifecycle hook"),
    (_exec_probe, "no lifecycle hook"),
    (_node_critical, "priority class probe.priorityClassName"),
    (_preload, "environment is the operator's"),
    (_simulated, "environment is the operator's"),
    (_env_twice, "environment is the operator's"),
    (_env_from, "environment is the operator's"),
    (_extra_arg, "passes only the flags the operator passes"),
    (_unconfined_pod, "not Unconfined by seccomp"),
    (_unconfined_container, "not Unconfined by seccomp"),
]


def test_operator_token_creates_only_probe_shaped_pods(
    operator_api: k8s.ApiClient,
    rendered: list[dict[str, Any]],
    admission: Admission,
    node: str,
) -> None:
    pod = _probe_pod(rendered, node)
    attacks = [(_variant(pod, change), message) for change, message in SHAPE_ATTACKS]
    # Without the rules the operator's token may create any of them (dry runs).
    for bad, _ in attacks:
        eventually_admitted(_create(operator_api, bad))
    admission.install()
    eventually_refused(_create(operator_api, attacks[0][0]), attacks[0][1])
    for bad, message in attacks:
        eventually_refused(_create(operator_api, bad), message)
    # The probe pod and the fabric pod the operator builds, with the chart's settings
    # (IPC_LOCK added, a toleration of probe.tolerations, the platform team's labels,
    # annotations and env, the sidecar opt-outs), are admitted.
    fabric = _fabric_pod(rendered, node)
    watch = _watch_pod(rendered, node)  # policy inService: no GPU, no volume, no toleration
    for adapted in (pod, fabric, watch):
        meta = adapted["metadata"]
        assert meta["labels"]["team"] == "ml-platform"
        assert meta["labels"]["sidecar.istio.io/inject"] == "false"
        assert meta["annotations"]["linkerd.io/inject"] == "disabled"
        assert meta["annotations"]["example.com/owner"] == "gpu-team"
        env = {e["name"] for e in adapted["spec"]["containers"][0]["env"]}
        assert "HTTPS_PROXY" in env
    admitted(_create(operator_api, pod))
    admitted(_create(operator_api, fabric))
    admitted(_create(operator_api, watch))
    # a watch pod with a token, or running another command, is refused like a probe pod
    for change, message in SHAPE_ATTACKS:
        if change in (_privileged, _token, _other_command, _tolerate_everything):
            eventually_refused(_create(operator_api, _variant(watch, change)), message)
    # Elsewhere than the release namespace: refused (RBAC refuses it first).
    assert (
        _refusal(
            lambda: k8s.CoreV1Api(operator_api).create_namespaced_pod(
                "default", pod, dry_run=DRY_RUN
            )
        )
        is not None
    )


# --------------------------------------------------------------------------- DRA


def _dra_attempt(rendered: list[dict[str, Any]], node: str) -> ProbeAttempt:
    config = _config(rendered)
    name = probe_pod_name(config.pod_prefix, node, 1)
    gpus = tuple(DraDevice(f"gpu-{i}", uuid=f"GPU-{i:08x}", kind="gpu") for i in range(8))
    return ProbeAttempt(
        name=name,
        serial=1,
        node=NodeView(name=node, boot_id="b"),
        policy_name="default",
        spec=NodeAcceptancePolicySpec.model_validate({}),
        claim=name,
        dra_gpus=gpus,
    )


def _dra_fabric_request(
    rendered: list[dict[str, Any]], node: str, gpus: tuple[DraDevice, ...]
) -> FabricPodRequest:
    """The rank-0 fabric pod of a pair on the DRA node ``node``, through its claim."""
    config = _config(rendered)
    return FabricPodRequest(
        labels=FabricPodLabels(pair="abc123", rank=0, first=node, second="other"),
        node=NodeView(name=node, boot_id="b"),
        policy_name="default",
        spec=NodeAcceptancePolicySpec.model_validate({"fabric": {"enabled": True}}),
        rendezvous_address=None,
        nonce=fabric_pair_nonce(bytes(32), "abc123"),
        claim=fabric_pod_name(config.pod_prefix, "abc123", 0),
        dra_gpus=gpus,
    )


def _create_claim(
    api: k8s.ApiClient, claim: dict[str, Any], *, dry_run: bool = True
) -> Callable[[], object]:
    custom = k8s.CustomObjectsApi(api)
    args = ("resource.k8s.io", "v1", NAMESPACE, "resourceclaims", claim)
    if dry_run:
        return lambda: custom.create_namespaced_custom_object(*args, dry_run=DRY_RUN)
    return lambda: custom.create_namespaced_custom_object(*args)


def _other_claim(pod: dict[str, Any]) -> None:
    pod["spec"]["resourceClaims"][0]["resourceClaimName"] = "someone-elses-claim"


def _pinned_with_claim(pod: dict[str, Any]) -> None:
    pod["spec"]["nodeName"] = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]


def _any_node_by_field(pod: dict[str, Any]) -> None:
    term = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]
    term["matchFields"][0]["operator"] = "NotIn"


def _other_scheduler(pod: dict[str, Any]) -> None:
    pod["spec"]["schedulerName"] = "my-scheduler"


def _exact_count(claim: dict[str, Any]) -> None:
    claim["spec"]["devices"]["requests"][0]["exactly"] |= {
        "allocationMode": "ExactCount",
        "count": 1,
    }


def _other_class(claim: dict[str, Any]) -> None:
    claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "other.example.com"


def _with_selector(claim: dict[str, Any]) -> None:
    cel = {"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}
    claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [cel]


def _tolerate_every_taint(claim: dict[str, Any]) -> None:
    claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [{"operator": "Exists"}]


def _two_requests(claim: dict[str, Any]) -> None:
    requests = claim["spec"]["devices"]["requests"]
    requests.append({**requests[0], "name": "more"})


DRA_POD_ATTACKS: list[tuple[Callable[[dict[str, Any]], None], str]] = [
    (_other_claim, "pinned to its node"),
    (_pinned_with_claim, "pinned to its node"),
    (_other_scheduler, "pinned to its node"),
    (_any_node_by_field, "requires exactly the operator's reach as its node affinity"),
]
CLAIM_ATTACKS: list[tuple[Callable[[dict[str, Any]], None], str]] = [
    (_exact_count, "a probe claim is one request of every device"),
    (_other_class, "a probe claim is one request of every device"),
    (_with_selector, "a probe claim is one request of every device"),
    (_two_requests, "a probe claim is one request of every device"),
    (_tolerate_every_taint, "a probe claim is one request of every device"),
    (_not_a_probe, "a probe claim is one request of every device"),
]


def test_a_dra_probe_pod_and_its_claim_are_the_operators_only(
    operator_api: k8s.ApiClient,
    intruder: k8s.ApiClient,
    rendered: list[dict[str, Any]],
    admission: Admission,
    node: str,
) -> None:
    """Rule 3 admits a DRA node's probe pod (no nodeName, pinned by matchFields, its
    claim named as the pod, the default scheduler) and nothing looser; rule 11 lets
    the operator create only the probe claim's shape, and nobody else a claim that
    looks like the operator's."""
    attempt = _dra_attempt(rendered, node)
    config = _config(rendered)
    pod = probe_pod_manifest(attempt, config)
    claim = probe_claim_manifest(attempt, config)
    assert "nodeName" not in pod["spec"]
    bad_pods = [(_variant(pod, change), message) for change, message in DRA_POD_ATTACKS]
    bad_claims = [(_variant(claim, change), message) for change, message in CLAIM_ATTACKS]
    for bad, _ in bad_pods:
        eventually_admitted(_create(operator_api, bad))
    for bad, _ in bad_claims:
        eventually_admitted(_create_claim(operator_api, bad))
    eventually_admitted(_create_claim(intruder, claim))
    admission.install()
    eventually_refused(_create_claim(intruder, claim), "only the gpuaccept operator")
    for bad, message in bad_pods:
        eventually_refused(_create(operator_api, bad), message)
    for bad, message in bad_claims:
        eventually_refused(_create_claim(operator_api, bad), message)
    admitted(_create(operator_api, pod))
    admitted(_create_claim(operator_api, claim))
    # a fabric pod on a DRA node and its claim: the same shapes, the same rules
    fabric = _dra_fabric_request(rendered, node, attempt.dra_gpus)
    admitted(_create(operator_api, fabric_pod_manifest(fabric, config)))
    admitted(_create_claim(operator_api, fabric_claim_manifest(fabric, config)))
    # a claim of the operator's: nobody else changes its labels or its nonce
    _create_claim(operator_api, with_nonce(claim, "n" * 32), dry_run=False)()
    custom = k8s.CustomObjectsApi(intruder)
    name = claim["metadata"]["name"]
    patch = {"metadata": {"annotations": {CREATION_NONCE_ANNOTATION: "forged"}}}
    try:
        eventually_refused(
            lambda: custom.patch_namespaced_custom_object(
                "resource.k8s.io", "v1", NAMESPACE, "resourceclaims", name, patch,
                dry_run=DRY_RUN,
            ),
            "labels and annotations (its creation nonce) are the operator's",
        )  # fmt: skip
    finally:
        k8s.CustomObjectsApi(operator_api).delete_namespaced_custom_object(
            "resource.k8s.io", "v1", NAMESPACE, "resourceclaims", name
        )


def _fence_rule(node: str, *, key: str = FENCE_TAINT_KEY, labels: bool = True) -> dict[str, Any]:
    view = FenceRuleView(
        rule_name(node, "GPU-5"), node, "GPU-5", "gpu.nvidia.com", node, "gpu-5", key,
        "memory_health", "NoSchedule",
    )  # fmt: skip
    ours = {
        "app.kubernetes.io/managed-by": "gpuaccept",
        "app.kubernetes.io/component": FENCE_COMPONENT,
        "gpuaccept.io/node": node,
    }
    return fence_rule_manifest(view, ours if labels else {"team": "ml"}, None)


def _rules(api: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(api)


def _create_rule(
    api: k8s.ApiClient, rule: dict[str, Any], *, dry_run: bool = True
) -> Callable[[], object]:
    args = ("resource.k8s.io", "v1", "devicetaintrules", rule)
    if dry_run:
        return lambda: _rules(api).create_cluster_custom_object(*args, dry_run=DRY_RUN)
    return lambda: _rules(api).create_cluster_custom_object(*args)


def _delete_rule(api: k8s.ApiClient, name: str, *, dry_run: bool = True) -> Callable[[], object]:
    args = ("resource.k8s.io", "v1", "devicetaintrules", name)
    if dry_run:
        return lambda: _rules(api).delete_cluster_custom_object(*args, dry_run=DRY_RUN)
    return lambda: _rules(api).delete_cluster_custom_object(*args)


def test_fence_rules_are_the_operators_only(
    operator_api: k8s.ApiClient,
    intruder: k8s.ApiClient,
    admission: Admission,
) -> None:
    """Rule 12: nobody but the operator creates, changes or deletes a DeviceTaintRule
    with gpuaccept's key or fence labels (it could fence a GPU in gpuaccept's name, or
    lift a fence); the operator writes only its own shape; a rule of someone else's
    under another key is not gpuaccept's business."""
    node = f"adm-fence-{uuid.uuid4().hex[:6]}"
    ours = _fence_rule(node)
    other_key = _fence_rule(node, key="example.com/broken")
    theirs = _fence_rule(node, key="example.com/broken", labels=False)
    eventually_admitted(_create_rule(intruder, ours))
    eventually_admitted(_create_rule(operator_api, other_key))
    admission.install()
    eventually_refused(_create_rule(intruder, ours), "only the gpuaccept operator")
    eventually_refused(_create_rule(intruder, other_key), "only the gpuaccept operator")
    eventually_refused(_create_rule(operator_api, other_key), "a fence rule has the taint key")
    admitted(_create_rule(intruder, theirs))
    admitted(_create_rule(operator_api, ours))
    _create_rule(operator_api, ours, dry_run=False)()
    name = ours["metadata"]["name"]
    try:
        eventually_refused(_delete_rule(intruder, name), "only the gpuaccept operator")
        lift = {"spec": {"taint": {"key": FENCE_TAINT_KEY, "effect": "None"}}}
        eventually_refused(
            lambda: _rules(intruder).patch_cluster_custom_object(
                "resource.k8s.io", "v1", "devicetaintrules", name, lift, dry_run=DRY_RUN
            ),
            "only the gpuaccept operator",
        )
        admitted(_delete_rule(operator_api, name))
    finally:
        _delete_rule(operator_api, name, dry_run=False)()


CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"


def test_operator_token_cannot_run_a_pod_on_a_control_plane_node(
    control_plane: ControlPlane,
    admin: k8s.ApiClient,
    operator_api: k8s.ApiClient,
    rendered: list[dict[str, Any]],
    admission: Admission,
) -> None:
    """A ValidatingAdmissionPolicy cannot read the Node a pod names, so the rules
    require the node affinity that keeps the pod off control-plane (and non-GPU)
    nodes, and the node's kubelet enforces it at admission even for a pod pinned by
    nodeName (the kubelet stand-in, as kubelet 1.37: reason NodeAffinity). Without
    the rules the operator's token runs a probe-shaped pod there."""
    name = f"adm-cp-{uuid.uuid4().hex[:6]}"
    # A control-plane node that also has GPUs: the base selector alone would not keep
    # the pod off it.
    standin = KubeletStandIn(
        control_plane.configuration(),
        nodes=[SimNode(name, gpu_count=8, labels={CONTROL_PLANE_ROLE: ""}, behaviour=Hang())],
    )
    standin.start()
    core = k8s.CoreV1Api(admin)
    bare = _variant(_probe_pod(rendered, name, serial=1), _no_node_affinity)
    bare["spec"]["activeDeadlineSeconds"] = 600
    pinned = _probe_pod(rendered, name, serial=2)  # the operator's own pod, on that node
    try:
        # Without the rules: the pod without the affinity is admitted and runs there.
        eventually_admitted(_create(operator_api, bare, dry_run=False))
        running = _wait_phase(core, bare["metadata"]["name"], ("Running",))
        assert running.status.reason is None
        _delete_pod(admin, bare["metadata"]["name"])  # its GPUs back for the next
        _wait_until(lambda: (NAMESPACE, bare["metadata"]["name"]) not in standin.running_pods())
        admission.install()
        eventually_refused(
            _create(operator_api, bare),
            "requires exactly the operator's reach as its node affinity",
        )
        # With the affinity the API server admits it (it cannot see the node's labels);
        # the node's kubelet refuses it: no container ever starts.
        admitted(_create(operator_api, pinned, dry_run=False))
        refused = _wait_phase(core, pinned["metadata"]["name"], ("Failed",))
        assert (refused.status.reason, refused.status.message) == (
            "NodeAffinity",
            "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node "
            "affinity/selector",
        )
        assert not refused.status.container_statuses
    finally:
        standin.stop(delete_nodes=True)
        for pod in (bare, pinned):
            _delete_pod(admin, pod["metadata"]["name"])


def _wait_until(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + SETTLE_S
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _wait_phase(core: k8s.CoreV1Api, name: str, phases: tuple[str, ...]) -> k8s.V1Pod:
    deadline = time.monotonic() + SETTLE_S
    while True:
        pod = core.read_namespaced_pod(name, NAMESPACE)
        if pod.status.phase in phases:
            return pod
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}: {pod.status.phase} {pod.status.reason}")
        time.sleep(0.2)


# --------------------------------------------------------------------------- nodes


def test_operator_node_writes_are_limited_to_its_own_keys(
    admin: k8s.ApiClient,
    operator_api: k8s.ApiClient,
    admission: Admission,
    node: str,
) -> None:
    core = k8s.CoreV1Api(operator_api)
    stamp = "2026-01-01T00:00:00Z"
    ready = {"type": "Ready", "status": "False", "reason": "Forged", "message": "x",
             "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}  # fmt: skip
    pending = {"key": "gpuaccept.io/pending", "value": "true", "effect": "NoSchedule"}
    bodies: list[tuple[str, dict[str, Any], str]] = [
        ("node", {"metadata": {"labels": {"node-role.kubernetes.io/secure": "true"}}},
         "changes only labels under"),
        ("node", {"metadata": {"labels": {"team": None}}}, "changes only labels under"),
        ("node", {"spec": {"taints": [pending]}}, "changes only taints under"),
        ("node", {"spec": {"unschedulable": True}}, "does not change a Node's spec"),
        ("node", {"metadata": {"annotations": {"example.com/owner": "me"}}},
         "only removes the gpuaccept.io/reprobe"),
        ("status", {"status": {"conditions": [ready]}}, "writes only its own node conditions"),
        ("status", {"status": {"allocatable": {"nvidia.com/gpu": "4"}}},
         "writes only its own node conditions"),
        # issue 42 item 8: an owned NoExecute taint (evicts every pod, budgets ignored),
        # the kubelet's endpoint (where the API server reaches the node's kubelet)
        ("node", {"spec": {"taints": [
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            {"key": "gpuaccept.io/quarantined", "value": "x", "effect": "NoExecute"}]}},
         "adds no NoExecute taint"),
        ("status", {"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 10999}}}},
         "writes only its own node conditions"),
    ]  # fmt: skip

    def write(kind: str, body: dict[str, Any]) -> Callable[[], object]:
        patch = core.patch_node if kind == "node" else core.patch_node_status
        return lambda: patch(node, body, dry_run=DRY_RUN)

    attacks = [(write(kind, body), message) for kind, body, message in bodies]
    for attack, _ in attacks:
        eventually_admitted(attack)

    admission.install()
    for attack, message in attacks:
        eventually_refused(attack, message)

    # The operator's own writes, through its adapter, as the executor makes them.
    kube = Kube(operator_api)
    current = k8s.CoreV1Api(admin).read_node(node)
    taints = (
        Taint("dedicated", "NoSchedule", "gpu"),
        Taint("gpuaccept.io/quarantined", "NoSchedule", "PcieLinkFailed"),
    )
    kube.patch_node(
        node,
        current.metadata.resource_version,
        taints,
        {"gpuaccept.io/acceptance": "quarantined"},
    )
    kube.patch_node_condition(node, "False", "PcieLinkFailed", "Gen5x8", datetime.now(UTC))
    # and what a quarantined node needs (the remedy ladder, core/offenders.py)
    kube.patch_node_remedy(node, "True", "Reboot", "reboot it", datetime.now(UTC))
    kube.remove_node_annotation(node, REPROBE_ANNOTATION)
    after = k8s.CoreV1Api(admin).read_node(node)
    assert {(t.key, t.effect) for t in after.spec.taints} == {
        ("dedicated", "NoSchedule"),
        ("gpuaccept.io/quarantined", "NoSchedule"),
    }
    assert after.metadata.labels["gpuaccept.io/acceptance"] == "quarantined"
    assert after.metadata.labels["team"] == "ml"
    assert REPROBE_ANNOTATION not in (after.metadata.annotations or {})
    conditions = {c.type: c.status for c in after.status.conditions}
    assert conditions == {"Ready": "True", "GPUAcceptance": "False", REMEDY_CONDITION_TYPE: "True"}


def test_operator_writes_no_node_outside_its_watch_selector(
    admin: k8s.ApiClient, operator_api: k8s.ApiClient, admission: Admission
) -> None:
    """A CPU node (no nvidia.com/gpu.present=true), and a control-plane node with GPUs
    (operator.allowControlPlaneNodes is off): not even an owned label or taint."""
    suffix = uuid.uuid4().hex[:6]
    names = [f"adm-cpu-{suffix}", f"adm-cp-gpu-{suffix}"]
    core = k8s.CoreV1Api(admin)
    core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=names[0])))
    core.create_node(
        k8s.V1Node(
            metadata=k8s.V1ObjectMeta(
                name=names[1],
                labels={"nvidia.com/gpu.present": "true", CONTROL_PLANE_ROLE: ""},
            )
        )
    )
    as_operator = k8s.CoreV1Api(operator_api)
    taint = {"key": "gpuaccept.io/pending", "value": "true", "effect": "NoSchedule"}
    writes = [
        write
        for name in names
        for write in (
            lambda name=name: as_operator.patch_node(
                name, {"spec": {"taints": [taint]}}, dry_run=DRY_RUN
            ),
            lambda name=name: as_operator.patch_node(
                name, {"metadata": {"labels": {"gpuaccept.io/acceptance": "x"}}}, dry_run=DRY_RUN
            ),
        )
    ]
    try:
        for write in writes:
            eventually_admitted(write)
        admission.install()
        for write in writes:
            eventually_refused(write, "writes only the Nodes its watch selector matches")
    finally:
        for name in names:
            core.delete_node(name)


def test_nobody_else_borrows_the_operator_identity(
    control_plane: ControlPlane,
    intruder: k8s.ApiClient,
    identity: OperatorIdentity,
    admission: Admission,
) -> None:
    """A pod run as the operator's ServiceAccount, or a token requested for it. The
    ReplicaSet controller's identity is admitted; it is impersonated here (with its
    bootstrap RBAC): no controller-manager runs on this control plane, so this shows
    the rule admits that user name, not that a real controller-manager uses it."""
    as_intruder = k8s.CoreV1Api(intruder)
    borrower = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "borrower"},
        "spec": {
            "serviceAccountName": identity.service_account,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    request = k8s.AuthenticationV1TokenRequest(spec=k8s.V1TokenRequestSpec(audiences=[]))
    attacks: list[tuple[Callable[[], object], str]] = [
        (
            lambda: as_intruder.create_namespaced_pod(NAMESPACE, borrower, dry_run=DRY_RUN),
            "only the ReplicaSet controller",
        ),
        (
            lambda: as_intruder.create_namespaced_service_account_token(
                identity.service_account, NAMESPACE, request, dry_run=DRY_RUN
            ),
            "only a kubelet requests tokens",
        ),
    ]
    for attack, _ in attacks:
        eventually_admitted(attack)
    admission.install()
    for attack, message in attacks:
        eventually_refused(attack, message)
    replicaset = "system:serviceaccount:kube-system:replicaset-controller"
    with control_plane.api_client(impersonate_user=replicaset) as controller:
        # the Deployment's own pod (another image is refused to the controller too:
        # test_a_replicaset_of_the_editor_cannot_run_as_the_operator)
        rendered = _release().render()
        own = _deployment_pod(rendered, f"{_deployment(rendered)['metadata']['name']}-6b7c8d9f5")
        admitted(
            lambda: k8s.CoreV1Api(controller).create_namespaced_pod(NAMESPACE, own, dry_run=DRY_RUN)
        )


# --------------------------------------------------------------------------- issue 42: trust routes

EDITOR = "editor"
CNI = "system:serviceaccount:kube-system:calico-node"  # a CNI's token sits on every node
EDIT_RULES = "system:aggregate-to-edit"  # the built-in edit role's rules (kube-apiserver bootstrap)


@pytest.fixture(scope="module")
def editor(control_plane: ControlPlane, identity: OperatorIdentity) -> Iterator[k8s.ApiClient]:
    """A namespace editor: a ServiceAccount of the release namespace holding, there, the
    rules of Kubernetes' built-in ``edit`` role (``system:aggregate-to-edit`` and
    ``system:aggregate-to-view``, which it aggregates: no aggregation controller runs on
    this control plane, so ``edit`` itself is empty here), authenticated by its own
    bound token (no impersonation by the admin: it must be able to impersonate on its
    own)."""
    rbac = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": EDITOR, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "editor", "namespace": NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": EDIT_RULES},
         "subjects": [{"kind": "ServiceAccount", "name": EDITOR, "namespace": NAMESPACE}]},
        # edit aggregates view (its reads)
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "editor-view", "namespace": NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "system:aggregate-to-view"},
         "subjects": [{"kind": "ServiceAccount", "name": EDITOR, "namespace": NAMESPACE}]},
        # what `kubectl debug` needs (not in edit; some clusters grant it)
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "editor-debug", "namespace": NAMESPACE},
         "rules": [{"apiGroups": [""], "resources": ["pods/ephemeralcontainers"],
                    "verbs": ["patch", "update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "editor-debug", "namespace": NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "editor-debug"},
         "subjects": [{"kind": "ServiceAccount", "name": EDITOR, "namespace": NAMESPACE}]},
    ]  # fmt: skip
    apply_manifests(control_plane, rbac)
    token = control_plane.service_account_token(NAMESPACE, EDITOR)
    with control_plane.api_client(token=token) as api:
        yield api
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": rbac})
    control_plane.kubectl("delete", "--ignore-not-found", "-f", "-", input=body)


def _as_operator_by_impersonation(
    control_plane: ControlPlane, editor: k8s.ApiClient, identity: OperatorIdentity
) -> k8s.ApiClient:
    """The editor's own token, impersonating the operator's ServiceAccount (``edit``
    grants ``impersonate`` on ServiceAccounts in its namespace)."""
    token = editor.configuration.api_key["BearerToken"]
    return control_plane.api_client(token=token, impersonate_user=identity.username)


def _na(custom: k8s.CustomObjectsApi, node: str) -> None:
    custom.create_cluster_custom_object(
        GROUP, VERSION, ACCEPTANCE_PLURAL,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeAcceptance",
         "metadata": {"name": node}, "spec": {"nodeName": node}},
    )  # fmt: skip


def test_an_editor_impersonating_the_operator_is_refused(  # noqa: PLR0913, PLR0917
    control_plane: ControlPlane,
    admin: k8s.ApiClient,
    editor: k8s.ApiClient,
    identity: OperatorIdentity,
    operator_api: k8s.ApiClient,
    rendered: list[dict[str, Any]],
    admission: Admission,
    node: str,
) -> None:
    """Issue 42 item 1: a namespace editor impersonates the operator's ServiceAccount
    and marks a node's NodeAcceptance Accepted, or takes a node's taint off. The rules
    ask for the operator's own bound token (its credential-id); impersonation carries
    none. The operator's real token is still admitted."""
    custom = k8s.CustomObjectsApi(admin)
    _na(custom, node)
    accepted = {"status": {"phase": "Accepted", "policy": "default"}}
    probe = _probe_pod(rendered, node, serial=3)
    with _as_operator_by_impersonation(control_plane, editor, identity) as borrowed:
        as_borrowed = k8s.CustomObjectsApi(borrowed)
        attacks: list[Callable[[], object]] = [
            lambda: as_borrowed.patch_cluster_custom_object_status(
                GROUP, VERSION, ACCEPTANCE_PLURAL, node, accepted, dry_run=DRY_RUN
            ),
            lambda: k8s.CoreV1Api(borrowed).patch_node(
                node, {"metadata": {"labels": {"gpuaccept.io/acceptance": "accepted"}}},
                dry_run=DRY_RUN,
            ),
            lambda: k8s.CoreV1Api(borrowed).create_namespaced_pod(
                NAMESPACE, probe, dry_run=DRY_RUN
            ),
        ]  # fmt: skip
        try:
            for attack in attacks:
                eventually_admitted(attack)
            admission.install()
            for attack in attacks:
                # rule 7 (or 1, 3, 4), or for the pod rule 2, which also asks for the token;
                # whichever rule the API server reports: 403 (Forbidden), or 422 where
                # the reporting rule's reason is Invalid (rule 3's pod shape)
                error = eventually_refused(attack, "own bound", "only the gpuaccept operator (")
                assert error.status in (403, 422)
            admitted(
                lambda: k8s.CustomObjectsApi(operator_api).patch_cluster_custom_object_status(
                    GROUP, VERSION, ACCEPTANCE_PLURAL, node, accepted, dry_run=DRY_RUN
                )
            )
        finally:
            custom.delete_cluster_custom_object(GROUP, VERSION, ACCEPTANCE_PLURAL, node)


def test_a_legacy_token_of_the_operator_is_refused(  # noqa: PLR0913, PLR0917
    control_plane: ControlPlane,
    admin: k8s.ApiClient,
    editor: k8s.ApiClient,
    identity: OperatorIdentity,
    admission: Admission,
    node: str,
) -> None:
    """Issue 42 item 1: the editor creates a ``kubernetes.io/service-account-token``
    Secret for the operator's ServiceAccount, which the tokens controller fills in
    (signed here as it signs it: no controller-manager runs on this control plane),
    and uses that token. The rules refuse the Secret, and the token's writes (a
    legacy token has no credential-id)."""
    core = k8s.CoreV1Api(admin)
    account = core.read_namespaced_service_account(identity.service_account, NAMESPACE)
    secret_name = f"legacy-{uuid.uuid4().hex[:6]}"
    secret = {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": secret_name,
                     "annotations": {"kubernetes.io/service-account.name":
                                     identity.service_account}},
    }  # fmt: skip
    as_editor = k8s.CoreV1Api(editor)
    custom = k8s.CustomObjectsApi(admin)
    _na(custom, node)
    try:
        eventually_admitted(lambda: as_editor.create_namespaced_secret(NAMESPACE, secret))
        token = sign_legacy_token(
            control_plane.dir / "pki" / "sa.key",
            namespace=NAMESPACE,
            service_account=identity.service_account,
            uid=account.metadata.uid,
            secret=secret_name,
        )
        core.patch_namespaced_secret(
            secret_name, NAMESPACE, {"data": {"token": base64.b64encode(token.encode()).decode()}}
        )  # what the tokens controller writes
        accepted = {"status": {"phase": "Accepted", "policy": "default"}}
        with control_plane.api_client(token=token) as legacy:
            as_legacy = k8s.CustomObjectsApi(legacy)

            def forge() -> object:
                return as_legacy.patch_cluster_custom_object_status(
                    GROUP, VERSION, ACCEPTANCE_PLURAL, node, accepted, dry_run=DRY_RUN
                )

            review = k8s.AuthenticationV1Api(admin).create_token_review(
                k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token))
            )
            assert review.status.authenticated, review.status.error
            assert review.status.user.username == identity.username
            eventually_admitted(forge)
            admission.install()
            eventually_refused(forge, "own bound")
        other = _variant(secret, lambda s: s["metadata"].update(name=f"{secret_name}-2"))
        eventually_refused(
            lambda: as_editor.create_namespaced_secret(NAMESPACE, other, dry_run=DRY_RUN),
            "no legacy token Secret",
        )
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, ACCEPTANCE_PLURAL, node)
        core.delete_namespaced_secret(secret_name, NAMESPACE)


def _deployment(rendered: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    return deployment


def _deployment_pod(rendered: list[dict[str, Any]], replicaset: str) -> dict[str, Any]:
    """A pod as the ReplicaSet controller makes it from the chart's Deployment."""
    deployment = _deployment(rendered)
    template = json.loads(json.dumps(deployment["spec"]["template"]))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{replicaset}-{uuid.uuid4().hex[:5]}",
            "labels": template["metadata"]["labels"],
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replicaset,
                 "uid": str(uuid.uuid4()), "controller": True, "blockOwnerDeletion": True}
            ],
        },
        "spec": template["spec"],
    }  # fmt: skip


def _on_a_judged_node(pod: dict[str, Any]) -> None:
    del pod["spec"]["affinity"]
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.present": "true"}


def _shell(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["image"] = "registry.example/shell:latest"


def _watch_every_node(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["args"].append("--node-selector=")


def _extra_env(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["env"].append({"name": "LD_PRELOAD", "value": "/tmp/x.so"})


def _host_root(pod: dict[str, Any]) -> None:
    pod["spec"]["volumes"].append({"name": "root", "hostPath": {"path": "/"}})


def test_a_replicaset_of_the_editor_cannot_run_as_the_operator(
    control_plane: ControlPlane,
    identity: OperatorIdentity,
    rendered: list[dict[str, Any]],
    admission: Admission,
) -> None:
    """Issue 42 item 1: the editor creates a ReplicaSet (or edits the Deployment) whose
    pods run as the operator's ServiceAccount with another image, other arguments,
    another variable, a host path, or on a GPU node; the ReplicaSet controller makes
    the pods. The rules admit only the chart's Deployment's shape. The controller is
    impersonated (with its bootstrap RBAC): no controller-manager runs here."""
    replicaset = "system:serviceaccount:kube-system:replicaset-controller"
    fullname = _deployment(rendered)["metadata"]["name"]
    own = _deployment_pod(rendered, f"{fullname}-5d8f7c9b4")
    evil = _deployment_pod(rendered, "evil")
    variants = [
        _variant(own, change)
        for change in (_shell, _watch_every_node, _extra_env, _host_root, _on_a_judged_node)
    ]
    with control_plane.api_client(impersonate_user=replicaset) as controller:
        core = k8s.CoreV1Api(controller)

        def create(pod: dict[str, Any]) -> Callable[[], object]:
            return lambda: core.create_namespaced_pod(NAMESPACE, pod, dry_run=DRY_RUN)

        for pod in (evil, *variants):
            eventually_admitted(create(pod))
        admission.install()
        eventually_refused(create(evil), "is the chart's Deployment's")
        for pod in variants[:-1]:
            eventually_refused(create(pod), "is the chart's Deployment's")
        eventually_refused(create(variants[-1]), "never runs on a node the operator judges")
        admitted(create(own))
    # the ServiceAccount admission plugin mounted the token volume the rule admits
    assert identity.service_account == own["spec"]["serviceAccountName"]


def test_nobody_execs_into_the_release_namespace(
    control_plane: ControlPlane,
    admin: k8s.ApiClient,
    editor: k8s.ApiClient,
    admission: Admission,
    tmp_path: Path,
) -> None:
    """Issue 42 item 1: ``kubectl exec`` (a CONNECT on pods/exec) into the operator's
    pod reads its token. Without the rules the API server goes on to the node (there
    is no kubelet here, so it fails there); with them it refuses the CONNECT first.
    Ephemeral containers (which may mount the pod's volumes) likewise."""
    name = f"operator-{uuid.uuid4().hex[:5]}"
    k8s.CoreV1Api(admin).create_namespaced_pod(
        NAMESPACE,
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
         "spec": {"nodeName": "no-such-node", "serviceAccountName": EDITOR,
                  "containers": [{"name": "c", "image": "busybox"}]}},
    )  # fmt: skip
    kubeconfig = write_token_kubeconfig(
        tmp_path / "editor.kubeconfig",
        server=control_plane.server,
        ca_file=control_plane.ca_file,
        token=editor.configuration.api_key["BearerToken"],
        user="editor",
    )
    debug = {"spec": {"ephemeralContainers": [
        {"name": "debug", "image": "busybox", "targetContainerName": "c"}]}}  # fmt: skip

    def exec_() -> str:
        done = control_plane.kubectl(
            "--kubeconfig", str(kubeconfig), "-n", NAMESPACE, "exec", name, "--", "true",
            check=False,
        )  # fmt: skip
        assert done.returncode != 0
        return done.stderr

    def ephemeral() -> object:
        return k8s.CoreV1Api(editor).patch_namespaced_pod_ephemeralcontainers(
            name, NAMESPACE, debug, dry_run=DRY_RUN
        )

    try:
        eventually_admitted(ephemeral)
        before = exec_()
        assert "no exec into pods" not in before
        assert "forbidden" not in before.lower(), before  # RBAC (edit) lets it through
        admission.install()
        deadline = time.monotonic() + SETTLE_S
        while "no exec into pods" not in (after := exec_()):
            assert time.monotonic() < deadline, after
            time.sleep(0.5)
        eventually_refused(ephemeral, "no ephemeralcontainers into pods")
    finally:
        _delete_pod(admin, name)


def test_nobody_else_takes_the_leader_lease(
    admin: k8s.ApiClient,
    editor: k8s.ApiClient,
    operator_api: k8s.ApiClient,
    rendered: list[dict[str, Any]],
    admission: Admission,
) -> None:
    """Issue 42 item 1: the editor (``edit`` writes Leases) takes the operator's leader
    Lease for 2**31 - 1 seconds, and the operator stands by. The rules leave the Lease
    to the operator's own token."""
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    lease_name = next(a.split("=", 1)[1] for a in args if a.startswith("--lease-name="))
    coordination = k8s.CoordinationV1Api(admin)
    stamp = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    coordination.create_namespaced_lease(
        NAMESPACE,
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
         "metadata": {"name": lease_name},
         "spec": {"holderIdentity": "operator-pod", "leaseDurationSeconds": 15,
                  "renewTime": stamp, "acquireTime": stamp}},
    )  # fmt: skip
    taken = {"spec": {"holderIdentity": "editor", "leaseDurationSeconds": 2**31 - 1,
                      "renewTime": stamp}}  # fmt: skip

    def take(api: k8s.ApiClient) -> Callable[[], object]:
        return lambda: k8s.CoordinationV1Api(api).patch_namespaced_lease(
            lease_name, NAMESPACE, taken, dry_run=DRY_RUN
        )

    def renew() -> object:  # the operator's own write: an update (its RBAC: get, update)
        operator = k8s.CoordinationV1Api(operator_api)
        lease = operator.read_namespaced_lease(lease_name, NAMESPACE)
        lease.spec.renew_time = datetime.now(UTC)
        return operator.replace_namespaced_lease(lease_name, NAMESPACE, lease, dry_run=DRY_RUN)

    try:
        eventually_admitted(take(editor))
        admission.install()
        eventually_refused(take(editor), "writes its leader Lease")
        admitted(renew)
    finally:
        coordination.delete_namespaced_lease(lease_name, NAMESPACE)


def test_an_editor_of_default_cannot_hold_the_installation_lock(  # noqa: PLR0913, PLR0917
    control_plane: ControlPlane,
    admin: k8s.ApiClient,
    editor: k8s.ApiClient,
    operator_api: k8s.ApiClient,
    rendered: list[dict[str, Any]],
    admission: Admission,
) -> None:
    """Issue 42 item 4: the installation lock is a Lease in ``default``, and ``edit``
    there writes Leases. A tenant with edit in ``default`` creates the lock as its own,
    or takes it over for 2**31 - 1 seconds, and this installation stands by. Rule 10
    leaves the lock to the operator's own token."""
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    lock = next(a.split("=", 1)[1] for a in args if a.startswith("--installation-lock="))
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "editor-of-default", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": EDIT_RULES},
        "subjects": [{"kind": "ServiceAccount", "name": EDITOR, "namespace": NAMESPACE}],
    }  # fmt: skip
    apply_manifests(control_plane, [binding])
    coordination = k8s.CoordinationV1Api(admin)
    stamp = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    record = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
              "metadata": {"name": lock},
              "spec": {"holderIdentity": "tenant/squatter", "leaseDurationSeconds": 2**31 - 1,
                       "renewTime": stamp, "acquireTime": stamp}}  # fmt: skip
    taken = {"spec": {"holderIdentity": "tenant/squatter", "leaseDurationSeconds": 2**31 - 1,
                      "renewTime": stamp}}  # fmt: skip

    def create(api: k8s.ApiClient) -> Callable[[], object]:
        return lambda: k8s.CoordinationV1Api(api).create_namespaced_lease(
            "default", record, dry_run=DRY_RUN
        )

    def take(api: k8s.ApiClient) -> Callable[[], object]:
        return lambda: k8s.CoordinationV1Api(api).patch_namespaced_lease(
            lock, "default", taken, dry_run=DRY_RUN
        )

    def renew() -> object:  # the operator's own write: an update (its RBAC: get, update)
        operator = k8s.CoordinationV1Api(operator_api)
        lease = operator.read_namespaced_lease(lock, "default")
        lease.spec.holder_identity = f"{NAMESPACE}/operator"
        lease.spec.renew_time = datetime.now(UTC)
        return operator.replace_namespaced_lease(lock, "default", lease, dry_run=DRY_RUN)

    # An operator run earlier on this control plane under the chart's lock name (the
    # local-operator test) may have left its lock: this test starts without one.
    with contextlib.suppress(ApiException):
        coordination.delete_namespaced_lease(lock, "default")
    try:
        eventually_admitted(create(editor))  # RBAC lets the tenant: edit writes Leases
        coordination.create_namespaced_lease(
            "default", {**record, "spec": {**record["spec"], "holderIdentity": "x/operator",
                                           "leaseDurationSeconds": 15}}
        )  # fmt: skip
        eventually_admitted(take(editor))
        admission.install()
        eventually_refused(take(editor), "writes the installation lock")
        coordination.delete_namespaced_lease(lock, "default")
        eventually_refused(create(editor), "writes the installation lock")
        admitted(create(operator_api))
        coordination.create_namespaced_lease("default", record)  # as a cluster admin
        admitted(renew)
    finally:
        with contextlib.suppress(ApiException):
            coordination.delete_namespaced_lease(lock, "default")
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": [binding]})
        control_plane.kubectl("delete", "--ignore-not-found", "-f", "-", input=body)


def test_an_operator_without_watch_pods_creates_no_pod_that_sees_every_gpu(
    operator_api: k8s.ApiClient,
    rendered: list[dict[str, Any]],
    admission: Admission,
    node: str,
) -> None:
    """Issue 42 item 10: the watch pod sees its node's GPUs through
    ``NVIDIA_VISIBLE_DEVICES=all``, which the container runtime honours in an
    unprivileged pod under the toolkit's default only; a platform that closes that
    (every tenant pod could use every GPU) sets ``operator.watchPods: false``, and rule 3
    then refuses the variable on every pod of the operator: its token cannot make a pod
    that sees every GPU (under the default values the same pod is admitted,
    test_operator_token_creates_only_probe_shaped_pods)."""
    watch = _watch_pod(rendered, node)
    hardened = ChartRelease(
        RELEASE, NAMESPACE, set_values={**VALUES, "operator.watchPods": "false"}
    ).render()
    args = next(d for d in hardened if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert "--no-watch-pods" in args["containers"][0]["args"]
    admission.objects = [o for o in hardened if o.get("kind") in ADMISSION_KINDS]
    admission.install()
    eventually_refused(_create(operator_api, watch), "a probe pod's environment is the operator's")
    admitted(_create(operator_api, _fabric_pod(rendered, node)))  # the other pods still pass


def test_a_tenant_editor_of_default_reads_none_of_the_operators_events(
    control_plane: ControlPlane,
    admin: k8s.ApiClient,
    editor: k8s.ApiClient,
    operator_api: k8s.ApiClient,
    node: str,
) -> None:
    """Issue 42 item 4, its second half: the operator's Events (node names, verdicts)
    were written in ``default``, where a tenant with edit reads them. The API server
    keeps an Event on a cluster-scoped object (no ``involvedObject.namespace``, an
    ``eventTime`` set) to ``default`` or ``kube-system``, nowhere else (checked below:
    the release namespace is refused); the operator writes them in ``kube-system``, and
    ``kubectl describe node`` still shows them (it lists every namespace)."""
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "editor-of-default-events", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:aggregate-to-view"},
        "subjects": [{"kind": "ServiceAccount", "name": EDITOR, "namespace": NAMESPACE}],
    }  # fmt: skip
    apply_manifests(control_plane, [binding])
    core = k8s.CoreV1Api(admin)
    uid = core.read_node(node).metadata.uid
    event = EventRecord(
        kind="Node", api_version="v1", name=node, uid=uid, type="Warning",
        reason="Quarantined", message="NcclAllreduceFailed: busbw 210.8 < 400 GB/s",
    )  # fmt: skip
    selector = f"involvedObject.name={node}"
    tenant = k8s.CoreV1Api(editor)
    try:
        Kube(operator_api).create_event(event, now=datetime.now(UTC), reporting_instance="test")
        assert tenant.list_namespaced_event("default", field_selector=selector).items == []
        with pytest.raises(ApiException) as refused:
            tenant.list_namespaced_event(EVENT_NAMESPACE, field_selector=selector)
        assert refused.value.status == 403
        written = core.list_event_for_all_namespaces(field_selector=selector).items
        assert [(e.metadata.namespace, e.reason) for e in written] == [
            ("kube-system", "Quarantined")
        ]
        described = control_plane.kubectl("describe", "node", node).stdout
        assert "NcclAllreduceFailed: busbw 210.8" in described, described
        body = Kube.event_body(event, now=datetime.now(UTC), reporting_instance="test")
        body["metadata"]["namespace"] = NAMESPACE
        with pytest.raises(ApiException) as invalid:  # the API server: not the release's
            core.create_namespaced_event(NAMESPACE, body)
        assert invalid.value.status == 422, invalid.value.body
        assert "does not match event.namespace" in str(invalid.value.body)
    finally:
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": [binding]})
        control_plane.kubectl("delete", "--ignore-not-found", "-f", "-", input=text)


def test_only_the_named_controllers_write_probe_pod_status(  # noqa: PLR0913, PLR0917
    control_plane: ControlPlane,
    admin: k8s.ApiClient,
    operator_api: k8s.ApiClient,
    rendered: list[dict[str, Any]],
    admission: Admission,
    node: str,
) -> None:
    """Issue 42 item 2: a CNI's ServiceAccount (kube-system, its token on every node)
    writes a probe pod's termination message: a forged report. The rules admit only
    the named kube-system controllers, and those never change container statuses."""
    rbac = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": f"{RELEASE}-cni"},
         "rules": [{"apiGroups": [""], "resources": ["pods", "pods/status"],
                    "verbs": ["get", "patch", "update", "delete"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{RELEASE}-cni"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": f"{RELEASE}-cni"},
         "subjects": [{"kind": "User", "name": CNI}]},
    ]  # fmt: skip
    apply_manifests(control_plane, rbac)
    pod = _probe_pod(rendered, node, serial=11)
    name = pod["metadata"]["name"]
    forged = {"status": {"phase": "Failed", "containerStatuses": [
        {"name": pod["spec"]["containers"][0]["name"], "image": "x", "imageID": "",
         "ready": False, "restartCount": 0,
         "state": {"terminated": {"exitCode": 1, "message": '{"forged": true}',
                                  "reason": "Error"}}}]}}  # fmt: skip
    gone = {"status": {"conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
         "message": "node gone"}]}}  # fmt: skip
    collector = "system:serviceaccount:kube-system:pod-garbage-collector"
    try:
        admitted(_create(operator_api, pod, dry_run=False))
        with (
            control_plane.api_client(impersonate_user=CNI) as cni,
            control_plane.api_client(impersonate_user=collector) as gc,
        ):

            def write(api: k8s.ApiClient, body: dict[str, Any]) -> Callable[[], object]:
                return lambda: k8s.CoreV1Api(api).patch_namespaced_pod_status(
                    name, NAMESPACE, body, dry_run=DRY_RUN
                )

            eventually_admitted(write(cni, forged))
            admitted(lambda: k8s.CoreV1Api(cni).delete_namespaced_pod(
                name, NAMESPACE, dry_run=DRY_RUN))  # fmt: skip
            admission.install()
            eventually_refused(write(cni, forged), "probe pods are not changed after creation")
            eventually_refused(
                lambda: k8s.CoreV1Api(cni).delete_namespaced_pod(name, NAMESPACE, dry_run=DRY_RUN),
                "only the gpuaccept operator, the pod's kubelet",
            )
            eventually_refused(write(gc, forged), "does not change a probe pod's container")
            admitted(write(gc, gone))
    finally:
        _delete_pod(admin, name)
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": rbac})
        control_plane.kubectl("delete", "--ignore-not-found", "-f", "-", input=body)


def test_an_edit_holder_cannot_release_a_node(  # noqa: PLR0913, PLR0917
    control_plane: ControlPlane,
    admin: k8s.ApiClient,
    identity: OperatorIdentity,  # the chart's ClusterRoles applied
    rendered: list[dict[str, Any]],
    admission: Admission,
    node: str,
) -> None:
    """Issue 42 item 6: with a cluster-wide ``edit`` binding a user released a
    quarantined node (and one never probed). ``edit`` is what aggregates into it: the
    built-in rules and the chart's ``-edit`` role (no aggregation controller runs here,
    so both are bound as it would combine them). The release is the chart's own
    ``-release`` ClusterRole, bound by name."""
    roles = {o["metadata"]["name"] for o in rendered if o["kind"] == "ClusterRole"}
    fullname = _deployment(rendered)["metadata"]["name"]
    assert {f"{fullname}-edit", f"{fullname}-release"} <= roles
    people = {"editor@example.com": [EDIT_RULES, f"{fullname}-edit"],
              "releaser@example.com": [f"{fullname}-release"]}  # fmt: skip
    rbac = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{RELEASE}-{user.split('@')[0]}-{role.split(':')[-1]}"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": role},
         "subjects": [{"kind": "User", "name": user}]}
        for user, bound in people.items()
        for role in bound
    ]  # fmt: skip
    apply_manifests(control_plane, rbac)
    custom = k8s.CustomObjectsApi(admin)
    _na(custom, node)
    admission.install()  # rule 6: the request names its requester

    def release(user: str) -> Callable[[], object]:
        at = "2026-12-05T10:00:00Z"
        annotations = {"gpuaccept.io/release-by": user, "gpuaccept.io/release-at": at}
        body = {"metadata": {"annotations": annotations}}

        def call() -> object:
            with control_plane.api_client(impersonate_user=user) as api:
                return k8s.CustomObjectsApi(api).patch_cluster_custom_object(
                    GROUP, VERSION, ACCEPTANCE_PLURAL, node, body, dry_run=DRY_RUN
                )

        return call

    try:
        refused = _refusal(release("editor@example.com"))
        assert refused is not None
        assert refused.status == 403
        assert "cannot patch resource" in str(refused.body)
        eventually_admitted(release("releaser@example.com"))
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, ACCEPTANCE_PLURAL, node)
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": rbac})
        control_plane.kubectl("delete", "--ignore-not-found", "-f", "-", input=body)


def test_pinned_pods_are_refused_when_the_platform_team_asks(
    control_plane: ControlPlane,
    intruder: k8s.ApiClient,
    operator_api: k8s.ApiClient,
    rendered: list[dict[str, Any]],
    node: str,
) -> None:
    """Issue 42 item 7: a tenant pod that names its node (spec.nodeName) skips the
    scheduler and the NoSchedule pending taint, runs on an unprobed node and keeps it
    NodeBusy. ``admission.refusePinnedPods`` refuses it; the operator's probe pod
    (pinned by design) is still admitted, and an unpinned tenant pod too."""
    release = ChartRelease(
        RELEASE, NAMESPACE, set_values={**VALUES, "admission.refusePinnedPods": "true"}
    )
    objects = [
        o
        for o in release.render()
        if o["kind"] in ADMISSION_KINDS and o["metadata"]["name"].endswith("-pinned-pods")
    ]
    assert len(objects) == 2  # the policy and its binding
    tenant = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tenant-pinned"},
              "spec": {"nodeName": node, "serviceAccountName": INTRUDER,
                       "containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip
    unpinned = _variant(tenant, lambda p: p["spec"].pop("nodeName"))
    probe = _probe_pod(rendered, node, serial=21)
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    try:
        eventually_admitted(_create(intruder, tenant))
        apply_manifests(control_plane, objects)
        eventually_refused(_create(intruder, tenant), "a pod names its node (spec.nodeName)")
        admitted(_create(intruder, unpinned))
        admitted(_create(operator_api, probe))
    finally:
        control_plane.kubectl("delete", "--ignore-not-found", "-f", "-", input=body)
