"""The generated CRDs against the real kube-apiserver (from ``make cluster-up``).

They apply; the models' defaults and a realistic status are stored and read back
unchanged; schema-invalid policies are refused with a message naming the field;
unknown fields are refused (strict) or pruned; the printer columns show.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.nodeacceptance import (
    CheckSummary,
    Condition,
    ConditionStatus,
    FabricPairRecord,
    FabricStatus,
    KeyFigures,
    NodeAcceptancePolicyStatus,
    NodeAcceptanceStatus,
    Phase,
    PhaseCounts,
    Reason,
)
from gpuaccept.contracts.policy_fields import VersionRange
from gpuaccept.contracts.report import (
    CheckResult,
    CheckStatus,
    HardwareMode,
    HardwareSummary,
    ProbeReport,
)
from gpuaccept.testsupport.chart_rbac import apply_crds
from gpuaccept.testsupport.controlplane import ControlPlane

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
API = "gpuaccept.io/v1alpha1"


@pytest.fixture(scope="module")
def cp(control_plane: ControlPlane) -> ControlPlane:
    apply_crds(control_plane)
    return control_plane


@pytest.fixture
def name(cp: ControlPlane) -> Iterator[str]:
    """A unique object name; every object of that name is deleted afterwards."""
    value = f"crdtest-{uuid.uuid4().hex[:8]}"
    yield value
    for kind in ("nodeacceptancepolicy", "nodeacceptance"):
        cp.kubectl("delete", kind, value, "--ignore-not-found", "--wait=false")


def _apply(cp: ControlPlane, obj: dict[str, Any], *extra: str) -> Any:
    return cp.kubectl("create", "-f", "-", "-o", "json", *extra, input=json.dumps(obj), check=False)


def _policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "NodeAcceptancePolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def _get(cp: ControlPlane, kind: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(cp.kubectl("get", kind, name, "-o", "json").stdout)
    return obj


def test_crds_are_established(cp: ControlPlane) -> None:
    out = cp.kubectl("get", "crd", "-o", "json").stdout
    crds = {c["metadata"]["name"]: c for c in json.loads(out)["items"]}
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        crd_name = yaml.safe_load_all(path.read_text()).__next__()["metadata"]["name"]
        conditions = {c["type"]: c["status"] for c in crds[crd_name]["status"]["conditions"]}
        assert conditions.get("Established") == "True", crd_name
        assert conditions.get("NonStructuralSchema") is None, crd_name


def test_default_policy_is_accepted_and_round_trips(cp: ControlPlane, name: str) -> None:
    # Every default written out; unset optionals are left out, as a user leaves
    # them out (an explicit null for an enum such as infinibandPorts.linkLayer is
    # refused by the API server's enum check, and means the same as leaving it out).
    full = NodeAcceptancePolicySpec().model_dump(mode="json", by_alias=True, exclude_none=True)
    proc = _apply(cp, _policy(name, full))
    assert proc.returncode == 0, proc.stderr
    stored = _get(cp, "nodeacceptancepolicy", name)
    assert NodeAcceptancePolicySpec.model_validate(stored["spec"]) == NodeAcceptancePolicySpec()


def test_empty_and_typical_policies_are_accepted(cp: ControlPlane, name: str) -> None:
    spec = {
        "nodeSelector": {"nvidia.com/gpu.present": "true", "pool": "h100"},
        "maxQuarantined": 3,
        "dryRun": True,
        "probe": {"ncclAllreduce": {"minBusbwGBpsByModel": {"NVIDIA H100 80GB HBM3": 350.5}}},
        "quarantine": {"taintEffect": "NoExecute", "labels": {"example.com/bad": "gpu"}},
    }
    assert _apply(cp, _policy(name, spec)).returncode == 0
    stored = _get(cp, "nodeacceptancepolicy", name)
    # The spec's switches are defaulted by the API server (printer columns show them).
    assert stored["spec"] == {**spec, "paused": False, "includeControlPlane": False}
    NodeAcceptancePolicySpec.model_validate(stored["spec"])
    cp.kubectl("delete", "nodeacceptancepolicy", name)
    assert _apply(cp, _policy(name, {})).returncode == 0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"maxQuarantined": "abc"}, "spec.maxQuarantined"),
        ({"maxQuarantined": "101%"}, "spec.maxQuarantined"),
        ({"maxQuarantined": -2}, "spec.maxQuarantined"),
        ({"dryRun": "maybe"}, "spec.dryRun"),
        ({"quarantine": {"taintEffect": "Sometimes"}}, "spec.quarantine.taintEffect"),
        ({"reprobe": {"onPolicyChange": "Never"}}, "spec.reprobe.onPolicyChange"),
        ({"probeRun": {"timeoutSeconds": 1}}, "spec.probeRun.timeoutSeconds"),
        ({"probe": {"throttleReasons": {"failOn": ["idle"]}}}, "spec.probe.throttleReasons.failOn"),
        ({"nodeSelector": {"pool": "has spaces"}}, "spec.nodeSelector.pool"),
        (
            {"pendingTaintKey": "gpuaccept.io/quarantined"},
            "pendingTaintKey and quarantine.taintKey",
        ),
        ({"dryrun": True}, 'unknown field "spec.dryrun"'),
        ({"nodeSelector": {}}, "spec.nodeSelector"),  # would govern every node
        ({"quarantine": {"taintKey": "gpuaccept.io/" + "q" * 64}}, "spec.quarantine.taintKey"),
        (
            {"pendingTaintKey": "node.kubernetes.io/unschedulable"},
            "pendingTaintKey: keys under kubernetes.io",
        ),
        ({"quarantine": {"taintKey": "nvidia.com/gpu"}}, "quarantine.taintKey: keys under"),
        (
            {"quarantine": {"labels": {"example.com/ok": "x", "kubernetes.io/hostname": "q"}}},
            "quarantine.labels: keys under",
        ),
        # CEL rules mirroring the models' validators (issue 16 item 3)
        (
            {"probe": {"driverLibraries": {"driverVersions": {"min": "560", "max": "550.54"}}}},
            "spec.probe.driverLibraries.driverVersions: Invalid value: min is above max",
        ),
        (
            {"probe": {"ncclAllreduce": {"minBusbwGBpsByModel": {"NVIDIA H100": -1}}}},
            "spec.probe.ncclAllreduce.minBusbwGBpsByModel.NVIDIA H100",
        ),
        ({"nodeSelector": {"bad key!": "x"}}, "every key must be a valid label key"),
        ({"nodeSelector": {"a/b/c": "x"}}, "every key must be a valid label key"),
        (
            {"quarantine": {"labels": {"gpuaccept.io/" + "x" * 64: "y"}}},
            "every key must be a valid label key",
        ),
    ],
)
def test_invalid_policy_is_refused_naming_the_field(
    cp: ControlPlane, name: str, spec: dict[str, Any], message: str
) -> None:
    proc = _apply(cp, _policy(name, spec), "--validate=strict")
    assert proc.returncode != 0, f"{spec} was accepted"
    assert message in proc.stderr, proc.stderr
    assert cp.kubectl("get", "nodeacceptancepolicy", name, check=False).returncode != 0


@pytest.mark.parametrize(
    ("low", "high"),
    [
        ("550", "550.54.15"),
        ("550.54.15", "550.54.15"),
        ("2.21.5", "2.21"),  # max holds at its own precision
        ("2.21", "2.21.0"),
        ("2.22", "2.21.9"),
        ("560", "550.54"),
        ("12.4.1", "12.4.0"),
        ("9", "10"),  # numeric, not text, comparison
        ("1.2.3.4", "1.2.3.5"),
        ("1.2.3.6", "1.2.3.5"),
    ],
)
def test_version_order_rule_agrees_with_the_model(
    cp: ControlPlane, name: str, low: str, high: str
) -> None:
    try:
        VersionRange(min=low, max=high)
        model_accepts = True
    except ValueError:
        model_accepts = False
    spec = {"probe": {"driverLibraries": {"driverVersions": {"min": low, "max": high}}}}
    proc = _apply(cp, _policy(name, spec))
    assert (proc.returncode == 0) == model_accepts, proc.stderr


def test_switch_defaults_show_in_the_columns(cp: ControlPlane, name: str) -> None:
    assert _apply(cp, _policy(name, {})).returncode == 0
    spec = _get(cp, "nodeacceptancepolicy", name)["spec"]
    assert spec == {"dryRun": False, "paused": False, "includeControlPlane": False}
    header, row = cp.kubectl("get", "nodeacceptancepolicy", name).stdout.splitlines()
    # The count columns are blank (no status yet): read the two by position.
    for column in ("DRYRUN", "PAUSED"):
        start = header.index(column)
        assert row[start:].split()[0] == "false", f"{column}:\n{header}\n{row}"


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("spec.paused", "No new probes and no decisions"),
        ("spec.dryRun", "Default: false"),
        ("spec.probeRun.timeoutSeconds", "Default: 900"),
        ("spec.maxQuarantined", 'Default: "10%"'),
        ("spec.probe.ncclAllreduce.enabled", "Run this check"),
        ("spec.probe.driverLibraries.driverVersions.min", "Lowest version admitted"),
        ("spec.reprobe.onPolicyChange", 'Default: "Rejudge"'),
    ],
)
def test_kubectl_explain_explains(cp: ControlPlane, field: str, expected: str) -> None:
    out = cp.kubectl("explain", f"nodeacceptancepolicy.{field}").stdout
    assert expected in " ".join(out.split()), out


def test_unknown_field_is_pruned_without_strict_validation(cp: ControlPlane, name: str) -> None:
    proc = _apply(cp, _policy(name, {"dryrun": True, "paused": True}), "--validate=ignore")
    assert proc.returncode == 0, proc.stderr
    assert _get(cp, "nodeacceptancepolicy", name)["spec"] == {
        "paused": True,
        "dryRun": False,
        "includeControlPlane": False,
    }


def sample_status(node: str) -> NodeAcceptanceStatus:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    report = ProbeReport(
        node_name=node,
        boot_id="0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
        probe_version="0.1.0",
        started_at=now,
        finished_at=now,
        hardware=HardwareMode.SIMULATED,
        summary=HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8),
        results=[
            CheckResult(
                check="nccl_allreduce",
                status=CheckStatus.FAIL,
                observed={"busbwGBps": 80.5, "bySize": [[1024, 1.5], [2048, 3.25]], "x": None},
                expected={"minBusbwGBps": 350},
                duration_s=12.5,
            ),
            CheckResult(
                check="cpu_governor", status=CheckStatus.PASS, observed="performance", duration_s=0
            ),
        ],
        wall_s=53.1,
    )
    return NodeAcceptanceStatus(
        phase=Phase.QUARANTINED,
        reason="LowBusBandwidth",
        message="all-reduce bus bandwidth 80.5 GB/s < 350 GB/s",
        reasons=[Reason(check="nccl_allreduce", reason="LowBusBandwidth")],
        checks=[
            CheckSummary(check="nccl_allreduce", status=CheckStatus.FAIL),
            CheckSummary(check="cpu_governor", status=CheckStatus.PASS),
        ],
        figures=KeyFigures.model_validate(
            {
                "gpuModel": "NVIDIA H100 80GB HBM3",
                "gpuCount": 8,
                "busbwGBps": 80.5,
                "pcie": "Gen5x16",
                "driverVersion": "550.54.15",
                "probeWallS": 53.1,
            }
        ),
        probe_pod_seconds=55,
        policy="default",
        policy_generation=1,
        attempts=1,
        last_probe_time=now,
        probed_boot_id=report.boot_id,
        applied_taints=["gpuaccept.io/quarantined"],
        report=report,
        fabric=FabricStatus(
            waiting_since=now,
            pairs=[
                FabricPairRecord(
                    pair="0a1b2c3d4e5f",
                    partner="gpu-2",
                    node_rank=1,
                    outcome="failed",
                    busbw_gbps=167.5,
                    finished_at=now,
                    message="fabric busbw 167.5 GB/s < 200",
                ),
                FabricPairRecord(
                    pair="5f4e3d2c1b0a",
                    partner="gpu-3",
                    node_rank=0,
                    outcome="incomplete",
                    finished_at=now,
                ),
            ],
            verdict="FabricAllreduceFailed",
            busbw_gbps=167.5,
            summary="failed 167.5 GB/s",
        ),
        conditions=[
            Condition(
                type="GPUAcceptance",
                status=ConditionStatus.FALSE,
                reason="LowBusBandwidth",
                last_transition_time=now,
                observed_generation=1,
            )
        ],
    )


def _status_patch(cp: ControlPlane, kind: str, name: str, status: dict[str, Any]) -> Any:
    """Replace the status whole with a JSON patch, as the operator does (a merge
    patch would drop the nulls inside free-form ``observed`` values)."""
    ops = [{"op": "add", "path": "/status", "value": status}]
    return cp.kubectl(
        "patch", kind, name, "--subresource=status", "--type=json", "-p", json.dumps(ops),
        check=False,
    )  # fmt: skip


def test_acceptance_status_round_trips_and_columns_show(cp: ControlPlane, name: str) -> None:
    na = {"apiVersion": API, "kind": "NodeAcceptance", "metadata": {"name": name}}
    refused = _apply(cp, na)
    assert refused.returncode != 0
    assert "spec" in refused.stderr
    assert _apply(cp, {**na, "spec": {"nodeName": name}}).returncode == 0

    status = sample_status(name)
    proc = _status_patch(cp, "nodeacceptance", name, status.to_wire())
    assert proc.returncode == 0, proc.stderr
    stored = _get(cp, "nodeacceptance", name)
    assert NodeAcceptanceStatus.model_validate(stored["status"]) == status

    bad = _status_patch(cp, "nodeacceptance", name, {"phase": "Gone"})
    assert bad.returncode != 0
    assert "status.phase" in bad.stderr

    table = cp.kubectl("get", "nodeacceptance", name).stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "PHASE",
        "REASON",
        "HELD",  # the action held back (empty: none), then the verdict's first reason
        "FAILING",
        "FENCED",  # the fenced GPUs (empty: none fenced), then the key figures'
        "BUSBW",  # the key figures' columns, in their declared display order
        "PCIE",
        "FABRIC",
        "DRIVER",
        "PROBED",
        "AGE",
    ]
    row = table[1].split()
    # HELD and FENCED are empty here, so FAILING's value follows REASON's
    assert row[:6] == [name, "Quarantined", "LowBusBandwidth", "LowBusBandwidth", "80.5", "Gen5x16"]
    assert row[6:10] == ["failed", "167.5", "GB/s", "550.54.15"]  # the FABRIC column, then DRIVER
    wide = cp.kubectl("get", "na", name, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-4:] == ["POLICY", "ATTEMPTS", "WALL", "AGE"]
    assert wide[1].split()[-4:-1] == ["default", "1", "53.1"]  # the probe's own wall time


def test_policy_status_and_columns(cp: ControlPlane, name: str) -> None:
    assert _apply(cp, _policy(name, {"dryRun": True})).returncode == 0
    status = NodeAcceptancePolicyStatus(
        counts=PhaseCounts(accepted=7, quarantined=2, pending=1, held=3),
        matched_nodes=13,
        would_accept=2,
        would_quarantine=1,
        conditions=[
            Condition(
                type="Ready",
                status=ConditionStatus.TRUE,
                reason="Reconciling",
                last_transition_time=datetime.now(UTC),
            )
        ],
    )
    proc = _status_patch(cp, "nodeacceptancepolicy", name, status.to_wire())
    assert proc.returncode == 0, proc.stderr
    table = cp.kubectl("get", "nap", name).stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "READY",
        "MATCHED",
        "ACCEPTED",
        "QUARANTINED",
        "PENDING",
        "HELD",
        "WOULD-ACCEPT",
        "WOULD-QUARANTINE",
        "STALLED",
        "BREAKER",
        "DRYRUN",
        "PAUSED",
        "AGE",
    ]
    row = table[1].split()
    assert row[:13] == [
        name,
        "True",
        "13",
        "7",
        "2",
        "1",
        "3",
        "2",
        "1",
        "0",
        "false",
        "true",
        "false",
    ]
    everything = cp.kubectl("get", "gpuaccept").stdout
    assert name in everything


def test_status_is_a_subresource(cp: ControlPlane, name: str) -> None:
    """A spec update does not touch status, and a status patch does not touch spec."""
    assert _apply(cp, _policy(name, {"paused": False})).returncode == 0
    assert _status_patch(cp, "nodeacceptancepolicy", name, {"matchedNodes": 4}).returncode == 0
    cp.kubectl(
        "patch",
        "nodeacceptancepolicy",
        name,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"paused": True}, "status": {"matchedNodes": 99}}),
    )
    obj = _get(cp, "nodeacceptancepolicy", name)
    assert obj["spec"]["paused"] is True
    assert obj["status"]["matchedNodes"] == 4
