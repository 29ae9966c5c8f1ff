"""``gpuaccept probe``: measure this node, print a report, exit with the verdict.

The environment, flags and exit codes are the contract in
:mod:`gpuaccept.contracts.probe_invocation`: 0 accepted, 1 quarantined (or not
a GPU node, or the probe failed), 2 bad usage or a bad input file. With ``--termination-log`` the
compact report is written on every path, failures included, so the operator
never mistakes a missing report for success.
"""

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console

from gpuaccept.checks.budget import phase_seconds
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import BY_NAME, CHECKS
from gpuaccept.checks.report_table import TABLE_WIDTH, RunTimes, table_lines
from gpuaccept.checks.spec import AnyCheckSpec
from gpuaccept.checks.verdict import Verdict, evaluate
from gpuaccept.contracts.probe_invocation import (
    ENV_BOOT_ID,
    ENV_EXPECTED_GPU_UUIDS,
    ENV_EXPECTED_GPUS,
    ENV_GFD_GPU_COUNT,
    ENV_GFD_GPU_REPLICAS,
    ENV_NODE_GPU_CAPACITY,
    ENV_NODE_NAME,
    ENV_POLICY,
    ENV_PROC_ROOT,
    ENV_PROFILE,
    ENV_SYSFS_ROOT,
    FABRIC_SUBCOMMAND,
    FLAG_CHECKS,
    FLAG_EXPECTED_GPUS,
    FLAG_NODE_NAME,
    FLAG_OUTPUT,
    FLAG_POLICY,
    FLAG_PROC_ROOT,
    FLAG_PROFILE,
    FLAG_SYSFS_ROOT,
    FLAG_TERMINATION_LOG,
    WATCH_SUBCOMMAND,
    ProbeExit,
)
from gpuaccept.contracts.report import CheckResult, HardwareMode, ProbeReport
from gpuaccept.probe.fabric_cli import main as fabric_main
from gpuaccept.probe.failure import (
    OneLineParser,
    UsageError,
    default_node_name,
    failure_report,
    termination_log_from_argv,
    write_termination_log,
)
from gpuaccept.probe.hardware.base import HardwareBackend
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.real import RealBackend
from gpuaccept.probe.hardware.simulated import SimulatedBackend, simulated_uuid
from gpuaccept.probe.hardware.simulated_visible import (
    ENV_VISIBLE_DEVICES,
    VisibleDevicesError,
    given_profile,
    visible_gpus,
)
from gpuaccept.probe.inputs import (
    InputError,
    default_policy,
    env_count,
    load_policy,
    policy_from_json,
    sim_time_scale,
)
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.measure.context import NodeGpuCounts
from gpuaccept.probe.output import CheckProgress, json_output
from gpuaccept.probe.process_clock import process_age_s
from gpuaccept.probe.runner import RunSetup, measuring_order, run_probe
from gpuaccept.probe.watch_cli import main as watch_main

EXIT_ACCEPTED = ProbeExit.ACCEPTED
EXIT_QUARANTINED = ProbeExit.QUARANTINED
EXIT_USAGE = ProbeExit.USAGE
MAX_PUBLISHED_UUIDS = 64  # GpuCountObserved's lists hold at most this many


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="gpuaccept probe",
        description="Measure this GPU node and judge it against a policy. "
        f"Exit {ProbeExit.ACCEPTED} accepted, {ProbeExit.QUARANTINED} quarantined, "
        f"{ProbeExit.USAGE} bad usage or bad input file.",
        epilog="checks, in the order they run: "
        + "; ".join(f"{c.name} ({c.summary})" for c in CHECKS)
        + f". Two-node fabric all-reduce: gpuaccept probe {FABRIC_SUBCOMMAND} --help. "
        f"In-service watch window: gpuaccept probe {WATCH_SUBCOMMAND} --help.",
    )
    parser.add_argument(
        FLAG_PROFILE,
        type=Path,
        help=f"simulate the node described by this hardware profile (env {ENV_PROFILE})",
    )
    parser.add_argument(
        FLAG_POLICY,
        type=Path,
        help=f"ProbePolicy YAML/JSON, or a NodeAcceptancePolicy manifest "
        f"(env {ENV_POLICY}: the policy as JSON text; default: the packaged "
        "policies/default-h100-h200.yaml)",
    )
    parser.add_argument(FLAG_OUTPUT, choices=("table", "json"), default="table")
    parser.add_argument(
        FLAG_CHECKS,
        help="comma-separated checks to run (the others are disabled): "
        + ",".join(c.name for c in CHECKS),
    )
    parser.add_argument(
        FLAG_TERMINATION_LOG, type=Path, help="write the compact report here (for the pod)"
    )
    parser.add_argument(FLAG_NODE_NAME, help=f"default: env {ENV_NODE_NAME}, then the hostname")
    parser.add_argument(
        FLAG_EXPECTED_GPUS,
        type=int,
        help=f"the node's allocatable nvidia.com/gpu (env {ENV_EXPECTED_GPUS}); the "
        f"operator also passes its capacity (env {ENV_NODE_GPU_CAPACITY}) and the "
        f"nvidia.com/gpu.count label (env {ENV_GFD_GPU_COUNT})",
    )
    parser.add_argument(
        FLAG_SYSFS_ROOT, type=Path, help=f"real hardware: sysfs root (env {ENV_SYSFS_ROOT}, /sys)"
    )
    parser.add_argument(
        FLAG_PROC_ROOT, type=Path, help=f"real hardware: procfs root (env {ENV_PROC_ROOT}, /proc)"
    )
    return parser


