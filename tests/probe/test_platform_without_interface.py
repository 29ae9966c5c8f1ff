"""A platform that has no such interface is judged with its reason; it is not a skip
(a required skip quarantines a healthy node) and not a failed read."""

import socket
from pathlib import Path

from probe_scenarios import PROFILES, default_policy, probe

from gpuaccept.checks.cpu_governor import SPEC as CPU_GOVERNOR
from gpuaccept.checks.gpu_config import SPEC as GPU_CONFIG
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.hardware.persistenced import socket_reachable

SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


def _result(report_profile: Path, check: str) -> tuple[CheckStatus, str]:
    report = probe(report_profile)
    result = report.result(check)
    assert result is not None
    return result.status, result.message


def test_no_cpufreq_driver_passes_with_its_reason_and_the_node_is_accepted() -> None:
    path = PROFILES / "h100-sxm-8gpu-bios-pstates.yaml"
    status, message = _result(path, "cpu_governor")
    assert status is CheckStatus.PASS
    assert message.startswith("no cpufreq driver")
    assert evaluate(probe(path), default_policy()).accepted


def test_a_policy_may_still_refuse_a_host_without_cpufreq() -> None:
    observed = CPU_GOVERNOR.parse({"cpus": 0, "count": {}, "noCpufreq": "no cpufreq driver"})
    strict = ProbePolicy.model_validate({"cpuGovernor": {"withoutCpufreq": "fail"}})
    assert CPU_GOVERNOR.judge(observed, strict.section(CPU_GOVERNOR), SUMMARY).status is (
        CheckStatus.FAIL
    )
    warn = ProbePolicy.model_validate({"cpuGovernor": {"withoutCpufreq": "warn"}})
    assert CPU_GOVERNOR.judge(observed, warn.section(CPU_GOVERNOR), SUMMARY).status is (
        CheckStatus.WARN
    )


def test_persistence_off_without_the_daemons_socket_warns_and_is_accepted() -> None:
    path = PROFILES / "h100-sxm-8gpu-persistenced-unreachable.yaml"
    status, message = _result(path, "gpu_config")
    assert status is CheckStatus.WARN
    assert "nvidia-persistenced's socket is not reachable" in message
    assert evaluate(probe(path), default_policy()).accepted


def test_persistence_off_with_the_socket_reachable_still_fails() -> None:
    observed = GPU_CONFIG.parse({"gpus": 8, "persistenceOff": "0-3", "persistencedSocket": True})
    judgement = GPU_CONFIG.judge(observed, ProbePolicy().section(GPU_CONFIG), SUMMARY)
    assert judgement.status is CheckStatus.FAIL
    assert "persistence mode off on GPUs 0, 1, 2, 3" in judgement.message


def test_the_socket_is_reachable_only_when_something_listens(tmp_path: Path) -> None:
    path = tmp_path / "socket"
    assert not socket_reachable((path,))
    path.write_text("")  # a file, not a socket
    assert not socket_reachable((path,))
    path.unlink()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        assert socket_reachable((tmp_path / "absent", path))
