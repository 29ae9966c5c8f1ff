"""``kubectl gpuaccept explain`` and ``what-if``, the pure halves: stored
NodeAcceptances (as the API server returns them) in, lines out."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.contracts.reverify import GpuFence, ReverifyStatus
from gpuaccept.operator.plugin.explain import explain_lines
from gpuaccept.operator.plugin.kubectl import PluginError, load_candidate, parser
from gpuaccept.operator.plugin.whatif import ACCEPT, QUARANTINE, UNKNOWN, what_if, what_if_lines
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.measure.context import NodeGpuCounts
from gpuaccept.probe.runner import RunSetup, run_probe

ROOT = Path(__file__).resolve().parents[3]
PROFILES = ROOT / "profiles"
DEFAULT_SPEC = NodeAcceptancePolicySpec.model_validate(
    {"probe": yaml.safe_load((ROOT / "policies" / "default-h100-h200.yaml").read_text())}
)


def report_of(profile: Path, node: str) -> ProbeReport:
    loaded = load_profile(profile)
    hardware = SimulatedBackend(loaded)
    try:
        counts = NodeGpuCounts(
            allocatable=loaded.node.allocatable,
            capacity=loaded.node.gpu_capacity,
            labelled=loaded.node.gfd_gpu_count,
        )
        run = RunSetup(node_name=node, context=ProbeContext(node_gpus=counts))
        return run_probe(hardware, DEFAULT_SPEC.probe, run)
    finally:
        hardware.close()


def acceptance(node: str, report: ProbeReport | None, *, policy: str = "default") -> dict[str, Any]:
    """A NodeAcceptance as stored: the verdict the default policy gave the report."""
    status: dict[str, Any] = {"phase": "Pending", "policy": policy, "policyGeneration": 1}
    if report is not None:
        verdict = evaluate(report, DEFAULT_SPEC.probe)
        status |= {
            "phase": "Accepted" if verdict.accepted else "Quarantined",
            "reason": verdict.reason,
            "message": verdict.message,
            "reasons": [r.model_dump(mode="json", by_alias=True) for r in verdict.reasons],
            "report": report.model_dump(mode="json", by_alias=True, exclude_none=True),
        }
    return {"metadata": {"name": node}, "status": status}


@pytest.fixture(scope="module")
def healthy() -> ProbeReport:
    return report_of(PROFILES / "h100-sxm-8gpu-healthy.yaml", "gpu-good")


@pytest.fixture(scope="module")
def pcie_x8() -> ProbeReport:
    return report_of(PROFILES / "faults" / "pcie-x8.yaml", "gpu-x8")


def stricter_spec(**extra: Any) -> dict[str, Any]:
    """The default policy with an all-reduce minimum the healthy profile's 465 GB/s misses."""
    spec: dict[str, Any] = DEFAULT_SPEC.model_dump(mode="json", by_alias=True)
    spec["probe"]["ncclAllreduce"]["minBusbwGBpsByModel"] = {"h100-sxm": 500}
    return spec | extra


