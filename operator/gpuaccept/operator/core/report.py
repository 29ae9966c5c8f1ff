"""Validation of a probe pod's termination message (pure).

Whatever is not a valid report for exactly this node and this boot is an
error; an error never accepts a node.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from gpuaccept.contracts.api import TERMINATION_MESSAGE_MAX_BYTES
from gpuaccept.contracts.report import ProbeReport, ReportTooLargeError, decode_termination_message


@dataclass(frozen=True)
class ReportProblem:
    reason: str  # one word: InvalidReport | ReportTooLargeError | ReportMismatch
    message: str


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0] if error.errors() else {"loc": (), "msg": str(error)}
    loc = ".".join(str(part) for part in first.get("loc", ())) or "report"
    return f"{loc}: {first.get('msg', '')}"


def validate_report(message: str, *, node_name: str, boot_id: str) -> ProbeReport | ReportProblem:
    """The report in ``message``, or why it cannot be trusted."""
    if not message.strip():
        return ReportProblem("InvalidReport", "empty termination message")
    if len(message.encode()) > TERMINATION_MESSAGE_MAX_BYTES:
        return ReportProblem(
            "ReportTooLargeError",
            f"termination message is {len(message.encode())} bytes, over "
            f"{TERMINATION_MESSAGE_MAX_BYTES}",
        )
    try:
        report = decode_termination_message(message)
    except ReportTooLargeError as error:
        return ReportProblem("ReportTooLargeError", str(error))
    except ValidationError as error:
        return ReportProblem("InvalidReport", f"report does not validate: {_first_error(error)}")
    except ValueError as error:  # pragma: no cover - decode raises ValidationError
        return ReportProblem("InvalidReport", str(error)[:200])
    if report.node_name != node_name:
        return ReportProblem(
            "ReportMismatch", f"report is for node {report.node_name!r}, not {node_name!r}"
        )
    if report.boot_id != boot_id:
        return ReportProblem(
            "ReportMismatch",
            f"report bootID {report.boot_id!r} does not match the node's {boot_id!r}",
        )
    return report
