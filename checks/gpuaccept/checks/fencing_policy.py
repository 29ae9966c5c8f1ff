"""The policy's ``fencing`` section: take one bad GPU out of service rather than its node.

``mode: node`` (the default) quarantines the node on any failure, as always. ``mode:
gpu`` lets a failure that belongs to single GPUs (a check in ``checks`` that tied it to
GPUs: :mod:`gpuaccept.checks.attribution`) fence those GPUs alone, on a node that
publishes its GPUs through DRA, up to ``maxFencedGpus`` of them; anything else still
quarantines the node (the core's :mod:`gpuaccept.operator.core.fencing` decides).
"""

from enum import StrEnum

from pydantic import Field, field_validator

from gpuaccept.checks.registry import CHECKS
from gpuaccept.contracts.contract_model import ContractModel

FENCIBLE_CHECKS: tuple[str, ...] = tuple(check.name for check in CHECKS if check.fencible)


class FencingMode(StrEnum):
    NODE = "node"
    GPU = "gpu"


class FenceEffect(StrEnum):
    """The effect of a fenced GPU's DeviceTaintRule (KEP-5055; ``None``, the third
    effect, is what dryRun uses)."""

    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"


class FencingPolicy(ContractModel):
    """Whether a failure that belongs to single GPUs takes out those GPUs or the node."""

    mode: FencingMode = Field(
        default=FencingMode.NODE,
        description="node: any failure quarantines the node. gpu: a failure that belongs "
        "to single GPUs (of a check in checks) fences those GPUs alone on a DRA node, up "
        "to maxFencedGpus; a device-plugin node, a node-level failure or more GPUs than "
        "the bound still quarantine the node.",
    )
    max_fenced_gpus: int = Field(
        default=1,
        ge=1,
        le=64,
        description="The most GPUs of one node fenced; more failing GPUs quarantine the node.",
    )
    effect: FenceEffect = Field(
        default=FenceEffect.NO_SCHEDULE,
        description="The fence's DeviceTaintRule effect: NoSchedule (no new claim gets the "
        "GPU; a running pod keeps it) or NoExecute (pods whose claims hold it are evicted "
        "too). Under dryRun the rule is made with effect None.",
    )
    checks: list[str] | None = Field(
        default=None,
        max_length=64,
        description="The checks whose per-GPU failures may be fenced; unset: every check "
        'whose failures can belong to one GPU (docs/policy.md, "Per-GPU verdicts").',
    )

    @field_validator("checks")
    @classmethod
    def _fencible(cls, names: list[str] | None) -> list[str] | None:
        for name in names or []:
            if name not in FENCIBLE_CHECKS:
                raise ValueError(
                    f"{name}: not a check whose failures can belong to one GPU "
                    f"(those are: {', '.join(FENCIBLE_CHECKS)})"
                )
        return names

    def fences(self, check: str) -> bool:
        """Whether a per-GPU failure of ``check`` may be fenced under this section."""
        return check in (FENCIBLE_CHECKS if self.checks is None else self.checks)
