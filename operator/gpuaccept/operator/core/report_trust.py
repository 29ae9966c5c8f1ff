"""Whether a probe pod's result can be trusted (pure).

Three steps, each of which can only ever take trust away:

1. :func:`validate_report`: the termination message is a valid report for
   exactly this node and this boot;
2. :func:`report_problem`: the report is what this operator may judge
   (``hardware: simulated`` only when told so) and agrees with itself and with
   the node (GPU counts: allocatable and capacity as the operator passed them;
   every result's GPU counts, GPUs and figures, :mod:`gpuaccept.checks.consistency`),
   and :func:`freshness_problem`: its timestamps fall in its pod's lifetime;
3. :func:`outcome_problem`: once judged, the verdict agrees with how the pod
   ended (exit code, phase, deadline) and covers every GPU the node advertises.

:func:`trusted_report` is steps 1 and 2 for every report the operator reads (a
probe pod's, a fabric pod's, a stored one judged again), always against the
node's allocatable and capacity. Whatever fails a step is an attempt error,
never an accepted node.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from pydantic import ValidationError

from gpuaccept.checks import gpu_count, nccl_allreduce
from gpuaccept.checks.consistency import report_inconsistency
from gpuaccept.checks.spec import AnyCheckSpec
from gpuaccept.checks.verdict import Verdict
from gpuaccept.contracts.api import TERMINATION_MESSAGE_MAX_BYTES
from gpuaccept.contracts.probe_invocation import ProbeExit
from gpuaccept.contracts.report import (
    HardwareMode,
    ProbeReport,
    ReportTooLargeError,
    decode_termination_message,
)
from gpuaccept.operator.core.model import NodeView, PodView

REPORT_MISMATCH = "ReportMismatch"
SIMULATED_REPORT = "SimulatedReport"
PROBE_TIMEOUT = "ProbeTimeout"
PROBE_FAILED = "ProbeFailed"
DEADLINE_EXCEEDED = "DeadlineExceeded"  # the pod reason when activeDeadlineSeconds ran out
# How far a report's timestamps (the node's clock) may lie outside its pod's lifetime:
# creationTimestamp is the API server's clock, finishedAt the kubelet's (whole seconds).
# docs/report-format.md ("Freshness").
CLOCK_SKEW = timedelta(seconds=60)


@dataclass(frozen=True)
class ReportProblem:
    # one word: InvalidReport | ReportTooLargeError | ReportMismatch | SimulatedReport
    # | ProbeTimeout | ProbeFailed
    reason: str
    message: str


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0] if error.errors() else {"loc": (), "msg": str(error)}
    loc = ".".join(str(part) for part in first.get("loc", ())) or "report"
    return f"{loc}: {first.get('msg', '')}"


def validate_report(message: str, *, node_name: str, boot_id: str) -> ProbeReport | ReportProblem:
    """The report in ``message``, or why it cannot be trusted."""
    if not message.strip():
        return ReportProblem("InvalidReport", "empty termination message")
    if len(message.encode()) > TERMINATION_MESSAGE_MAX_BYTES:
        return ReportProblem(
            "ReportTooLargeError",
            f"termination message is {len(message.encode())} bytes, over "
            f"{TERMINATION_MESSAGE_MAX_BYTES}",
        )
    try:
        report = decode_termination_message(message)
    except ReportTooLargeError as error:
        return ReportProblem("ReportTooLargeError", str(error))
    except ValidationError as error:
        return ReportProblem("InvalidReport", f"report does not validate: {_first_error(error)}")
    except ValueError as error:  # not JSON, a key twice, NaN or Infinity
        return ReportProblem("InvalidReport", str(error)[:200])
    if report.node_name != node_name:
        return ReportProblem(
            REPORT_MISMATCH, f"report is for node {report.node_name!r}, not {node_name!r}"
        )
    if report.boot_id != boot_id:
        return ReportProblem(
            REPORT_MISMATCH,
            f"report bootID {report.boot_id!r} does not match the node's {boot_id!r}",
        )
    return report


def trusted_report(
    source: str | ProbeReport,
    node: NodeView,
    *,
    accept_simulated: bool,
    pod: PodView | None = None,
) -> ProbeReport | ReportProblem:
    """The report, or why it cannot be judged for ``node``: ``source`` is a pod's
    termination message (validated for this node and boot first) or a report read
    before (stored in status, validated then), checked against the node as it is:
    its counts, every result's claims (:mod:`gpuaccept.checks.consistency`) and, with
    the ``pod`` it came from, its timestamps against the pod's lifetime."""
    if isinstance(source, str):
        report = validate_report(source, node_name=node.name, boot_id=node.boot_id)
        if not isinstance(report, ProbeReport):
            return report
    else:
        report = source
    problem = report_problem(
        report,
        node_gpus=node.gpus,
        node_capacity=node.gpu_capacity,
        accept_simulated=accept_simulated,
    )
    if problem is None and pod is not None:
        problem = freshness_problem(report, pod)
    return report if problem is None else problem


def freshness_problem(report: ProbeReport, pod: PodView) -> ReportProblem | None:
    """Why the report cannot come from ``pod``'s run, or None: it starts before it ends,
    not before the pod was created, and ends by the time the container finished (each
    within :data:`CLOCK_SKEW`; a time the pod does not give is not compared)."""
    started, finished = report.started_at, report.finished_at
    if started.tzinfo is None or finished.tzinfo is None:
        return ReportProblem(REPORT_MISMATCH, "report timestamps carry no time zone")
    if finished < started:
        return ReportProblem(
            REPORT_MISMATCH, f"report finished ({finished:%FT%TZ}) before it started"
        )
    if pod.created is not None and started < pod.created - CLOCK_SKEW:
        return ReportProblem(
            REPORT_MISMATCH,
            f"report started at {started:%FT%TZ}, before its pod {pod.name} was created "
            f"({pod.created:%FT%TZ})",
        )
    if pod.finished is not None and finished > pod.finished + CLOCK_SKEW:
        return ReportProblem(
            REPORT_MISMATCH,
            f"report finished at {finished:%FT%TZ}, after its pod {pod.name} ended "
            f"({pod.finished:%FT%TZ})",
        )
    return None


