"""The time budget: the default suite within 60 s on 8 GPUs, one set of figures for
the docs table, the budget test and the simulated node's durations, each check's
from its own ``CheckSpec.budget``."""

import sys
from pathlib import Path

import pytest
from probe_scenarios import FIXTURES, HEALTHY, default_policy, probe, run_cli
from test_probe_real_backend import fake_nvml

from gpuaccept.checks import budget, peer_bandwidth, phase_estimate
from gpuaccept.checks import gpu_compute as gpu_compute_check
from gpuaccept.checks import nccl_allreduce as nccl_allreduce_check
from gpuaccept.checks import pcie_link as pcie_link_check
from gpuaccept.checks import throttle_reasons as throttle_reasons_check
from gpuaccept.checks.budget import (
    START_PHASE,
    SUITE_LIMIT_S,
    phase_seconds,
    suite_budget,
    suite_seconds,
)
from gpuaccept.checks.gen.docs import probe_budget
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS
from gpuaccept.contracts.report import CheckStatus
from gpuaccept.probe.hardware import real, simulated
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.measure import gpu_compute as gpu_compute_measure
from gpuaccept.probe.measure import nccl_allreduce, pcie_link, throttle_reasons
from gpuaccept.probe.runner import RunSetup, measuring_order, run_probe

REPO = Path(__file__).resolve().parents[2]


def test_the_default_suite_fits_in_60_seconds_on_8_gpus() -> None:
    """The sum the docs table shows (generated from the same function)."""
    for policy in (default_policy(), ProbePolicy()):
        total = suite_seconds(suite_budget(policy))
        assert total <= SUITE_LIMIT_S, [(p.check, p.seconds) for p in suite_budget(policy)]
    assert f"**{suite_seconds(suite_budget(default_policy())):.1f} s**" in probe_budget(REPO)


def test_the_budget_rows_are_the_registry_between_start_and_end() -> None:
    """Each row comes from a registered check's ``budget`` (a spec field), in registry
    order, so a check added later is in the budget (and its simulated duration)."""
    rows = [p.check for p in suite_budget(ProbePolicy())]
    assert rows == [budget.START_PHASE, *(c.name for c in CHECKS), budget.END_PHASE]
    for check, row in zip(CHECKS, suite_budget(ProbePolicy(), 4)[1:-1], strict=True):
        assert row.estimate == check.budget(ProbePolicy().section(check), 4)


def test_the_peer_row_covers_a_node_without_peer_access() -> None:
    """56 ordered pairs staged through host memory (at the budget's worst staged rate)
    fit the peer row; with the 256 MiB buffer and both directions they would take ~18 s."""
    policy = default_policy()
    section = policy.section(peer_bandwidth.SPEC)
    row = next(p for p in suite_budget(policy) if p.check == "peer_bandwidth")
    copies = 56 * (section.warmup_iterations + section.iterations)
    staged = copies * section.staged_buffer_bytes / (peer_bandwidth.STAGED_PEER_GBPS * 1e9)
    assert row.seconds >= staged
    assert 2 * copies * section.buffer_bytes / (peer_bandwidth.STAGED_PEER_GBPS * 1e9) > row.seconds


def test_the_former_60_second_window_alone_breaks_the_budget() -> None:
    policy = ProbePolicy.model_validate(
        {"throttleReasons": {"warmupSeconds": 10, "sampleSeconds": 60}}
    )
    assert suite_seconds(suite_budget(policy)) > SUITE_LIMIT_S


def test_the_policy_drives_the_load_and_sweep_rows() -> None:
    longer = ProbePolicy.model_validate(
        {"throttleReasons": {"sampleSeconds": 60}, "ncclAllreduce": {"iterations": 200}}
    )
    base = phase_seconds(ProbePolicy())
    more = phase_seconds(longer)
    assert more["throttle_reasons"] - base["throttle_reasons"] == pytest.approx(45 * 1.032, 0.01)
    assert more["nccl_allreduce"] > base["nccl_allreduce"]
    disabled = ProbePolicy.model_validate({"ncclAllreduce": {"enabled": False}})
    assert "nccl_allreduce" not in phase_seconds(disabled)


