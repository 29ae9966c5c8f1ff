"""The compact report for the termination message: always well-formed JSON
of at most 4096 bytes.

:func:`fit_report` shrinks the report step by step until it fits:

1. as is;
2. each check's ``observed`` replaced by its condensed form (per-GPU columns
   collapsed to minima and the GPUs concerned) — still re-judgeable — with
   ``durationS`` rounded to 0.1 s and the start and finish times to whole seconds;
3. ``expected`` dropped and messages cut to 80 characters;
4. the messages of results that keep an ``observed`` value dropped: the
   operator re-judges those results, which writes their message and
   ``expected`` again, so nothing of the verdict is lost;
5. ``observed`` dropped, result by result, largest first, each keeping its
   80-character message (a failure then keeps the status the probe gave; a pass
   without ``observed`` is judged an error, never a pass on the probe's word);
6. every message dropped.

Steps 1-4 apply to every result at once; steps 5 and 6 one result at a time, so
as many results as fit stay re-judgeable. It never truncates JSON text. The
contract's :func:`~gpuaccept.contracts.report.encode_termination_message` is
the final guard.
"""

from collections.abc import Callable

from gpuaccept.checks.registry import get_check
from gpuaccept.checks.spec import clip
from gpuaccept.contracts.api import TERMINATION_MESSAGE_MAX_BYTES
from gpuaccept.contracts.report import CheckResult, ProbeReport, encode_termination_message

SHORT_MESSAGE = 80


def _condensed(result: CheckResult) -> CheckResult:
    rounded = result.model_copy(update={"duration_s": round(result.duration_s, 1)})
    check = get_check(result.check)
    if check is None or result.observed is None:
        return rounded
    try:
        condensed = check.condense(check.parse(result.observed))
        return rounded.model_copy(update={"observed": condensed.to_observed()})
    except Exception:  # an odd observation is kept as is; later steps still shrink it
        return rounded


def _whole_seconds(report: ProbeReport) -> ProbeReport:
    """Start and finish times without their fractions of a second (both rounded down,
    so their order stays)."""
    return report.model_copy(
        update={
            "started_at": report.started_at.replace(microsecond=0),
            "finished_at": report.finished_at.replace(microsecond=0),
        }
    )


def _short(result: CheckResult) -> CheckResult:
    return result.model_copy(
        update={"expected": None, "message": clip(result.message, SHORT_MESSAGE)}
    )


def _rejudged_later(result: CheckResult) -> CheckResult:
    """No message where the operator re-judges the result from its ``observed``."""
    if result.observed is None or get_check(result.check) is None:
        return result
    return result.model_copy(update={"message": ""})


def _bare(result: CheckResult) -> CheckResult:
    """No ``observed``; the short message back (it is all that explains the status)."""
    return result.model_copy(update={"observed": None})


def _silent(result: CheckResult) -> CheckResult:
    return result.model_copy(update={"message": ""})


# Applied to every result at once (after "as is").
STEPS: tuple[Callable[[CheckResult], CheckResult], ...] = (_condensed, _short, _rejudged_later)


def _size(result: CheckResult) -> int:
    return len(result.model_dump_json(by_alias=True, exclude_none=True))


def _one_by_one(
    report: ProbeReport,
    forms: list[CheckResult],
    step: Callable[[CheckResult], CheckResult],
    limit: int,
) -> ProbeReport:
    """Apply ``step`` to one result at a time, largest first, until it fits."""
    current = list(forms)
    for index in sorted(range(len(current)), key=lambda i: -_size(current[i])):
        fitted = report.model_copy(update={"results": current})
        if fitted.compact_size() <= limit:
            return fitted
        current[index] = step(current[index])
    return report.model_copy(update={"results": current})


def fit_report(report: ProbeReport, limit: int = TERMINATION_MESSAGE_MAX_BYTES) -> ProbeReport:
    """The largest form of ``report`` (by the steps above) whose compact JSON fits."""
    if report.compact_size() <= limit:
        return report
    current = _whole_seconds(report)
    shorts: list[CheckResult] = []
    for step in STEPS:
        current = current.model_copy(update={"results": [step(r) for r in current.results]})
        if step is _short:
            shorts = list(current.results)
        if current.compact_size() <= limit:
            return current
    # step 5: observed dropped one by one, each result getting its short message back
    bare = [_bare(short) for short in shorts]
    forms = list(current.results)
    for index in sorted(range(len(forms)), key=lambda i: -_size(forms[i])):
        fitted = current.model_copy(update={"results": forms})
        if fitted.compact_size() <= limit:
            return fitted
        forms[index] = bare[index]
    current = current.model_copy(update={"results": forms})
    if current.compact_size() <= limit:
        return current
    return _one_by_one(current, forms, _silent, limit)


def termination_message(report: ProbeReport) -> str:
    """Compact JSON for ``/dev/termination-log`` (raises ReportTooLargeError, never truncates)."""
    return encode_termination_message(fit_report(report))
