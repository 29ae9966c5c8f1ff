"""``gpuaccept probe watch``: one in-service watch window on this node.

Listens for NVML's critical-Xid events for ``--window-s`` seconds (ending early
on an Xid of ``--fatal-xids``, a lost GPU or SIGTERM), reads the GPUs' durable
state at the start and the end of the window, and writes a compact
:class:`~gpuaccept.contracts.watch_report.WatchReport` to ``--termination-log``
on every path (a watch that cannot run writes one with ``endReason: failed``).
It puts no load on the GPUs and needs no GPU of its own: its pod requests none
and sees them through ``NVIDIA_VISIBLE_DEVICES=all`` (docs/probe.md). Exit
codes: :class:`~gpuaccept.contracts.probe_invocation.WatchExit`.
"""

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

from rich.console import Console

from gpuaccept.checks.xid_classes import default_fatal_xids
from gpuaccept.contracts.probe_invocation import (
    ENV_BOOT_ID,
    ENV_GFD_GPU_COUNT,
    ENV_GFD_GPU_REPLICAS,
    ENV_NODE_GPU_CAPACITY,
    ENV_NODE_NAME,
    ENV_PROC_ROOT,
    ENV_PROFILE,
    ENV_SIM_TIME_SCALE,
    ENV_SYSFS_ROOT,
    FLAG_BURST_MERGE,
    FLAG_EXPECTED_GPUS,
    FLAG_FATAL_XIDS,
    FLAG_NODE_NAME,
    FLAG_PROC_ROOT,
    FLAG_PROFILE,
    FLAG_SYSFS_ROOT,
    FLAG_TERMINATION_LOG,
    FLAG_WINDOW,
    WatchExit,
)
from gpuaccept.contracts.report import HardwareMode
from gpuaccept.contracts.watch_report import (
    BURST_MERGE_S,
    DEFAULT_WINDOW_S,
    WatchEnd,
    WatchReport,
    encode_watch_message,
)
from gpuaccept.probe.failure import (
    OneLineParser,
    UsageError,
    default_node_name,
    termination_log_from_argv,
)
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.real import RealBackend
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.hardware.simulated_watch import SimulatedWatch
from gpuaccept.probe.inputs import InputError, env_count, sim_time_scale
from gpuaccept.probe.runner import UNKNOWN_BOOT_ID
from gpuaccept.probe.watch import (
    WallClockWatch,
    WatchHardware,
    WatchSettings,
    WatchSource,
    ended_at_once,
    run_watch,
)

MAX_WINDOW_S = 86400.0
MAX_BURST_MERGE_S = 86400.0  # the policy's bound (contracts.inservice.XidRules)
NO_DEVICE_ACCESS_SIM = (
    "no GPU in the container: the runtime refused NVIDIA_VISIBLE_DEVICES=all (simulated "
    "hardened runtime)"
)
QUIET_ENDS = (WatchEnd.WINDOW, WatchEnd.NO_DEVICE_ACCESS)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="gpuaccept probe watch",
        description="Watch this GPU node in service for one window: critical Xid events "
        "(NVML) and, at the window's end, the GPUs' durable state. No load, no GPU "
        f"requested. Exit {WatchExit.QUIET} the window ran out (or no GPU was visible), "
        f"{WatchExit.EARLY} ended early (a fatal Xid, a lost GPU, SIGTERM, a failure), "
        f"{WatchExit.USAGE} bad usage.",
    )
    parser.add_argument(
        FLAG_PROFILE,
        type=Path,
        help=f"simulate the node described by this hardware profile (env {ENV_PROFILE}); "
        f"its inService timeline plays, times x env {ENV_SIM_TIME_SCALE}",
    )
    parser.add_argument(FLAG_WINDOW, type=float, default=DEFAULT_WINDOW_S, help="seconds to watch")
    parser.add_argument(
        FLAG_FATAL_XIDS,
        default=",".join(str(x) for x in default_fatal_xids()),
        help="comma-separated Xids that end the window at once",
    )
    parser.add_argument(
        FLAG_BURST_MERGE,
        type=float,
        default=BURST_MERGE_S,
        help="events of one Xid on one GPU less than this many seconds apart are one burst "
        "(the operator passes its policy's inService.xid.burstMergeSeconds)",
    )
    parser.add_argument(
        FLAG_TERMINATION_LOG, type=Path, help="write the compact report here (for the pod)"
    )
    parser.add_argument(FLAG_NODE_NAME, help=f"default: env {ENV_NODE_NAME}, then the hostname")
    parser.add_argument(
        FLAG_EXPECTED_GPUS,
        type=int,
        help=f"the GPUs the node should have (default: env {ENV_NODE_GPU_CAPACITY}, its "
        f"nvidia.com/gpu capacity, divided by env {ENV_GFD_GPU_REPLICAS} when its GPUs are "
        "shared); the report's gpusExpected",
    )
    parser.add_argument(
        FLAG_SYSFS_ROOT, type=Path, help=f"real hardware: sysfs root (env {ENV_SYSFS_ROOT}, /sys)"
    )
    parser.add_argument(
        FLAG_PROC_ROOT, type=Path, help=f"real hardware: procfs root (env {ENV_PROC_ROOT}, /proc)"
    )
    return parser


