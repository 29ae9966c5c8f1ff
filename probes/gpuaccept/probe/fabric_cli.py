"""``gpuaccept probe fabric``: this node's half of a two-node all-reduce.

One pod on each node of a pair runs it (docs/fabric.md): the rank-0 pod first,
then the other with the rank-0 pod's IP as ``--rendezvous-address``. Each writes
a :class:`ProbeReport` with one result, ``fabric_allreduce``, to the
termination log, on every path: a partner that never comes is an ``error``
result with ``phase: rendezvous`` once ``--rendezvous-timeout-s`` has passed,
and the whole run stops at ``--deadline-s``. Exit 0 when the pair's busbw met
``--min-busbw-gbps`` (or none was given), 1 otherwise, 2 on a bad input (one
line naming the field).

Real hardware: NCCL, one rank per local GPU. With ``--profile`` (a simulated
node): one gloo rank over the loopback, held to the profile's
``interNode.busbwGBps`` scaled down :data:`LOOPBACK_SCALE` times, and reported
scaled back up (``source: "loopback"``; docs/profile-format.md).
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from gpuaccept.checks import fabric_allreduce
from gpuaccept.checks.fabric_allreduce import (
    CHECK,
    MAX_NCCL_ENV,
    FabricAllreduceObserved,
    judge_fabric,
)
from gpuaccept.checks.spec import clip
from gpuaccept.contracts.probe_invocation import (
    DEFAULT_RENDEZVOUS_PORT,
    ENV_BOOT_ID,
    ENV_EXPECTED_GPUS,
    ENV_FABRIC_NONCE,
    ENV_POD_IP,
    ENV_PROFILE,
    FLAG_ALLOW_SOCKET_TRANSPORT,
    FLAG_BIND_ADDRESS,
    FLAG_DEADLINE,
    FLAG_LOCAL_RANKS,
    FLAG_MAX_MESSAGE_BYTES,
    FLAG_MIN_BUSBW,
    FLAG_NODE_NAME,
    FLAG_NODE_RANK,
    FLAG_NODES,
    FLAG_OUTPUT,
    FLAG_PROFILE,
    FLAG_RENDEZVOUS_ADDRESS,
    FLAG_RENDEZVOUS_PORT,
    FLAG_RENDEZVOUS_TIMEOUT,
    FLAG_TERMINATION_LOG,
    ProbeExit,
)
from gpuaccept.contracts.report import (
    CheckResult,
    CheckStatus,
    HardwareMode,
    HardwareSummary,
    ProbeReport,
)
from gpuaccept.probe import PROBE_VERSION
from gpuaccept.probe.fabric_run import (
    FabricError,
    FabricJob,
    FabricMeasurement,
    Rendezvous,
    run_fabric,
)
from gpuaccept.probe.failure import (
    OneLineParser,
    UsageError,
    default_node_name,
    failure_report,
    termination_log_from_argv,
    write_termination_log,
)
from gpuaccept.probe.hardware.allreduce import AllreduceTiming, Backend
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.inputs import InputError
from gpuaccept.probe.runner import UNKNOWN_BOOT_ID

LOOPBACK_SCALE = 10000.0
"""A simulated node's profile GB/s per loopback GB/s: 400 GB/s becomes 0.04 GB/s,
far below what gloo moves over the loopback even on a starved CPU, so the hold, not
the loopback, sets the pace. (At 1000, a 4 MiB all-reduce took 10 ms, and a healthy
pair measured 275 of 390 GB/s on a 2-core machine running four test workers.)"""
MIN_MESSAGE_BYTES = 1 << 20
DEFAULT_MAX_MESSAGE_BYTES = fabric_allreduce.DEFAULT_MAX_MESSAGE_BYTES
SIMULATED_MESSAGE_BYTES = (1 << 18, 1 << 19, 1 << 20, 1 << 21, 1 << 22)
SIMULATED_ITERATIONS = 5
SIMULATED_WARMUP = 2
MAX_NODES = 64
MAX_LOCAL_RANKS = 64
MAX_SECONDS = 86_400.0
NCCL_ENV_VALUE_MAX = 64
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="gpuaccept probe fabric",
        description="Run this node's half of a two-node all-reduce and report the pair's "
        f"busbw. Exit {ProbeExit.ACCEPTED} passed, {ProbeExit.QUARANTINED} failed or broke, "
        f"{ProbeExit.USAGE} bad input.",
    )
    parser.add_argument(
        FLAG_RENDEZVOUS_ADDRESS, required=True, help="the rank-0 pod's IP (its own, on rank 0)"
    )
    parser.add_argument(FLAG_RENDEZVOUS_PORT, type=int, default=DEFAULT_RENDEZVOUS_PORT)
    parser.add_argument(FLAG_NODES, type=int, default=2, help="nodes in the test (default 2)")
    parser.add_argument(FLAG_NODE_RANK, type=int, required=True, help="this node: 0 .. nodes-1")
    parser.add_argument(
        FLAG_LOCAL_RANKS,
        type=int,
        help=f"this node's GPUs, one rank each (default: env {ENV_EXPECTED_GPUS}; "
        "a simulated node runs one gloo rank)",
    )
    parser.add_argument(
        FLAG_BIND_ADDRESS, help=f"this pod's IP, to listen on (default: env {ENV_POD_IP})"
    )
    parser.add_argument(FLAG_PROFILE, type=Path, help=f"a simulated node (env {ENV_PROFILE})")
    parser.add_argument(FLAG_MIN_BUSBW, type=float, help="lowest passing busbw, GB/s")
    parser.add_argument(
        FLAG_ALLOW_SOCKET_TRANSPORT,
        action="store_true",
        help="a pair over NCCL's socket transport (TCP) may pass (policy fabric.requireRdma: "
        "false)",
    )
    parser.add_argument(
        FLAG_MAX_MESSAGE_BYTES,
        type=int,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        help="the largest message of the sweep (from 1 MiB, doubling), the one judged",
    )
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(FLAG_RENDEZVOUS_TIMEOUT, type=float, default=300.0)
    parser.add_argument(FLAG_DEADLINE, type=float, default=900.0, help="stop the run after this")
    parser.add_argument(FLAG_TERMINATION_LOG, type=Path)
    parser.add_argument(FLAG_NODE_NAME)
    parser.add_argument(FLAG_OUTPUT, choices=("table", "json"), default="table")
    return parser


@dataclass(frozen=True)
class FabricRun:
    job: FabricJob
    deadline_s: float
    min_busbw_gbps: float | None
    mode: HardwareMode
    require_rdma: bool = True
    scale: float = 1.0


def _ip(flag: str, text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise UsageError(f"{flag}: not an IP address (got {text[:64]!r})") from None


def _within(flag: str, value: float, low: float, high: float) -> None:
    if not math.isfinite(value) or not low <= value <= high:
        raise UsageError(f"{flag}: must be between {low:g} and {high:g} (got {value:g})")


def _local_ranks(args: argparse.Namespace) -> int:
    if args.local_ranks is not None:
        return int(args.local_ranks)
    raw = os.environ.get(ENV_EXPECTED_GPUS, "").strip()
    if not raw:
        raise UsageError(f"{FLAG_LOCAL_RANKS}: required (or env {ENV_EXPECTED_GPUS})")
    if not raw.isascii() or not raw.isdigit():
        raise UsageError(f"{ENV_EXPECTED_GPUS}: not a non-negative integer (got {raw[:32]!r})")
    return int(raw)


def _sizes(max_bytes: int) -> tuple[int, ...]:
    sizes = [MIN_MESSAGE_BYTES]
    while sizes[-1] * 2 <= max_bytes:
        sizes.append(sizes[-1] * 2)
    return tuple(s for s in sizes if s <= max_bytes) or (max_bytes,)


_NONCE = re.compile(r"[0-9a-f]{32,128}")


def _nonce(text: str) -> str:
    """The pair's nonce: empty (a run by hand, no secret), or 32 to 128 hex digits."""
    if text and not _NONCE.fullmatch(text):
        raise UsageError(
            f"{ENV_FABRIC_NONCE}: 32 to 128 lowercase hex digits (got {len(text)} characters)"
        )
    return text


