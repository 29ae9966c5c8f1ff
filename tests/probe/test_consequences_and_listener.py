"""A dead Xid listener is not "no critical Xid"; a GPU that fell off the bus is gone
for every later check (the simulator models it); a profile naming a link or a pair
the node does not have is refused."""

import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest
from probe_scenarios import REPO, fault, probe

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.xid_errors import SPEC as XID
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.xid_events import XidLog, _wait_loop
from gpuaccept.probe.inputs import InputError

SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _fake_nvml(errors: list[int], clock: _Clock) -> SimpleNamespace:
    """pynvml's event wait: each call takes 0.5 s and raises the next error code."""

    def wait(_event_set: object, _ms: int) -> object:
        clock.now += 0.5
        raise pynvml.NVMLError(errors.pop(0))

    return SimpleNamespace(
        NVMLError=pynvml.NVMLError,
        nvmlEventTypeXidCriticalError=pynvml.nvmlEventTypeXidCriticalError,
        nvmlEventSetWait_v2=wait,
    )


def _run_wait(errors: list[int]) -> XidLog:
    clock = _Clock()
    log = XidLog(clock=clock)
    log.phase = "nccl_allreduce"
    _wait_loop(_fake_nvml(errors, clock), object(), {}, log, threading.Event())
    clock.now = 200.0  # the probe goes on long after the listener died
    log.stop()
    return log


def test_a_wait_that_dies_on_gpu_is_lost_says_so_and_when() -> None:
    log = _run_wait([pynvml.NVML_ERROR_TIMEOUT, pynvml.NVML_ERROR_TIMEOUT, 15])
    assert log.died is not None
    at, during, _error, gpu_lost = log.died
    assert (at, during, gpu_lost) == (1.5, "nccl_allreduce", True)
    assert log.seconds == 1.5  # not the 200 s the probe ran


def test_a_wait_that_dies_on_another_error_is_not_a_lost_gpu() -> None:
    log = _run_wait([pynvml.NVML_ERROR_UNKNOWN])
    assert log.died is not None
    assert log.died[3] is False


def _judge(stopped: dict[str, object] | None) -> tuple[CheckStatus, str]:
    observed: dict[str, object] = {"watched": "0-7", "listenedS": 1.5}
    if stopped is not None:
        observed["listenerStopped"] = stopped
    judged = XID.judge(XID.parse(observed), ProbePolicy().section(XID), SUMMARY)
    return judged.status, judged.message


def test_a_listener_that_died_is_never_no_critical_xid() -> None:
    status, message = _judge({"atS": 1.5, "during": "nccl_allreduce", "error": "Unknown Error"})
    assert status is CheckStatus.ERROR
    assert "the Xid listener stopped after 1.5 s during nccl_allreduce" in message
    assert "no critical Xid" not in message


def test_a_listener_that_lost_a_gpu_fails() -> None:
    status, message = _judge(
        {"atS": 1.5, "error": "GPU is lost", "gpuLost": True, "during": "nccl_allreduce"}
    )
    assert status is CheckStatus.FAIL
    assert message.startswith("a GPU was lost")


def test_a_listener_that_ran_to_the_end_still_passes() -> None:
    assert _judge(None)[0] is CheckStatus.PASS


def test_a_gpu_that_threw_xid_79_is_lost_for_every_later_check() -> None:
    report = probe(fault("xid-79-under-load"))
    for check in ("throttle_reasons", "peer_bandwidth", "nvlink", "gpu_compute"):
        result = report.result(check)
        assert result is not None
        assert result.status is CheckStatus.FAIL, check
        assert "GPU 5" in result.message, check
        assert "GPU_IS_LOST" in result.message, check
    nccl = report.result("nccl_allreduce")
    assert nccl is not None
    assert nccl.status is CheckStatus.ERROR


def _profile_with(tmp_path: Path, old: str, new: str) -> Path:
    text = fault("nvlink-links-down").read_text()
    assert old in text
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("inactive: [16, 17]", "inactive: [16, 18]", "nvlink: inactive: link 18 is not below"),
        ("inactive: [16, 17]", "inactive: [1], errors: {recovery: {20: 1}}", "errors.recovery"),
    ],
)
def test_a_profile_naming_a_link_beyond_the_count_is_refused(
    tmp_path: Path, old: str, new: str, field: str
) -> None:
    path = _profile_with(tmp_path, old, new)
    with pytest.raises(InputError) as refused:
        load_profile(path)
    assert str(path) in str(refused.value)
    assert field in str(refused.value)


