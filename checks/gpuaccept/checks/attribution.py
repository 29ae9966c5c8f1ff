"""Per-GPU verdicts: whose each failure is, a GPU's or the node's (pure).

A check whose failures may belong to single GPUs says so with
:attr:`~gpuaccept.checks.spec.CheckSpec.failing_gpus` (docs/policy.md, "Per-GPU
verdicts", has the table and its sources). :func:`attribute` asks each failing
result of such a check which GPUs fail it. A failure is the node's when

* its check has no ``failing_gpus`` (the CPU governor, the driver, the fabric...);
* the result has no ``observed`` value to ask, or one that does not parse;
* the check cannot tie it to GPUs (``failing_gpus`` answers None or no GPU);
* it names a GPU the report does not have (never fenced on evidence about other hardware);

and every error, skip and probe error is the node's. Only a ``fail`` is attributed:
a warning takes nothing out of service.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.spec import AnyCheckSpec
from gpuaccept.contracts.nodeacceptance import GpuVerdict, Reason
from gpuaccept.contracts.report import CheckResult, CheckStatus, HardwareSummary


@dataclass(frozen=True)
class Attribution:
    """The GPUs that failed which checks, and the checks whose failure is theirs alone."""

    gpus: tuple[GpuVerdict, ...] = ()
    per_gpu_checks: frozenset[str] = frozenset()

    def node_reasons(self, reasons: Sequence[Reason]) -> tuple[Reason, ...]:
        """The reasons among ``reasons`` that are the node's: all but the failures of a
        check whose failure belongs to GPUs alone."""
        return tuple(r for r in reasons if r.check not in self.per_gpu_checks)


def failing_gpus_of(
    check: AnyCheckSpec, result: CheckResult, summary: HardwareSummary, policy: ProbePolicy
) -> frozenset[int] | None:
    """The GPUs that fail ``result`` (a judged ``fail``) on their own; None: the node's."""
    if check.failing_gpus is None or result.status is not CheckStatus.FAIL:
        return None
    if result.observed is None:
        return None
    try:
        gpus = check.failing_gpus(check.parse(result.observed), policy.section(check))
    except ValueError:
        return None
    if not gpus or any(not 0 <= gpu < summary.gpu_count for gpu in gpus):
        return None
    return gpus


def _uuid(summary: HardwareSummary, index: int) -> str | None:
    uuids = summary.gpu_uuids or []
    return (uuids[index] or None) if index < len(uuids) else None


def attribute(
    results: Sequence[CheckResult],
    summary: HardwareSummary,
    policy: ProbePolicy,
    checks: Sequence[AnyCheckSpec],
) -> Attribution:
    """Whose each failing result of ``results`` (judged, registry order) is."""
    by_name = {check.name: check for check in checks}
    per_gpu: dict[int, list[str]] = {}
    per_gpu_checks: set[str] = set()
    for result in results:
        check = by_name.get(result.check)
        if check is None:
            continue
        gpus = failing_gpus_of(check, result, summary, policy)
        if gpus is None:
            continue
        per_gpu_checks.add(check.name)
        for gpu in gpus:
            per_gpu.setdefault(gpu, []).append(check.name)
    return Attribution(
        gpus=tuple(
            GpuVerdict(index=gpu, uuid=_uuid(summary, gpu), checks=names)
            for gpu, names in sorted(per_gpu.items())
        ),
        per_gpu_checks=frozenset(per_gpu_checks),
    )
