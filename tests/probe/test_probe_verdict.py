"""``evaluate(report, policy)``: re-judging and folding, edge cases."""

import subprocess
import sys
from datetime import UTC, datetime

import pytest
from probe_scenarios import HEALTHY, default_policy, fault, probe
from pydantic import JsonValue, ValidationError
from pydantic.alias_generators import to_camel

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS
from gpuaccept.checks.verdict import UNSHOWN_PASS, evaluate
from gpuaccept.contracts.nodeacceptance import KeyFigures
from gpuaccept.contracts.report import CheckResult, CheckStatus, HardwareSummary, ProbeReport

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def report(*results: CheckResult, model: str | None = "NVIDIA H100 80GB HBM3") -> ProbeReport:
    return ProbeReport(
        node_name="n1",
        boot_id="b",
        probe_version="0.1.0",
        started_at=NOW,
        finished_at=NOW,
        hardware="simulated",
        summary=HardwareSummary(gpu_model=model, gpu_count=8, driver_version="550.54.15"),
        results=list(results),
    )


def result(
    check: str, status: CheckStatus, observed: JsonValue = None, msg: str = ""
) -> CheckResult:
    return CheckResult(check=check, status=status, observed=observed, message=msg, duration_s=0.1)


def only(*checks: str, **overrides: dict[str, object]) -> ProbePolicy:
    """A policy with only ``checks`` enabled."""
    data: dict[str, dict[str, object]] = {
        to_camel(c.name): {"enabled": c.name in checks} for c in CHECKS
    }
    for name, values in overrides.items():
        data[name] = {**data[name], **values}
    return ProbePolicy.model_validate(data)


COUNT_OK: JsonValue = {"visible": 8, "allocatable": 8, "capacity": 8}
NCCL_OBS: JsonValue = {"backend": "nccl", "source": "measured", "ranks": 8, "busbwGBps": 300.0}


def test_healthy_report_is_accepted_with_figures() -> None:
    report = probe(HEALTHY)
    v = evaluate(report, default_policy())
    assert v.accepted
    assert v.accepted
    assert v.reasons == ()
    assert v.warnings == ()
    assert v.reason is None
    assert v.message == "all checks passed"
    assert [c.status for c in v.checks] == [CheckStatus.PASS] * len(CHECKS)
    assert v.figures == KeyFigures.model_validate(
        {
            "gpuModel": "NVIDIA H100 80GB HBM3",
            "gpuCount": 8,
            "minPcieGeneration": 5,
            "minPcieWidth": 16,
            "pcie": "Gen5x16",
            "busbwGBps": 465.3,  # the profile's 468 plateau at the 8 GiB message
            "driverVersion": "550.54.15",
            "probeWallS": report.wall_s,  # the budget's durations (a simulated node)
        }
    )
    assert report.wall_s is not None


def test_fault_reason_names_the_check() -> None:
    v = evaluate(probe(fault("pcie-x8")), default_policy())
    assert not v.accepted
    assert [(r.check, r.reason) for r in v.reasons] == [("pcie_link", "PcieLinkFailed")]
    assert v.reason == "PcieLinkFailed"
    assert v.figures.figure("pcie") == "Gen5x8"
    assert v.message.startswith("pcie_link: GPU 3 below max width")


def test_rejudge_after_threshold_change_without_reprobe() -> None:
    slow = probe(fault("nccl-slow"))  # busbw 212 plateau, 210.8 at 8 GiB
    assert not evaluate(slow, default_policy()).accepted
    lowered = default_policy().model_copy(
        update={
            "nccl_allreduce": default_policy().nccl_allreduce.model_copy(
                update={"min_busbw_gbps_by_model": {"h100-sxm": 200.0}}
            )
        }
    )
    v = evaluate(slow, lowered)
    assert v.accepted
    nccl = next(r for r in v.results if r.check == "nccl_allreduce")
    assert nccl.expected == {"minBusbwGBps": 200.0}
    assert "210.8 GB/s over 8 GPUs (from the simulated profile) >= 200" in nccl.message
    # and the other way: a stricter policy quarantines a node that passed
    healthy = probe(HEALTHY)
    strict = ProbePolicy.model_validate({"ncclAllreduce": {"minBusbwGBps": 500}})
    assert [r.reason for r in evaluate(healthy, strict).reasons] == ["NcclAllreduceFailed"]