def _resolve_policy(args: argparse.Namespace) -> ProbePolicy:
    if args.policy is not None:
        return load_policy(args.policy)
    text = os.environ.get(ENV_POLICY)
    if text:
        return policy_from_json(text)
    return default_policy()


def _select_checks(policy: ProbePolicy, spec: str | None) -> ProbePolicy:
    if not spec:
        return policy
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        raise UsageError(
            f"--checks: unknown check {', '.join(unknown) or '(none)'}; known: {', '.join(BY_NAME)}"
        )
    update = {
        name: getattr(policy, name).model_copy(update={"enabled": False})
        for name in BY_NAME
        if name not in names
    }
    return policy.model_copy(update=update)


def _node_gpus(args: argparse.Namespace) -> NodeGpuCounts:
    """The node's GPU counts from the flags and the operator's env vars."""
    if args.expected_gpus is not None and args.expected_gpus < 0:
        raise UsageError(f"{FLAG_EXPECTED_GPUS} must be >= 0")
    allocatable = (
        int(args.expected_gpus) if args.expected_gpus is not None else env_count(ENV_EXPECTED_GPUS)
    )
    return NodeGpuCounts(
        allocatable=allocatable,
        capacity=env_count(ENV_NODE_GPU_CAPACITY),
        labelled=env_count(ENV_GFD_GPU_COUNT),
        replicas=env_count(ENV_GFD_GPU_REPLICAS),
        published_uuids=_published_uuids(),
    )


def _published_uuids() -> tuple[str, ...] | None:
    """A DRA node's pool (env GPUACCEPT_EXPECTED_GPU_UUIDS: comma-separated GPU UUIDs)."""
    text = os.environ.get(ENV_EXPECTED_GPU_UUIDS)
    if text is None:
        return None
    uuids = tuple(part.strip() for part in text.split(",") if part.strip())
    bad = [u for u in uuids if not u.startswith(("GPU-", "MIG-")) or len(u) > 64]
    if bad or len(set(uuids)) != len(uuids) or len(uuids) > MAX_PUBLISHED_UUIDS:
        raise UsageError(
            f"{ENV_EXPECTED_GPU_UUIDS}: not a list of distinct GPU UUIDs (GPU-...): {text[:120]}"
        )
    return uuids


def render_table(
    report: ProbeReport, verdict: Verdict, out: Console, elapsed_s: float | None = None
) -> None:
    """The final table, every row one line at most 100 columns wide."""
    width = min(out.width, TABLE_WIDTH) if out.is_terminal else TABLE_WIDTH
    lines = table_lines(report, verdict, width=width, times=RunTimes(elapsed_s=elapsed_s))
    for line in lines:
        out.print(line, markup=False, highlight=False, soft_wrap=True)


@dataclass(frozen=True)
class _FailureReporter:
    """Reports a probe that could not run: a one-line error, and with
    ``--termination-log`` a failure report for the operator."""

    err: Console
    term_log: Path | None
    node_name: str
    boot_id: str | None
    mode: HardwareMode = HardwareMode.REAL

    def write(self, message: str, *, boot_id: str | None) -> None:
        if self.term_log is not None:
            report = failure_report(
                message, node_name=self.node_name, boot_id=boot_id, mode=self.mode
            )
            write_termination_log(self.term_log, report, self.err)

    def bad_input(self, message: str) -> int:
        self.err.print(
            f"gpuaccept probe: error: {message}", markup=False, highlight=False, soft_wrap=True
        )
        self.write(message, boot_id=self.boot_id)
        return EXIT_USAGE

    def crashed(self, message: str, *, boot_id: str | None) -> int:
        self.err.print(f"gpuaccept probe: {message}", markup=False, highlight=False, soft_wrap=True)
        self.write(message, boot_id=boot_id or self.boot_id)
        return EXIT_QUARANTINED


def _profile_path(args: argparse.Namespace) -> Path | None:
    if args.profile is not None:
        return Path(args.profile)
    return Path(os.environ[ENV_PROFILE]) if os.environ.get(ENV_PROFILE) else None


