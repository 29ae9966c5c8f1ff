"""Runs the checks in registry order against one backend and builds the report:
for each, its measuring function (:mod:`gpuaccept.probe.measure`), then its judge."""

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from pydantic import JsonValue

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS
from gpuaccept.checks.spec import AnyCheckSpec, clip
from gpuaccept.contracts.report import CheckResult, CheckStatus, HardwareSummary, ProbeReport
from gpuaccept.probe import PROBE_VERSION
from gpuaccept.probe.hardware.base import HardwareBackend, Unavailable, VersionInfo
from gpuaccept.probe.measure import ProbeContext, measurer

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
    models = sorted({gpu.name for gpu in gpus})
    model = models[0] if len(models) == 1 else ("mixed: " + ", ".join(models) if models else None)
    driver = versions.kernel_module or (
        versions.gpu_drivers[0] if versions.gpu_drivers else versions.nvml_library
    )
    return HardwareSummary(
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
    """Measure, then judge. Unavailable → skip; any other exception → error."""
    switch = policy.switch(check.name)
    if switch is not None and not switch.enabled:
        return CheckResult(
            check=check.name, status=CheckStatus.SKIP, message="disabled by policy", duration_s=0
        )
    started = time.monotonic()
    observed: JsonValue = None
    try:
        section = policy.section(check)
        measured = measurer(check)(hardware, section, context)
        observed = measured.to_observed()
        judgement = check.judge(measured, section, summary)
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


def run_probe(
    hardware: HardwareBackend,
    policy: ProbePolicy,
    *,
    node_name: str,
    boot_id: str | None,
    context: ProbeContext | None = None,
    checks: Sequence[AnyCheckSpec] = CHECKS,
    on_check: Callable[[AnyCheckSpec], None] = lambda _check: None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> ProbeReport:
    """Every check in ``checks``, in order; ``on_check`` is called as each starts."""
    context = context or ProbeContext()
    started_at = now()
    summary = hardware_summary(hardware)
    results = []
    for check in checks:
        on_check(check)
        results.append(run_check(check, hardware, policy, context, summary))
    return ProbeReport(
        node_name=node_name,
        boot_id=(boot_id or hardware.boot_id() or UNKNOWN_BOOT_ID)[:64],
        probe_version=PROBE_VERSION,
        started_at=started_at,
        finished_at=now(),
        hardware=hardware.mode,
        summary=summary,
        results=results,
    )
