"""What a check states about its time: one :class:`PhaseEstimate` per check, from
its policy section and the node's GPU count (the ``budget`` field of its
:class:`~gpuaccept.checks.spec.CheckSpec`).

The probe's time budget (:mod:`gpuaccept.checks.budget`) adds them up in registry
order. Figures that follow from the policy (a load's warm-up and window, a sweep)
are computed from the section; the others are estimates stated where they are
used. No figure here was measured on a GPU (none was lent to this work); each
estimate says what it rests on.
"""

from collections.abc import Callable
from dataclasses import dataclass

from gpuaccept.contracts.policy_fields import CheckSwitch

NOT_ON_GPU = "estimate, not measured on a GPU"

# Shared by the checks whose phase starts a GPU load (a test ties it to the probe's).
LOAD_RAMP_S = 0.5  # real backend: the load threads start before sampling begins


@dataclass(frozen=True)
class PhaseEstimate:
    """One phase of a probe run: what it does, its seconds, how they are derived,
    and the source."""

    phase: str
    seconds: float
    derivation: str
    source: str = NOT_ON_GPU


def fixed_phase(
    phase: str, seconds: float, derivation: str, source: str = NOT_ON_GPU
) -> Callable[[CheckSwitch, int], PhaseEstimate]:
    """The ``budget`` of a check whose time follows from neither policy nor GPU count."""
    estimate = PhaseEstimate(phase, seconds, derivation, source)

    def budget(_section: CheckSwitch, _gpus: int) -> PhaseEstimate:
        return estimate

    return budget
