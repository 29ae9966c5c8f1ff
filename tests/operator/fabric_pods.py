"""Fabric pods and their reports, for the tests of a policy's pass and of the fabric loop."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime

from gpuaccept.checks.fabric_allreduce import CHECK
from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.nodeacceptance import OwnedPod
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
    node = labels.first if rank == 0 else labels.second
    name = f"gpuaccept-probe-fabric-{labels.pair}-{rank}"
    return PodView(
        name=name,
        phase="Succeeded" if done else "Running",
        terminated=done,
        exit_code=0 if done else None,
        message=message,
        pod_ip=ip,
        created=created,
        fabric=FabricPodLabels(labels.pair, rank, labels.first, labels.second),
        **identity(name, node),
    )


def identity(name: str, node: str) -> dict[str, str]:
    """The identity fields of the pod ``name`` the operator created on ``node``."""
    return {
        "uid": f"uid-{name}",
        "node_name": node,
        "owner_uid": na_uid(node),
        "shape": shape_of(name),
    }


def shape_of(name: str) -> str:
    """A made-up shape digest for the pod ``name`` (unique per name)."""
    return "shape-" + hashlib.sha256(name.encode()).hexdigest()[:8]


def na_uid(node: str) -> str:
    return f"uid-na-{node}"


def owned(node: str, pods: Iterable[PodView]) -> list[OwnedPod]:
    """The status records of ``pods`` on ``node``, as pods the operator created
    (a pod gets the identity :func:`identity` gives it)."""
    return [
        OwnedPod(name=p.name, uid=identity(p.name, node)["uid"], shape=shape_of(p.name))
        for p in pods
    ]


def ours(node: str, pods: Iterable[PodView]) -> tuple[PodView, ...]:
    """``pods`` with the identity of pods the operator created on ``node``."""
    return tuple(dataclasses.replace(p, **identity(p.name, node)) for p in pods)
