"""``gpuaccept probe watch`` against simulated in-service profiles: a fatal Xid ends the
window early, a window runs out with its counters, the report always fits, and a
watch that cannot run or sees no GPU says so (never "GPUs lost")."""

import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from probe_scenarios import HEALTHY, PROFILES, REPO, run_cli

from gpuaccept.contracts.api import TERMINATION_MESSAGE_MAX_BYTES
from gpuaccept.contracts.probe_invocation import WATCH_SUBCOMMAND, WatchExit
from gpuaccept.contracts.watch_report import WatchEnd, WatchReport, decode_watch_message
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.hardware.simulated_watch import SimulatedWatch
from gpuaccept.probe.hardware.xid_events import XidEvent
from gpuaccept.probe.watch import WatchSettings, merge_bursts, run_watch

INSERVICE = PROFILES / "inservice"
BOOT = "7d3b1a52-0000-4000-8000-000000000001"


def watch(
    profile: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], WatchReport]:
    """``gpuaccept probe watch`` in a subprocess; the report read from its termination log."""
    log = REPO / ".pytest_cache" / f"watch-{os.getpid()}-{threading.get_ident()}.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text("")
    proc = run_cli(
        WATCH_SUBCOMMAND,
        "--profile",
        profile,
        "--termination-log",
        log,
        *args,
        env={"NODE_NAME": "gpu-7", "GPUACCEPT_BOOT_ID": BOOT, **(env or {})},
    )
    text = log.read_text()
    log.unlink()
    assert len(text.encode()) <= TERMINATION_MESSAGE_MAX_BYTES
    return proc, decode_watch_message(text)


def test_xid_79_ends_the_window_at_once_with_the_gpu_lost() -> None:
    proc, report = watch(INSERVICE / "xid79-after-acceptance.yaml", "--window-s", "600")
    assert proc.returncode == WatchExit.EARLY, proc.stderr
    assert (report.end_reason, report.ended_early) == (WatchEnd.FATAL_XID, True)
    assert report.watched_s == pytest.approx(40.0, abs=0.5)
    assert [(x.gpu, x.xid, x.count) for x in report.xids] == [(3, 79, 1)]
    assert report.xids[0].uuid == report.gpus[3].uuid
    assert report.gpus[3].uuid is not None
    assert report.gpus[3].lost
    assert report.gpus_lost() == 1
    assert (report.node_name, report.boot_id, report.simulated) == ("gpu-7", BOOT, True)


def test_a_window_shorter_than_the_fault_sees_nothing() -> None:
    proc, report = watch(INSERVICE / "xid79-after-acceptance.yaml", "--window-s", "30")
    assert proc.returncode == WatchExit.QUIET, proc.stderr
    assert report.end_reason is WatchEnd.WINDOW
    assert report.xids == []
    assert not any(g.faulty() for g in report.gpus)


def test_the_fatal_list_is_the_operators() -> None:
    proc, report = watch(
        INSERVICE / "xid79-after-acceptance.yaml", "--window-s", "60", "--fatal-xids", "48"
    )
    assert proc.returncode == WatchExit.QUIET, proc.stderr
    assert report.end_reason is WatchEnd.WINDOW
    assert report.watched_s == 60.0
    assert report.gpus[3].lost  # the GPU still fell off; the window ran on


def test_window_end_reports_counter_increases_and_remap_state() -> None:
    proc, report = watch(INSERVICE / "remap-pending.yaml", "--window-s", "60")
    assert proc.returncode == WatchExit.QUIET, proc.stderr
    gpu = report.gpus[2]
    assert (gpu.remap_pending, gpu.ecc_corrected, gpu.remap_failed) == (True, 12, False)
    assert [(x.gpu, x.xid) for x in report.xids] == [(2, 63)]
    assert [g.index for g in report.gpus if g.faulty()] == [2]


def test_the_quiet_trap_window_holds_only_self_correcting_counts() -> None:
    proc, report = watch(INSERVICE / "quiet.yaml", "--window-s", "60")
    assert proc.returncode == WatchExit.QUIET, proc.stderr
    assert report.xids == []
    assert (report.gpus[1].ecc_corrected, report.gpus[4].nvlink_errors) == (3, {"replay": 2})
    assert report.gpus_lost() == 0
    assert not any(
        g.lost or g.remap_pending or g.remap_failed or g.ecc_uncorrected or g.nvlink_down
        for g in report.gpus
    )


def test_an_xid_45_burst_is_one_burst_per_gpu() -> None:
    _, report = watch(INSERVICE / "xid45-burst.yaml", "--window-s", "60")
    assert [(x.gpu, x.xid, x.count, x.first_s, x.last_s) for x in report.xids] == [
        (gpu, 45, 5, 20.0, 20.8) for gpu in range(8)
    ]


