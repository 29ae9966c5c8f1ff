"""Termination message validation (pure)."""

from __future__ import annotations

from world import BOOT, make_report

from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core.report_trust import ReportProblem, validate_report


def check(message: str) -> ProbeReport | ReportProblem:
    return validate_report(message, node_name="gpu-1", boot_id=BOOT)


def test_valid() -> None:
    assert isinstance(check(make_report().to_compact_json()), ProbeReport)


def test_problems() -> None:
    cases = {
        "": "InvalidReport",
        "not json": "InvalidReport",
        "x" * 4097: "ReportTooLargeError",
        make_report(node="gpu-2").to_compact_json(): "ReportMismatch",
        make_report(boot_id="b2").to_compact_json(): "ReportMismatch",
        make_report().to_compact_json().replace('"kind":"ProbeReport"', '"kind":"Other"'): (
            "InvalidReport"
        ),
    }
    for message, reason in cases.items():
        result = check(message)
        assert isinstance(result, ReportProblem), message[:40]
        assert result.reason == reason
        assert result.message
