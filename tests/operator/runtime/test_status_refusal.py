"""A status write the API server refuses is remembered for the core, not repeated blindly."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.operator.cache import Cache
from gpuaccept.operator.controller import Controller
from gpuaccept.operator.core import NodeSnapshot, OperatorConfig, PatchNAStatus
from gpuaccept.operator.core.judge import judge
from gpuaccept.operator.executor import KubeExecutor, StatusRefusedError
from gpuaccept.operator.kube import ConflictError, Kube

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NA_BODY = {"metadata": {"name": "gpu-1", "resourceVersion": "7"}, "status": {"phase": "Pending"}}


class StatusKube:
    """A Kube whose status patch fails with ``error`` (or succeeds when None)."""

    def __init__(self) -> None:
        self.error: ApiException | None = None

    def patch_na_status(self, name: str, rv: str, status: Any) -> dict[str, Any]:
        if self.error is not None:
            raise self.error
        return NA_BODY


def refused(status: int, message: str) -> ApiException:
    error = ApiException(status=status, reason="Invalid")
    error.body = json.dumps({"message": message})
    return error


def write(executor: KubeExecutor) -> None:
    status = NodeAcceptanceStatus(phase=Phase.ACCEPTED)
    executor.execute(
        NodeSnapshot(node_name="gpu-1", now=NOW, node=None), PatchNAStatus("gpu-1", "6", status)
    )


@pytest.fixture
def setup() -> tuple[StatusKube, KubeExecutor]:
    kube = StatusKube()
    return kube, KubeExecutor(cast(Kube, kube), Cache(), namespace="ns", identity="test")


@pytest.mark.parametrize("code", [400, 422])
def test_an_invalid_status_is_remembered_and_raised_as_refused(
    setup: tuple[StatusKube, KubeExecutor], code: int
) -> None:
    kube, executor = setup
    kube.error = refused(code, "status.figures.busbwGBps: Invalid value")
    with pytest.raises(StatusRefusedError):
        write(executor)
    assert executor.status_errors["gpu-1"] == f"{code} status.figures.busbwGBps: Invalid value"
    kube.error = None
    write(executor)  # a later write that goes through clears it
    assert "gpu-1" not in executor.status_errors


@pytest.mark.parametrize(
    "error",
    [ConflictError(status=409, reason="resourceVersion changed"), refused(500, "etcd timeout")],
    ids=["conflict", "server-error"],
)
def test_conflicts_and_outages_are_not_refusals(
    setup: tuple[StatusKube, KubeExecutor], error: ApiException
) -> None:
    kube, executor = setup
    kube.error = error
    with pytest.raises(type(error)):
        write(executor)
    assert executor.status_errors == {}


def test_the_controller_hands_the_refusal_to_the_core() -> None:
    controller = Controller(Kube(k8s.ApiClient()), OperatorConfig(), judge)
    try:
        controller.actions.status_errors["gpu-1"] = "422 invalid"
        assert controller.observe("gpu-1", NOW).status_write_error == "422 invalid"
        assert controller.observe("gpu-2", NOW).status_write_error is None
    finally:
        controller.executor.shutdown()
