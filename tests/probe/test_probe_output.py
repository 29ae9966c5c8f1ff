"""What ``gpuaccept probe`` says while it works and at the end: a line per check
without a terminal, ``n of N`` with the budget's time left on one, a final table
that fits 100 columns, the verdict in the JSON, and the time a simulated run took."""

import io
import re

from probe_scenarios import HEALTHY, fault, probe, run_cli
from rich.console import Console

from gpuaccept.checks.budget import phase_seconds
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import BY_NAME, CHECKS
from gpuaccept.contracts.report import CheckResult, CheckStatus
from gpuaccept.probe.output import CheckProgress, check_line, eta_s, read_json_output
from gpuaccept.probe.runner import measuring_order

LINE = re.compile(r"^\[\s*(\d+)/(\d+)\] (\w+)\s+(pass|warn|fail|error|skip)\s+(\d+\.\d)s")


def test_without_a_terminal_each_check_prints_one_line_as_it_finishes() -> None:
    proc = run_cli("--profile", fault("pcie-x8"))
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if LINE.match(line)]
    parsed = [LINE.match(line) for line in lines]
    got = [(m.group(1), m.group(2), m.group(3), m.group(4)) for m in parsed if m]
    order = [c.name for c in measuring_order(CHECKS)]
    assert [name for _, _, name, _ in got] == order
    assert [int(n) for n, _, _, _ in got] == list(range(1, len(CHECKS) + 1))
    assert {total for _, total, _, _ in got} == {str(len(CHECKS))}
    assert dict((name, status) for _, _, name, status in got)["pcie_link"] == "fail"
    pcie = next(line for line in lines if " pcie_link " in line)
    assert "PCIe Gen5x8" in pcie  # the key figure
    assert all(len(line) <= 100 for line in lines)


def test_json_output_keeps_stdout_json_and_its_progress_on_stderr() -> None:
    proc = run_cli("--profile", HEALTHY, "--output", "json")
    assert proc.returncode == 0, proc.stderr
    report, _extra = read_json_output(proc.stdout)
    assert len(report.results) == len(CHECKS)
    assert sum(1 for line in proc.stderr.splitlines() if LINE.match(line)) == len(CHECKS)


def test_json_output_carries_the_verdict_and_its_reasons() -> None:
    proc = run_cli("--profile", fault("pcie-x8"), "--output", "json")
    assert proc.returncode == 1
    _report, extra = read_json_output(proc.stdout)
    verdict = extra["verdict"]
    assert verdict["accepted"] is False
    assert verdict["reason"] == "PcieLinkFailed"
    assert [(r["check"], r["reason"]) for r in verdict["reasons"]] == [
        ("pcie_link", "PcieLinkFailed")
    ]
    assert "x8 < x16" in verdict["reasons"][0]["message"]
    healthy, ok = read_json_output(run_cli("--profile", HEALTHY, "--output", "json").stdout)
    assert ok["verdict"] == {"accepted": True, "reason": None, "reasons": [], "warnings": []}
    assert healthy.wall_s is not None


def test_a_simulated_run_reports_the_time_it_took_beside_the_stated_one() -> None:
    proc = run_cli("--profile", HEALTHY, "--output", "json")
    report, extra = read_json_output(proc.stdout)
    assert report.wall_s is not None
    assert extra["elapsedS"] < report.wall_s  # no time scale: the run takes a few seconds
    table = run_cli("--profile", HEALTHY).stdout
    assert f"simulated wall time {report.wall_s:.1f}s (the profile's stated durations" in table
    assert "this run took " in table
    assert "\nwall time" not in table  # never the stated figure as if it had passed


def test_the_final_table_fits_100_columns_one_line_per_check() -> None:
    proc = run_cli("--profile", fault("pcie-x8"))
    lines = proc.stdout.splitlines()
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    start = next(i for i, line in enumerate(lines) if set(line) == {"-"}) + 1
    end = lines.index("", start)
    rows = lines[start:end]
    assert [row.split()[0] for row in rows] == [c.name for c in CHECKS]
    # the failing check's whole message and thresholds follow the table
    after = " ".join(line.strip() for line in lines[end:])
    assert "pcie_link (fail): GPU 3 below max width" in after
    assert "D2H 26.1 GB/s < 40 on GPU 3 judged against: {" in after
    assert '"minWidth": 16' in after


def test_a_healthy_sxm_node_does_not_read_like_a_numa_fault() -> None:
    proc = run_cli("--profile", HEALTHY)
    row = next(line for line in proc.stdout.splitlines() if line.startswith("gpu_numa "))
    assert "numa_node -1" not in row
    assert "one NUMA node" in row


def test_a_plain_line_names_check_status_seconds_and_figure() -> None:
    result = probe(HEALTHY).result("nccl_allreduce")
    assert result is not None
    line = check_line(7, 16, BY_NAME["nccl_allreduce"], result, simulated=True)
    assert line.startswith("[ 7/16] nccl_allreduce ")
    assert " pass " in line
    assert "8.8s (simulated)" in line
    assert line.endswith("BusBW 465.3")


def test_the_eta_is_the_budget_of_the_checks_not_finished() -> None:
    policy = ProbePolicy()
    budget = phase_seconds(policy, 8)
    remaining = [BY_NAME["nccl_allreduce"], BY_NAME["pcie_link"]]
    assert eta_s(budget, remaining) == budget["nccl_allreduce"] + budget["pcie_link"]
    assert eta_s(budget, []) == 0


def test_on_a_terminal_the_live_line_says_n_of_n_and_the_time_left() -> None:
    buffer = io.StringIO()
    err = Console(file=buffer, force_terminal=True, width=120)
    checks = measuring_order(CHECKS)
    budget = phase_seconds(ProbePolicy(), 8)
    progress = CheckProgress(err=err, checks=checks, budget=budget, simulated=False)
    done = CheckResult(check=checks[0].name, status=CheckStatus.PASS, duration_s=0.1)
    with progress.shown():
        progress.finished(checks[0], done)
        progress.started(checks[1])
        progress.refresh()
    text = buffer.getvalue()
    left = eta_s(budget, checks[1:])
    assert f"2 of {len(checks)}: {checks[1].title}" in text
    assert f"about {left:.0f}s left by the budget" in text
    assert not LINE.search(text)  # no plain lines on a terminal
