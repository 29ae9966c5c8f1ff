"""The chart's RBAC grants exactly the operator's calls, and nothing else.

The allow-list below is the reviewed list of what the code calls (each entry
names the caller). It is checked both ways: against the rendered roles (a new
rule in the chart fails until it is listed with its reason), and against the
code: every ``<x>.request("VERB", path)`` in operator/gpuaccept/operator (the
Kube adapter and its callers) and every kopf index/watch in handlers.py,
parsed (a new call without a grant fails, a grant no call needs fails). At run
time, a rule missing from the chart fails the integration tests that run the
operator as the chart's ServiceAccount (tests/integration/test_chart_rbac.py,
test_chart_local_operator.py and the operator's own tests).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import pytest

from gpuaccept.testsupport.chart_rbac import chart_dir, render_chart

Manifest = dict[str, Any]
HA_VALUES = chart_dir() / "ci" / "ha-values.yaml"
NAMESPACE = "gpuaccept-system"


def by_kind(docs: list[Manifest], kind: str) -> list[Manifest]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Manifest], kind: str) -> Manifest:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def operator_cluster_role(docs: list[Manifest]) -> Manifest:
    """The operator's own ClusterRole (not the user-facing view/edit ClusterRoles the
    chart aggregates into Kubernetes' default roles: tests/chart/test_chart_platform.py)."""
    (role,) = [
        d
        for d in by_kind(docs, "ClusterRole")
        if d["metadata"]["labels"].get("app.kubernetes.io/component") == "operator"
    ]
    return role


# (apiGroup, resource, verb, resourceName or "")
Grant = tuple[str, str, str, str]

LEASE = "gpuaccept"  # default release: the Lease is named after the release's full name

# What operator/gpuaccept/operator/kube.py calls, and what kopf watches for the
# indexes in operator/gpuaccept/operator/handlers.py (kopf runs standalone, with
# CRD scanning and its own Events off).
CLUSTER_ALLOW: dict[Grant, str] = {
    ("", "nodes", "list", ""): "kopf index on nodes (initial list)",
    ("", "nodes", "watch", ""): "kopf index/event watch on nodes",
    ("", "nodes", "get", ""): "Kube.get_node",
    ("", "nodes", "patch", ""): "Kube.patch_node, Kube.remove_node_annotation",
    ("", "nodes/status", "patch", ""): "Kube.patch_node_condition, Kube.patch_node_remedy",
    ("gpuaccept.io", "nodeacceptancepolicies", "list", ""): "kopf index on policies",
    ("gpuaccept.io", "nodeacceptancepolicies", "watch", ""): "kopf index/event watch",
    ("gpuaccept.io", "nodeacceptancepolicies/status", "patch", ""): "Kube.patch_policy_status",
    ("gpuaccept.io", "nodeacceptances", "list", ""): "kopf index on NodeAcceptances",
    ("gpuaccept.io", "nodeacceptances", "watch", ""): "kopf index/event watch",
    ("gpuaccept.io", "nodeacceptances", "get", ""): "Kube.get_na",
    ("gpuaccept.io", "nodeacceptances", "create", ""): "Kube.create_na",
    ("gpuaccept.io", "nodeacceptances", "delete", ""): "Kube.delete_na",
    ("gpuaccept.io", "nodeacceptances/status", "patch", ""): "Kube.patch_na_status",
    ("", "pods", "list", ""): "Kube.list_running_pods_on_node",
    ("", "pods/eviction", "create", ""): "Kube.evict_pod (the drain of a quarantined node)",
    ("resource.k8s.io", "resourceslices", "list", ""): (
        "kopf index on ResourceSlices (DRA), Kube.list_resource_slice_names"
    ),
    ("resource.k8s.io", "resourceslices", "watch", ""): "kopf index/event watch (DRA)",
    ("resource.k8s.io", "devicetaintrules", "list", ""): (
        "kopf index of the fence rules; Kube.list_fence_rule_names (relist check)"
    ),
    ("resource.k8s.io", "devicetaintrules", "watch", ""): "kopf index/event watch (fences)",
    ("resource.k8s.io", "devicetaintrules", "create", ""): "Kube.create_device_taint_rule",
    ("resource.k8s.io", "devicetaintrules", "patch", ""): "Kube.replace_device_taint_rule_spec",
    ("resource.k8s.io", "devicetaintrules", "delete", ""): "Kube.delete_device_taint_rule",
}