def physical_gpus(capacity: int | None, labelled: int | None, replicas: int | None) -> int | None:
    """The GPUs NVML should see, from the node's ``nvidia.com/gpu`` capacity: under
    time-slicing or MPS the device plugin advertises each GPU ``replicas`` times
    (GFD labels ``nvidia.com/gpu.replicas`` and ``nvidia.com/gpu.count``, the GPUs), so
    the count is the label, else the capacity divided by the replicas; None when
    they do not divide (no count is better than a wrong one). Without replicas, the
    capacity. (Under MIG the capacity counts MIG devices: the operator judges a
    report against the GPUs the node's acceptance saw, not this count.)"""
    if replicas is None or replicas <= 1:
        return capacity
    if labelled:
        return labelled
    if capacity is not None and capacity % replicas == 0:
        return capacity // replicas
    return None


def parse_fatal_xids(text: str) -> frozenset[int]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not all(p.isascii() and p.isdigit() and int(p) <= 65535 for p in parts):
        raise UsageError(f"{FLAG_FATAL_XIDS}: not a comma-separated list of Xids (got {text!r})")
    return frozenset(int(p) for p in parts)


def _burst_merge(value: float) -> float:
    if not 0 <= value <= MAX_BURST_MERGE_S:  # NaN fails both
        raise UsageError(
            f"{FLAG_BURST_MERGE}: not a number of seconds from 0 to {MAX_BURST_MERGE_S:g}"
        )
    return value


def _window(value: float) -> float:
    if not 0 <= value <= MAX_WINDOW_S:  # NaN fails both
        raise UsageError(f"{FLAG_WINDOW}: not a number of seconds from 0 to {MAX_WINDOW_S:g}")
    return value


@dataclass
class _Opened:
    hardware: WatchHardware
    source: WatchSource
    hidden: bool  # a simulated hardened runtime: no GPU visible
    capacity: int | None  # what a profile states as the node's capacity


def _open(args: argparse.Namespace, node_name: str, stop: threading.Event) -> _Opened:
    profile_path = args.profile or (
        Path(os.environ[ENV_PROFILE]) if os.environ.get(ENV_PROFILE) else None
    )
    if profile_path is not None:
        profile = load_profile(profile_path)
        scale = sim_time_scale()
        backend = SimulatedBackend(profile)
        watch = SimulatedWatch(backend, node_name, time_scale=scale, stop=stop)
        node = profile.node
        capacity = physical_gpus(node.gpu_capacity, node.gfd_gpu_count, node.gfd_gpu_replicas)
        return _Opened(backend, watch, watch.no_device_access(), capacity)

    sysfs = args.sysfs_root or Path(os.environ.get(ENV_SYSFS_ROOT) or "/sys")
    proc = args.proc_root or Path(os.environ.get(ENV_PROC_ROOT) or "/proc")
    real = RealBackend(sysfs_root=sysfs, proc_root=proc)
    return _Opened(real, WallClockWatch(real.xid_listener, stop), hidden=False, capacity=None)


def _write(path: Path | None, report: WatchReport, err: Console) -> bool:
    if path is None:
        return True
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(encode_watch_message(report))
    except (OSError, ValueError) as exc:
        err.print(f"gpuaccept probe watch: cannot write {path}: {exc}", markup=False)
        return False
    return True


