"""Runs the checks in registry order against one backend and builds the report:
for each, its measuring function (:mod:`gpuaccept.probe.measure`), then its judge."""

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import JsonValue

from gpuaccept.checks.budget import START_PHASE, phase_seconds
from gpuaccept.checks.dataflow import in_data_order
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS
from gpuaccept.checks.spec import AnyCheckSpec, clip
from gpuaccept.contracts.report import CheckResult, CheckStatus, HardwareSummary, ProbeReport
from gpuaccept.probe import PROBE_VERSION
from gpuaccept.probe.hardware.base import HardwareBackend, NoSuchInterface, Unavailable, VersionInfo
from gpuaccept.probe.measure import ProbeContext, measurer, runs_last
from gpuaccept.probe.measure.nvlink import baseline as nvlink_baseline

UNKNOWN_BOOT_ID = "unknown"


def _short(value: str | None, limit: int) -> str | None:
    return value[:limit] if value else None


def hardware_summary(hardware: HardwareBackend) -> HardwareSummary:
    """What the node is; every part that cannot be read is left out."""
    try:
        gpus = hardware.gpus()
    except Exception:
        gpus = []
    try:
        versions = hardware.versions()
    except Exception:
        versions = VersionInfo()
    # a GPU NVML could not open has no trustworthy name; it must not make the node "mixed"
    models = sorted({gpu.name for gpu in gpus if gpu.problem is None})
    model = models[0] if len(models) == 1 else ("mixed: " + ", ".join(models) if models else None)
    driver = versions.kernel_module or versions.nvml_driver
    try:
        nvswitches: int | None = min(hardware.pci_nvswitch_count(), 64)
    except Exception:
        nvswitches = None
    uuids = [gpu.uuid or "" for gpu in gpus][:64]
    return HardwareSummary(
        gpu_uuids=uuids if any(uuids) else None,
        nvswitch_devices=nvswitches,
        gpu_model=_short(model, 64),
        gpu_count=min(len(gpus), 64),
        driver_version=_short(driver, 32),
        cuda_driver_version=_short(versions.cuda_driver, 16),
        cuda_runtime_version=_short(versions.cuda_runtime, 16),
        nccl_version=_short(versions.nccl, 16),
    )


def run_check(
    check: AnyCheckSpec,
    hardware: HardwareBackend,
    policy: ProbePolicy,
    context: ProbeContext,
    summary: HardwareSummary,
) -> CheckResult:
    """Measure, then judge. NoSuchInterface (the node has no such thing to measure: one
    GPU has no pair) → pass with that reason; Unavailable → skip; any other exception →
    error."""
    switch = policy.switch(check.name)
    if switch is not None and not switch.enabled:
        return CheckResult(
            check=check.name, status=CheckStatus.SKIP, message="disabled by policy", duration_s=0
        )
    started = time.monotonic()
    observed: JsonValue = None
    try:
        section = policy.section(check)
        seen = context.view(check.name, needs=check.needs, provides=check.provides)
        measured = measurer(check)(hardware, section, seen)
        observed = measured.to_observed()
        judgement = check.judge(measured, section, summary)
    except NoSuchInterface as exc:
        return CheckResult(
            check=check.name,
            status=CheckStatus.PASS,
            message=clip(f"not applicable: {exc}"),
            duration_s=round(time.monotonic() - started, 3),
        )
    except Unavailable as exc:
        return CheckResult(
            check=check.name,
            status=CheckStatus.SKIP,
            message=clip(str(exc) or "hardware cannot answer"),
            duration_s=round(time.monotonic() - started, 3),
        )
    except Exception as exc:
        return CheckResult(
            check=check.name,
            status=CheckStatus.ERROR,
            observed=observed,
            message=clip(f"{type(exc).__name__}: {exc}"),
            duration_s=round(time.monotonic() - started, 3),
        )
    return CheckResult(
        check=check.name,
        status=judgement.status,
        observed=observed,
        expected=judgement.expected,
        message=clip(judgement.message),
        duration_s=round(time.monotonic() - started, 3),
    )


def _no_progress(_check: AnyCheckSpec) -> None:
    pass


def _no_result(_check: AnyCheckSpec, _result: CheckResult) -> None:
    pass


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _age_unknown() -> float | None:
    return None