def plan_run(args: argparse.Namespace) -> FabricRun:
    """The run the arguments describe; raises UsageError or InputError naming the field."""
    address = _ip(FLAG_RENDEZVOUS_ADDRESS, args.rendezvous_address)
    bind_text = args.bind_address or os.environ.get(ENV_POD_IP) or None
    bind = (
        _ip(FLAG_BIND_ADDRESS if args.bind_address else ENV_POD_IP, bind_text)
        if bind_text
        else None
    )
    _within(FLAG_RENDEZVOUS_PORT, args.rendezvous_port, 1, 65535)
    _within(FLAG_NODES, args.nodes, 2, MAX_NODES)
    _within(FLAG_NODE_RANK, args.node_rank, 0, args.nodes - 1)
    _within(FLAG_MAX_MESSAGE_BYTES, args.max_message_bytes, 1 << 10, 1 << 34)
    _within("--iterations", args.iterations, 1, 1000)
    _within("--warmup", args.warmup, 0, 100)
    _within(FLAG_RENDEZVOUS_TIMEOUT, args.rendezvous_timeout_s, 1, MAX_SECONDS)
    _within(FLAG_DEADLINE, args.deadline_s, 1, MAX_SECONDS)
    if args.min_busbw_gbps is not None:
        _within(FLAG_MIN_BUSBW, args.min_busbw_gbps, 0, 1e6)
    profile_path = args.profile or (Path(p) if (p := os.environ.get(ENV_PROFILE)) else None)
    timing = AllreduceTiming(args.iterations, args.warmup, args.deadline_s)
    backend: Backend = "nccl"
    local_ranks, sizes, hold, scale = 0, _sizes(args.max_message_bytes), None, 1.0
    if profile_path is not None:
        profile = load_profile(profile_path)
        if profile.inter_node is None:
            raise InputError(f"{profile_path}: interNode: required by the fabric probe")
        backend, local_ranks, scale = "gloo", 1, LOOPBACK_SCALE
        hold = profile.inter_node.busbw_gbps / LOOPBACK_SCALE
        sizes = tuple(s for s in SIMULATED_MESSAGE_BYTES if s <= args.max_message_bytes) or (
            args.max_message_bytes,
        )
        timing = AllreduceTiming(SIMULATED_ITERATIONS, SIMULATED_WARMUP, args.deadline_s)
    else:
        local_ranks = _local_ranks(args)
        _within(FLAG_LOCAL_RANKS, local_ranks, 1, MAX_LOCAL_RANKS)
    rendezvous = Rendezvous(
        address=address,
        port=args.rendezvous_port,
        nodes=args.nodes,
        node_rank=args.node_rank,
        local_ranks=local_ranks,
        bind_address=bind,
        timeout_s=args.rendezvous_timeout_s,
        nonce=_nonce(os.environ.get(ENV_FABRIC_NONCE, "")),
    )
    return FabricRun(
        job=FabricJob(rendezvous, backend, sizes, timing, hold_gbps=hold),
        deadline_s=args.deadline_s,
        min_busbw_gbps=args.min_busbw_gbps,
        require_rdma=not args.allow_socket_transport,
        mode=HardwareMode.REAL if profile_path is None else HardwareMode.SIMULATED,
        scale=scale,
    )


