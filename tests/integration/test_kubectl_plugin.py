"""``kubectl gpuaccept`` on the real kube-apiserver: ``explain`` reads a stored
NodeAcceptance and its policy, ``reprobe`` sets the annotation on the Node,
``what-if`` judges the stored reports under a candidate and writes nothing."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.api import (
    RELEASE_AT_ANNOTATION,
    RELEASE_BY_ANNOTATION,
    RELEASE_REASON_ANNOTATION,
    REPROBE_ANNOTATION,
)
from gpuaccept.operator.plugin.kubectl import main as plugin_main
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.inputs import load_policy
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.measure.context import NodeGpuCounts
from gpuaccept.probe.runner import RunSetup, run_probe
from gpuaccept.testsupport.chart_rbac import apply_crds, write_token_kubeconfig
from gpuaccept.testsupport.controlplane import ControlPlane

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
API = "gpuaccept.io/v1alpha1"
POLICY = "plugin-test"
GOOD, BAD = "plugin-gpu-good", "plugin-gpu-x8"
DEFAULT_PROBE = yaml.safe_load((ROOT / "policies" / "default-h100-h200.yaml").read_text())


def _report(profile: Path, node: str) -> dict[str, Any]:
    loaded = load_profile(profile)
    hardware = SimulatedBackend(loaded)
    try:
        counts = NodeGpuCounts(
            allocatable=loaded.node.allocatable,
            capacity=loaded.node.gpu_capacity,
            labelled=loaded.node.gfd_gpu_count,
        )
        run = RunSetup(node_name=node, context=ProbeContext(node_gpus=counts))
        report = run_probe(hardware, load_policy(ROOT / "policies" / "default-h100-h200.yaml"), run)
    finally:
        hardware.close()
    verdict = evaluate(report, load_policy(ROOT / "policies" / "default-h100-h200.yaml"))
    return {
        "phase": "Accepted" if verdict.accepted else "Quarantined",
        "reason": verdict.reason,
        "message": verdict.message,
        "reasons": [r.model_dump(mode="json", by_alias=True) for r in verdict.reasons],
        "policy": POLICY,
        "policyGeneration": 1,
        "report": report.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


def _kubectl_json(cp: ControlPlane, obj: dict[str, Any]) -> None:
    cp.kubectl("create", "-f", "-", input=json.dumps(obj))


@pytest.fixture
def fleet(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """Two decided nodes of one policy, as the operator leaves them."""
    cp = control_plane
    apply_crds(cp)
    for name in (GOOD, BAD):
        cp.kubectl("delete", "node,nodeacceptance", name, "--ignore-not-found", check=False)
    cp.kubectl("delete", "nodeacceptancepolicy", POLICY, "--ignore-not-found")
    _kubectl_json(
        cp,
        {
            "apiVersion": API,
            "kind": "NodeAcceptancePolicy",
            "metadata": {"name": POLICY},
            "spec": {"nodeSelector": {"example.com/plugin-test": "true"}, "probe": DEFAULT_PROBE},
        },
    )
    profiles = {
        GOOD: ROOT / "profiles" / "h100-sxm-8gpu-healthy.yaml",
        BAD: ROOT / "profiles" / "faults" / "pcie-x8.yaml",
    }
    for name, profile in profiles.items():
        _kubectl_json(cp, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        _kubectl_json(
            cp,
            {"apiVersion": API, "kind": "NodeAcceptance", "metadata": {"name": name},
             "spec": {"nodeName": name}},
        )  # fmt: skip
        cp.kubectl(
            "patch", "nodeacceptance", name, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": _report(profile, name)}),
        )  # fmt: skip
    yield cp
    for name in (GOOD, BAD):
        cp.kubectl("delete", "node,nodeacceptance", name, "--ignore-not-found", check=False)
    cp.kubectl("delete", "nodeacceptancepolicy", POLICY, "--ignore-not-found")


def _plugin(cp: ControlPlane, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = plugin_main(["--kubeconfig", str(cp.kubeconfig), *args], out=out)
    return code, out.getvalue()


def _versions(cp: ControlPlane) -> dict[str, str]:
    got = {}
    for kind in ("nodeacceptances", "nodes", "nodeacceptancepolicies"):
        items = json.loads(cp.kubectl("get", kind, "-o", "json").stdout)["items"]
        for item in items:
            got[f"{kind}/{item['metadata']['name']}"] = item["metadata"]["resourceVersion"]
    return got


def test_explain_a_quarantined_node(fleet: ControlPlane) -> None:
    code, text = _plugin(fleet, "explain", BAD)
    assert code == 0
    lines = text.splitlines()
    assert lines[0] == f"{BAD}: Quarantined (PcieLinkFailed)"
    assert f"policy {POLICY} (judged at generation 1)" in lines
    assert any(line.startswith("pcie_link             fail ") for line in lines)
    assert '"minWidth": 16' in text
    assert lines[-1] == "QUARANTINED: PcieLinkFailed (pcie_link)"


def test_explain_a_node_no_policy_governs(fleet: ControlPlane) -> None:
    assert _plugin(fleet, "explain", "plugin-no-such-node")[0] == 1


def test_reprobe_sets_the_annotation(fleet: ControlPlane) -> None:
    code, text = _plugin(fleet, "reprobe", GOOD)
    assert code == 0
    node = json.loads(fleet.kubectl("get", "node", GOOD, "-o", "json").stdout)
    value = node["metadata"]["annotations"][REPROBE_ANNOTATION]
    assert value.isdigit()
    assert f"{REPROBE_ANNOTATION}={value}" in text
    assert _plugin(fleet, "reprobe", "plugin-no-such-node")[0] == 1


REQUESTER_NS, REQUESTER = "default", "plugin-requester"


@pytest.fixture
def requester_kubeconfig(fleet: ControlPlane, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig of a ServiceAccount that may annotate NodeAcceptances and nothing
    more (the chart's aggregated edit role grants that), with a TokenRequest token."""
    rbac = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": REQUESTER, "namespace": REQUESTER_NS}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": REQUESTER},
         "rules": [{"apiGroups": ["gpuaccept.io"], "resources": ["nodeacceptances"],
                    "verbs": ["get", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": REQUESTER},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": REQUESTER},
         "subjects": [{"kind": "ServiceAccount", "name": REQUESTER,
                       "namespace": REQUESTER_NS}]},
    ]  # fmt: skip
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": rbac})
    fleet.kubectl("apply", "-f", "-", input=body)
    token = fleet.service_account_token(REQUESTER_NS, REQUESTER)
    yield write_token_kubeconfig(
        tmp_path / "requester.kubeconfig",
        server=fleet.server,
        ca_file=fleet.ca_file,
        token=token,
        user=REQUESTER,
    )
    fleet.kubectl("delete", "--ignore-not-found", "-f", "-", input=body)