def _summary(report: WatchReport) -> str:
    lost = report.gpus_lost()
    return (
        f"gpuaccept probe watch: {report.node_name}: {report.end_reason.value} after "
        f"{report.watched_s:g} s of {report.window_s:g}; GPUs seen {report.gpus_seen}"
        + (f", lost {lost}" if lost else "")
        + f"; {len(report.xids)} Xid bursts"
        + (f" ({report.xids_dropped} left out)" if report.xids_dropped else "")
    )


def _stop_on_sigterm(stop: threading.Event) -> None:
    def handler(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


def _settings(args: argparse.Namespace, node_name: str, boot_id: str) -> WatchSettings:
    """The watch's settings from the command line (UsageError, InputError: bad ones);
    the GPUs expected, when not given, from the node's capacity in the environment."""
    if args.expected_gpus is not None and args.expected_gpus < 0:
        raise UsageError(f"{FLAG_EXPECTED_GPUS} must be >= 0")
    return WatchSettings(
        node_name=node_name,
        boot_id=boot_id,
        window_s=_window(args.window_s),
        fatal_xids=parse_fatal_xids(args.fatal_xids),
        burst_merge_s=_burst_merge(args.burst_merge_s),
        gpus_expected=(
            args.expected_gpus
            if args.expected_gpus is not None
            else physical_gpus(
                env_count(ENV_NODE_GPU_CAPACITY),
                env_count(ENV_GFD_GPU_COUNT),
                env_count(ENV_GFD_GPU_REPLICAS),
            )
        ),
    )


def _filled_in(opened: _Opened, settings: WatchSettings) -> WatchSettings:
    """The capacity and boot ID the opened hardware states, where the environment left
    them unknown."""
    if settings.gpus_expected is None and opened.capacity is not None:
        settings = replace(settings, gpus_expected=opened.capacity)
    if not os.environ.get(ENV_BOOT_ID):
        settings = replace(settings, boot_id=opened.hardware.boot_id() or UNKNOWN_BOOT_ID)
    return settings


def _watch(opened: _Opened, settings: WatchSettings, err: Console) -> WatchReport:
    """The watch over the opened hardware; ended at once when no GPU is visible."""
    if opened.hidden:
        return ended_at_once(
            settings, opened.hardware.mode, WatchEnd.NO_DEVICE_ACCESS, NO_DEVICE_ACCESS_SIM
        )
    err.print(
        f"gpuaccept probe watch: {settings.node_name}: watching for {settings.window_s:g} s",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    return run_watch(opened.hardware, opened.source, settings)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    err = Console(stderr=True)
    term_log = termination_log_from_argv(argv)
    node_name = default_node_name()
    boot_id = os.environ.get(ENV_BOOT_ID) or UNKNOWN_BOOT_ID
    settings = WatchSettings(
        node_name=node_name, boot_id=boot_id, window_s=0.0, fatal_xids=frozenset()
    )
    mode = HardwareMode.SIMULATED if os.environ.get(ENV_PROFILE) else HardwareMode.REAL

    def failed(message: str, code: int) -> int:
        err.print(
            f"gpuaccept probe watch: {message}", markup=False, highlight=False, soft_wrap=True
        )
        _write(term_log, ended_at_once(settings, mode, WatchEnd.FAILED, message), err)
        return code

    try:
        args = build_parser().parse_args(argv)
        node_name = (args.node_name or node_name)[:253]
        if args.profile is not None:
            mode = HardwareMode.SIMULATED
        settings = _settings(args, node_name, boot_id)
    except (UsageError, InputError) as exc:
        return failed(str(exc), WatchExit.USAGE)
    stop = threading.Event()
    _stop_on_sigterm(stop)
    try:
        opened = _open(args, node_name, stop)
    except InputError as exc:
        return failed(str(exc), WatchExit.USAGE)
    except Exception as exc:  # a watch that cannot start is no evidence, and says so
        return failed(f"watch failed: {type(exc).__name__}: {exc}", WatchExit.EARLY)
    try:
        settings = _filled_in(opened, settings)
        report = _watch(opened, settings, err)
    except Exception as exc:  # fail safe: a crashed watch reports that it saw nothing
        return failed(f"watch failed: {type(exc).__name__}: {exc}", WatchExit.EARLY)
    finally:
        opened.hardware.close()
    written = _write(term_log, report, err)
    err.print(_summary(report), markup=False, highlight=False, soft_wrap=True)
    sys.stdout.write(report.to_compact_json() + "\n")
    if not written or report.end_reason not in QUIET_ENDS:
        return WatchExit.EARLY
    return WatchExit.QUIET