def policy_object(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    default = DEFAULT_SPEC.model_dump(mode="json", by_alias=True)
    return {"metadata": {"name": "default"}, "spec": spec or default}


def test_explain_shows_the_verdict_every_reason_and_the_probes_table(pcie_x8: ProbeReport) -> None:
    lines = explain_lines(acceptance("gpu-x8", pcie_x8), policy_object())
    text = "\n".join(lines)
    assert lines[0] == "gpu-x8: Quarantined (PcieLinkFailed)"
    assert "policy default (judged at generation 1)" in lines
    assert any(
        line.startswith("  PcieLinkFailed (pcie_link): GPU 3 below max width") for line in lines
    )
    # the probe's own table, judged under the policy: one row per check, its thresholds below
    assert any(line.startswith("pcie_link             fail ") for line in lines)
    assert '"minWidth": 16' in text
    assert lines[-1] == "QUARANTINED: PcieLinkFailed (pcie_link)"
    assert all(len(line) <= 100 for line in lines)


def test_explain_judges_under_the_policy_as_it_is_now(healthy: ProbeReport) -> None:
    lines = explain_lines(acceptance("gpu-good", healthy), policy_object(stricter_spec()))
    assert lines[0] == "gpu-good: Accepted"
    assert lines[-1] == "QUARANTINED: NcclAllreduceFailed (nccl_allreduce)"


def test_explain_without_the_policy_shows_the_stored_results(healthy: ProbeReport) -> None:
    lines = explain_lines(acceptance("gpu-good", healthy), None)
    assert "policy default not found: the stored results are shown as judged" in lines
    assert not any(line.startswith(("ACCEPTED", "QUARANTINED")) for line in lines)


def test_explain_a_node_not_probed_yet() -> None:
    lines = explain_lines(acceptance("gpu-new", None), policy_object())
    assert lines[0] == "gpu-new: Pending"
    assert lines[-1] == "no probe report stored yet (the node has not been probed)"


def test_what_if_a_stricter_policy_lists_what_changes_against_the_limit(
    healthy: ProbeReport, pcie_x8: ProbeReport
) -> None:
    nodes = [
        acceptance("gpu-good", healthy),
        acceptance("gpu-x8", pcie_x8),
        acceptance("gpu-new", None),
        acceptance("other", healthy, policy="another"),
    ]
    stricter = NodeAcceptancePolicySpec.model_validate(stricter_spec(maxQuarantined=1))
    result = what_if(nodes, stricter, policy_name="default")
    by_node = {n.node: n for n in result.nodes}
    assert set(by_node) == {"gpu-good", "gpu-x8", "gpu-new"}  # only the policy's nodes
    assert (by_node["gpu-good"].now, by_node["gpu-good"].then) == (ACCEPT, QUARANTINE)
    assert by_node["gpu-good"].reason == "NcclAllreduceFailed"
    assert by_node["gpu-new"].then == UNKNOWN
    assert [n.node for n in result.changed] == ["gpu-good"]
    assert (result.would_quarantine, result.limit) == (2, 1)
    lines = what_if_lines(result, policy_name="default")
    assert lines[0] == "3 node(s) of policy default judged again; nothing written"
    assert lines[2].startswith("  gpu-good: Accept -> Quarantine NcclAllreduceFailed: ")
    assert "  gpu-new: not judged (no stored report: a probe is needed)" in lines
    assert lines[-1] == (
        "would quarantine 2 of 3 node(s); limit 1 (maxQuarantined 1): "
        "OVER the limit, the breaker would hold the rest"
    )


def test_what_if_the_same_policy_changes_nothing(
    healthy: ProbeReport, pcie_x8: ProbeReport
) -> None:
    nodes = [acceptance("gpu-good", healthy), acceptance("gpu-x8", pcie_x8)]
    result = what_if(nodes, DEFAULT_SPEC, policy_name=None)
    assert result.changed == ()
    lines = what_if_lines(result, policy_name=None)
    assert lines[1] == "no verdict would change"
    assert lines[-1].endswith("within the limit")


def test_a_held_node_counts_as_its_held_action(pcie_x8: ProbeReport) -> None:
    held = acceptance("gpu-x8", pcie_x8)
    held["status"] |= {"phase": "Held", "reason": "DryRun", "heldAction": "Quarantine"}
    (node,) = what_if([held], DEFAULT_SPEC, policy_name=None).nodes
    assert (node.now, node.then, node.changes) == (QUARANTINE, QUARANTINE, False)


def test_a_candidate_file_names_its_policy_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    good = tmp_path / "p.yaml"
    good.write_text(
        "apiVersion: gpuaccept.io/v1alpha1\nkind: NodeAcceptancePolicy\n"
        "metadata: {name: default}\nspec: {maxQuarantined: 3}\n"
    )
    name, spec = load_candidate(good)
    assert (name, spec.max_quarantined) == ("default", 3)
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: NodeAcceptancePolicy\nspec: {maxQuarantined: many}\n")
    with pytest.raises(PluginError) as caught:
        load_candidate(bad)
    assert caught.value.code == 2
    assert str(caught.value).startswith(f"{bad}: spec.maxQuarantined")


def test_the_plugins_commands() -> None:
    p = parser()
    assert p.parse_args(["explain", "n1"]).node == "n1"
    assert p.parse_args(["reprobe", "n1"]).command == "reprobe"
    assert p.parse_args(["what-if", "f.yaml", "--all"]).all
    text = p.format_help()
    for command in ("explain", "reprobe", "what-if"):
        assert command in text


def test_the_console_script_is_declared() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'kubectl-gpuaccept = "gpuaccept.operator.plugin.kubectl:main"' in text


def test_explain_shows_why_a_node_was_quarantined_in_service(healthy: ProbeReport) -> None:
    """The in-service ledger as stored: the verdict with its evidence window, the
    suspects, the latest events with their GPU."""
    stored = acceptance("gpu-good", healthy)
    stored["status"] |= {
        "phase": "Quarantined",
        "reason": "XidFatal",
        "inService": {
            "bootID": "boot-1",
            "events": [
                {"what": "Xid 13", "kind": "application", "time": "2026-12-01T12:00:00Z",
                 "gpu": "GPU-5", "xid": 13},
                {"what": "Xid 79", "kind": "fatal", "time": "2026-12-01T12:00:40Z",
                 "gpu": "GPU-3", "xid": 79},
            ],
            "suspects": [{"gpu": "GPU-5", "xid": 13, "count": 2,
                          "since": "2026-12-01T12:00:00Z"}],
            "verdict": {"reason": "XidFatal", "message": "Xid 79 (fatal) on GPU GPU-3",
                        "signature": "XidFatal:79", "windowStart": "2026-12-01T12:00:40Z",
                        "windowEnd": "2026-12-01T12:00:41Z"},
        },
    }  # fmt: skip
    text = "\n".join(explain_lines(stored, policy_object()))
    assert "in service (boot boot-1):" in text
    assert "verdict XidFatal, evidence 2026-12-01T12:00:40Z .. 2026-12-01T12:00:41Z" in text
    assert "suspect: Xid 13 x2 on GPU GPU-5" in text
    assert "2026-12-01T12:00:40Z Xid 79 on GPU GPU-3 (fatal)" in text


def test_explain_shows_a_dra_node_s_pool_and_its_driver_s_taints() -> None:
    ledger = {
        "bootID": "boot-1",
        "draDevices": ["GPU-0", "GPU-1"],
        "driverTaints": [
            {"gpu": "GPU-1", "key": "gpu.nvidia.com/xid", "value": "13", "effect": "None",
             "since": "2026-12-01T12:00:00Z"},
            {"gpu": "GPU-0", "key": "gpu.nvidia.com/unmonitored", "effect": "None",
             "since": "2026-12-01T11:00:00Z"},
        ],
    }  # fmt: skip
    status = {"phase": "Accepted", "policy": "default", "inService": ledger}
    lines = explain_lines({"metadata": {"name": "gpu-1"}, "status": status}, None)
    assert "  held to its DRA pool of 2 GPUs (as accepted)" in lines
    assert (
        "  DRA driver taint gpu.nvidia.com/xid=13 (None) on GPU GPU-1 since 2026-12-01T12:00:00Z"
        in lines
    )
    assert any("gpu.nvidia.com/unmonitored (None) on GPU GPU-0" in line for line in lines)


def test_explain_without_an_in_service_ledger_says_nothing_of_it(healthy: ProbeReport) -> None:
    text = "\n".join(explain_lines(acceptance("gpu-good", healthy), policy_object()))
    assert "in service" not in text


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("DevicePlugin", "device plugin (nvidia.com/gpu)"),
        ("DRA", "through DRA"),
        ("Both", "at once (not probed)"),
    ],
)
def test_explain_says_how_the_node_publishes_its_gpus(mode: str, says: str) -> None:
    status = {"phase": "Pending", "policy": "default", "gpuPublishing": mode}
    lines = explain_lines({"metadata": {"name": "gpu-1"}, "status": status}, None)
    assert any(says in line for line in lines), lines


