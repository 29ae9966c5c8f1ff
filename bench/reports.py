"""Prepared probe reports for the stand-in's scale mode.

A report is produced once per profile by the real probe (``gpuaccept probe
--profile FILE --output json`` on the simulated backend), validated with the
contract model, then copied per node with that node's name and bootID, fitted
to the termination message as the probe fits it
(:func:`~gpuaccept.probe.compact.fit_report`), and encoded
(:func:`~gpuaccept.contracts.report.encode_termination_message`). So the
operator reads and re-judges exactly what a probe pod would have said.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from gpuaccept.contracts.report import (
    CheckResult,
    CheckStatus,
    HardwareMode,
    HardwareSummary,
    ProbeReport,
    encode_termination_message,
)
from gpuaccept.probe.compact import fit_report
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.output import read_json_output

REPO = Path(__file__).resolve().parent.parent
JSON_OUT = ("--output", "json")


def default_profiles() -> tuple[Path, Path]:
    """A healthy profile and a fault profile from ``profiles/``, by their ``expect`` field.

    The healthy one is ``h100-sxm-8gpu-healthy.yaml`` when shipped.

    The fault is one that quarantines: a PCIe link narrower than its maximum
    (the fault profile expecting ``pcie_link`` to fail) if the probe ships it,
    else the first fault profile.
    """
    expected = {p: load_profile(p).expect for p in sorted((REPO / "profiles").glob("**/*.yaml"))}
    healthy = [p for p, e in expected.items() if e is not None and e.accepted]
    faults = [p for p, e in expected.items() if e is not None and not e.accepted]
    if not healthy or not faults:
        raise FileNotFoundError(
            "no accepted and no fault profile (expect:) under profiles/: the probe's simulated "
            "profiles are needed to build reports (pass --healthy-profile/--fault-profile)"
        )
    preferred = [p for p in faults if (e := expected[p]) is not None and e.check == "pcie_link"]
    # the healthy H100 if shipped (not the first accepted profile by path, which would be
    # the damaged-cable one in profiles/fabric/: the same box, reported the same)
    healthy_h100 = [p for p in healthy if p.name == "h100-sxm-8gpu-healthy.yaml"]
    return (healthy_h100 or healthy)[0], (preferred or faults)[0]


def probe_report(profile: Path, gpus: int) -> ProbeReport:
    """Run the real probe once on ``profile`` (simulated hardware) and validate its report."""
    proc = subprocess.run(
        [sys.executable, "-m", "gpuaccept.cli", "probe", "--profile", str(profile), *JSON_OUT],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "GPUACCEPT_EXPECTED_GPUS": str(gpus)},
    )
    if proc.returncode not in (0, 1):
        raise RuntimeError(
            f"gpuaccept probe --profile {profile} exited {proc.returncode}:\n"
            f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return read_json_output(proc.stdout)[0]


def for_node(template: ProbeReport, node_name: str, boot_id: str) -> str:
    """The termination message for ``node_name`` (compact JSON, size-checked)."""
    now = datetime.now(UTC)
    report = template.model_copy(
        update={"node_name": node_name, "boot_id": boot_id, "started_at": now, "finished_at": now}
    )
    return encode_termination_message(fit_report(report))


def message_for(
    healthy: ProbeReport, faulty: ProbeReport, fails: Callable[[str], bool]
) -> Callable[[str, str], str]:
    """``(node_name, boot_id) → termination message``: the fault report for nodes that fail."""

    def message(node_name: str, boot_id: str) -> str:
        return for_node(faulty if fails(node_name) else healthy, node_name, boot_id)

    return message


def synthetic(passed: bool) -> ProbeReport:
    """A hand-made report (status only): for the floor when the probe is not at hand."""
    now = datetime.now(UTC)
    return ProbeReport(
        node_name="template",
        boot_id="template",
        probe_version="synthetic",
        started_at=now,
        finished_at=now,
        hardware=HardwareMode.SIMULATED,
        summary=HardwareSummary(gpu_count=8),
        results=[
            CheckResult(
                check="gpu_count",
                status=CheckStatus.PASS if passed else CheckStatus.FAIL,
                duration_s=0.0,
            )
        ],
    )
