"""``gpuaccept probe`` end to end, in subprocesses: exit codes, outputs, the termination log."""

import json
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest
from probe_scenarios import (
    DEFAULT_POLICY_FILE,
    FAULTS,
    HEALTHY,
    IDLE_DOWNSHIFT,
    REPO,
    fault,
    run_cli,
)

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.api import TERMINATION_MESSAGE_MAX_BYTES
from gpuaccept.contracts.report import ProbeReport, decode_termination_message
from gpuaccept.probe import cli
from gpuaccept.probe.compact import fit_report
from gpuaccept.probe.output import read_json_output


def statuses(report: ProbeReport) -> dict[str, str]:
    return {r.check: r.status.value for r in report.results}


@pytest.mark.parametrize("profile", [HEALTHY, IDLE_DOWNSHIFT], ids=lambda p: p.stem)
def test_healthy_profiles_exit_0_with_every_check_passing(profile: Path) -> None:
    proc = run_cli("--profile", profile, "--output", "json")
    assert proc.returncode == 0, proc.stderr
    report = read_json_output(proc.stdout)[0]
    assert set(statuses(report).values()) == {"pass"}
    assert len(report.results) == len(CHECKS)
    assert report.hardware.value == "simulated"


@pytest.mark.parametrize("explicit_policy", [True, False], ids=["policy-file", "no-policy"])
@pytest.mark.parametrize(("name", "check"), FAULTS.items())
def test_fault_profiles_exit_1_failing_only_their_check(
    name: str, check: str, explicit_policy: bool
) -> None:
    policy: list[str | Path] = ["--policy", DEFAULT_POLICY_FILE] if explicit_policy else []
    proc = run_cli("--profile", fault(name), *policy, "--output", "json")
    assert proc.returncode == 1, proc.stderr
    got = statuses(read_json_output(proc.stdout)[0])
    assert got.pop(check) == "fail"
    if name == "driver-library-mismatch":
        # NVML cannot initialise (LIB_RM_VERSION_MISMATCH): it sees no GPU, so the
        # count fails too and no GPU can be measured
        assert got.pop("gpu_count") == "fail"
        assert {got["pcie_link"], got["throttle_reasons"], got["nccl_allreduce"]} == {"skip"}
    elif name == "xid-79-under-load":
        # the GPU fell off the bus at its first load: every later check fails naming it
        assert got.pop("xid_errors") == "fail"
        assert {"peer_bandwidth", "nvlink"} <= {c for c, s in got.items() if s == "fail"}
    else:
        assert set(got.values()) <= {"pass", "warn"}  # a warning elsewhere, never more


def test_table_output_and_verdict_line() -> None:
    proc = run_cli("--profile", fault("pcie-x8"))
    assert proc.returncode == 1
    assert "QUARANTINED: PcieLinkFailed (pcie_link)" in proc.stdout
    assert "hardware: simulated" in proc.stdout
    ok = run_cli("--profile", HEALTHY)
    assert ok.returncode == 0
    assert "ACCEPTED" in ok.stdout


def test_environment_and_termination_log(tmp_path: Path) -> None:
    log = tmp_path / "dev" / "termination-log"
    env = {
        "GPUACCEPT_PROFILE": str(HEALTHY),
        "NODE_NAME": "gpu-node-17",
        "GPUACCEPT_BOOT_ID": "11111111-2222-3333-4444-555555555555",
    }
    proc = run_cli("--termination-log", log, "--output", "json", env=env)
    assert proc.returncode == 0, proc.stderr
    text = log.read_text()
    assert len(text.encode()) <= TERMINATION_MESSAGE_MAX_BYTES
    report = decode_termination_message(text)
    assert report.node_name == "gpu-node-17"
    assert report.boot_id == "11111111-2222-3333-4444-555555555555"
    # The termination message is the report fitted to 4096 bytes (condensed).
    assert report == fit_report(read_json_output(proc.stdout)[0])


def test_node_name_flag_wins_and_boot_id_from_proc(tmp_path: Path) -> None:
    log = tmp_path / "log"
    proc = run_cli(
        "--profile", HEALTHY, "--node-name", "flag-node", "--termination-log", log,
        env={"NODE_NAME": "env-node"},
    )  # fmt: skip
    assert proc.returncode == 0
    report = decode_termination_message(log.read_text())
    assert report.node_name == "flag-node"
    assert report.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def test_policy_from_env_and_expected_gpus() -> None:
    strict = json.dumps({"ncclAllreduce": {"minBusbwGBps": 500}})
    proc = run_cli("--profile", HEALTHY, "--output", "json", env={"GPUACCEPT_POLICY": strict})
    assert proc.returncode == 1
    assert statuses(read_json_output(proc.stdout)[0])["nccl_allreduce"] == "fail"
    # the operator passes the node's allocatable count; it overrides the profile's
    proc = run_cli("--profile", HEALTHY, "--output", "json", env={"GPUACCEPT_EXPECTED_GPUS": "16"})
    assert proc.returncode == 1
    count = read_json_output(proc.stdout)[0].result("gpu_count")
    assert count is not None
    assert "the probe was given 16 GPUs but NVML sees 8" in count.message
    # and its capacity
    proc = run_cli(
        "--profile", HEALTHY, "--output", "json", env={"GPUACCEPT_NODE_GPU_CAPACITY": "9"}
    )
    assert proc.returncode == 1
    count = read_json_output(proc.stdout)[0].result("gpu_count")
    assert count is not None
    assert "allocatable nvidia.com/gpu 8 < capacity 9" in count.message
    # the flag wins over the env
    proc = run_cli(
        "--profile", HEALTHY, "--expected-gpus", "8", env={"GPUACCEPT_EXPECTED_GPUS": "16"}
    )
    assert proc.returncode == 0