@dataclass(frozen=True)
class RunSetup:
    """What one probe run reports on and how: the node, its boot ID when known from
    outside, the facts a measurement may need, the checks in order, a callback as
    each check starts, another as each finishes (with its result, the time it reports
    included), and the clock."""

    node_name: str
    boot_id: str | None = None
    context: ProbeContext = field(default_factory=ProbeContext)
    checks: Sequence[AnyCheckSpec] = CHECKS
    on_check: Callable[[AnyCheckSpec], None] = _no_progress
    on_result: Callable[[AnyCheckSpec, CheckResult], None] = _no_result
    now: Callable[[], datetime] = _utc_now
    # Seconds since the probe process started (the CLI: process_clock.process_age_s);
    # None: unknown (a run inside another process), and the report has no wallS.
    process_age: Callable[[], float | None] = _age_unknown


def measuring_order(checks: Sequence[AnyCheckSpec]) -> list[AnyCheckSpec]:
    """The order given, with every provider of a fact before the checks that need it
    (:func:`~gpuaccept.checks.dataflow.in_data_order`), except that checks reading what
    the others' load left (:func:`~gpuaccept.probe.measure.runs_last`) come after all
    the others."""
    ordered = in_data_order(checks, complete=False)
    return sorted(ordered, key=runs_last)  # stable: data order within each group


def run_probe(hardware: HardwareBackend, policy: ProbePolicy, run: RunSetup) -> ProbeReport:
    """Every check in ``run.checks`` (the report lists them in that order);
    ``run.on_check`` is called as each starts, ``run.on_result`` as each finishes
    (in measuring order: :func:`measuring_order`).

    One Xid listener (``hardware.xid_listener()``) is open from before the first
    check to after the last, so every phase that loads the GPUs is watched; the
    check being measured is recorded with each Xid.

    Times: each check's ``durationS`` and the report's ``wallS`` (the process's age
    at the first check, ``run.process_age()``, plus every ``durationS``) are what the
    backend reports (:meth:`~gpuaccept.probe.hardware.base.HardwareBackend.phase_seconds`):
    measured on real hardware, stated by a simulated node (default: the budget,
    :mod:`gpuaccept.checks.budget`)."""
    started_at = run.now()
    summary = hardware_summary(hardware)
    budget = phase_seconds(policy, max(summary.gpu_count, 1))
    by_name: dict[str, CheckResult] = {}
    with hardware.xid_listener() as xids:
        switch = policy.switch("nvlink")
        nvlink_on = any(c.name == "nvlink" for c in run.checks) and (
            switch is None or switch.enabled
        )
        context = dataclasses.replace(
            run.context, xids=xids, nvlink_before=nvlink_baseline(hardware) if nvlink_on else None
        )
        wall = hardware.phase_seconds(START_PHASE, run.process_age(), budget[START_PHASE])
        for check in measuring_order(run.checks):
            xids.phase = check.name
            run.on_check(check)
            result = _timed(run_check(check, hardware, policy, context, summary), hardware, budget)
            by_name[check.name] = result
            run.on_result(check, result)
            wall = None if wall is None else wall + result.duration_s
    results = [by_name[check.name] for check in run.checks]
    return ProbeReport(
        node_name=run.node_name,
        boot_id=(run.boot_id or hardware.boot_id() or UNKNOWN_BOOT_ID)[:64],
        probe_version=PROBE_VERSION,
        started_at=started_at,
        finished_at=run.now(),
        hardware=hardware.mode,
        summary=summary,
        results=results,
        wall_s=None if wall is None else round(wall, 1),
    )


def _timed(
    result: CheckResult, hardware: HardwareBackend, budget: Mapping[str, float]
) -> CheckResult:
    """``result`` with the duration the backend reports: what was measured, or on a
    simulated node the stated one. A check that did not measure (disabled, skipped,
    in error) keeps the time it took."""
    if result.status not in (CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL):
        return result
    seconds = hardware.phase_seconds(
        result.check, result.duration_s, budget.get(result.check, result.duration_s)
    )
    if seconds is None or seconds == result.duration_s:
        return result
    return result.model_copy(update={"duration_s": seconds})
