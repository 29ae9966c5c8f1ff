"""Fabric pods and their reports, for the tests of a policy's pass and of the fabric loop."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuaccept.checks.fabric_allreduce import CHECK
from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.report import (
    CheckResult,
    CheckStatus,
    HardwareMode,
    HardwareSummary,
    ProbeReport,
    encode_termination_message,
)
from gpuaccept.operator.core.model import FabricPodLabels, OperatorConfig, PodView, PolicyView

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = NodeAcceptancePolicySpec.model_validate({"fabric": {"enabled": True, "minBusbwGBps": 300}})
POLICY = PolicyView(name="fab", spec=SPEC)
CONFIG = OperatorConfig(accept_simulated_reports=True)
PAIR = FabricPodLabels("p1", 0, "a", "b")


def report(node: str, busbw: float | None, *, phase: str | None = None) -> str:
    observed = {"backend": "gloo", "source": "loopback", "nodes": 2, "nodeRank": 0,
                "localRanks": 1, "ranks": 2, "busbwGBps": busbw, "phase": phase}  # fmt: skip
    status = CheckStatus.ERROR if phase else CheckStatus.PASS
    result = CheckResult(check=CHECK, status=status, observed=observed, durationS=1.0)
    return encode_termination_message(
        ProbeReport(
            node_name=node,
            bootID=f"boot-{node}",
            probe_version="0.1.0",
            started_at=T0,
            finished_at=T0,
            hardware=HardwareMode.SIMULATED,
            summary=HardwareSummary(gpu_count=1),
            results=[result],
        )
    )


def pod(rank: int, *, ip: str | None = None, message: str | None = None, created: datetime = T0,
        labels: FabricPodLabels = PAIR) -> PodView:  # fmt: skip
    done = message is not None
    return PodView(
        name=f"gpuaccept-probe-fabric-{labels.pair}-{rank}",
        phase="Succeeded" if done else "Running",
        terminated=done,
        exit_code=0 if done else None,
        message=message,
        pod_ip=ip,
        created=created,
        fabric=FabricPodLabels(labels.pair, rank, labels.first, labels.second),
    )
