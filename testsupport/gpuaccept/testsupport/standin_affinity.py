"""The kubelet's node-affinity admission, for the kubelet stand-in (test support).

A pod pinned by ``spec.nodeName`` bypasses the scheduler, but the node's kubelet
runs the scheduler's filters on it at admission (pkg/kubelet/lifecycle/predicate.go
``generalFilter`` -> pkg/scheduler ``AdmissionCheck``): a pod whose
``spec.nodeSelector`` or required node affinity does not match the Node is
rejected, phase ``Failed``, reason ``NodeAffinity`` (the filter's name), message
``Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node
affinity/selector`` (``PredicateFailureError.Error``, the plugin's ``ErrReasonPod``,
and ``rejectPod``'s prefix). Before it rejects on affinity alone, the kubelet reads
the Node again without its cache; the stand-in always reads it.

:func:`matches_required_affinity` is k8s.io/component-helpers
``nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)``, written here on its own
(not shared with the operator, so that the operator's pods are checked by an
independent reading of the rules): every ``nodeSelector`` label, and at least one
``nodeSelectorTerm`` whose requirements all hold (a term with none matches nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

AFFINITY_REASON = "NodeAffinity"
AFFINITY_MESSAGE = (
    "Pod was rejected: Predicate NodeAffinity failed: "
    "node(s) didn't match Pod's node affinity/selector"
)


def _requirement(req: Mapping[str, Any], values_of: Mapping[str, str]) -> bool:
    """One NodeSelectorRequirement against a label (or field) map."""
    key, op = req.get("key", ""), req.get("operator", "")
    values = [str(v) for v in req.get("values") or []]
    present = key in values_of
    if op == "In":
        return present and values_of[key] in values
    if op == "NotIn":
        return not present or values_of[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, bound = int(values_of[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _term(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    expressions = list(term.get("matchExpressions") or [])
    fields = list(term.get("matchFields") or [])
    if not expressions and not fields:
        return False  # an empty term matches no node
    field_values = {"metadata.name": name}
    return all(_requirement(r, labels) for r in expressions) and all(
        _requirement(r, field_values) for r in fields
    )


def matches_required_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Whether ``node`` (a Node object) satisfies ``pod``'s nodeSelector and required
    node affinity."""
    spec = pod.get("spec") or {}
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    selector: Mapping[str, str] = spec.get("nodeSelector") or {}
    if any(labels.get(key) != value for key, value in selector.items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if not required or terms is None:
        return True
    return any(_term(term, labels, str(meta.get("name", ""))) for term in terms)


def requires_node_labels(pod: Mapping[str, Any]) -> bool:
    """The pod has a nodeSelector or a required node affinity (else nothing to check)."""
    spec = pod.get("spec") or {}
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    return bool(spec.get("nodeSelector")) or bool(
        affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    )


# The kubelet's other predicate on a bound pod (pkg/kubelet/lifecycle/predicate.go
# generalFilter, after AdmissionCheck): an untolerated taint of effect NoExecute
# (only that effect: a NoSchedule taint does not stop a pod that names its node).
# Reason the plugin's name, message its ErrReasonNotMatch
# (pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go).
TAINT_REASON = "TaintToleration"
TAINT_MESSAGE = (
    "Pod was rejected: Predicate TaintToleration failed: "
    "node(s) had taints that the pod didn't tolerate"
)


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """k8s.io/api/core/v1 ``Toleration.ToleratesTaint`` (Equal and Exists)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return bool(key) and (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_no_execute(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Whether ``node`` has a NoExecute taint that none of ``pod``'s tolerations
    tolerates (the kubelet then rejects the pod, reason ``TaintToleration``)."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    taints = (node.get("spec") or {}).get("taints") or []
    return any(
        t.get("effect") == "NoExecute" and not any(_tolerates(tol, t) for tol in tolerations)
        for t in taints
    )