def nccl_env(environ: dict[str, str] | os._Environ[str]) -> dict[str, str] | None:
    """The NCCL_* settings the run had (at most :data:`MAX_NCCL_ENV`, values clipped)."""
    found = {
        k: clip(v, NCCL_ENV_VALUE_MAX) for k, v in sorted(environ.items()) if k.startswith("NCCL_")
    }
    return dict(list(found.items())[:MAX_NCCL_ENV]) or None


def observe(
    run: FabricRun, measured: FabricMeasurement | None, phase: str | None
) -> FabricAllreduceObserved:
    rdv = run.job.rendezvous
    fields: dict[str, object] = {
        "backend": run.job.backend,
        "source": "loopback" if run.mode is HardwareMode.SIMULATED else "measured",
        "nodes": rdv.nodes,
        "nodeRank": rdv.node_rank,
        "localRanks": rdv.local_ranks,
        "ranks": rdv.world,
        "rendezvous": rdv.endpoint,
        "timing": "host-batch-mean",
        "phase": phase,
        "ncclEnv": nccl_env(os.environ) if run.job.backend == "nccl" else None,
    }
    if measured is not None:
        largest = measured.sweep[-1]
        fields |= {
            "bytes": largest[0],
            "busbwGBps": round(measured.busbw_gbps * run.scale, 2),
            "algbwGBps": round(measured.algbw_gbps * run.scale, 2),
            "sweep": [(size, round(busbw * run.scale, 1)) for size, _, _, busbw in measured.sweep],
            "transport": measured.transport,
        }
    return FabricAllreduceObserved.model_validate(fields)


