"""The benchmark's own control plane: the same binary as ``make cluster-up``,
started fresh in ``bench/out/cluster`` with kube-apiserver's audit log on, plus
the CRDs, a namespace, one ServiceAccount identity per measured process, and
the policy.

A dedicated state dir (not the shared ``.cluster``) because the audit flags
must be on the apiserver's command line, and a benchmark wants an empty etcd.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from bench.audit import AUDIT_POLICY
from gpuaccept.checks.fabric_allreduce import FabricPolicy
from gpuaccept.checks.policy import NodeAcceptancePolicySpec, ProbePolicy
from gpuaccept.contracts.api import (
    ACCEPTANCE_PLURAL,
    API_VERSION,
    GROUP,
    POLICY_KIND,
    POLICY_PLURAL,
    VERSION,
)
from gpuaccept.testsupport import controlplane
from gpuaccept.testsupport.controlplane import ControlPlane

NAMESPACE = "gpuaccept-bench"
POLICY_NAME = "bench"
# The shipped default policy: the simulated profiles' `expect` verdicts, and the
# probe's own verdict (its exit code), are stated against it.
DEFAULT_POLICY = Path(__file__).resolve().parent.parent / "policies" / "default-h100-h200.yaml"


def start_cluster(state_dir: Path, audit_dir: Path) -> tuple[ControlPlane, Path]:
    """A fresh control plane with the audit log at ``audit_dir/audit.log``."""
    audit_dir.mkdir(parents=True, exist_ok=True)
    policy = audit_dir / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    log = audit_dir / "audit.log"
    log.unlink(missing_ok=True)
    controlplane.build_tools(("controlplane",))  # a no-op when .bin/controlplane is current
    if (state_dir / "state.json").exists():
        controlplane.stop(state_dir)
    cp = controlplane.start(
        state_dir,
        build=False,
        extra_apiserver_args=[
            f"--audit-policy-file={policy.resolve()}",
            f"--audit-log-path={log.resolve()}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--audit-log-maxsize=0",
            # The operator and the stand-in may both run hundreds of requests at once.
            "--max-requests-inflight=800",
            "--max-mutating-requests-inflight=400",
        ],
    )
    return cp, log


def ensure_namespace(api: client.ApiClient, name: str = NAMESPACE) -> None:
    """The namespace, its ``default`` ServiceAccount (no controller-manager makes it
    here) and ``gpuaccept-probe``, the operator's probe pods' ServiceAccount."""
    core = client.CoreV1Api(api)
    bodies: list[tuple[Any, Any]] = [(core.create_namespace, {"metadata": {"name": name}})]
    bodies += [
        (
            lambda body: core.create_namespaced_service_account(name, body),
            {"metadata": {"name": account}},
        )
        for account in ("default", "gpuaccept-probe")
    ]
    for create, body in bodies:
        try:
            create(body)
        except ApiException as error:
            if error.status != 409:
                raise


@dataclass(frozen=True)
class Identity:
    user: str  # as the audit log names it
    token: str
    kubeconfig: Path


def identity(cp: ControlPlane, name: str, out_dir: Path, namespace: str = NAMESPACE) -> Identity:
    """A ServiceAccount bound to cluster-admin, a token for it, and a kubeconfig file.

    Each measured process gets its own, so that the audit log splits their requests.
    """
    with cp.api_client() as api:
        core = client.CoreV1Api(api)
        rbac = client.RbacAuthorizationV1Api(api)
        try:
            account: Any = {"metadata": {"name": name}}
            core.create_namespaced_service_account(namespace, account)
        except ApiException as error:
            if error.status != 409:
                raise
        binding: Any = {
            "metadata": {"name": f"bench-{name}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }
        try:
            rbac.create_cluster_role_binding(binding)
        except ApiException as error:
            if error.status != 409:
                raise
    token = cp.service_account_token(namespace, name, expiration_seconds=24 * 3600)
    kubeconfig = out_dir / f"kubeconfig-{name}"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "bench",
                        "cluster": {
                            "server": cp.server,
                            "certificate-authority": str(cp.ca_file),
                        },
                    }
                ],
                "users": [{"name": name, "user": {"token": token}}],
                "contexts": [
                    {
                        "name": "bench",
                        "context": {"cluster": "bench", "user": name, "namespace": namespace},
                    }
                ],
                "current-context": "bench",
            }
        )
    )
    kubeconfig.chmod(0o600)
    return Identity(f"system:serviceaccount:{namespace}:{name}", token, kubeconfig)


def ensure_policy(
    api: client.ApiClient,
    selector: dict[str, str],
    *,
    fabric: dict[str, Any] | None = None,
    sections: dict[str, Any] | None = None,
) -> NodeAcceptancePolicySpec:
    """The benchmark's policy: the shipped default policy, with a breaker that never
    holds here.

    10% of the fleet fails on purpose, and the default ``maxQuarantined`` (10%)
    would hold some of them (``Held``) instead of quarantining them; the
    benchmark measures the quarantine path, so the limit is 100%. ``sections``: more
    of the spec's sections (wire names), e.g. ``inService`` and ``reverify`` on.
    """
    probe = ProbePolicy.model_validate(yaml.safe_load(DEFAULT_POLICY.read_text()))
    spec = NodeAcceptancePolicySpec(node_selector=selector, max_quarantined="100%", probe=probe)
    if fabric is not None:  # the fabric test too (fleet_bench --fabric-slow-every)
        spec = spec.model_copy(update={"fabric": FabricPolicy.model_validate(fabric)})
    if sections:  # validated as the API's schema would
        spec = NodeAcceptancePolicySpec.model_validate({**spec.to_wire(), **sections})
    body = {
        "apiVersion": API_VERSION,
        "kind": POLICY_KIND,
        "metadata": {"name": POLICY_NAME},
        "spec": spec.to_wire(),
    }
    try:
        client.CustomObjectsApi(api).create_cluster_custom_object(
            GROUP, VERSION, POLICY_PLURAL, body
        )
    except ApiException as error:
        if error.status != 409:
            raise
    return spec


def clean_fleet(api: client.ApiClient, selector: str, namespace: str = NAMESPACE) -> None:
    """Remove the last run's nodes, NodeAcceptances, probe pods and Events; wait until gone."""
    core = client.CoreV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    core.delete_collection_node(label_selector=selector)
    custom.delete_collection_cluster_custom_object(GROUP, VERSION, ACCEPTANCE_PLURAL)
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    core.delete_collection_namespaced_event("default")
    core.delete_collection_namespaced_event(namespace)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        left = (
            len(core.list_node(label_selector=selector, limit=1).items)
            + len(
                custom.list_cluster_custom_object(GROUP, VERSION, ACCEPTANCE_PLURAL, limit=1)[
                    "items"
                ]
            )
            + len(core.list_namespaced_pod(namespace, limit=1).items)
        )
        if not left:
            return
        time.sleep(0.5)
    raise TimeoutError("the previous fleet was not removed within 120 s")