def _observed(report: ProbeReport, check: AnyCheckSpec) -> object | None:
    """``check``'s observed value as its model; None when absent or unparseable
    (the judge then rules on it: an unparseable value is an error, never a pass)."""
    result = report.result(check.name)
    if result is None or result.observed is None:
        return None
    try:
        parsed: object = check.parse(result.observed)
    except ValueError:
        return None
    return parsed


def report_problem(
    report: ProbeReport,
    *,
    node_gpus: int,
    node_capacity: int,
    accept_simulated: bool,
) -> ReportProblem | None:
    """Why a valid report still cannot be judged for this node, or None.

    ``node_gpus`` is the node's allocatable ``nvidia.com/gpu``: the probe pod
    requests all of them and is told the count (``GPUACCEPT_EXPECTED_GPUS``),
    so the report must echo it and cannot see more. ``node_capacity`` is the
    node's capacity (``GPUACCEPT_NODE_GPU_CAPACITY``), which the report must
    echo too. Its own counts (summary, ``gpu_count.visible``, the all-reduce
    ranks) must agree with each other.
    """
    if report.hardware is HardwareMode.SIMULATED and not accept_simulated:
        return ReportProblem(
            SIMULATED_REPORT,
            "the report is from simulated hardware (a hardware profile); this operator "
            "judges only real hardware (--accept-simulated-reports is off)",
        )
    seen = report.summary.gpu_count
    if seen > node_gpus:
        return ReportProblem(
            REPORT_MISMATCH, f"report covers {seen} GPUs, the node has only {node_gpus} allocatable"
        )
    count = _observed(report, gpu_count.SPEC)
    if isinstance(count, gpu_count.GpuCountObserved):
        problem = _count_problem(count, seen, node_gpus, node_capacity)
        if problem is not None:
            return problem
    allreduce = _observed(report, nccl_allreduce.SPEC)
    if isinstance(allreduce, nccl_allreduce.NcclAllreduceObserved) and allreduce.ranks != seen:
        return ReportProblem(
            REPORT_MISMATCH,
            f"report summary has {seen} GPUs but the all-reduce ran on {allreduce.ranks} ranks",
        )
    inconsistent = report_inconsistency(report)
    if inconsistent is not None:
        return ReportProblem(REPORT_MISMATCH, inconsistent)
    return None


def _count_problem(
    count: gpu_count.GpuCountObserved, seen: int, node_gpus: int, node_capacity: int
) -> ReportProblem | None:
    """The counts the operator passed must come back as passed, and the probe's own agree."""
    if count.allocatable is not None and count.allocatable != node_gpus:
        return ReportProblem(
            REPORT_MISMATCH,
            f"report says the node has {count.allocatable} allocatable GPUs; it has {node_gpus}",
        )
    if count.capacity is not None and count.capacity != node_capacity:
        return ReportProblem(
            REPORT_MISMATCH,
            f"report says the node's GPU capacity is {count.capacity}; it is {node_capacity}",
        )
    if count.visible != seen:
        return ReportProblem(
            REPORT_MISMATCH,
            f"report summary has {seen} GPUs but gpu_count saw {count.visible}",
        )
    return None


def outcome_problem(
    verdict: Verdict, report: ProbeReport, pod: PodView, *, node_gpus: int
) -> ReportProblem | None:
    """Why the verdict on a finished pod's report cannot stand, or None.

    The probe judges its report with the same policy and exits with the verdict
    (:class:`~gpuaccept.contracts.probe_invocation.ProbeExit`): 0 and phase
    ``Succeeded`` for accepted, 1 and ``Failed`` for not accepted. Any other
    combination (a crash or kill after the report was written, a deadline, a
    probe that disagrees with its own report) is an error. An accepting
    verdict must also cover every GPU the node has (``node_gpus``: the most of
    its allocatable and its capacity).
    """
    if pod.reason == DEADLINE_EXCEEDED:
        return ReportProblem(
            PROBE_TIMEOUT, "the probe pod ran past its deadline (DeadlineExceeded)"
        )
    expected = ProbeExit.ACCEPTED if verdict.accepted else ProbeExit.QUARANTINED
    if pod.exit_code not in (ProbeExit.ACCEPTED, ProbeExit.QUARANTINED):
        code = "no exit code" if pod.exit_code is None else f"exit code {pod.exit_code}"
        return ReportProblem(PROBE_FAILED, f"the probe ended with {code} after writing its report")
    said = "passes" if verdict.accepted else "does not pass"
    if pod.exit_code != expected:
        return ReportProblem(
            REPORT_MISMATCH,
            f"the probe exited {pod.exit_code}, but its report {said} (expected exit {expected})",
        )
    phase = "Succeeded" if verdict.accepted else "Failed"
    if pod.phase != phase:
        return ReportProblem(
            REPORT_MISMATCH, f"the probe pod is {pod.phase}, but its report {said}"
        )
    if verdict.accepted and report.summary.gpu_count != node_gpus:
        return ReportProblem(
            REPORT_MISMATCH,
            f"report covers {report.summary.gpu_count} of the node's {node_gpus} GPUs",
        )
    return None
