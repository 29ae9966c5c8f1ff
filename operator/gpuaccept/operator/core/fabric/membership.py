"""Who takes part in a policy's fabric pass, and who can take a fabric pod (pure).

:func:`is_member` is the one rule, used for the pass (the fabric loop gathers a
pass's members with it), by the node's own reconcile
(only a member's fabric pods are the pass's to delete; the node deletes any
other, docs/fabric.md, Safety) and, as the superset :func:`fabric_candidate_policy`,
by the cache that keeps the candidates of each policy.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.operator.core.capacity import HELD_ACCEPT
from gpuaccept.operator.core.fleet import selector_matches
from gpuaccept.operator.core.model import NodeView, PodView

PARTNER_PHASES = frozenset({Phase.ACCEPTED, Phase.HELD})


def is_member(
    status: NodeAcceptanceStatus,
    policy_name: str,
    spec: NodeAcceptancePolicySpec,
    labels: Mapping[str, str],
) -> bool:
    """Whether the node with ``status`` and ``labels`` is a member of the fabric pass
    of the policy ``policy_name`` with ``spec``: the policy runs fabric tests, the node
    was decided under it and its selector still matches (a node relabelled away under
    ``onPolicyChange: Ignore`` keeps the old policy's name in its status), and the
    node waits (phase Fabric) or is a partner (Accepted/Held with fabric results, or
    any with ``idleAcceptedPartners``)."""
    if not spec.fabric.enabled or status.policy != policy_name:
        return False
    if not (selector_matches(spec.node_selector, labels) and spec.governs_role(labels)):
        return False
    return status.phase == Phase.FABRIC or (
        status.phase in PARTNER_PHASES
        and (status.fabric is not None or spec.fabric.idle_accepted_partners)
    )


def fabric_candidate_policy(status: NodeAcceptanceStatus | None) -> str | None:
    """The policy whose pass the node with ``status`` may be a member of through a
    fabric test (waiting, or with fabric results); None: no such test. Every member
    but an idle accepted partner (``idleAcceptedPartners``) is a candidate."""
    if status is None or not status.policy:
        return None
    return status.policy if status.fabric is not None or status.phase == Phase.FABRIC else None


def can_take_fabric_pod(node: NodeView | None, pods: tuple[PodView, ...]) -> bool:
    """Can a fabric pod still go on ``node``, with its probe pods ``pods``? It exists,
    advertises GPUs, and has no other probe pod."""
    if node is None or node.gpus <= 0:
        return False
    return all(p.fabric is not None for p in pods if not p.deleting)


def is_idle_partner(
    status: NodeAcceptanceStatus, node: NodeView, pods: tuple[PodView, ...]
) -> bool:
    """Accepted (or would be, in a dry run), in service, with no probe pod of its own."""
    accepted = status.phase == Phase.ACCEPTED or (
        status.phase == Phase.HELD and status.held_action == HELD_ACCEPT
    )
    return accepted and not node.unschedulable and can_take_fabric_pod(node, pods)
