"""What a node should look like for a NodeAcceptance phase (pure).

Owned taints: the operator only ever removes taints whose key it owns (the
policy's pending and quarantine keys, and keys it recorded in
``status.appliedTaints``). A person's taint, or a cordon
(``spec.unschedulable``), is never touched.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.api import ACCEPTANCE_LABEL
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.operator.core.model import NodeView, Taint

PENDING_EFFECT = "NoSchedule"
ACCEPTED = "accepted"
QUARANTINED = "quarantined"


def owned_keys(spec: NodeAcceptancePolicySpec, status: NodeAcceptanceStatus) -> set[str]:
    return {spec.pending_taint_key, spec.quarantine.taint_key, *status.applied_taints}


def desired_taints(
    node: NodeView, spec: NodeAcceptancePolicySpec, status: NodeAcceptanceStatus
) -> tuple[Taint, ...]:
    """The node's taint list for ``status.phase``; foreign taints kept in order."""
    owned = owned_keys(spec, status)
    pending = Taint(spec.pending_taint_key, PENDING_EFFECT)
    quarantine = Taint(
        spec.quarantine.taint_key, spec.quarantine.taint_effect.value, spec.quarantine.taint_value
    )
    phase = status.phase
    if phase == Phase.ACCEPTED:
        return tuple(t for t in node.taints if t.key not in owned)
    if phase == Phase.QUARANTINED:
        kept = [t for t in node.taints if t.key not in owned or t == quarantine]
        if quarantine not in kept:
            kept.append(quarantine)
        unique: list[Taint] = []
        for taint in kept:
            if taint not in unique:
                unique.append(taint)
        return tuple(unique)
    # Pending, Probing, Held: out of service under the pending taint; a
    # quarantine taint from an earlier verdict stays until the new verdict.
    if any(t.key == pending.key for t in node.taints):
        return node.taints
    return (*node.taints, pending)


def desired_labels(
    node: NodeView, spec: NodeAcceptancePolicySpec, phase: Phase
) -> dict[str, str | None]:
    """Label changes only (key → value, or None to remove); empty when in place."""
    want: dict[str, str | None] = {}
    if phase == Phase.ACCEPTED:
        want[ACCEPTANCE_LABEL] = ACCEPTED
        for key in spec.quarantine.labels:
            want[key] = None
    elif phase == Phase.QUARANTINED:
        want[ACCEPTANCE_LABEL] = QUARANTINED
        want.update(spec.quarantine.labels)
    elif node.labels.get(ACCEPTANCE_LABEL) == ACCEPTED:
        # Pending, Probing, Held: out of service again (a re-probe, a failed one
        # held by the breaker), so no longer "accepted"; "quarantined" stays, like
        # its taint, until the new verdict.
        want[ACCEPTANCE_LABEL] = None
    return _changes(node.labels, want)


def _changes(current: Mapping[str, str], want: Mapping[str, str | None]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for key, value in want.items():
        if value is None and key in current:
            out[key] = None
        elif value is not None and current.get(key) != value:
            out[key] = value
    return out
