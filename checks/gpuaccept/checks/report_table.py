"""A probe report and its verdict as plain text: the probe's final table, and the
same table for a stored report (``kubectl gpuaccept explain``).

Pure: lines of text from plain data, no terminal library, so the probe and the
operator's plugin print one table. Every row is one line at most ``width``
columns wide (a long result ends in ``…``); the full message of every result
that is not a pass follows the table, with the thresholds it was judged
against, so nothing a person needs is cut.
"""

import json
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import JsonValue

from gpuaccept.checks.registry import BY_NAME
from gpuaccept.checks.spec import AnyCheckSpec
from gpuaccept.checks.verdict import Verdict, check_figures
from gpuaccept.contracts.report import CheckResult, CheckStatus, HardwareMode, ProbeReport

TABLE_WIDTH = 100
CHECK_COLUMN = max(len(name) for name in BY_NAME)
STATUS_COLUMN = 6  # "error", "pass", ...
TIME_COLUMN = 7  # "1234.5s"
MIN_RESULT_COLUMN = 20


@dataclass(frozen=True)
class RunTimes:
    """How long the run took: the report's ``wallS`` (measured on real hardware;
    on a simulated node the profile's stated durations) and, when the caller
    knows it, the seconds this process really ran."""

    elapsed_s: float | None = None


def ellipsize(text: str, width: int) -> str:
    """``text`` on one line of at most ``width`` characters."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    return flat[: max(width - 1, 0)] + "…"


def key_figure(check: AnyCheckSpec | None, result: CheckResult) -> str:
    """The figure a person looks at first for this result: the check's printer
    column figures (``PCIe Gen5x16``, ``BusBW 465.3``) where it has them, else its
    message."""
    if check is not None and check.columns and result.observed is not None:
        wire = check_figures(check, result.observed)
        shown = ", ".join(f"{c.name} {wire[c.figure]}" for c in check.columns if c.figure in wire)
        if shown and result.status is CheckStatus.PASS:
            return shown
        if shown:
            return f"{shown}; {result.message}"
    return result.message


def _row(check: str, status: str, result: str, time: str, result_width: int) -> str:
    return (
        f"{check:<{CHECK_COLUMN}}  {status:<{STATUS_COLUMN}}  "
        f"{ellipsize(result, result_width):<{result_width}}  {time:>{TIME_COLUMN}}"
    ).rstrip()


def _header(report: ProbeReport) -> list[str]:
    s = report.summary
    return [
        f"{report.node_name}  {s.gpu_count} x {s.gpu_model or 'no GPU'}  "
        f"driver {s.driver_version or '?'}  CUDA {s.cuda_driver_version or '?'}  "
        f"hardware: {report.hardware.value}",
        f"probe image: CUDA runtime {s.cuda_runtime_version or '?'}, "
        f"NCCL {s.nccl_version or '?'}; probe {report.probe_version}",
    ]


def _expected(value: JsonValue) -> str:
    return json.dumps(value, separators=(", ", ": "), sort_keys=True)


def details(results: Sequence[CheckResult], width: int = TABLE_WIDTH) -> list[str]:
    """Every result that is not a pass: its whole message and its thresholds,
    wrapped at ``width``."""
    out: list[str] = []
    for result in results:
        if result.status is CheckStatus.PASS:
            continue
        text = [f"{result.check} ({result.status.value}): {result.message}"]
        if result.expected is not None:
            text.append(f"  judged against: {_expected(result.expected)}")
        for paragraph in text:
            out += textwrap.wrap(paragraph, width, subsequent_indent="    ") or [""]
    return out


def time_lines(report: ProbeReport, times: RunTimes) -> list[str]:
    """The run's time. A simulated report's ``wallS`` is the profile's stated
    durations, not time that passed; it is labelled so, beside the real one."""
    real = f"{times.elapsed_s:.1f}s" if times.elapsed_s is not None else None
    if report.hardware is HardwareMode.SIMULATED:
        stated = f"{report.wall_s:.1f}s" if report.wall_s is not None else "not stated"
        line = f"simulated wall time {stated} (the profile's stated durations, the report's wallS)"
        return [line + (f"; this run took {real}" if real else "")]
    if report.wall_s is not None:
        return [f"wall time {report.wall_s:.1f}s (process start to the end of the last check)"]
    return [f"this run took {real}"] if real else []


def verdict_line(verdict: Verdict) -> str:
    if verdict.accepted:
        extra = f" with {len(verdict.warnings)} warning(s)" if verdict.warnings else ""
        return f"ACCEPTED{extra}"
    return "QUARANTINED: " + ", ".join(f"{r.reason} ({r.check})" for r in verdict.reasons)


def table_lines(
    report: ProbeReport,
    verdict: Verdict | None,
    *,
    width: int = TABLE_WIDTH,
    times: RunTimes | None = None,
) -> list[str]:
    """The report as its table: a header, one line per check (no line wider than
    ``width``), the details of every result that is not a pass, the time, the
    verdict. Results are the verdict's (re-judged) where it has them; without a
    verdict (no policy to judge with) the stored results, and no verdict line."""
    result_width = max(width - CHECK_COLUMN - STATUS_COLUMN - TIME_COLUMN - 6, MIN_RESULT_COLUMN)
    judged = {r.check: r for r in verdict.results} if verdict is not None else {}
    results = [judged.get(stored.check, stored) for stored in report.results]
    lines = [*_header(report), ""]
    lines.append(_row("check", "status", "result", "time", result_width))
    lines.append("-" * min(width, CHECK_COLUMN + STATUS_COLUMN + result_width + TIME_COLUMN + 6))
    for result in results:
        lines.append(
            _row(
                result.check,
                result.status.value,
                result.message,
                f"{result.duration_s:.1f}s",
                result_width,
            )
        )
    more = details(results, width)
    if more:
        lines += ["", *more]
    lines += ["", *time_lines(report, times or RunTimes())]
    if verdict is not None:
        lines.append(verdict_line(verdict))
    return lines