def _open_hardware(
    args: argparse.Namespace, profile_path: Path | None, node: NodeGpuCounts
) -> tuple[HardwareBackend, NodeGpuCounts]:
    """The backend to measure, and the node's GPU counts (a profile may state them;
    what the operator passed wins)."""
    if profile_path is not None:
        profile = load_profile(profile_path)
        time_scale = sim_time_scale()
        stated = profile.node
        node = NodeGpuCounts(
            allocatable=node.allocatable if node.allocatable is not None else stated.allocatable,
            capacity=node.capacity if node.capacity is not None else stated.gpu_capacity,
            labelled=node.labelled if node.labelled is not None else stated.gfd_gpu_count,
            replicas=node.replicas if node.replicas is not None else stated.gfd_gpu_replicas,
            published_uuids=node.published_uuids,
        )
        node_name = args.node_name or default_node_name()
        uuids = [simulated_uuid(node_name, i) for i in range(profile.gpus.count)]
        try:
            given = visible_gpus(os.environ.get(ENV_VISIBLE_DEVICES), uuids)
        except VisibleDevicesError as exc:
            raise InputError(str(exc)) from exc
        backend = SimulatedBackend(
            given_profile(profile, given),
            time_scale=time_scale,
            node_name=node_name,
            host_indices=given,
        )
        return backend, node

    sysfs = args.sysfs_root or Path(os.environ.get(ENV_SYSFS_ROOT) or "/sys")
    proc = args.proc_root or Path(os.environ.get(ENV_PROC_ROOT) or "/proc")
    return RealBackend(sysfs_root=sysfs, proc_root=proc), node


def _gpu_count(hardware: HardwareBackend) -> int:
    """The GPUs the budget is for (0 where the backend cannot list them: the run
    reports why)."""
    try:
        return len(hardware.gpus())
    except Exception:
        return 0


def _measure(
    hardware: HardwareBackend, policy: ProbePolicy, run: RunSetup, err: Console
) -> ProbeReport:
    """Run the probe, showing on ``err`` each check as it runs or finishes."""
    budget = phase_seconds(policy, max(_gpu_count(hardware), 1))
    enabled = [c for c in run.checks if policy.section(c).enabled]
    progress = CheckProgress(
        err=err,
        checks=measuring_order(enabled),
        budget=budget,
        simulated=hardware.mode is HardwareMode.SIMULATED,
    )

    def finished(check: AnyCheckSpec, result: CheckResult) -> None:
        if policy.section(check).enabled:
            progress.finished(check, result)

    with progress.shown():
        context = replace(run.context, progress=progress.note)
        return run_probe(
            hardware,
            policy,
            replace(run, context=context, on_check=progress.started, on_result=finished),
        )


def _warn_no_gpu(report: ProbeReport, hardware: HardwareBackend, err: Console) -> None:
    if report.summary.gpu_count == 0 and report.hardware is HardwareMode.REAL:
        problem = hardware.gpu_problem()
        err.print(
            "gpuaccept probe: no NVIDIA GPU found on this machine"
            + (f" ({problem})" if problem else "")
            + "; it is not an accepted GPU node.",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _print(output: str, report: ProbeReport, verdict: Verdict, out: Console) -> None:
    """The report and its verdict on standard output: JSON, or a table."""
    elapsed = process_age_s()
    if output == "json":
        sys.stdout.write(json_output(report, verdict, elapsed))
    else:
        render_table(report, verdict, out, elapsed)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    subcommands = {FABRIC_SUBCOMMAND: fabric_main, WATCH_SUBCOMMAND: watch_main}
    if argv[:1] and argv[0] in subcommands:
        return subcommands[argv[0]](argv[1:])
    err = Console(stderr=True)
    out = Console()
    parser = build_parser()
    failures = _FailureReporter(
        err=err,
        term_log=termination_log_from_argv(argv),
        node_name=default_node_name(),
        boot_id=os.environ.get(ENV_BOOT_ID) or None,
    )
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        return failures.bad_input(str(exc))
    profile_path = _profile_path(args)
    failures = replace(
        failures,
        node_name=(args.node_name or failures.node_name)[:253],
        mode=HardwareMode.REAL if profile_path is None else HardwareMode.SIMULATED,
    )
    try:
        policy = _select_checks(_resolve_policy(args), args.checks)
        hardware, node_gpus = _open_hardware(args, profile_path, _node_gpus(args))
    except (InputError, UsageError) as exc:
        return failures.bad_input(str(exc))
    except Exception as exc:  # fail safe: hardware that cannot be set up is a failed probe
        return failures.crashed(f"probe failed: {type(exc).__name__}: {exc}", boot_id=None)

    run = RunSetup(
        node_name=failures.node_name,
        boot_id=failures.boot_id,
        context=ProbeContext(node_gpus=node_gpus),
        process_age=process_age_s,
    )
    try:
        report = _measure(hardware, policy, run, err)
        verdict = evaluate(report, policy)
    except Exception as exc:  # fail safe: a crashed probe is a failed probe, with a report
        message = f"probe failed: {type(exc).__name__}: {exc}"
        return failures.crashed(message, boot_id=failures.boot_id or hardware.boot_id())
    finally:
        hardware.close()

    written = True
    if failures.term_log is not None:
        written = write_termination_log(failures.term_log, report, err)
    _warn_no_gpu(report, hardware, err)
    _print(args.output, report, verdict, out)
    if not written:
        return EXIT_QUARANTINED
    return EXIT_ACCEPTED if verdict.accepted else EXIT_QUARANTINED
