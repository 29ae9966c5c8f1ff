"""Whether every result of a report is consistent with the report's GPUs (pure).

One rule set, for every report the operator reads (a probe pod's, a fabric pod's, a
stored one judged again): each registered check's result makes the claims its
``SPEC.claims`` declares (:mod:`gpuaccept.checks.claims`), a fabric result those of
:func:`gpuaccept.checks.fabric_allreduce.claims`, and every one must hold on the
report's GPU count (which the operator holds to the node's). A result whose
``observed`` value does not parse is left to its judge (an error, never a pass).
"""

from collections.abc import Sequence

from pydantic import JsonValue

from gpuaccept.checks import fabric_allreduce
from gpuaccept.checks.claims import Claims, claims_problem
from gpuaccept.checks.registry import CHECKS
from gpuaccept.checks.spec import AnyCheckSpec
from gpuaccept.contracts.report import HardwareSummary, ProbeReport


def _claims(
    name: str, observed: JsonValue, summary: HardwareSummary, checks: Sequence[AnyCheckSpec]
) -> Claims | None:
    """The result's claims; None when no rule knows the check or its value does not parse."""
    check = next((c for c in checks if c.name == name), None)
    try:
        if check is not None:
            claims: Claims = check.claims(check.parse(observed), summary)
            return claims
        if name == fabric_allreduce.CHECK:
            return fabric_allreduce.claims(fabric_allreduce.parse(observed), summary)
    except ValueError:
        return None
    return None


def report_inconsistency(
    report: ProbeReport, checks: Sequence[AnyCheckSpec] = CHECKS
) -> str | None:
    """The first claim of a result that does not hold on the report's GPUs, or None."""
    gpus = report.summary.gpu_count
    for result in report.results:
        if result.observed is None:
            continue
        claims = _claims(result.check, result.observed, report.summary, checks)
        if claims is None:
            continue
        problem = claims_problem(result.check, claims, gpus)
        if problem is not None:
            return problem
    return None