def test_policy_file_wins_over_env() -> None:
    strict = json.dumps({"ncclAllreduce": {"minBusbwGBps": 500}})
    proc = run_cli(
        "--profile", HEALTHY, "--policy", DEFAULT_POLICY_FILE, env={"GPUACCEPT_POLICY": strict}
    )
    assert proc.returncode == 0


def test_checks_subset() -> None:
    proc = run_cli("--profile", fault("nccl-slow"), "--checks", "gpu_count,pcie_link",
                   "--output", "json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = read_json_output(proc.stdout)[0]
    got = {r.check: (r.status.value, r.message) for r in report.results}
    assert got["pcie_link"][0] == "pass"
    assert got["nccl_allreduce"] == ("skip", "disabled by policy")


def test_no_gpu_says_so_and_is_not_accepted(tmp_path: Path) -> None:
    """The real backend on a machine without NVML (pynvml made unimportable, so the
    test means the same on a GPU host)."""
    log = tmp_path / "termination-log"
    code = (
        "import sys; sys.modules['pynvml'] = None; "
        "from gpuaccept.cli import main; "
        f"sys.exit(main(['probe', '--termination-log', {str(log)!r}, "
        f"'--proc-root', {str(tmp_path)!r}, '--sysfs-root', {str(tmp_path)!r}]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert proc.returncode == 1, proc.stderr
    assert "no NVIDIA GPU found on this machine" in proc.stderr
    assert "not an accepted GPU node" in proc.stderr
    report = decode_termination_message(log.read_text())
    assert report.hardware.value == "real"
    assert report.summary.gpu_count == 0
    assert statuses(report)["gpu_count"] == "fail"
    assert not evaluate(report, ProbePolicy()).accepted


def test_no_gpu_is_not_accepted_even_when_the_checks_left_pass(tmp_path: Path) -> None:
    """Only the governor check, on a sysfs tree where every CPU is on performance:
    the check passes, but a probe that saw no GPU never accepts the node."""
    cpu = tmp_path / "devices" / "system" / "cpu"
    for n in (0, 1):
        (cpu / f"cpu{n}" / "cpufreq").mkdir(parents=True)
        (cpu / f"cpu{n}" / "cpufreq" / "scaling_governor").write_text("performance\n")
    (cpu / "online").write_text("0-1\n")
    (cpu / "possible").write_text("0-1\n")
    code = (
        "import sys; sys.modules['pynvml'] = None; "
        "from gpuaccept.cli import main; "
        "sys.exit(main(['probe', '--checks', 'cpu_governor', '--output', 'json', "
        f"'--proc-root', {str(tmp_path)!r}, '--sysfs-root', {str(tmp_path)!r}]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert proc.returncode == 1, proc.stderr
    report = read_json_output(proc.stdout)[0]
    assert statuses(report)["cpu_governor"] == "pass"
    assert "no NVIDIA GPU found on this machine" in proc.stderr


def test_this_machine_without_a_profile_is_not_accepted() -> None:
    """On this CI machine (no GPU) the plain command must say so and exit 1."""
    proc = run_cli()
    if _nvml_works():  # a GPU host (scripts/device-check.sh) probes for real instead
        assert proc.returncode in (0, 1), proc.stderr
        assert "no NVIDIA GPU found" not in proc.stderr
        return
    assert proc.returncode == 1, proc.stderr
    assert "no NVIDIA GPU found on this machine" in proc.stderr


def _nvml_works() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_unwritable_termination_log_is_not_success(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run_cli("--profile", HEALTHY, "--termination-log", blocker / "log")
    assert proc.returncode == 1
    assert "cannot write the termination log" in proc.stderr


def test_bad_option_value_is_one_line_without_usage() -> None:
    proc = run_cli("--expected-gpus", "abc")
    assert proc.returncode == 2
    assert (
        proc.stderr
        == "gpuaccept probe: error: argument --expected-gpus: invalid int value: 'abc'\n"
    )
    assert proc.stdout == ""


def test_help_prints_the_full_usage_and_exits_0() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: gpuaccept probe")
    for option in ("--profile", "--policy", "--termination-log", "--expected-gpus"):
        assert option in proc.stdout
    assert proc.stderr == ""


def test_bad_usage_still_writes_a_report(tmp_path: Path) -> None:
    log = tmp_path / "log"
    proc = run_cli("--termination-log", log, "--checks", "nope", "--profile", HEALTHY,
                   env={"NODE_NAME": "n9"})  # fmt: skip
    assert proc.returncode == 2
    report = decode_termination_message(log.read_text())
    assert report.node_name == "n9"
    assert [(r.check, r.status.value) for r in report.results] == [("probe", "error")]


def test_crash_during_probe_writes_a_failure_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(*_args: object, **_kwargs: object) -> ProbeReport:
        raise RuntimeError("the GPU fell off the bus")

    monkeypatch.setattr(cli, "run_probe", explode)
    log = tmp_path / "log"
    code = cli.main(["--profile", str(HEALTHY), "--termination-log", str(log), "--node-name", "n"])
    assert code == 1
    report = decode_termination_message(log.read_text())
    assert report.results[0].message == "probe failed: RuntimeError: the GPU fell off the bus"
    assert report.hardware.value == "simulated"
    assert not evaluate(report, ProbePolicy()).accepted


def test_console_script_dispatches_to_probe() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0
    assert "--termination-log" in proc.stdout