def test_disabled_checks_are_ignored_even_when_failed() -> None:
    r = report(result("gpu_count", CheckStatus.PASS, COUNT_OK),
               result("nccl_allreduce", CheckStatus.FAIL, NCCL_OBS))  # fmt: skip
    p = only("gpu_count", ncclAllreduce={"minBusbwGBps": 400})
    v = evaluate(r, p)
    assert v.accepted
    assert [c.check for c in v.checks] == ["gpu_count"]


def test_missing_required_check_is_probe_error() -> None:
    v = evaluate(
        report(result("gpu_count", CheckStatus.PASS, COUNT_OK)), only("gpu_count", "cpu_governor")
    )
    assert not v.accepted
    assert [(r.check, r.reason) for r in v.reasons] == [("cpu_governor", "ProbeError")]
    assert v.checks[1].status is CheckStatus.ERROR


def test_missing_optional_check_only_warns() -> None:
    p = only("gpu_count", "cpu_governor", cpuGovernor={"required": False})
    v = evaluate(report(result("gpu_count", CheckStatus.PASS, COUNT_OK)), p)
    assert v.accepted
    assert [(w.check, w.reason) for w in v.warnings] == [("cpu_governor", "ProbeError")]


def test_error_and_skip_of_required_checks() -> None:
    r = report(
        result("gpu_count", CheckStatus.PASS, COUNT_OK),
        result("cpu_governor", CheckStatus.SKIP, msg="no cpufreq"),
        result("pcie_link", CheckStatus.ERROR, msg="boom"),
    )
    v = evaluate(r, only("gpu_count", "cpu_governor", "pcie_link"))
    assert [(x.check, x.reason, x.message) for x in v.reasons] == [
        ("cpu_governor", "CheckSkipped", "no cpufreq"),
        ("pcie_link", "ProbeError", "boom"),
    ]


def test_skip_of_optional_check_is_accepted() -> None:
    r = report(result("gpu_count", CheckStatus.PASS, COUNT_OK),
               result("cpu_governor", CheckStatus.SKIP, msg="no cpufreq"))  # fmt: skip
    v = evaluate(r, only("gpu_count", "cpu_governor", cpuGovernor={"required": False}))
    assert v.accepted
    assert [w.reason for w in v.warnings] == ["CheckSkipped"]


def test_fail_of_optional_check_still_quarantines() -> None:
    # "required" is about checks that cannot produce a result; a measured failure always counts
    r = report(result("nccl_allreduce", CheckStatus.PASS, NCCL_OBS))
    p = only("nccl_allreduce", ncclAllreduce={"required": False, "minBusbwGBps": 400})
    assert evaluate(r, p).reasons[0].reason == "NcclAllreduceFailed"


def test_warn_is_accepted_with_warnings() -> None:
    observed: JsonValue = {"samples": 10, "reasons": {"sw_thermal_slowdown": [0]}}
    v = evaluate(
        report(result("throttle_reasons", CheckStatus.PASS, observed)), only("throttle_reasons")
    )
    assert v.accepted
    assert [(w.check, w.reason) for w in v.warnings] == [
        ("throttle_reasons", "ThrottleReasonsWarning")
    ]
    assert v.checks[0].status is CheckStatus.WARN
    assert v.message == "throttle_reasons: sw_thermal_slowdown on GPU 0"


def test_stored_status_is_never_trusted_when_observed_exists() -> None:
    # the stored "pass" is re-judged to fail against the same policy
    bad_count: JsonValue = {"visible": 7, "allocatable": 7, "capacity": 8}
    v = evaluate(report(result("gpu_count", CheckStatus.PASS, bad_count)), only("gpu_count"))
    assert v.reasons[0].reason == "GpuCountFailed"


def test_malformed_observed_is_probe_error() -> None:
    bad: list[JsonValue] = [{"visible": "eight"}, [1, 2, 3], {"nothing": True}]
    for observed in bad:
        v = evaluate(report(result("gpu_count", CheckStatus.PASS, observed)), only("gpu_count"))
        assert [r.reason for r in v.reasons] == ["ProbeError"], observed
        assert v.results[0].status is CheckStatus.ERROR
        assert v.results[0].message.startswith("cannot judge observed value")


def test_result_without_observed_keeps_a_failure_but_not_a_pass() -> None:
    # what the compact report does as a last resort to fit 4096 bytes: a failure stands
    # (it only takes acceptance away), a pass is the probe's word alone and is an error
    v = evaluate(report(result("gpu_count", CheckStatus.PASS)), only("gpu_count"))
    assert not v.accepted
    assert [(r.reason, r.message) for r in v.reasons] == [("ProbeError", UNSHOWN_PASS)]
    v = evaluate(report(result("gpu_count", CheckStatus.WARN)), only("gpu_count"))
    assert not v.accepted
    v = evaluate(report(result("gpu_count", CheckStatus.FAIL, msg="7 of 8")), only("gpu_count"))
    assert [r.reason for r in v.reasons] == ["GpuCountFailed"]


