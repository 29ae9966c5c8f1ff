"""The chart's RBAC grants exactly the operator's calls, and nothing else.

The allow-list below is the reviewed list of what the code calls (each entry
names the caller). A new rule in the chart fails here until it is added to the
list with its reason; a rule missing from the chart fails the operator's
integration tests, which run under the chart's ServiceAccount
(tests/integration/test_chart_rbac.py and the operator's own tests).
"""

from __future__ import annotations

from typing import Any

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


# (apiGroup, resource, verb, resourceName or "")
Grant = tuple[str, str, str, str]

PEERING = "gpuaccept"  # default release: the peering object is the release's full name

CLUSTER_ALLOW: dict[Grant, str] = {
    ("", "nodes", "get", ""): "read one node before patching it",
    ("", "nodes", "list", ""): "kopf index of nodes (initial list)",
    ("", "nodes", "watch", ""): "kopf index/event watch on nodes",
    ("", "nodes", "patch", ""): "taints and labels (pending, quarantine, acceptance label)",
    ("", "nodes/status", "patch", ""): "the GPUAcceptance node condition",
    ("gpuaccept.io", "nodeacceptancepolicies", "get", ""): "read the governing policy",
    ("gpuaccept.io", "nodeacceptancepolicies", "list", ""): "kopf watch (initial list)",
    ("gpuaccept.io", "nodeacceptancepolicies", "watch", ""): "kopf watch on policies",
    ("gpuaccept.io", "nodeacceptancepolicies/status", "get", ""): "read status before patch",
    ("gpuaccept.io", "nodeacceptancepolicies/status", "patch", ""): "counts, breaker",
    ("gpuaccept.io", "nodeacceptances", "get", ""): "read one NodeAcceptance",
    ("gpuaccept.io", "nodeacceptances", "list", ""): "kopf watch (initial list)",
    ("gpuaccept.io", "nodeacceptances", "watch", ""): "kopf watch, timers",
    ("gpuaccept.io", "nodeacceptances", "create", ""): "one NodeAcceptance per new node",
    ("gpuaccept.io", "nodeacceptances", "patch", ""): "kopf's own annotations/finalizer",
    ("gpuaccept.io", "nodeacceptances", "delete", ""): "the node is gone",
    ("gpuaccept.io", "nodeacceptances/status", "get", ""): "read status before patch",
    ("gpuaccept.io", "nodeacceptances/status", "patch", ""): "phase, verdict, figures",
    ("", "events", "create", ""): "events on nodes and NodeAcceptances (kopf and ours)",
    ("", "events", "patch", ""): "repeated events are aggregated",
    ("kopf.dev", "clusterkopfpeerings", "list", ""): "kopf peering: see the other replicas",
    ("kopf.dev", "clusterkopfpeerings", "watch", ""): "kopf peering",
    ("kopf.dev", "clusterkopfpeerings", "get", PEERING): "kopf peering keep-alive",
    ("kopf.dev", "clusterkopfpeerings", "patch", PEERING): "kopf peering keep-alive",
    ("apiextensions.k8s.io", "customresourcedefinitions", "list", ""): "kopf resource scan",
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch", ""): "kopf resource scan",
}

NAMESPACE_ALLOW: dict[Grant, str] = {
    ("", "pods", "get", ""): "read a probe pod (termination message)",
    ("", "pods", "list", ""): "kopf watch on probe pods (initial list)",
    ("", "pods", "watch", ""): "kopf watch on probe pods",
    ("", "pods", "create", ""): "one probe pod per attempt",
    ("", "pods", "delete", ""): "probe pod cleanup after the verdict",
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
    granted = grants(one(docs, "ClusterRole"))
    extra = granted - CLUSTER_ALLOW.keys()
    missing = CLUSTER_ALLOW.keys() - granted
    assert not extra, f"the ClusterRole grants more than the code uses: {sorted(extra)}"
    assert not missing, f"the ClusterRole lacks what the code uses: {sorted(missing)}"


def test_namespace_role_is_exactly_the_allow_list(docs: list[Manifest]) -> None:
    role = one(docs, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert grants(role) == NAMESPACE_ALLOW.keys()


@pytest.mark.parametrize("values", [None, HA_VALUES], ids=["defaults", "ha-values"])
def test_no_wildcards_no_secrets_no_cluster_wide_pods(values: Any) -> None:
    rendered = render_chart(namespace=NAMESPACE, values_files=[values] if values else [])
    for role in by_kind(rendered, "ClusterRole") + by_kind(rendered, "Role"):
        for group, resource, verb, _ in grants(role):
            assert "*" not in (group, resource, verb), f"wildcard in {role['kind']}"
            assert resource not in SENSITIVE, f"{role['kind']} grants {resource}"
            assert verb not in ESCALATION_VERBS
            assert verb not in {"update", "deletecollection"}, f"{verb} {resource}: use patch"
    cluster = grants(one(rendered, "ClusterRole"))
    assert not {g for g in cluster if g[1].startswith("pods")}, "pods only in the release Role"


def test_bindings_point_at_the_operator_only(docs: list[Manifest]) -> None:
    sa = one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        binding = one(docs, kind)
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}
        ]
        assert (
            binding["roleRef"]["name"] == one(docs, kind.replace("Binding", ""))["metadata"]["name"]
        )


def test_rbac_can_be_left_to_the_user() -> None:
    rendered = render_chart(namespace=NAMESPACE, set_values={"rbac.create": "false"})
    kinds = {d["kind"] for d in rendered}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