NAMESPACE_ALLOW: dict[Grant, str] = {
    ("", "pods", "list", ""): "kopf index on probe pods (label-selected)",
    ("", "pods", "watch", ""): "kopf index/event watch on probe pods",
    ("", "pods", "create", ""): "Kube.create_pod",
    ("", "pods", "delete", ""): "Kube.delete_pod",
    ("resource.k8s.io", "resourceclaims", "create", ""): "Kube.create_resource_claim (DRA)",
    ("resource.k8s.io", "resourceclaims", "get", ""): "Kube.get_resource_claim (DRA)",
    ("resource.k8s.io", "resourceclaims", "delete", ""): "Kube.delete_resource_claim (DRA)",
    ("coordination.k8s.io", "leases", "create", ""): "Kube.create_lease",
    ("coordination.k8s.io", "leases", "get", LEASE): "Kube.get_lease",
    ("coordination.k8s.io", "leases", "update", LEASE): "Kube.replace_lease",
}

EVENTS_ALLOW: dict[Grant, str] = {
    ("", "events", "create", ""): "Kube.create_event (namespace kube-system, not a tenant's)",
}

LOCK_ALLOW: dict[Grant, str] = {
    ("coordination.k8s.io", "leases", "create", ""): "Kube.create_lock_lease",
    ("coordination.k8s.io", "leases", "get", "gpuaccept-installation"): "Kube.get_lock_lease",
    ("coordination.k8s.io", "leases", "update", "gpuaccept-installation"): (
        "Kube.replace_lock_lease"
    ),
}

SENSITIVE = {
    "secrets",
    "configmaps",
    "serviceaccounts",
    "serviceaccounts/token",
    "pods/exec",
    "pods/attach",
    "pods/portforward",
    "nodes/proxy",
    "roles",
    "rolebindings",
    "clusterroles",
    "clusterrolebindings",
    "certificatesigningrequests",
    "tokenreviews",
}
ESCALATION_VERBS = {"escalate", "bind", "impersonate", "*"}


def grants(role: Manifest) -> set[Grant]:
    out: set[Grant] = set()
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule, "no non-resource URLs"
        names = rule.get("resourceNames") or [""]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in names:
                        out.add((group, resource, verb, name))
    return out


@pytest.fixture(scope="module")
def docs() -> list[Manifest]:
    return render_chart(namespace=NAMESPACE)


def test_cluster_role_is_exactly_the_allow_list(docs: list[Manifest]) -> None:
    granted = grants(operator_cluster_role(docs))
    extra = granted - CLUSTER_ALLOW.keys()
    missing = CLUSTER_ALLOW.keys() - granted
    assert not extra, f"the ClusterRole grants more than the code uses: {sorted(extra)}"
    assert not missing, f"the ClusterRole lacks what the code uses: {sorted(missing)}"


def test_namespace_roles_are_exactly_the_allow_list(docs: list[Manifest]) -> None:
    roles = {r["metadata"]["namespace"]: r for r in by_kind(docs, "Role")}
    assert set(roles) == {NAMESPACE, "kube-system", "default"}
    assert grants(roles[NAMESPACE]) == NAMESPACE_ALLOW.keys()
    assert grants(roles["kube-system"]) == EVENTS_ALLOW.keys()
    assert grants(roles["default"]) == LOCK_ALLOW.keys()  # nothing but the lock in "default"


def test_allow_list_names_real_calls() -> None:
    """Every ``Kube.*`` the allow-list cites exists in the operator's adapter."""
    from gpuaccept.operator.kube import Kube  # noqa: PLC0415

    cited = {
        word.split(".")[1].rstrip(",")
        for reason in (CLUSTER_ALLOW | NAMESPACE_ALLOW | EVENTS_ALLOW | LOCK_ALLOW).values()
        for word in reason.split()
        if word.startswith("Kube.")
    }
    assert cited
    for method in cited:
        assert callable(getattr(Kube, method, None)), f"Kube.{method} does not exist"