def test_the_budget_assumes_what_the_probe_does() -> None:
    assert phase_estimate.LOAD_RAMP_S == real.LOAD_RAMP_S
    assert throttle_reasons_check.THROTTLE_SAMPLE_INTERVAL_S == throttle_reasons.SAMPLE_INTERVAL_S
    assert pcie_link_check.COPY_BYTES == pcie_link.COPY_BYTES
    assert gpu_compute_check.FP8_WARMUP_S == gpu_compute_measure.OWN_WARMUP_S
    assert pcie_link_check.COPY_REPETITIONS == real.COPY_REPETITIONS
    for top in (1 << 10, 1 << 20, 1 << 33, 1 << 34, 3 << 30):
        assert nccl_allreduce_check.sweep_bytes(top) == nccl_allreduce.sweep_sizes(top)


def test_a_simulated_report_states_the_budget_durations_and_their_sum() -> None:
    report = probe(HEALTHY)
    expected = phase_seconds(default_policy(), 8)
    durations = {r.check: r.duration_s for r in report.results}
    assert durations == {name: expected[name] for name in durations}
    assert report.wall_s == round(expected[START_PHASE] + sum(durations.values()), 1)


def test_a_profile_states_its_own_durations(tmp_path: Path) -> None:
    text = HEALTHY.read_text() + "durations: {start: 2.5, pcie_link: 1, throttle_reasons: 70}\n"
    path = tmp_path / "slow-load.yaml"
    path.write_text(text)
    report = probe(path)
    by_check = {r.check: r.duration_s for r in report.results}
    assert (by_check["pcie_link"], by_check["throttle_reasons"]) == (1.0, 70.0)
    assert report.wall_s == round(2.5 + sum(by_check.values()), 1)


def test_a_check_that_did_not_measure_keeps_its_own_time() -> None:
    policy = ProbePolicy.model_validate({"ncclAllreduce": {"enabled": False}})
    result = probe(HEALTHY, policy).result("nccl_allreduce")
    assert result is not None
    assert (result.status, result.duration_s) == (CheckStatus.SKIP, 0)


def test_an_unknown_phase_is_a_bad_profile(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text(HEALTHY.read_text() + "durations: {pcie_lnk: 3}\n")
    done = run_cli("--profile", path)
    assert done.returncode == 2
    assert "durations" in done.stderr
    assert "unknown phase pcie_lnk" in done.stderr


def test_a_time_scale_makes_the_simulated_probe_take_its_durations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(simulated.time, "sleep", slept.append)
    hardware = SimulatedBackend(load_profile(HEALTHY), time_scale=0.5)
    try:
        run = RunSetup(node_name="n", process_age=lambda: 0.2)
        report = run_probe(hardware, default_policy(), run)
    finally:
        hardware.close()
    expected = phase_seconds(default_policy(), 8)
    # the start: its stated seconds x the scale, less what the process had already taken
    assert slept[0] == pytest.approx(expected[START_PHASE] * 0.5 - 0.2)
    # then each check: its stated seconds x the scale, less what its real work took
    stated = [report.result(c.name) for c in measuring_order(CHECKS)]
    assert len(slept) == 1 + len(stated)
    assert all(0 <= s <= r.duration_s * 0.5 for s, r in zip(slept[1:], stated, strict=True) if r)


@pytest.mark.parametrize("age", [3.25, None])
def test_a_real_probe_reports_what_it_measured(
    age: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real backend's times are its own: the start from the process clock (None:
    no wallS), each check's measured time, never the budget's."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    hardware = real.RealBackend(sysfs_root=FIXTURES / "sysfs", proc_root=FIXTURES / "proc")
    no_torch = {
        name: {"enabled": False} for name in ("pcieLink", "throttleReasons", "ncclAllreduce")
    }
    try:
        report = run_probe(
            hardware,
            ProbePolicy.model_validate(no_torch),
            RunSetup(node_name="n", process_age=lambda: age),
        )
    finally:
        hardware.close()
    measured = [r.duration_s for r in report.results]
    budgeted = phase_seconds(ProbePolicy())
    assert [r.duration_s for r in report.results if r.check == "nvlink"] != [budgeted["nvlink"]]
    assert report.wall_s == (None if age is None else round(age + sum(measured), 1))


def test_a_bad_time_scale_is_bad_input() -> None:
    done = run_cli("--profile", HEALTHY, env={"GPUACCEPT_SIM_TIME_SCALE": "fast"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "gpuaccept probe: error: GPUACCEPT_SIM_TIME_SCALE: not a number from 0 to 10 (got 'fast')"
    ]


def test_the_cli_report_has_its_wall_time() -> None:
    done = run_cli("--profile", HEALTHY, "--output", "json")
    assert done.returncode == 0, done.stderr
    assert '"wallS": ' in done.stdout