def _boot_id() -> str:
    if os.environ.get(ENV_BOOT_ID):
        return os.environ[ENV_BOOT_ID][:64]
    try:
        return BOOT_ID_PATH.read_text().strip()[:64] or UNKNOWN_BOOT_ID
    except OSError:
        return UNKNOWN_BOOT_ID


def measure_fabric(run: FabricRun, node_name: str) -> ProbeReport:
    started_at, clock = datetime.now(UTC), time.monotonic()
    measured: FabricMeasurement | None = None
    phase: str | None = None
    error = ""
    try:
        measured = run_fabric(run.job, run.deadline_s)
    except FabricError as exc:
        phase, error = exc.phase, str(exc)
    observed = observe(run, measured, phase)
    judged = judge_fabric(observed, run.min_busbw_gbps, require_rdma=run.require_rdma)
    result = CheckResult(
        check=CHECK,
        status=CheckStatus.ERROR if error else judged.status,
        observed=observed.to_observed(),
        expected=judged.expected,
        message=clip(error) if error else judged.message,
        duration_s=round(time.monotonic() - clock, 3),
    )
    local_gpus = run.job.rendezvous.local_ranks if run.job.backend == "nccl" else 0
    return ProbeReport(
        node_name=node_name,
        boot_id=_boot_id(),
        probe_version=PROBE_VERSION,
        started_at=started_at,
        finished_at=datetime.now(UTC),
        hardware=run.mode,
        summary=HardwareSummary(gpu_count=local_gpus),
        results=[result],
    )


def main(argv: Sequence[str]) -> int:
    err, out = Console(stderr=True), Console()
    argv = list(argv)
    node_name = default_node_name()
    try:
        args = build_parser().parse_args(argv)
        node_name = (args.node_name or node_name)[:253]
        run = plan_run(args)
    except (UsageError, InputError) as exc:
        message = f"gpuaccept probe fabric: error: {exc}"
        err.print(message, markup=False, highlight=False, soft_wrap=True)
        term_log = termination_log_from_argv(argv)
        if term_log is not None:
            report = failure_report(
                str(exc), node_name=node_name, boot_id=_boot_id(), mode=HardwareMode.REAL
            )
            write_termination_log(term_log, report, err)
        return ProbeExit.USAGE
    report = measure_fabric(run, node_name)
    written = args.termination_log is None or write_termination_log(
        args.termination_log, report, err
    )
    result = report.results[0]
    if args.output == "json":
        sys.stdout.write(report.model_dump_json(by_alias=True, exclude_none=True, indent=2) + "\n")
    else:
        out.print(
            f"{node_name}  {result.check}  {result.status.value}: {result.message}",
            markup=False,
            highlight=False,
        )
    passed = result.status is CheckStatus.PASS
    return ProbeExit.ACCEPTED if passed and written else ProbeExit.QUARANTINED
