"""The report fuzz run's correctness at a small count (its figures: docs/report-format.md)."""

from bench import fuzz_reports


def test_a_small_fuzz_run_accepts_no_inconsistent_report() -> None:
    tally, accepted = fuzz_reports.fuzz(600, seed=7)
    assert tally["decided"] == 600
    assert accepted == []
    assert tally["ReportMismatch"] > 0


def test_the_fuzz_cli_exits_zero_when_none_is_accepted() -> None:
    assert fuzz_reports.main(["--reports", "50"]) == 0
