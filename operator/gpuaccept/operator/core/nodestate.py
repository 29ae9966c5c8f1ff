"""What a node should look like for a NodeAcceptance phase (pure).

Owned taints: the operator only ever removes taints whose key it owns (the
policy's pending and quarantine keys, and keys it recorded in
``status.appliedTaints``). Owned labels: besides its own acceptance and reason
labels (``gpuaccept.io/reason``: why a quarantined node is quarantined), it
removes only the quarantine label keys it recorded in ``status.appliedLabels``
(those it set). A person's taint or label, or a cordon
(``spec.unschedulable``), is never touched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.api import ACCEPTANCE_LABEL, REASON_LABEL, REMEDY_LABEL
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.contracts.policy_fields import GPUWaitExpiry
from gpuaccept.operator.core import ladder
from gpuaccept.operator.core.model import NodeView, Taint

PENDING_EFFECT = "NoSchedule"
ACCEPTED = "accepted"
QUARANTINED = "quarantined"
RELEASED = "released"
UNKNOWN_REASON = "ProbeError"  # a quarantine recorded without a reason word
MAX_LABEL_VALUE = 63
_NOT_IN_LABEL_VALUE = re.compile(r"[^-A-Za-z0-9_.]+")


# Phase Stalled for a node whose GPUs are all unhealthy: nvidia.com/gpu in its
# capacity, none allocatable. It keeps the pending taint whatever waitForGPUs says.
REASON_GPUS_UNHEALTHY = "GPUsUnhealthy"


def quarantine_taint(spec: NodeAcceptancePolicySpec) -> Taint:
    """Always ``NoSchedule``: gpuaccept never applies a ``NoExecute`` taint (it evicts
    past PodDisruptionBudgets); ``taintEffect: NoExecute`` drains the node through the
    Eviction API instead (core/phases/drain.py)."""
    q = spec.quarantine
    return Taint(q.taint_key, "NoSchedule", q.taint_value)


def owned_keys(spec: NodeAcceptancePolicySpec, status: NodeAcceptanceStatus) -> set[str]:
    """Taint keys the operator may remove: the pending key (a node registers with it)
    and the keys it recorded applying. A quarantine-key taint it did not apply (a
    person's) is never removed."""
    return {spec.pending_taint_key, *status.applied_taints}


def desired_taints(
    node: NodeView, spec: NodeAcceptancePolicySpec, status: NodeAcceptanceStatus
) -> tuple[Taint, ...]:
    """The node's taint list for ``status.phase``; foreign taints kept in order."""
    owned = owned_keys(spec, status)
    pending = Taint(spec.pending_taint_key, PENDING_EFFECT)
    quarantine = quarantine_taint(spec)
    phase = status.phase
    if phase in (Phase.ACCEPTED, Phase.RELEASED):
        return tuple(t for t in node.taints if t.key not in owned)
    if phase == Phase.QUARANTINED:
        return _quarantined(node, owned, quarantine)
    if (
        phase == Phase.STALLED
        and spec.wait_for_gpus.on_timeout == GPUWaitExpiry.REMOVE_PENDING_TAINT
        and status.reason != REASON_GPUS_UNHEALTHY
    ):
        # The policy lets a node that never advertised GPUs take pods, unprobed; never
        # one that has GPUs, all of them unhealthy (capacity, no allocatable).
        return tuple(t for t in node.taints if t.key != pending.key)
    # Pending, Probing, Held, Stalled: out of service under the pending taint; a
    # quarantine taint from an earlier verdict stays until the new verdict.
    if any(t.key == pending.key for t in node.taints):
        return node.taints
    return (*node.taints, pending)


def _quarantined(node: NodeView, owned: set[str], quarantine: Taint) -> tuple[Taint, ...]:
    kept = [t for t in node.taints if t.key not in owned or t == quarantine]
    # a person's taint under the same key and effect already keeps pods off (and a
    # second one would be refused): it stays, and the operator's is not added
    if any((t.key, t.effect) == (quarantine.key, quarantine.effect) for t in kept):
        return _unique(kept)
    return _unique([*kept, quarantine])


def _unique(taints: list[Taint]) -> tuple[Taint, ...]:
    """``taints`` in order, each once."""
    return tuple(dict.fromkeys(taints))


def desired_labels(
    node: NodeView, spec: NodeAcceptancePolicySpec, status: NodeAcceptanceStatus
) -> dict[str, str | None]:
    """Label changes only (key → value, or None to remove); empty when in place.

    Quarantine labels are removed only where ``status.appliedLabels`` records
    that the operator set them: all of them on acceptance, and on a quarantined
    node those the policy no longer names (an old key after a policy change).
    """
    want: dict[str, str | None] = {}
    phase = status.phase
    if phase in (Phase.ACCEPTED, Phase.RELEASED):
        want[ACCEPTANCE_LABEL] = ACCEPTED if phase == Phase.ACCEPTED else RELEASED
        want[REASON_LABEL] = None
        for key in status.applied_labels:
            want[key] = None
    elif phase == Phase.QUARANTINED:
        want[ACCEPTANCE_LABEL] = QUARANTINED
        want[REASON_LABEL] = reason_label_value(status.reason)
        for key in status.applied_labels:
            if key not in spec.quarantine.labels:
                want[key] = None
        want.update(spec.quarantine.labels)
    elif node.labels.get(ACCEPTANCE_LABEL) in (ACCEPTED, RELEASED):
        # Pending, Probing, Held, Stalled: out of service again (a re-probe, a
        # failed one held by the quarantine limit), so no longer "accepted"; "quarantined"
        # and the quarantine labels stay, like its taint, until the new verdict.
        want[ACCEPTANCE_LABEL] = None
    # what a quarantined node needs, for selectors (a NodeHealthCheck that reboots
    # only reboot-node nodes); gone once it is not quarantined (a re-probe runs)
    rung = ladder.remedy(status)
    want[REMEDY_LABEL] = ladder.REMEDY_LABEL_VALUE.get(rung)
    return _changes(node.labels, want)


def reason_label_value(reason: str | None) -> str:
    """``reason`` as a label value (at most 63 of ``[-A-Za-z0-9_.]``, alphanumeric at
    both ends): a reason word passes unchanged."""
    value = _NOT_IN_LABEL_VALUE.sub("-", reason or "")[:MAX_LABEL_VALUE]
    value = value.strip("-_.")
    return value or UNKNOWN_REASON


def _changes(current: Mapping[str, str], want: Mapping[str, str | None]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for key, value in want.items():
        if value is None and key in current:
            out[key] = None
        elif value is not None and current.get(key) != value:
            out[key] = value
    return out
