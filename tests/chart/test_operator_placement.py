"""Where the operator's pods may run (issue 42 item 3): never on a node the operator
judges, unless ``operator.runOnJudgedNodes``. A node that runs the operator's pod can
request the operator's token through the Node authorizer and accept itself.

Rendered with ``.bin/helm template``; the admission rule that refuses an operator pod
without this affinity is tested on the real API server in
tests/integration/test_admission_policies.py
(``test_a_replicaset_of_the_editor_cannot_run_as_the_operator``).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuaccept.testsupport.chart_rbac import ChartRelease
from gpuaccept.testsupport.controlplane import ControlPlaneError

Manifest = dict[str, Any]
GPU_LABEL = "nvidia.com/gpu.present"


def _affinity(values: dict[str, str]) -> dict[str, Any]:
    docs = ChartRelease(set_values=values).render()
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    affinity: dict[str, Any] = deployment["spec"]["template"]["spec"].get("affinity", {})
    return affinity


def _terms(affinity: dict[str, Any]) -> list[dict[str, Any]]:
    required = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms: list[dict[str, Any]] = required["nodeSelectorTerms"]
    return terms


def _matches(term: dict[str, Any], labels: dict[str, str]) -> bool:
    """A nodeSelectorTerm's matchExpressions on a node's labels, as the scheduler reads
    them (k8s.io/component-helpers/scheduling/corev1/nodeaffinity)."""
    for e in term.get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        present = key in labels
        ok = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[op]
        if not ok:
            return False
    return True


def _schedulable(affinity: dict[str, Any], labels: dict[str, str]) -> bool:
    return any(_matches(term, labels) for term in _terms(affinity))


def test_by_default_the_operator_cannot_be_scheduled_onto_a_judged_node() -> None:
    affinity = _affinity({})
    assert _terms(affinity) == [
        {"matchExpressions": [{"key": GPU_LABEL, "operator": "NotIn", "values": ["true"]}]}
    ]
    assert not _schedulable(affinity, {GPU_LABEL: "true", "kubernetes.io/os": "linux"})
    assert _schedulable(affinity, {"kubernetes.io/os": "linux"})
    assert _schedulable(affinity, {GPU_LABEL: "false"})


def test_a_selector_of_several_labels_excludes_every_node_it_matches() -> None:
    affinity = _affinity({"operator.watchNodeSelector": "pool=gpu\\,accelerator"})
    judged = {"pool": "gpu", "accelerator": "h100"}
    assert not _schedulable(affinity, judged)
    assert _schedulable(affinity, {"pool": "gpu"})  # no accelerator label: not judged
    assert _schedulable(affinity, {"pool": "cpu", "accelerator": "h100"})


def test_the_users_affinity_is_kept_and_crossed_with_the_exclusion() -> None:
    affinity = _affinity(
        {
            "operator.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].key": "zone",
            "operator.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].operator": "In",
            "operator.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].values[0]": "a",
            "operator.replicas": "2",
        }
    )
    assert not _schedulable(affinity, {"zone": "a", GPU_LABEL: "true"})
    assert _schedulable(affinity, {"zone": "a"})
    assert not _schedulable(affinity, {"zone": "b"})
    # the user's affinity replaces the HA default, as before
    assert "podAntiAffinity" not in affinity


def test_replicas_keep_the_ha_default_beside_the_exclusion() -> None:
    affinity = _affinity({"operator.replicas": "2"})
    assert affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert not _schedulable(affinity, {GPU_LABEL: "true"})


def test_watching_every_node_leaves_only_control_plane_nodes() -> None:
    affinity = _affinity({"operator.watchNodeSelector": ""})
    assert not _schedulable(affinity, {"kubernetes.io/os": "linux"})
    assert _schedulable(affinity, {"node-role.kubernetes.io/control-plane": ""})


def test_a_chart_that_judges_every_node_is_not_rendered_unless_the_user_says_so() -> None:
    values = {"operator.watchNodeSelector": "", "operator.allowControlPlaneNodes": "true"}
    with pytest.raises(ControlPlaneError, match=r"operator\.runOnJudgedNodes=true"):
        ChartRelease(set_values=values).render()
    affinity = _affinity({**values, "operator.runOnJudgedNodes": "true"})
    assert "nodeAffinity" not in affinity


def test_run_on_judged_nodes_renders_the_old_affinity() -> None:
    assert _affinity({"operator.runOnJudgedNodes": "true"}) == {}
