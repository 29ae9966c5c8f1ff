"""Probe and fabric pods adapted to the cluster (issue 25, item 6): the platform
team's labels, annotations and env (``--probe-pod-labels``, ``--probe-pod-annotations``,
``--probe-env``; the chart's ``probe.podLabels``, ``podAnnotations``, ``env``), with the
service-mesh sidecar opt-outs by default, and never the operator's own keys or the
probe's own variables."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts import probe_invocation
from gpuaccept.operator.core import NodeView, OperatorConfig
from gpuaccept.operator.core.model import FabricPodConfig, FabricPodLabels
from gpuaccept.operator.core.podspec import (
    FabricPodRequest,
    ProbeAttempt,
    fabric_pod_manifest,
    probe_pod_manifest,
)
from gpuaccept.operator.options import (
    OptionError,
    fabric_pods,
    parser,
    pod_annotations,
    pod_labels,
    probe_env,
)

NODE = NodeView(name="gpu-1", gpus=8, gpu_capacity=8, boot_id="b")
SPEC = NodeAcceptancePolicySpec.model_validate({"fabric": {"enabled": True, "minBusbwGBps": 1}})
ADAPTED = OperatorConfig(
    pod_labels={"team": "ml-platform", "sidecar.istio.io/inject": "false"},
    pod_annotations={"linkerd.io/inject": "disabled", "example.com/cost-center": "gpu"},
    probe_env=(("HTTPS_PROXY", "http://proxy:3128"), ("NCCL_DEBUG", "WARN")),
    fabric=FabricPodConfig(
        annotations={"k8s.v1.cni.cncf.io/networks": "rdma-net"}, env=(("NCCL_DEBUG", "INFO"),)
    ),
)


def _probe(config: OperatorConfig) -> dict[str, Any]:
    attempt = ProbeAttempt(name="gpuaccept-probe-gpu-1-1", serial=1, node=NODE, policy_name="p",
                           spec=SPEC)  # fmt: skip
    return probe_pod_manifest(attempt, config)


def _fabric(config: OperatorConfig) -> dict[str, Any]:
    request = FabricPodRequest(
        labels=FabricPodLabels(pair="abc", rank=0, first="gpu-1", second="gpu-2"),
        node=NODE, policy_name="p", spec=SPEC, rendezvous_address=None,
    )  # fmt: skip
    return fabric_pod_manifest(request, config)


def _env(pod: dict[str, Any]) -> dict[str, Any]:
    """The container's env as the kubelet reads it: a later entry of a name wins."""
    out: dict[str, Any] = {}
    for item in pod["spec"]["containers"][0]["env"]:
        out[item["name"]] = item.get("value", item.get("valueFrom"))
    return out


@pytest.mark.parametrize("build", [_probe, _fabric], ids=["probe", "fabric"])
def test_the_platform_teams_labels_annotations_and_env_are_on_the_pod(build: Any) -> None:
    pod = build(ADAPTED)
    meta = pod["metadata"]
    assert meta["labels"]["team"] == "ml-platform"
    assert meta["labels"]["sidecar.istio.io/inject"] == "false"
    assert meta["annotations"]["linkerd.io/inject"] == "disabled"
    assert meta["annotations"]["example.com/cost-center"] == "gpu"
    assert _env(pod)["HTTPS_PROXY"] == "http://proxy:3128"
    # the operator's own stay as they are
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "gpuaccept"
    assert meta["labels"]["app.kubernetes.io/component"] == "probe"
    assert meta["annotations"]["gpuaccept.io/node-name"] == "gpu-1"
    assert _env(pod)["GPUACCEPT_EXPECTED_GPUS"] == "8"
    assert _env(pod)["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_the_fabric_settings_win_over_the_probe_pods() -> None:
    pod = _fabric(ADAPTED)
    assert _env(pod)["NCCL_DEBUG"] == "INFO"
    assert [e["name"] for e in pod["spec"]["containers"][0]["env"]].count("NCCL_DEBUG") == 1
    assert pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "rdma-net"
    assert _env(_probe(ADAPTED))["NCCL_DEBUG"] == "WARN"


@pytest.mark.parametrize("build", [_probe, _fabric], ids=["probe", "fabric"])
def test_even_an_unchecked_config_cannot_override_the_operators_own(build: Any) -> None:
    hostile = OperatorConfig(
        pod_labels={"app.kubernetes.io/component": "other", "gpuaccept.io/node": "x"},
        pod_annotations={"gpuaccept.io/node-name": "other"},
        probe_env=(("GPUACCEPT_EXPECTED_GPUS", "1"), ("NODE_NAME", "other")),
    )
    pod = build(hostile)
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "probe"
    assert pod["metadata"]["labels"]["gpuaccept.io/node"] == "gpu-1"
    assert pod["metadata"]["annotations"]["gpuaccept.io/node-name"] == "gpu-1"
    assert _env(pod)["GPUACCEPT_EXPECTED_GPUS"] == "8"  # the operator's entry comes last
    assert _env(pod)["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_the_defaults_opt_out_of_sidecar_injection() -> None:
    args = parser().parse_args([])
    assert pod_labels(args.probe_pod_labels) == {"sidecar.istio.io/inject": "false"}
    assert pod_annotations(args.probe_pod_annotations) == {
        "sidecar.istio.io/inject": "false",
        "linkerd.io/inject": "disabled",
    }
    assert probe_env(args.probe_env) == ()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: pod_labels('{"app.kubernetes.io/component": "x"}'), "is the operator's own"),
        (lambda: pod_labels('{"app.kubernetes.io/instance": "x"}'), "is the operator's own"),
        (lambda: pod_labels('{"gpuaccept.io/attempt": "9"}'), "is the operator's own"),
        (lambda: pod_labels('{"team": "has space"}'), "is not a label value"),
        (lambda: pod_labels('{"bad key!": "x"}'), "is not a label key"),
        (lambda: pod_labels('["x"]'), "expected a JSON object"),
        (lambda: pod_annotations('{"gpuaccept.io/fabric-first": "x"}'), "is the operator's own"),
        (lambda: pod_annotations('{"a": 1}'), "expected a string"),
        (lambda: probe_env('{"GPUACCEPT_EXPECTED_GPUS": "4"}'), "is the probe's own"),
        (lambda: probe_env('{"GPUACCEPT_PROFILE": "/x.yaml"}'), "is the probe's own"),
        (lambda: probe_env('{"NODE_NAME": "other"}'), "is the probe's own"),
        (lambda: probe_env('{"CUDA_VISIBLE_DEVICES": "0"}'), "is the probe's own"),
        (lambda: probe_env('{"LD_PRELOAD": "/x.so"}'), "is the probe's own"),
        (lambda: probe_env('{"1BAD": "x"}'), "is not an environment variable name"),
        (lambda: fabric_pods('{"env": {"GPUACCEPT_POD_IP": "1.2.3.4"}}'), "is the probe's own"),
    ],
)
def test_what_would_break_the_probes_trust_is_refused_in_one_line(call: Any, message: str) -> None:
    with pytest.raises(OptionError, match=message) as raised:
        call()
    assert "\n" not in str(raised.value)


def test_every_variable_the_probe_reads_is_reserved() -> None:
    names = [
        value
        for name, value in inspect.getmembers(probe_invocation)
        if name.startswith("ENV_") and isinstance(value, str)
    ]
    assert len(names) >= 10
    assert all(probe_invocation.reserved_env(name) for name in names), names