def test_release_records_who_asks_as_the_api_server_says(
    fleet: ControlPlane, requester_kubeconfig: Path
) -> None:
    out = io.StringIO()
    args = [
        "--kubeconfig",
        str(requester_kubeconfig),
        "release",
        BAD,
        "--reason",
        "riser",
        "--wait",
        "0",
    ]
    assert plugin_main(args, out=out) == 0
    na = json.loads(fleet.kubectl("get", "nodeacceptance", BAD, "-o", "json").stdout)
    annotations = na["metadata"]["annotations"]
    who = f"system:serviceaccount:{REQUESTER_NS}:{REQUESTER}"
    assert annotations[RELEASE_BY_ANNOTATION] == who  # the token's identity, not a name given
    at = datetime.strptime(annotations[RELEASE_AT_ANNOTATION], "%Y-%m-%dT%H:%M:%SZ")
    assert abs(at.replace(tzinfo=UTC) - datetime.now(UTC)) < timedelta(minutes=5)
    assert annotations[RELEASE_REASON_ANNOTATION] == "riser"
    assert f"release asked for by {who}" in out.getvalue()
    assert na["status"]["phase"] == "Quarantined"  # the operator applies it (not running here)
    # nothing to release on an accepted node; no NodeAcceptance, no release
    assert _plugin(fleet, "release", GOOD, "--wait", "0")[0] == 1
    assert _plugin(fleet, "release", "plugin-no-such-node", "--wait", "0")[0] == 1


def test_explain_shows_the_release_record(fleet: ControlPlane) -> None:
    record = {
        "by": "alice@example.com", "requestedAt": "2026-12-02T10:00:00Z", "reason": "riser",
        "releasedTime": "2026-12-02T10:00:01Z", "fromPhase": "Quarantined",
        "fromReason": "PcieLinkFailed",
    }  # fmt: skip
    released = {"status": {"phase": "Released", "reason": "Released", "release": record}}
    fleet.kubectl(
        "patch", "nodeacceptance", BAD, "--subresource=status", "--type=merge",
        "-p", json.dumps(released),
    )  # fmt: skip
    code, text = _plugin(fleet, "explain", BAD)
    assert code == 0
    assert (
        "released by alice@example.com at 2026-12-02T10:00:01Z (asked at 2026-12-02T10:00:00Z), "
        "was Quarantined (PcieLinkFailed): riser"
    ) in " ".join(text.split())


def test_what_if_reports_the_changes_and_writes_nothing(
    fleet: ControlPlane, tmp_path: Path
) -> None:
    probe = json.loads(json.dumps(DEFAULT_PROBE))
    probe["ncclAllreduce"]["minBusbwGBpsByModel"] = {"h100-sxm": 500}  # the healthy 465 fails
    candidate = {
        "apiVersion": API,
        "kind": "NodeAcceptancePolicy",
        "metadata": {"name": POLICY},
        "spec": {"nodeSelector": {"example.com/plugin-test": "true"}, "probe": probe,
                 "maxQuarantined": 1},
    }  # fmt: skip
    path = tmp_path / "candidate.yaml"
    path.write_text(yaml.safe_dump(candidate))
    before = _versions(fleet)
    code, text = _plugin(fleet, "what-if", str(path))
    assert code == 0
    lines = text.splitlines()
    assert lines[0] == f"2 node(s) of policy {POLICY} judged again; nothing written"
    assert any(
        line.startswith(f"  {GOOD}: Accept -> Quarantine NcclAllreduceFailed") for line in lines
    )
    assert not any(line.startswith(f"  {BAD}:") for line in lines)  # already quarantined
    assert lines[-1] == (
        "would quarantine 2 of 2 node(s); limit 1 (maxQuarantined 1): "
        "OVER the limit, the breaker would hold the rest"
    )
    assert _versions(fleet) == before
