"""fabric.requireRdma reaches both judges of a pair: the fabric pods' own (their
command line) and the operator's, which re-judges each pod's result."""

from fabric_pods import CONFIG, T0

from gpuaccept.checks.fabric_allreduce import CHECK
from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.nodeacceptance import FabricStatus, NodeAcceptanceStatus, Phase
from gpuaccept.contracts.probe_invocation import FLAG_ALLOW_SOCKET_TRANSPORT
from gpuaccept.contracts.report import CheckResult, CheckStatus
from gpuaccept.operator.core.fabric.pairing import pod_outcome
from gpuaccept.operator.core.fabric.policypass import (
    FabricMember,
    FabricSnapshot,
    plan_fabric_pass,
)
from gpuaccept.operator.core.model import CreateProbePod, NAView, NodeView, PairOutcome, PolicyView

# What the fabric probe reports for a pair NCCL ran over TCP sockets (no
# /dev/infiniband in the pods): "Using network Socket" in its NET debug output.
OVER_SOCKETS = CheckResult(
    check=CHECK,
    status=CheckStatus.FAIL,
    observed={"backend": "nccl", "source": "measured", "nodes": 2, "nodeRank": 0,
              "localRanks": 8, "ranks": 16, "busbwGBps": 11.2, "transport": "Socket"},
    durationS=30.0,
)  # fmt: skip


def spec(**fabric: object) -> NodeAcceptancePolicySpec:
    return NodeAcceptancePolicySpec.model_validate({"fabric": {"enabled": True, **fabric}})


def test_a_pair_over_sockets_fails_by_default_and_passes_where_the_policy_allows_it() -> None:
    assert spec().fabric.require_rdma is True
    assert pod_outcome(OVER_SOCKETS, None) is PairOutcome.FAILED
    assert pod_outcome(OVER_SOCKETS, None, require_rdma=False) is PairOutcome.PASSED
    assert pod_outcome(OVER_SOCKETS, 50.0, require_rdma=False) is PairOutcome.FAILED  # still slow


def _member(name: str) -> FabricMember:
    status = NodeAcceptanceStatus(
        phase=Phase.FABRIC,
        policy="fab",
        fabric=FabricStatus(waiting_since=T0, pairs=[], summary="waiting"),
        applied_taints=["gpuaccept.io/pending"],
    )
    return FabricMember(
        node=NodeView(name=name, boot_id=f"boot-{name}", gpus=8, gpu_capacity=8),
        na=NAView(name=name, status=status, resource_version=f"rv-{name}"),
        pods=(),
    )


def _command(policy: NodeAcceptancePolicySpec) -> list[str]:
    snapshot = FabricSnapshot(
        PolicyView(name="fab", spec=policy), policy, (_member("a"), _member("b")), T0, CONFIG
    )
    (create,) = [a for _n, a in plan_fabric_pass(snapshot).writes if isinstance(a, CreateProbePod)]
    command: list[str] = create.manifest["spec"]["containers"][0]["command"]
    return command


def test_the_fabric_pods_are_told_when_sockets_may_pass() -> None:
    assert FLAG_ALLOW_SOCKET_TRANSPORT not in _command(spec(minBusbwGBps=300))
    assert FLAG_ALLOW_SOCKET_TRANSPORT in _command(spec(minBusbwGBps=10, requireRdma=False))
