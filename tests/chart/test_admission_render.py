"""The chart's admission rules as rendered (templates/admission.yaml), on and off.

What they admit and refuse on the real API server is
tests/integration/test_admission_policies.py; here: that they render, are bound,
name this release's identities and images, and go away with ``admission.enabled``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.testsupport.chart_rbac import chart_dir, helm, render_chart

Manifest = dict[str, Any]
NAMESPACE = "gpuaccept-system"
ADMISSION_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
POLICIES = (
    "acceptance-status",
    "probe-pods",
    "probe-pod-shape",
    "probe-claims",  # with operator.draDrivers, the default
    "fence-rules",  # with operator.draDrivers, the default
    "node-writes",
    "operator-identity",
    "release-requester",
    "operator-credential",
    "no-exec",
    "installation-lock",  # with operator.installationLock, the default
)


def _admission(docs: list[Manifest]) -> list[Manifest]:
    return [d for d in docs if d["kind"] in ADMISSION_KINDS]


def _text(obj: object) -> str:
    return repr(obj)


def test_on_by_default_every_policy_bound_with_deny() -> None:
    docs = render_chart(namespace=NAMESPACE)
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert sorted(policies) == sorted(f"gpuaccept-{name}" for name in POLICIES)
    assert {b["spec"]["policyName"] for b in bindings} == set(policies)
    for binding in bindings:
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert "paramRef" not in binding["spec"]
    for policy in policies.values():
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert policy["spec"]["validations"]
    operator = "system:serviceaccount:gpuaccept-system:gpuaccept"
    for name in ("acceptance-status", "probe-pods"):
        assert operator in _text(policies[f"gpuaccept-{name}"]["spec"]["validations"])
    lock = policies["gpuaccept-installation-lock"]["spec"]  # the lock's Lease only
    assert lock["matchConstraints"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "default"}
    }
    assert "request.name == 'gpuaccept-installation'" in _text(lock["matchConditions"])
    assert operator in _text(lock["validations"])
    unlocked = render_chart(namespace=NAMESPACE, set_values={"operator.installationLock": ""})
    assert not [d for d in unlocked if d["metadata"]["name"].endswith("-installation-lock")]
    for name in ("probe-pod-shape", "node-writes"):  # bound to the operator's requests only
        assert operator in _text(policies[f"gpuaccept-{name}"]["spec"]["matchConditions"])
    pods = policies["gpuaccept-probe-pods"]["spec"]["matchConstraints"]
    assert pods["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "gpuaccept-system"}
    }


def test_rules_follow_the_values() -> None:
    docs = render_chart(
        release="r",
        namespace="gpu-ops",
        set_values={
            "global.imageRegistry": "mirror.example",
            "operator.ownedKeyPrefixes[0]": "example.com/gpu-",
            "fabric.capabilities[0]": "IPC_LOCK",
            "probe.runtimeClassName": "nvidia-cdi",
            "probe.serviceAccount.name": "probe-sa",
            "admission.exemptGroups[0]": "platform-admins",
        },
    )
    text = _text(_admission(docs))
    assert "system:serviceaccount:gpu-ops:r-gpuaccept" in text
    assert "mirror.example/gpuaccept/probe:" in text
    for policy in ("probe-pod-shape", "node-writes"):
        (obj,) = [
            d
            for d in docs
            if d["kind"] == "ValidatingAdmissionPolicy"
            and d["metadata"]["name"] == f"r-gpuaccept-{policy}"
        ]
        variables = {v["name"]: v["expression"] for v in obj["spec"]["variables"]}
        assert variables["prefixes"] == '["gpuaccept.io/","example.com/gpu-"]'
    assert "IPC_LOCK" in text
    assert "nvidia-cdi" in text
    assert "probe-sa" in text
    assert "platform-admins" in text
    assert "system:masters" not in text


@pytest.mark.parametrize("enabled", ["true", "false"])
def test_lint_and_render_with_admission_on_and_off(enabled: str) -> None:
    proc = helm(
        "lint", "--strict", str(chart_dir()), "--set", f"admission.enabled={enabled}", check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    docs = render_chart(namespace=NAMESPACE, set_values={"admission.enabled": enabled})
    assert len(_admission(docs)) == (2 * len(POLICIES) if enabled == "true" else 0)
    # Nothing else in the rendering depends on the switch.
    others = [d for d in docs if d["kind"] not in ADMISSION_KINDS]
    assert others == [
        d for d in render_chart(namespace=NAMESPACE) if d["kind"] not in ADMISSION_KINDS
    ]


NO_CONTROL_PLANE = (
    "!('node-role.kubernetes.io/control-plane' in oldObject.metadata.?labels.orValue({})) && "
    "!('node-role.kubernetes.io/master' in oldObject.metadata.?labels.orValue({}))"
)


def test_pinned_pods_are_refused_only_when_asked() -> None:
    def names(values: dict[str, str]) -> set[str]:
        docs = render_chart(namespace=NAMESPACE, set_values=values)
        return {d["metadata"]["name"] for d in _admission(docs)}

    assert "gpuaccept-pinned-pods" not in names({})
    assert {"gpuaccept-pinned-pods"} == names({"admission.refusePinnedPods": "true"}) - names({})


def test_node_writes_are_scoped_by_the_watch_selector() -> None:
    def scope(selector: str | None, *, control_plane: bool = False) -> str:
        values = {} if selector is None else {"operator.watchNodeSelector": selector}
        if control_plane:
            values["operator.allowControlPlaneNodes"] = "true"
            if selector == "":  # every node judged: rendered only when the user says so
                values["operator.runOnJudgedNodes"] = "true"
        docs = render_chart(namespace=NAMESPACE, set_values=values)
        (policy,) = [
            d
            for d in docs
            if d["kind"] == "ValidatingAdmissionPolicy"
            and d["metadata"]["name"] == "gpuaccept-node-writes"
        ]
        return str(policy["spec"]["validations"][0]["expression"])

    gpu = "oldObject.metadata.?labels[?'nvidia.com/gpu.present'] == optional.of('true')"
    assert scope(None) == f"{gpu} && {NO_CONTROL_PLANE}"
    assert scope("pool=a\\,gpu") == (
        "oldObject.metadata.?labels[?'pool'] == optional.of('a') && "
        f"'gpu' in oldObject.metadata.?labels.orValue({{}}) && {NO_CONTROL_PLANE}"
    )
    assert scope("") == NO_CONTROL_PLANE
    # Control-plane nodes allowed: the watch selector alone.
    assert scope(None, control_plane=True) == gpu
    assert scope("", control_plane=True) == "true"


def test_schema_refuses_a_bad_prefix() -> None:
    proc = helm(
        "template",
        "x",
        str(chart_dir()),
        "--set",
        "admission.probePodPrefix=Bad_Prefix",
        check=False,
    )
    assert proc.returncode != 0
    assert "probePodPrefix" in proc.stderr


@pytest.mark.parametrize(
    ("values", "level"),
    [([], "restricted"), (["--set", "fabric.capabilities={IPC_LOCK}"], "privileged")],
)
def test_notes_name_the_pod_security_level(values: list[str], level: str) -> None:
    out = helm("install", "g", str(chart_dir()), "--dry-run=client", "-n", NAMESPACE, *values)
    assert f"pod-security.kubernetes.io/enforce={level}" in out.stdout


def test_rule_3_admits_every_flag_the_operator_passes() -> None:
    """The probe-pod shape rule lists the flags the operator's pods pass (probe,
    watch, fabric); each flag of every rendered pod of the core's golden file
    (tests/operator/core/pod_manifests.golden.json, held byte for byte to
    podspec.pod_manifest) is in that list, so a new flag cannot ship without it."""
    golden = Path(__file__).resolve().parents[1] / "operator/core/pod_manifests.golden.json"
    passed = {
        word
        for line in golden.read_text(encoding="utf-8").splitlines()
        for pod in json.loads(line).values()
        if pod["kind"] == "Pod"  # the file also holds the DRA probe claims
        for container in pod["spec"]["containers"]
        for word in container.get("command", []) + container.get("args", [])
        if word.startswith("--")
    }
    (shape,) = [
        d
        for d in _admission(render_chart())
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"].endswith("shape")
    ]
    (flags,) = [v["expression"] for v in shape["spec"]["variables"] if v["name"] == "probeFlags"]
    listed = set(re.findall(r"'(--[a-z-]+)'", flags))
    assert passed, "the golden file holds no flag"
    assert passed <= listed, f"rule 3 refuses {sorted(passed - listed)}"