def test_unknown_checks_in_the_report_are_ignored() -> None:
    # e.g. a newer probe's check that this evaluator does not know
    r = report(
        result("gpu_count", CheckStatus.PASS, COUNT_OK), result("future_check", CheckStatus.FAIL)
    )
    assert evaluate(r, only("gpu_count")).accepted


def test_an_error_the_probe_recorded_is_never_accepted() -> None:
    # a probe that crashed after some checks ran: the enabled ones passed
    r = report(
        result("gpu_count", CheckStatus.PASS, COUNT_OK),
        result("probe", CheckStatus.ERROR, msg="probe failed: RuntimeError: boom"),
    )
    v = evaluate(r, only("gpu_count"))
    assert not v.accepted
    assert [(x.check, x.reason, x.message) for x in v.reasons] == [
        ("probe", "ProbeError", "probe failed: RuntimeError: boom")
    ]


def test_a_report_without_gpus_is_never_accepted() -> None:
    # every enabled check passed, but the probe saw no GPU (e.g. no GPU runtime in the pod)
    r = report(result("cpu_governor", CheckStatus.PASS, {"cpus": 2, "count": {"performance": 2}}))
    r = r.model_copy(update={"summary": r.summary.model_copy(update={"gpu_count": 0})})
    v = evaluate(r, only("cpu_governor"))
    assert [(x.check, x.reason) for x in v.reasons] == [("probe", "ProbeError")]
    assert v.reasons[0].message == "no GPU seen by the probe"


def test_a_policy_with_every_check_disabled_is_refused() -> None:
    with pytest.raises(ValidationError, match="every check is disabled"):
        only()


def test_no_enabled_check_is_never_accepted() -> None:
    # the model refuses such a policy; evaluate does not rely on that
    policy = only("gpu_count")
    policy = policy.model_copy(
        update={"gpu_count": policy.gpu_count.model_copy(update={"enabled": False})}
    )
    r = report(result("gpu_count", CheckStatus.PASS, COUNT_OK))
    v = evaluate(r, policy)
    assert [(x.check, x.message) for x in v.reasons] == [("probe", "the policy enables no check")]


def test_failure_report_is_never_accepted() -> None:
    # the report the CLI writes when it cannot probe at all: one error, no checks
    v = evaluate(report(result("probe", CheckStatus.ERROR, msg="bad input")), ProbePolicy())
    assert not v.accepted
    assert {r.reason for r in v.reasons} == {"ProbeError"}
    # each of the six checks has no result; the probe's own error is named too
    assert [r.check for r in v.reasons if r.message == "no result in the report"] == [
        c.name for c in CHECKS
    ]
    assert ("probe", "bad input") in [(r.check, r.message) for r in v.reasons]


def test_evaluate_is_deterministic_and_leaves_the_report_alone() -> None:
    r = probe(fault("hw-slowdown"))
    before = r.model_dump()
    assert evaluate(r, default_policy()) == evaluate(r, default_policy())
    assert r.model_dump() == before


def test_verdict_imports_neither_torch_nor_nvml() -> None:
    code = (
        "import sys; from gpuaccept.checks.verdict import evaluate, Verdict; "
        "import gpuaccept.checks.registry, gpuaccept.probe.compact; "
        "print(','.join(m for m in ('torch', 'pynvml') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_key_figures_tolerate_missing_results() -> None:
    v = evaluate(report(model=None), ProbePolicy())
    assert v.figures == KeyFigures(gpu_count=8, driver_version="550.54.15")


def test_implausible_pcie_figures_are_left_out_not_raised() -> None:
    # observed values outside what KeyFigures allows: the check judges them, the
    # figures omit them, and evaluate returns a verdict
    obs: JsonValue = {
        "gen": [-1], "width": [16], "maxGen": [5], "maxWidth": [16],
        "h2dGBps": [50.0], "d2hGBps": [50.0],
    }  # fmt: skip
    v = evaluate(report(result("pcie_link", CheckStatus.PASS, obs)), only("pcie_link"))
    assert v.figures is not None
    assert (v.figures.figure("minPcieGeneration"), v.figures.figure("pcie")) == (None, None)