def test_xid_13_twice_on_one_gpu_is_one_burst_of_two() -> None:
    _, report = watch(INSERVICE / "xid13-twice-one-gpu.yaml", "--window-s", "60")
    assert [(x.gpu, x.xid, x.count) for x in report.xids] == [(5, 13, 2)]
    assert report.end_reason is WatchEnd.WINDOW


def test_the_burst_gap_is_the_operators() -> None:
    # the two events 20 s apart: one burst under the default 180 s, two under 10 s
    _, report = watch(
        INSERVICE / "xid13-twice-one-gpu.yaml", "--window-s", "60", "--burst-merge-s", "10"
    )
    assert [(x.gpu, x.xid, x.count, x.first_s) for x in report.xids] == [
        (5, 13, 1, 10.0),
        (5, 13, 1, 30.0),
    ]


def test_a_hidden_runtime_is_no_device_access_never_gpus_lost() -> None:
    proc, report = watch(INSERVICE / "no-device-access.yaml", "--window-s", "60")
    assert proc.returncode == WatchExit.QUIET, proc.stderr
    assert (report.end_reason, report.gpus_seen, report.gpus_expected) == (
        WatchEnd.NO_DEVICE_ACCESS,
        0,
        8,
    )
    assert report.gpus_lost() is None
    assert "NVIDIA_VISIBLE_DEVICES" in report.not_read["gpus"]


def test_a_profile_without_a_timeline_has_a_quiet_window() -> None:
    proc, report = watch(HEALTHY, "--window-s", "1800")
    assert proc.returncode == WatchExit.QUIET, proc.stderr
    assert (report.end_reason, report.watched_s, report.gpus_seen) == (WatchEnd.WINDOW, 1800, 8)
    assert not any(g.faulty() for g in report.gpus)


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--window-s", "-1"], "--window-s"),
        (["--fatal-xids", "79,abc"], "--fatal-xids"),
        (["--burst-merge-s", "-1"], "--burst-merge-s"),
        (["--no-such-flag"], "unrecognized"),
    ],
)
def test_bad_usage_writes_a_failed_report(args: list[str], why: str) -> None:
    proc, report = watch(INSERVICE / "quiet.yaml", *args)
    assert proc.returncode == WatchExit.USAGE
    assert why in proc.stderr
    assert report.end_reason is WatchEnd.FAILED
    assert report.gpus_lost() is None


