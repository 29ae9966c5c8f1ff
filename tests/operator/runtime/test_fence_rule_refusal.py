"""A DeviceTaintRule write the API server refuses (403 from RBAC, 422 or 400 from an
admission policy) is remembered for the core, which quarantines the node as
FencingUnavailable with the API's reason (issue 40 review); a conflict or an outage is
a retry, not remembered. The API server is faked at the HTTP edge (fakeapi.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fakeapi import FakeApiServer, fake_api, status_body
from kubernetes.client.exceptions import ApiException

from gpuaccept.operator.cache import Cache
from gpuaccept.operator.controller import Controller
from gpuaccept.operator.core import NodeSnapshot, OperatorConfig
from gpuaccept.operator.core.fencing import FENCE_RULE_REFUSED_RETRY_SECONDS
from gpuaccept.operator.core.judge import judge
from gpuaccept.operator.core.model import WriteFenceRule
from gpuaccept.operator.executor import KubeExecutor

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RULES = "/apis/resource.k8s.io/v1/devicetaintrules"
NAME = "gpuaccept-fence-gpu-1-0f87d3d90ac6"
RULE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceTaintRule",
    "metadata": {"name": NAME},
    "spec": {
        "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-1", "device": "gpu-5"},
        "taint": {"key": "gpuaccept.io/fenced", "value": "memory_health", "effect": "NoSchedule"},
    },
}
FORBIDDEN = (
    'devicetaintrules.resource.k8s.io is forbidden: User "system:serviceaccount:'
    'gpuaccept-system:gpuaccept" cannot create resource "devicetaintrules"'
)


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with fake_api() as server:
        yield server


def executor_for(api: FakeApiServer) -> KubeExecutor:
    return KubeExecutor(api.kube(), Cache(), namespace="ns", identity="test")


def write(executor: KubeExecutor, *, exists: bool = False) -> None:
    action = WriteFenceRule(NAME, RULE, exists=exists)
    executor.execute(NodeSnapshot(node_name="gpu-1", now=NOW, node=None), action)


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (403, FORBIDDEN),
        (422, 'admission webhook "validate.kyverno.svc" denied the request'),
        (400, "spec.taint.effect: Unsupported value"),
    ],
)
def test_a_refused_create_is_remembered_and_a_later_write_clears_it(
    api: FakeApiServer, code: int, message: str
) -> None:
    executor = executor_for(api)
    api.script[("POST", RULES)] = [(code, status_body(code, message)), (201, RULE)]
    with pytest.raises(ApiException):
        write(executor)
    assert executor.fence_rule_error("gpu-1") == f"{code} {message}"
    assert executor.fence_rule_error("gpu-2") is None
    write(executor)  # a later write that goes through clears it
    assert executor.fence_rule_error("gpu-1") is None
    assert api.count("POST", RULES) == 2


def test_a_refused_patch_of_an_existing_rule_is_remembered(api: FakeApiServer) -> None:
    executor = executor_for(api)
    api.script[("PATCH", f"{RULES}/{NAME}")] = [(422, status_body(422, "denied by policy"))]
    with pytest.raises(ApiException):
        write(executor, exists=True)
    assert executor.fence_rule_error("gpu-1") == "422 denied by policy"


@pytest.mark.parametrize("code", [500, 503, 429])
def test_an_outage_is_a_retry_not_a_refusal(api: FakeApiServer, code: int) -> None:
    executor = executor_for(api)
    api.script[("POST", RULES)] = [(code, status_body(code, "etcd timeout"))]
    with pytest.raises(ApiException):
        write(executor)
    assert executor.fence_rule_error("gpu-1") is None


def test_a_name_taken_is_patched_not_a_refusal(api: FakeApiServer) -> None:
    executor = executor_for(api)
    api.script[("POST", RULES)] = [(409, status_body(409, "already exists"))]
    api.script[("PATCH", f"{RULES}/{NAME}")] = [(200, RULE)]
    write(executor)
    assert executor.fence_rule_error("gpu-1") is None
    assert api.count("PATCH", f"{RULES}/{NAME}") == 1


def test_the_controller_hands_the_refusal_to_the_core_until_it_is_forgotten(
    api: FakeApiServer,
) -> None:
    controller = Controller(api.kube(), OperatorConfig(), judge)
    try:
        api.script[("POST", RULES)] = [(403, status_body(403, FORBIDDEN))]
        with pytest.raises(ApiException):
            write(controller.actions)
        assert controller.observe("gpu-1", NOW).fence_rule_write_error == f"403 {FORBIDDEN}"
        assert controller.observe("gpu-2", NOW).fence_rule_write_error is None
        # after the retry interval the refusal is forgotten: a new fence tries again
        controller.actions.fence_rule_refused_at["gpu-1"] = (
            time.monotonic() - FENCE_RULE_REFUSED_RETRY_SECONDS
        )
        assert controller.observe("gpu-1", NOW).fence_rule_write_error is None
    finally:
        controller.executor.shutdown()