def test_a_profile_naming_a_peer_pair_beyond_the_count_is_refused(tmp_path: Path) -> None:
    text = fault("p2p-weak-pair").read_text().replace('"2<>5"', '"2<>9"')
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    run = subprocess.run(
        [sys.executable, "-m", "gpuaccept.cli", "probe", "--profile", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert str(path) in lines[0]
    assert "p2p.pairs" in lines[0]
    assert "GPU 9" in lines[0]


def test_a_wait_that_raises_anything_else_is_recorded_not_a_silent_death() -> None:
    """``_wait_loop`` catching only NVMLError let any other exception end the thread
    silently, and the check then passed on the Xids it had (issue 37, item 5)."""
    clock = _Clock()
    log = XidLog(clock=clock)

    def wait(_event_set: object, _ms: int) -> object:
        clock.now += 0.5
        raise ValueError("c_nvmlEventData_t: bad device")

    nvml = SimpleNamespace(
        NVMLError=pynvml.NVMLError,
        nvmlEventTypeXidCriticalError=pynvml.nvmlEventTypeXidCriticalError,
        nvmlEventSetWait_v2=wait,
    )
    _wait_loop(nvml, object(), {}, log, threading.Event())
    assert log.died is not None
    assert log.died[2] == "ValueError: c_nvmlEventData_t: bad device"
    assert log.died[3] is False


def _judge_watch(observed: dict[str, object]) -> tuple[CheckStatus, str]:
    judged = XID.judge(XID.parse(observed), ProbePolicy().section(XID), SUMMARY)
    return judged.status, judged.message


@pytest.mark.parametrize(
    ("observed", "status", "text"),
    [
        # every usable GPU watched: the only pass
        ({"gpus": "0-7", "watched": "0-7", "listenedS": 60.0}, CheckStatus.PASS, "no critical"),
        # a listener that registered no GPU, recovery actions read (R570+): never a pass
        ({"gpus": "0-7", "notRead": {"events": "GPUs 0-7: NVML: Unknown Error"}},
         CheckStatus.ERROR, "Xid events not watched on GPUs 0-7"),
        # one GPU left unregistered
        ({"gpus": "0-7", "watched": "0-6", "listenedS": 60.0,
          "notRead": {"events": "GPU 7: no critical-Xid events (NVML)"}},
         CheckStatus.ERROR, "Xid events not watched on GPU 7"),
        # a critical Xid on a watched GPU still fails
        ({"gpus": "0-7", "watched": "0-6", "listenedS": 60.0, "xids": {"3": [79]}},
         CheckStatus.FAIL, "Xid 79"),
        # a report without gpus (an older probe): the summary's GPU count
        ({"watched": "0-7", "listenedS": 60.0}, CheckStatus.PASS, "no critical"),
        ({"recoveryAction": None}, CheckStatus.ERROR, "Xid events not watched on GPUs 0-7"),
    ],
)  # fmt: skip
def test_the_gpus_watched_must_be_the_usable_gpus(
    observed: dict[str, object], status: CheckStatus, text: str
) -> None:
    got, message = _judge_watch(observed)
    assert got is status, message
    assert text in message


def test_a_gpu_nvml_gives_no_xid_events_for_is_an_error_in_a_probe_run(tmp_path: Path) -> None:
    """The simulator's ``unsupported: [xidEvents]``: NVML's supported event types without
    nvmlEventTypeXidCriticalError for that GPU, so it is never registered."""
    text = (REPO / "profiles" / "h100-sxm-8gpu-healthy.yaml").read_text()
    old = "  overrides:\n"
    assert old in text
    path = tmp_path / "unregistered.yaml"
    path.write_text(text.replace(old, old + "    5: {unsupported: [xidEvents]}\n"))
    result = probe(path).result("xid_errors")
    assert result is not None
    assert result.status is CheckStatus.ERROR, result.message
    assert "Xid events not watched on GPU 5" in result.message
