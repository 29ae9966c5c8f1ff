"""The chart's probe-pod values (issue 25, item 6): ``probe.podLabels``,
``probe.podAnnotations`` and ``probe.env`` reach the operator's command line and
from there every probe and fabric pod; the defaults opt out of Istio's and
Linkerd's sidecar injection; a value that would break the probe's trust (one of its
own variables, one of the operator's own labels) fails ``helm template`` naming it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.operator.core import NodeView
from gpuaccept.operator.core.podspec import ProbeAttempt, probe_pod_manifest
from gpuaccept.testsupport.chart_rbac import chart_dir, helm, operator_config, render_chart

NODE = NodeView(name="gpu-1", gpus=8, gpu_capacity=8, boot_id="b")


def _probe_pod(set_values: dict[str, str] | None = None) -> dict[str, Any]:
    config = operator_config(render_chart(set_values=set_values))
    attempt = ProbeAttempt(
        name="gpuaccept-probe-gpu-1-1", serial=1, node=NODE, policy_name="default",
        spec=NodeAcceptancePolicySpec.model_validate({}),
    )  # fmt: skip
    return probe_pod_manifest(attempt, config)


def test_by_default_probe_pods_opt_out_of_sidecar_injection() -> None:
    meta = _probe_pod()["metadata"]
    assert meta["labels"]["sidecar.istio.io/inject"] == "false"
    assert meta["annotations"]["sidecar.istio.io/inject"] == "false"
    assert meta["annotations"]["linkerd.io/inject"] == "disabled"


def test_labels_annotations_and_env_from_values_reach_the_pod() -> None:
    pod = _probe_pod(
        {
            "probe.podLabels.team": "ml-platform",
            "probe.podAnnotations.example\\.com/owner": "gpu-team",
            "probe.env.HTTPS_PROXY": "http://proxy.example.com:3128",
        }
    )
    assert pod["metadata"]["labels"]["team"] == "ml-platform"
    assert pod["metadata"]["annotations"]["example.com/owner"] == "gpu-team"
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["HTTPS_PROXY"] == "http://proxy.example.com:3128"


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("probe.env.GPUACCEPT_EXPECTED_GPUS=1", "probe.env"),
        ("probe.env.NODE_NAME=other", "probe.env"),
        ("probe.env.CUDA_VISIBLE_DEVICES=0", "probe.env"),
        ("fabric.env.GPUACCEPT_POD_IP=1.2.3.4", "fabric.env"),
        ("probe.podLabels.app\\.kubernetes\\.io/component=other", "probe.podLabels"),
        ("probe.podLabels.app\\.kubernetes\\.io/instance=other", "probe.podLabels"),
        ("probe.podLabels.gpuaccept\\.io/node=other", "probe.podLabels"),
        ("probe.podLabels.team=not a label value", "probe.podLabels"),
        ("probe.podAnnotations.gpuaccept\\.io/fabric-first=x", "probe.podAnnotations"),
    ],
)
def test_a_value_that_would_break_the_probes_trust_is_refused(value: str, named: str) -> None:
    proc = helm("template", "x", str(chart_dir()), "--set-string", value, check=False)
    assert proc.returncode != 0
    assert named in proc.stderr, proc.stderr


def test_the_chart_reserves_the_variables_the_contract_reserves() -> None:
    from gpuaccept.contracts.probe_invocation import RESERVED_ENV, RESERVED_ENV_PREFIX  # noqa: PLC0415

    helpers = (chart_dir() / "templates" / "_helpers.tpl").read_text()
    line = next(x for x in helpers.splitlines() if "$reservedEnv := list" in x)
    listed = set(re.findall(r'"([A-Z_]+)"', line))
    assert listed == set(RESERVED_ENV)
    assert f'hasPrefix "{RESERVED_ENV_PREFIX}"' in helpers
