"""Who takes part in a policy's fabric pass: the one rule (core.fabric.membership),
as a table, and the cache's superset of it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.api import GPU_PRESENT_LABEL
from gpuaccept.contracts.nodeacceptance import FabricStatus, NodeAcceptanceStatus, Phase
from gpuaccept.operator.core.fabric.membership import fabric_candidate_policy, is_member

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ON = NodeAcceptancePolicySpec.model_validate({"fabric": {"enabled": True}})
IDLE = NodeAcceptancePolicySpec.model_validate(
    {"fabric": {"enabled": True, "idleAcceptedPartners": True}}
)
OFF = NodeAcceptancePolicySpec.model_validate({})
GPU = {GPU_PRESENT_LABEL: "true"}
OTHER = {"team": "other"}
CONTROL_PLANE = {**GPU, "node-role.kubernetes.io/control-plane": ""}
WAIT = FabricStatus(waiting_since=T0, summary="waiting")


def st(
    phase: Phase, policy: str = "fab", fabric: FabricStatus | None = WAIT
) -> NodeAcceptanceStatus:
    return NodeAcceptanceStatus(phase=phase, policy=policy, fabric=fabric)


# status, spec, node labels -> a member of the pass of policy "fab"
CASES = {
    "waiting under the policy": (st(Phase.FABRIC), ON, GPU, True),
    "waiting, fabric turned off": (st(Phase.FABRIC), OFF, GPU, False),
    "waiting under another policy": (st(Phase.FABRIC, "other"), ON, GPU, False),
    "waiting, relabelled away": (st(Phase.FABRIC), ON, OTHER, False),
    "waiting, a control-plane node": (st(Phase.FABRIC), ON, CONTROL_PLANE, False),
    "accepted with fabric results": (st(Phase.ACCEPTED), ON, GPU, True),
    "accepted without fabric results": (st(Phase.ACCEPTED, fabric=None), ON, GPU, False),
    "accepted, idle partners allowed": (st(Phase.ACCEPTED, fabric=None), IDLE, GPU, True),
    "held with fabric results": (st(Phase.HELD), ON, GPU, True),
    "quarantined with fabric results": (st(Phase.QUARANTINED), ON, GPU, False),
    "quarantined, idle partners allowed": (st(Phase.QUARANTINED, fabric=None), IDLE, GPU, False),
    "pending": (st(Phase.PENDING, fabric=None), IDLE, GPU, False),
    "probing with old fabric results": (st(Phase.PROBING), ON, GPU, False),
}


@pytest.mark.parametrize(("status", "spec", "labels", "member"), CASES.values(), ids=CASES.keys())
def test_membership(
    status: NodeAcceptanceStatus,
    spec: NodeAcceptancePolicySpec,
    labels: dict[str, str],
    member: bool,
) -> None:
    assert is_member(status, "fab", spec, labels) is member
    if member and status.fabric is not None:  # the cache keeps every member with a fabric test
        assert fabric_candidate_policy(status) == "fab"


def test_no_status_or_policy_is_no_candidate() -> None:
    assert fabric_candidate_policy(None) is None
    assert fabric_candidate_policy(NodeAcceptanceStatus(phase=Phase.FABRIC)) is None