@pytest.mark.parametrize("values", [None, HA_VALUES], ids=["defaults", "ha-values"])
def test_no_wildcards_no_secrets_cluster_wide_pods_only_listed(values: Any) -> None:
    rendered = render_chart(namespace=NAMESPACE, values_files=[values] if values else [])
    for role in by_kind(rendered, "ClusterRole") + by_kind(rendered, "Role"):
        for group, resource, verb, _ in grants(role):
            assert "*" not in (group, resource, verb), f"wildcard in {role['kind']}"
            assert resource not in SENSITIVE, f"{role['kind']} grants {resource}"
            assert verb not in ESCALATION_VERBS
    for role in [operator_cluster_role(rendered), *by_kind(rendered, "Role")]:
        for group, resource, verb, _ in grants(role):
            if verb in {"update", "deletecollection"}:
                assert (group, resource) == ("coordination.k8s.io", "leases"), f"{verb} {resource}"
    cluster = grants(operator_cluster_role(rendered))
    # Cluster-wide, pods may only be listed (one list by spec.nodeName before a probe
    # pod is created, to wait for the node's GPU pods) and evicted through the Eviction
    # API, which respects PodDisruptionBudgets (the drain of a quarantined node): no
    # watch, get, delete or other write.
    pods = {g for g in cluster if g[1].startswith("pods")}
    assert pods == {("", "pods", "list", ""), ("", "pods/eviction", "create", "")}


def test_without_dra_drivers_neither_slices_nor_claims_are_granted(
    tmp_path: Path,
) -> None:
    values = tmp_path / "no-dra.yaml"
    values.write_text("operator:\n  draDrivers: []\n")
    rendered = render_chart(namespace=NAMESPACE, values_files=[values])
    args = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--dra-driver=" in args
    granted = grants(operator_cluster_role(rendered))
    assert not {g for g in granted if g[0] == "resource.k8s.io"}
    assert granted == {g for g in CLUSTER_ALLOW if g[0] != "resource.k8s.io"}
    roles = {r["metadata"]["namespace"]: r for r in by_kind(rendered, "Role")}
    assert grants(roles[NAMESPACE]) == NAMESPACE_ALLOW.keys() - {
        ("resource.k8s.io", "resourceclaims", verb, "") for verb in ("create", "get", "delete")
    }
    handlers = importlib.import_module("gpuaccept.operator.handlers")
    controller = MagicMock()
    controller.config.dra_drivers = ()
    controller.config.device_taint_rules = True  # served, but no DRA node to fence
    registry = handlers.build_registry(controller)
    watched = {
        h.selector.plural
        for h in [*registry._indexing.get_all_handlers(), *registry._watching.get_all_handlers()]
    }
    assert "resourceslices" not in watched
    assert "devicetaintrules" not in watched


