"""A probe command that cannot measure: its one-line usage error, and the failure
report it still writes to the termination log, so the operator never mistakes a
missing report for success. Shared by ``gpuaccept probe`` and ``gpuaccept probe
fabric``."""

import argparse
import os
import socket
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console

from gpuaccept.checks.spec import clip
from gpuaccept.contracts.cli_help import DefaultsHelpFormatter
from gpuaccept.contracts.probe_invocation import ENV_NODE_NAME, FLAG_TERMINATION_LOG
from gpuaccept.contracts.report import (
    CheckResult,
    CheckStatus,
    HardwareMode,
    HardwareSummary,
    ProbeReport,
)
from gpuaccept.probe import PROBE_VERSION
from gpuaccept.probe.compact import termination_message
from gpuaccept.probe.runner import UNKNOWN_BOOT_ID


class UsageError(Exception):
    pass


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage block); ``main`` exits 2 on them;
    ``--help`` shows every default."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(" ".join(message.split()))


def termination_log_from_argv(argv: Sequence[str]) -> Path | None:
    """Where to write the failure report when the arguments themselves are bad."""
    for i, arg in enumerate(argv):
        if arg == FLAG_TERMINATION_LOG and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith(f"{FLAG_TERMINATION_LOG}="):
            return Path(arg.split("=", 1)[1])
    return None


def failure_report(
    message: str, *, node_name: str, boot_id: str | None, mode: HardwareMode
) -> ProbeReport:
    """A valid report that can never be accepted: no check results, one error."""
    now = datetime.now(UTC)
    return ProbeReport(
        node_name=node_name,
        boot_id=(boot_id or UNKNOWN_BOOT_ID)[:64],
        probe_version=PROBE_VERSION,
        started_at=now,
        finished_at=now,
        hardware=mode,
        summary=HardwareSummary(gpu_count=0),
        results=[
            CheckResult(
                check="probe", status=CheckStatus.ERROR, message=clip(message), duration_s=0
            )
        ],
    )


def write_termination_log(path: Path, report: ProbeReport, err: Console) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(termination_message(report))
    except (OSError, ValueError) as exc:
        err.print(f"gpuaccept probe: cannot write the termination log {path}: {exc}", markup=False)
        return False
    return True


def default_node_name() -> str:
    return (os.environ.get(ENV_NODE_NAME) or socket.gethostname() or "unknown")[:253]
