"""Pod Security for the release namespace (docs/install.md, "Pod Security").

The probe pod and the fabric pod the operator builds (``core/podspec.py``, with the
chart's settings), the operator's Deployment pod and the ``helm test`` pod are
created with a server-side dry run in namespaces labelled with each Pod Security
level, on the real API server (its PodSecurity admission plugin):

- with the chart's defaults every one of them passes ``restricted``, the level the
  docs tell you to enforce;
- a fabric pod with ``fabric.capabilities: [IPC_LOCK]`` (RDMA memory registration)
  fails ``baseline`` and ``restricted``: that release needs ``privileged`` (or the
  operator exempted from PodSecurity), which is why the capability is named there.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.operator.core import NodeView
from gpuaccept.operator.core.model import FabricPodLabels
from gpuaccept.operator.core.podspec import (
    FabricPodRequest,
    ProbeAttempt,
    fabric_pod_manifest,
    probe_pod_manifest,
    probe_pod_name,
)
from gpuaccept.testsupport.chart_rbac import operator_config, render_chart
from gpuaccept.testsupport.controlplane import ControlPlane

pytestmark = pytest.mark.integration

LEVELS = ("restricted", "baseline", "privileged")
NODE = NodeView(name="gpu-psa-1", gpus=8, gpu_capacity=8, boot_id="b")


@pytest.fixture(scope="module")
def namespaces(control_plane: ControlPlane) -> Iterator[dict[str, str]]:
    """One namespace per level, each with the chart's ServiceAccounts' names (and
    "default", which no controller-manager creates here; the helm test pod runs as it)."""
    suffix = uuid.uuid4().hex[:6]
    made: dict[str, str] = {}
    with control_plane.api_client() as api:
        core = k8s.CoreV1Api(api)
        for level in LEVELS:
            name = f"psa-{level}-{suffix}"
            labels = {f"pod-security.kubernetes.io/{mode}": level for mode in ("enforce", "warn")}
            core.create_namespace(
                k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name, labels=labels))
            )
            for account in ("gpuaccept", "gpuaccept-probe", "default"):
                core.create_namespaced_service_account(
                    name, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=account))
                )
            made[level] = name
        yield made
        for name in made.values():
            core.delete_namespace(name)


def _pods(namespace: str, **values: str) -> dict[str, dict[str, Any]]:
    """The pods a release in ``namespace`` creates, by role."""
    rendered = render_chart(
        namespace=namespace, set_values={"probe.runtimeClassName": "", **values}
    )
    config = operator_config(rendered)
    attempt = ProbeAttempt(
        name=probe_pod_name(config.pod_prefix, NODE.name, 1),
        serial=1,
        node=NODE,
        policy_name="default",
        spec=NodeAcceptancePolicySpec.model_validate({}),
    )
    fabric = FabricPodRequest(
        labels=FabricPodLabels(pair="p1", rank=0, first=NODE.name, second="gpu-psa-2"),
        node=NODE,
        policy_name="default",
        spec=NodeAcceptancePolicySpec.model_validate({"fabric": {"enabled": True}}),
        rendezvous_address=None,
    )
    deployment = next(d for d in rendered if d["kind"] == "Deployment")
    template = deployment["spec"]["template"]
    operator_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "operator", "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
    }
    helm_test = next(d for d in rendered if d["kind"] == "Pod")
    return {
        "probe": probe_pod_manifest(attempt, config),
        "fabric": fabric_pod_manifest(fabric, config),
        "operator": operator_pod,
        "helm-test": helm_test,
    }


def _dry_run(cp: ControlPlane, namespace: str, pod: dict[str, Any]) -> str | None:
    """None when the pod is admitted, else the API server's message."""
    pod = json.loads(json.dumps(pod))
    pod["metadata"]["namespace"] = namespace
    pod["spec"].pop("priorityClassName", None)  # the Priority plugin, not Pod Security
    with cp.api_client() as api:
        try:
            k8s.CoreV1Api(api).create_namespaced_pod(namespace, pod, dry_run="All")
        except ApiException as error:
            return str(json.loads(error.body)["message"])
    return None


@pytest.mark.parametrize("role", ["probe", "fabric", "operator", "helm-test"])
def test_every_pod_of_a_default_release_passes_restricted(
    control_plane: ControlPlane, namespaces: dict[str, str], role: str
) -> None:
    namespace = namespaces["restricted"]
    pod = _pods(namespace)[role]
    assert _dry_run(control_plane, namespace, pod) is None


def test_a_violation_is_refused_in_the_restricted_namespace(
    control_plane: ControlPlane, namespaces: dict[str, str]
) -> None:
    """The level is enforced: the same probe pod as root with escalation is refused."""
    namespace = namespaces["restricted"]
    pod = _pods(namespace)["probe"]
    pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    message = _dry_run(control_plane, namespace, pod)
    assert message is not None
    assert 'violates PodSecurity "restricted' in message


def test_fabric_ipc_lock_needs_privileged(
    control_plane: ControlPlane, namespaces: dict[str, str]
) -> None:
    verdicts = {}
    for level, namespace in namespaces.items():
        pod = _pods(namespace, **{"fabric.capabilities": "{IPC_LOCK}"})["fabric"]
        verdicts[level] = _dry_run(control_plane, namespace, pod)
    assert verdicts["privileged"] is None
    for level in ("restricted", "baseline"):
        message = verdicts[level]
        assert message is not None
        assert f'violates PodSecurity "{level}' in message
        assert "IPC_LOCK" in message
    # The single-node probe pod of that release still passes restricted.
    probe = _pods(namespaces["restricted"], **{"fabric.capabilities": "{IPC_LOCK}"})["probe"]
    assert _dry_run(control_plane, namespaces["restricted"], probe) is None