def test_a_bad_profile_writes_a_failed_report(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = (INSERVICE / "xid79-after-acceptance.yaml").read_text()
    bad.write_text(text.replace("gpu: 3, xid: 79", "gpu: 9, xid: 79"))
    proc, report = watch(bad)
    assert proc.returncode == WatchExit.USAGE
    assert "GPU 9" in proc.stderr
    assert report.end_reason is WatchEnd.FAILED


def test_sigterm_ends_the_window_with_what_it_saw(tmp_path: Path) -> None:
    log = tmp_path / "term.log"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("GPUACCEPT_") and k != "NODE_NAME"
    }
    env.update({"NODE_NAME": "gpu-7", "GPUACCEPT_SIM_TIME_SCALE": "1"})
    argv = [
        *run_cli_command(),
        "--profile",
        str(INSERVICE / "xid13-twice-one-gpu.yaml"),
        "--window-s",
        "600",
        "--termination-log",
        str(log),
    ]
    with subprocess.Popen(
        argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stderr is not None
        assert "watching for 600 s" in proc.stderr.readline()  # the window has begun
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    report = decode_watch_message(log.read_text())
    assert code == WatchExit.EARLY
    assert report.end_reason is WatchEnd.TERMINATED
    assert report.watched_s < 600


def run_cli_command() -> list[str]:
    from probe_scenarios import gpuaccept_command  # noqa: PLC0415

    return [*gpuaccept_command(), "probe", WATCH_SUBCOMMAND]


def test_many_bursts_on_every_gpu_still_fit_keeping_the_fatal_one() -> None:
    profile = load_profile(HEALTHY)
    timeline = {
        "events": [
            {"atS": float(i), "gpu": i % 8, "xid": [13, 31, 43, 45, 68, 109][(i // 8) % 6]}
            for i in range(200)
        ]
        + [{"atS": 190.5, "gpu": 6, "xid": 95}]
    }
    profile = profile.model_validate(
        {**profile.model_dump(by_alias=True, exclude_none=True), "inService": timeline}
    )
    backend = SimulatedBackend(profile)
    settings = WatchSettings(
        node_name="n" * 253, boot_id=BOOT, window_s=600, fatal_xids=frozenset({95})
    )
    try:
        report = run_watch(backend, SimulatedWatch(backend, "n" * 253), settings)
    finally:
        backend.close()
    assert report.compact_size() <= TERMINATION_MESSAGE_MAX_BYTES
    assert report.end_reason is WatchEnd.FATAL_XID
    assert report.xids_dropped > 0
    assert (6, 95) in {(x.gpu, x.xid) for x in report.xids}


@pytest.mark.parametrize("shuffle", [False, True])
def test_bursts_merge_under_the_gap_and_ignore_order(shuffle: bool) -> None:
    events = [
        XidEvent(1, 13, 0.0, None),
        XidEvent(1, 13, 100.0, None),
        XidEvent(1, 13, 279.9, None),  # 179.9 s after the previous: same burst
        XidEvent(1, 13, 460.0, None),  # 180.1 s after: a new burst
        XidEvent(2, 13, 5.0, None),
        XidEvent(1, 79, 6.0, None),
    ]
    if shuffle:
        events = events[::-1]
    bursts = merge_bursts(events, {1: "GPU-a", 2: "GPU-b"})
    assert [(b.gpu, b.uuid, b.xid, b.first_s, b.last_s, b.count) for b in bursts] == [
        (1, "GPU-a", 13, 0.0, 279.9, 3),
        (2, "GPU-b", 13, 5.0, 5.0, 1),
        (1, "GPU-a", 79, 6.0, 6.0, 1),
        (1, "GPU-a", 13, 460.0, 460.0, 1),
    ]


def test_an_unknown_device_is_gpu_minus_one() -> None:
    bursts = merge_bursts([XidEvent(-1, 79, 1.0, None)], {})
    assert [(b.gpu, b.uuid) for b in bursts] == [(-1, None)]


def test_watch_leaves_the_acceptance_probe_alone() -> None:
    """The in-service profiles are healthy at the door (their expect is checked by
    test_profile_expectations); the watch subcommand is routed, not the probe."""
    proc = run_cli("--profile", INSERVICE / "xid79-after-acceptance.yaml", "--output", "json")
    assert proc.returncode == 0, proc.stderr


def _watch_timeline(timeline: dict[str, object], window_s: float = 60) -> WatchReport:
    """One in-process window over the healthy profile with ``timeline`` (R570 driver,
    so that the recovery action is read)."""
    base = load_profile(HEALTHY).model_dump(by_alias=True, exclude_none=True)
    base["driver"] = {**base["driver"], "version": "570.124.06"}
    profile = load_profile(HEALTHY).model_validate({**base, "inService": timeline})
    backend = SimulatedBackend(profile)
    settings = WatchSettings(
        node_name="gpu-7", boot_id=BOOT, window_s=window_s, fatal_xids=frozenset({79})
    )
    try:
        return run_watch(backend, SimulatedWatch(backend, "gpu-7"), settings)
    finally:
        backend.close()


@pytest.mark.parametrize(
    ("timeline", "gpu", "expected"),
    [
        ({"nvlinkDown": [{"gpu": 2, "link": 5, "atS": 10}]}, 2, {"nvlink_down": [5]}),
        (
            {"recoveryAction": [{"gpu": 4, "atS": 10, "action": "node_reboot"}]},
            4,
            {"recovery_action": "node_reboot"},
        ),
        ({"remapFailed": [{"gpu": 1, "atS": 59}]}, 1, {"remap_failed": True}),
        ({"gpusLost": [{"gpu": 6, "atS": 30}]}, 6, {"lost": True}),
        (
            {"ramps": [{"gpu": 0, "counter": "eccUncorrected", "add": 2, "fromS": 20, "toS": 20}]},
            0,
            {"ecc_uncorrected": 2},
        ),
        (
            {"ramps": [{"gpu": 3, "counter": "nvlinkCrc", "link": 1, "add": 40, "toS": 120}]},
            3,
            {"nvlink_errors": {"crc": 20}},  # half the ramp in a 60 s window
        ),
    ],
)
def test_each_timeline_change_reaches_its_gpu_alone(
    timeline: dict[str, object], gpu: int, expected: dict[str, object]
) -> None:
    report = _watch_timeline(timeline)
    lost = "gpusLost" in timeline  # NVML's event wait answers GPU_IS_LOST: the end
    assert report.end_reason is (WatchEnd.GPU_LOST if lost else WatchEnd.WINDOW)
    entry = report.gpus[gpu]
    assert {k: getattr(entry, k) for k in expected} == expected
    assert [g.index for g in report.gpus if g.faulty()] == [gpu]


def test_a_change_after_the_window_is_not_seen() -> None:
    report = _watch_timeline({"remapPending": [{"gpu": 1, "atS": 61}]})
    assert not any(g.faulty() for g in report.gpus)
