"""The compact report: size bound, JSON round trip, condensing when it would not fit."""

from probe_scenarios import COLLAPSE_64, H200_16, HEALTHY, WORST_16, default_policy, probe

from gpuaccept.checks.registry import BY_NAME, CHECKS
from gpuaccept.checks.verdict import UNSHOWN_PASS, evaluate
from gpuaccept.contracts.api import TERMINATION_MESSAGE_MAX_BYTES
from gpuaccept.contracts.report import (
    CheckResult,
    CheckStatus,
    ProbeReport,
    decode_termination_message,
)
from gpuaccept.probe.compact import fit_report, termination_message

LONG_NODE = "gpu-node-" + "x" * 244  # 253 characters, the longest node name


def test_16_gpu_healthy_report_fits_condensed_and_rejudgeable() -> None:
    """With every registered check, a healthy 16-GPU report no longer fits as is:
    it fits condensed, every result keeping its (condensed) observed value, so the
    operator re-judges it to the same verdict."""
    report = probe(H200_16, node_name=LONG_NODE)
    assert report.summary.gpu_count == 16
    fitted = decode_termination_message(termination_message(report))
    assert all(r.observed is not None for r in fitted.results)
    policy = default_policy()
    assert evaluate(report, policy).accepted
    assert evaluate(fitted, policy).accepted


def test_16_gpu_worst_case_fits_and_keeps_every_reason() -> None:
    """Everything failing on 16 GPUs: the report fits and every check keeps its
    failing verdict and reason. (Re-judgeability is guaranteed on 8 GPUs, see
    test_report_size_every_check_failing.py; here the largest observed values may
    be dropped, and those results keep the probe's own `fail`.)"""
    report = probe(WORST_16, node_name=LONG_NODE)
    assert report.summary.gpu_count == 16
    assert all(r.status is CheckStatus.FAIL for r in report.results)
    message = termination_message(report)
    assert len(message.encode()) <= TERMINATION_MESSAGE_MAX_BYTES
    decoded = decode_termination_message(message)
    policy = default_policy()
    full_reasons = [(r.check, r.reason) for r in evaluate(report, policy).reasons]
    compact_reasons = [(r.check, r.reason) for r in evaluate(decoded, policy).reasons]
    assert compact_reasons == full_reasons
    assert len(full_reasons) == len(CHECKS)


def test_json_round_trip() -> None:
    report = probe(HEALTHY)
    message = termination_message(report)
    assert decode_termination_message(message) == fit_report(report)
    full = report.model_dump_json(by_alias=True, exclude_none=True, indent=2)
    assert ProbeReport.model_validate_json(full) == report
    assert '"bootID"' in message
    assert '"durationS"' in message
    assert " " not in message.split('"results"')[0].replace("NVIDIA H100 80GB HBM3", "")


def test_64_gpus_are_condensed_to_fit() -> None:
    report = probe(COLLAPSE_64, node_name=LONG_NODE)
    assert report.compact_size() > TERMINATION_MESSAGE_MAX_BYTES
    fitted = fit_report(report)
    assert fitted.compact_size() <= TERMINATION_MESSAGE_MAX_BYTES
    pcie = fitted.result("pcie_link")
    assert pcie is not None
    assert isinstance(pcie.observed, dict)
    assert "gen" not in pcie.observed  # per-GPU columns collapsed
    assert pcie.observed["belowMaxWidth"] == "17"
    decoded = decode_termination_message(termination_message(report))
    policy = default_policy()
    full, compact = evaluate(report, policy), evaluate(decoded, policy)
    assert (
        [r.reason for r in compact.reasons]
        == [r.reason for r in full.reasons]
        == ["PcieLinkFailed"]
    )
    assert [w.reason for w in compact.warnings] == ["ThrottleReasonsWarning"]
    assert compact.figures.pcie == full.figures.pcie == "Gen5x8"


def test_last_resort_drops_observed_but_stays_valid_and_never_passes_on_the_probes_word() -> None:
    report = probe(HEALTHY)
    # pathological: every message at the contract's maximum and extra results up to 32
    padded = [r.model_copy(update={"message": "m" * 240}) for r in report.results]
    padded += [
        CheckResult(check=f"extra_{i}", status=CheckStatus.PASS, message="m" * 240, duration_s=1)
        for i in range(32 - len(padded))
    ]
    big = report.model_copy(update={"results": padded, "node_name": LONG_NODE})
    assert big.compact_size() > 2 * TERMINATION_MESSAGE_MAX_BYTES
    message = termination_message(big)
    assert len(message.encode()) <= TERMINATION_MESSAGE_MAX_BYTES
    decoded = decode_termination_message(message)
    assert len(decoded.results) == 32
    # the passes that lost their observed value are the probe's word alone: errors, so
    # the verdict does not accept on them (docs/report-format.md, results without observed)
    bare = {r.check for r in decoded.results if r.observed is None and r.check in BY_NAME}
    assert bare
    verdict = evaluate(decoded, default_policy())
    assert not verdict.accepted
    assert {(r.check, r.reason, r.message) for r in verdict.reasons} == {
        (check, "ProbeError", UNSHOWN_PASS) for check in bare
    }


def test_fit_report_never_truncates_json() -> None:
    report = probe(WORST_16, node_name=LONG_NODE)
    for limit in (4096, 3000, 2500):
        fitted = fit_report(report, limit=limit)
        ProbeReport.model_validate_json(fitted.to_compact_json())  # always well-formed