def test_explain_says_nothing_of_publishing_where_the_status_does_not() -> None:
    lines = explain_lines(acceptance("gpu-new", None), policy_object())
    assert not any("published" in line for line in lines)


def test_explain_names_the_gpus_that_failed_which_checks(pcie_x8: ProbeReport) -> None:
    """status.gpuVerdicts (issue 40): the verdict's per-GPU part, as the core records it."""
    stored = acceptance("gpu-x8", pcie_x8)
    gpus = evaluate(pcie_x8, DEFAULT_SPEC.probe).attribution.gpus
    assert [(g.index, g.checks) for g in gpus] == [(3, ["pcie_link"])]  # the full form
    stored["status"]["gpuVerdicts"] = [
        {"index": 3, "uuid": "GPU-3f1c", "checks": ["pcie_link"], "fenced": False},
        {"index": 6, "checks": ["memory_health", "pcie_link"], "fenced": True},
    ]
    stored["status"]["fenced"] = "1/8"
    lines = explain_lines(stored, policy_object())
    at = lines.index("per-GPU verdicts, fenced 1/8:")
    assert lines[at + 1 : at + 3] == [
        "  GPU 3 (GPU-3f1c): pcie_link (not fenced)",
        "  GPU 6: memory_health, pcie_link (fenced)",
    ]