def test_bindings_point_at_the_operator_only(docs: list[Manifest]) -> None:
    sa = one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    subject = [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    bindings = by_kind(docs, "ClusterRoleBinding") + by_kind(docs, "RoleBinding")
    assert len(bindings) == 4
    roles = {(r["kind"], r["metadata"].get("namespace"), r["metadata"]["name"]) for r in docs}
    for binding in bindings:
        assert binding["subjects"] == subject
        ref = binding["roleRef"]
        assert (ref["kind"], binding["metadata"].get("namespace"), ref["name"]) in roles
    # The probe pods' account is bound to nothing and gets no token.
    probe_sa = [a for a in by_kind(docs, "ServiceAccount") if a["metadata"]["name"] != sa]
    assert [a["automountServiceAccountToken"] for a in probe_sa] == [False]


def test_rbac_can_be_left_to_the_user() -> None:
    rendered = render_chart(namespace=NAMESPACE, set_values={"rbac.create": "false"})
    kinds = {d["kind"] for d in rendered}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


# --- the allow-list derived from the code ---------------------------------------------

_CORE = re.compile(
    r"^/api/v1/(namespaces/(?P<ns>[^/]+)/)?(?P<res>[a-z]+)(/(?P<name>[^/]+))?(/(?P<sub>[a-z]+))?$"
)
_GROUPED = re.compile(
    r"^/apis/(?P<group>[^/]+)/[^/]+/(namespaces/(?P<ns>[^/]+)/)?(?P<res>[a-z]+)"
    r"(/(?P<name>[^/]+))?(/(?P<sub>[a-z]+))?$"
)
_VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


def _path_template(node: ast.AST, module: Any) -> str:
    """The request path of a ``self.request(...)`` call, with ``{x}`` for variables."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            _path_template(v.value if isinstance(v, ast.FormattedValue) else v, module)
            for v in node.values
        )
    if isinstance(node, ast.Name):
        value = getattr(module, node.id, None)
        return value if isinstance(value, str) else "{x}"
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
    ):
        # {any_namespace}: a pod in any namespace (the drain's evictions): cluster-wide
        template = _path_template(node.func.value, module).replace("{any_namespace}", "*")
        return re.sub(r"\{\w+\}", "{x}", template)
    return "{x}"


_HTTP = {"GET", "POST", "PATCH", "PUT", "DELETE"}
# Modules that run with the admin's kubeconfig, never as the operator's
# ServiceAccount: their calls need no grant (and must get none).
ADMIN_MODULES = {
    "gpuaccept.operator.cleanup": "gpuaccept cleanup (after helm uninstall)",
    "gpuaccept.operator.plugin.kubectl": "kubectl gpuaccept (the user's own kubeconfig)",
}
# Discovery documents: readable by every authenticated user (system:discovery).
_DISCOVERY = re.compile(r"^/api(/[^/]+)?$|^/apis(/[^/]+){0,2}$")


def code_grants() -> dict[str, set[Grant]]:
    """(apiGroup, resource, verb, "") per scope, from every ``<x>.request("VERB", path)``
    in the operator's code (its Kube adapter and any caller of ``Kube.request``) and
    every kopf index/watch in its handler registry."""
    kube = importlib.import_module("gpuaccept.operator.kube")
    handlers = importlib.import_module("gpuaccept.operator.handlers")
    package = Path(kube.__file__).parent
    scopes: dict[str, set[Grant]] = {
        "cluster": set(), "release": set(), "kube-system": set(), "default": set()
    }  # fmt: skip
    calls = 0
    for source in sorted(package.rglob("*.py")):
        module_name = "gpuaccept.operator." + ".".join(
            source.relative_to(package).with_suffix("").parts
        )
        if module_name in ADMIN_MODULES:
            continue
        module = importlib.import_module(module_name)
        for node in ast.walk(ast.parse(source.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "request"
                and len(node.args) >= 2
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in _HTTP
            ):
                continue
            calls += 1
            method = str(node.args[0].value)
            path = _path_template(node.args[1], module)
            if _DISCOVERY.match(path):
                assert method == "GET", path
                continue
            match = _CORE.match(path) or _GROUPED.match(path)
            assert match, f"unrecognised API path {path!r} in {source.name}"
            parts = match.groupdict()
            resource = parts["res"] + (f"/{parts['sub']}" if parts["sub"] else "")
            verb = _VERBS.get(method) or ("get" if parts["name"] else "list")
            ns = parts["ns"]
            scope = (
                "cluster"
                if ns in (None, "*")
                else (ns if ns in {"default", "kube-system"} else "release")
            )
            scopes[scope].add((parts.get("group") or "", resource, verb, ""))
    assert calls >= 10, "the operator's API calls changed shape: update this parser"
    controller = MagicMock()
    controller.config.dra_drivers = ("gpu.nvidia.com",)  # the chart's default
    registry = handlers.build_registry(controller)
    for handler in [*registry._indexing.get_all_handlers(), *registry._watching.get_all_handlers()]:
        selector = handler.selector
        plural = selector.plural or selector.any_name
        scope = "release" if plural == "pods" else "cluster"  # kopf runs namespaced for pods
        for verb in ("list", "watch"):
            scopes[scope].add((selector.group, plural, verb, ""))
    for kind in ("_changing", "_spawning", "_webhooks"):
        assert not getattr(registry, kind).get_all_handlers(), (
            f"kopf {kind} handlers write to the objects they handle: RBAC needs patch"
        )
    return scopes


def _unnamed(allow: dict[Grant, str]) -> set[Grant]:
    return {(g, r, v, "") for g, r, v, _ in allow}


def test_allow_list_is_what_the_code_calls() -> None:
    """Every grant is backed by a call in kube.py or a kopf watch, and every call
    in kube.py is granted (lease names are checked by the integration tests)."""
    used = code_grants()
    assert _unnamed(CLUSTER_ALLOW) == used["cluster"]
    assert _unnamed(NAMESPACE_ALLOW) == used["release"]
    assert _unnamed(EVENTS_ALLOW) == used["kube-system"]
    assert _unnamed(LOCK_ALLOW) == used["default"]


def test_admin_modules_stay_out_of_the_operators_process() -> None:
    """An admin-only module is never imported by the operator's runtime: its calls
    run with the admin's kubeconfig, so leaving them out of the allow-list is sound."""
    kube = importlib.import_module("gpuaccept.operator.kube")
    package = Path(kube.__file__).parent
    for source in sorted(package.rglob("*.py")):
        tree = ast.parse(source.read_text())
        imported = {
            name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            # `from gpuaccept.operator import cleanup` imports gpuaccept.operator.cleanup
            for name in (node.module, *(f"{node.module}.{a.name}" for a in node.names))
        } | {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        assert not imported & ADMIN_MODULES.keys(), f"{source.name} imports an admin module"
