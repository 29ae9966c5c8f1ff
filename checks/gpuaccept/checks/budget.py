"""The probe's time budget: the default suite on an 8-GPU node in at most 60 s
of wall time, process start, CUDA and NCCL initialisation included.

:func:`suite_budget` gives one :class:`PhaseBudget` per phase of a probe run
under a policy: the time before the first check, each registered check's own
estimate (the ``budget`` of its :class:`~gpuaccept.checks.spec.CheckSpec`, in
registry order), and the time after the last. ``docs/probe.md``'s budget table
is generated from this function (``make docs``), a test holds the default
policy's total to :data:`SUITE_LIMIT_S`, and the simulated backend reports these
seconds as each check's ``durationS`` unless a profile states its own
(``durations:``), so the docs, the test and the simulation use one set of numbers.
"""

from dataclasses import dataclass

from gpuaccept.checks.phase_estimate import NOT_ON_GPU, PhaseEstimate
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS

SUITE_LIMIT_S = 60.0
BUDGET_GPUS = 8
START_PHASE = "start"
"""The phase before the first check (process start, imports, NVML init, the summary)."""
END_PHASE = "end"
"""The phase after the last check (not in the report's ``wallS``)."""

START = PhaseEstimate(
    "process start to the first check",
    5.0,
    "interpreter, imports (gpuaccept 0.2 s, torch 1.8 s measured here), x2 for a "
    "cold image on a fresh node; nvmlInit and 8 device handles ~1 s",
    "imports: `python -X importtime`, `time python -c 'import torch'` on the 2-core "
    f"work machine (2026-11-30); nvmlInit {NOT_ON_GPU}",
)
END = PhaseEstimate(
    "report, termination log, exit (not in the report's wallS)",
    1.0,
    "the Xid listener's last wait (at most 0.5 s), fit and write the report; "
    "interpreter, torch and NVML shutdown",
)


@dataclass(frozen=True)
class PhaseBudget:
    """One phase of a probe run: the check it belongs to (``start``/``end`` are
    outside every check) and its estimate."""

    check: str
    estimate: PhaseEstimate
    counts_in_wall: bool = True  # False: after the last check (not in the report's wallS)

    @property
    def phase(self) -> str:
        return self.estimate.phase

    @property
    def seconds(self) -> float:
        return self.estimate.seconds

    @property
    def derivation(self) -> str:
        return self.estimate.derivation

    @property
    def source(self) -> str:
        return self.estimate.source


def suite_budget(policy: ProbePolicy, gpus: int = BUDGET_GPUS) -> tuple[PhaseBudget, ...]:
    """Every phase of a probe run under ``policy`` on a node of ``gpus`` GPUs, in
    registry order between the start and the end; phases of checks the policy
    disables are left out."""
    checks = tuple(
        PhaseBudget(check.name, check.budget(policy.section(check), gpus))
        for check in CHECKS
        if policy.section(check).enabled
    )
    return (
        PhaseBudget(START_PHASE, START),
        *checks,
        PhaseBudget(END_PHASE, END, counts_in_wall=False),
    )


def suite_seconds(phases: tuple[PhaseBudget, ...]) -> float:
    """The whole probe run: every phase."""
    return sum(p.seconds for p in phases)


def phase_seconds(policy: ProbePolicy, gpus: int = BUDGET_GPUS) -> dict[str, float]:
    """Seconds per registered check and for :data:`START_PHASE`, rounded to 0.1 s:
    what a simulated node reports when its profile states no duration."""
    out: dict[str, float] = {}
    for p in suite_budget(policy, gpus):
        if p.counts_in_wall:
            out[p.check] = round(out.get(p.check, 0.0) + p.seconds, 1)
    return out