def test_explain_without_per_gpu_verdicts_says_nothing_of_them(healthy: ProbeReport) -> None:
    lines = explain_lines(acceptance("gpu-good", healthy), policy_object())
    assert not any(line.startswith("per-GPU verdicts") for line in lines)


def test_explain_shows_the_fences_on_record_and_what_the_rate_counts(healthy: ProbeReport) -> None:
    """status.reverify.gpuFences and takenOutTime/takenOutGpus, written as the contract
    writes them: each GPU with its count and last time, and the GPUs the rate counts."""
    at = [datetime(2026, 12, 5, h, tzinfo=UTC) for h in (1, 2, 3)]
    status = NodeAcceptanceStatus(
        reverify=ReverifyStatus(
            gpu_fences=[
                GpuFence(uuid="GPU-aaaa", time=at[0]),
                GpuFence(uuid="GPU-bbbb", time=at[1]),
                GpuFence(uuid="GPU-aaaa", time=at[2]),
            ]
        ),
        taken_out_time=at[2],
        taken_out_gpus=2,
    ).model_dump(mode="json", by_alias=True, exclude_none=True)
    stored = acceptance("gpu-fenced", healthy)
    stored["status"].update(status)
    lines = explain_lines(stored, policy_object(), width=200)
    first = lines.index("fences on record (repeatOffenders counts them per GPU):")
    assert lines[first + 1 : first + 3] == [
        f"  GPU-aaaa: 2 time(s), last at {status['reverify']['gpuFences'][2]['time']}",
        f"  GPU-bbbb: 1 time(s), last at {status['reverify']['gpuFences'][1]['time']}",
    ]
    assert lines[first + 3] == (
        f"last taken out of service at {status['takenOutTime']}: 2 GPU(s) fenced "
        "(the quarantine rate counts it)"
    )
    whole = acceptance("gpu-out", healthy)
    whole["status"]["takenOutTime"] = status["takenOutTime"]
    assert any(
        line.endswith("the whole node (the quarantine rate counts it)")
        for line in explain_lines(whole, policy_object(), width=200)
    )


def test_explain_without_fences_or_take_outs_says_nothing_of_them(healthy: ProbeReport) -> None:
    lines = explain_lines(acceptance("gpu-good", healthy), policy_object())
    assert not any("fences on record" in line or "taken out" in line for line in lines)


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        (None, []),
        ("the API server serves no DeviceTaintRules", [
            "fence rules: not shown (the API server serves no DeviceTaintRules)"]),
        ([], ["fence rules: none"]),
        ([{"metadata": {"name": "r1"},
           "spec": {"deviceSelector": {"pool": "n1", "device": "gpu-5"},
                    "taint": {"effect": "NoSchedule"}}}],
         ["fence rules:", "  r1: n1/gpu-5 effect NoSchedule"]),
        ([{"metadata": {"name": "r2"},
           "spec": {"deviceSelector": {"pool": "n1", "device": "gpu-3"},
                    "taint": {"effect": "None"}},
           "status": {"conditions": [
               {"type": "Other", "status": "True", "message": "not shown"},
               {"type": "EvictionInProgress", "status": "False",
                "message": "1 pod would be evicted"}]}}],
         ["fence rules:", "  r2: n1/gpu-3 effect None",
          "    EvictionInProgress=False: 1 pod would be evicted"]),
    ],
)  # fmt: skip
def test_explain_shows_the_fence_rules_and_their_eviction_feedback(
    healthy: ProbeReport, rules: Any, expected: list[str]
) -> None:
    lines = explain_lines(acceptance("gpu-f", healthy), policy_object(), rules=rules, width=200)
    shown = [line for line in lines if line.startswith(("fence rules", "  r", "    Evic"))]
    assert shown == expected
