"""The compact report for the termination message: always well-formed JSON
of at most 4096 bytes.

:func:`fit_report` shrinks the report step by step until it fits:

1. as is;
2. each check's ``observed`` replaced by its condensed form (per-GPU columns
   collapsed to minima and the GPUs concerned) — still re-judgeable;
3. ``expected`` dropped and messages cut to 80 characters;
4. ``observed`` dropped (the verdict then keeps the status the probe gave);
5. messages dropped.

It never truncates JSON text. The contract's
:func:`~gpuaccept.contracts.report.encode_termination_message` is the final
guard.
"""

from collections.abc import Callable

from gpuaccept.checks.registry import get_check
from gpuaccept.checks.spec import clip
from gpuaccept.contracts.api import TERMINATION_MESSAGE_MAX_BYTES
from gpuaccept.contracts.report import CheckResult, ProbeReport, encode_termination_message


def _condensed(result: CheckResult) -> CheckResult:
    check = get_check(result.check)
    if check is None or result.observed is None:
        return result
    try:
        condensed = check.condense(check.parse(result.observed))
        return result.model_copy(update={"observed": condensed.to_observed()})
    except Exception:  # an odd observation is kept as is; later steps still shrink it
        return result


def _short(result: CheckResult) -> CheckResult:
    return result.model_copy(update={"expected": None, "message": clip(result.message, 80)})


def _bare(result: CheckResult) -> CheckResult:
    return result.model_copy(update={"observed": None})


def _silent(result: CheckResult) -> CheckResult:
    return result.model_copy(update={"message": ""})


STEPS: tuple[Callable[[CheckResult], CheckResult], ...] = (_condensed, _short, _bare, _silent)


def fit_report(report: ProbeReport, limit: int = TERMINATION_MESSAGE_MAX_BYTES) -> ProbeReport:
    """The largest form of ``report`` (by the steps above) whose compact JSON fits."""
    current = report
    for step in (None, *STEPS):
        if step is not None:
            current = current.model_copy(update={"results": [step(r) for r in current.results]})
        if current.compact_size() <= limit:
            return current
    return current


def termination_message(report: ProbeReport) -> str:
    """Compact JSON for ``/dev/termination-log`` (raises ReportTooLargeError, never truncates)."""
    return encode_termination_message(fit_report(report))
