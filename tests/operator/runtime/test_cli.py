"""``gpuaccept operator`` command-line errors: one line, non-zero, before any API call."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import kopf
import pytest

from gpuaccept.operator.command import (
    GC_THRESHOLDS,
    main,
    parser,
    probe_resources,
    probe_tolerations,
    tune_gc,
)
from gpuaccept.operator.handlers import node_watch_filters
from gpuaccept.operator.options import OptionError, base_node_selector


def _usage_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run the real entry with ``args``; it must exit 2 with exactly one stderr line."""
    assert main(["--kubeconfig", os.devnull, *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert captured.err.endswith("\n")
    return lines[0]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("[]", "--fabric-pods: expected a JSON object, got array"),
        ('{"resource": {}}', "--fabric-pods: resource: unknown field (allowed: resources, "
         "annotations, capabilities, env, rendezvousPort, rendezvousTimeoutSeconds, "
         "timeoutSeconds)"),
        ('{"resources": {"rdma/a": "lots"}}',
         "--fabric-pods: resources: rdma/a: not a Kubernetes quantity (got 'lots')"),
        ('{"env": {"NCCL IB": "x"}}',
         "--fabric-pods: env: 'NCCL IB' is not an environment variable name"),
        ('{"env": {"NCCL_NET": 1}}',
         "--fabric-pods: env: NCCL_NET: expected a string, got integer"),
        ('{"capabilities": ["ipc_lock"]}',
         "--fabric-pods: capabilities: 'ipc_lock' is not a capability name"),
        ('{"rendezvousPort": 0}',
         "--fabric-pods: rendezvousPort: must be between 1 and 65535 (got 0)"),
        ('{"timeoutSeconds": "900"}',
         "--fabric-pods: timeoutSeconds: expected integer, got string"),
    ],
)  # fmt: skip
def test_bad_fabric_pod_settings_are_one_line(
    capsys: pytest.CaptureFixture[str], value: str, expected: str
) -> None:
    assert _usage_error(capsys, "--fabric-pods", value) == f"gpuaccept operator: {expected}"


def test_bad_json_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = _usage_error(capsys, "--probe-resources", "{nope")
    assert line.startswith("gpuaccept operator: --probe-resources: not valid JSON: ")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--probe-tolerations", "[1]"],
            "--probe-tolerations: [0]: expected a toleration object, got integer",
        ),
        (
            ["--probe-tolerations", '{"key": "a"}'],
            "--probe-tolerations: expected a JSON array of tolerations, got object",
        ),
        (
            ["--probe-tolerations", '[{"key": "a", "operator": "Exists"}, {"key": "b", "op": 1}]'],
            "--probe-tolerations: [1].op: unknown field "
            "(allowed: key, operator, value, effect, tolerationSeconds)",
        ),
        (
            ["--probe-tolerations", '[{"key": "a", "operator": "In"}]'],
            "--probe-tolerations: [0].operator: must be Exists or Equal (got 'In')",
        ),
        (
            ["--probe-tolerations", '[{"key": "a", "operator": "Exists", "effect": "NoRun"}]'],
            "--probe-tolerations: [0].effect: must be NoSchedule, PreferNoSchedule or "
            "NoExecute (got 'NoRun')",
        ),
        (
            ["--probe-tolerations", '[{"key": 7}]'],
            "--probe-tolerations: [0].key: expected a string, got integer",
        ),
        (  # Kubernetes would take it and tolerate every taint
            ["--probe-tolerations", '[{"operator": "Exists"}]'],
            "--probe-tolerations: [0].key: required (a toleration without one tolerates "
            "every taint)",
        ),
        (
            [
                "--probe-tolerations",
                '[{"key": "a", "effect": "NoExecute", "tolerationSeconds": "60"}]',
            ],
            "--probe-tolerations: [0].tolerationSeconds: expected an integer, got string",
        ),
        (
            [
                "--probe-tolerations",
                '[{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 60}]',
            ],
            "--probe-tolerations: [0].tolerationSeconds: only valid with effect NoExecute",
        ),
        (
            ["--probe-tolerations", '[{"key": "a", "operator": "Exists", "value": "v"}]'],
            "--probe-tolerations: [0].value: must be empty when operator is Exists",
        ),
        (
            ["--probe-tolerations", '[{"value": "v"}]'],
            "--probe-tolerations: [0].key: required (a toleration without one tolerates "
            "every taint)",
        ),
        (
            ["--probe-resources", "[]"],
            "--probe-resources: expected a JSON object with requests and/or limits, got array",
        ),
        (
            ["--probe-resources", '{"request": {"cpu": "1"}}'],
            "--probe-resources: request: unknown field (allowed: requests, limits)",
        ),
        (
            ["--probe-resources", '{"limits": ["cpu"]}'],
            "--probe-resources: limits: expected an object of resource name to quantity, got array",
        ),
        (
            ["--probe-resources", '{"requests": {"cpu": {"n": 1}}}'],
            '--probe-resources: requests.cpu: expected a quantity such as "4" or "16Gi", '
            "got object",
        ),
        (
            ["--probe-resources", '{"requests": {"memory": "lots"}}'],
            "--probe-resources: requests.memory: not a Kubernetes quantity (got 'lots')",
        ),
        (
            ["--probe-timeout", "abc"],
            "argument --probe-timeout: invalid int value: 'abc'",
        ),
        (["--probe-timeout", "0"], "--probe-timeout: must be at least 1 (got 0)"),
        (["--lease-duration", "0.5"], "--lease-duration: must be at least 1 (got 0.5)"),
        (["--status-interval", "0"], "--status-interval: must be positive (got 0.0)"),
        (["--metrics-port", "70000"], "--metrics-port: must be a port, 0 to 65535 (got 70000)"),
        (["--probe-command", " "], "--probe-command: must not be empty"),
        (
            ["--probe-priority-class", "system-node-critical"],
            "--probe-priority-class: system-node-critical is a system class",
        ),
        (["--log-format", "xml"], "argument --log-format: invalid choice: 'xml'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--node-selector", "=x"], "--node-selector: empty key in '=x'"),
        (
            ["--max-unavailable-ceiling", "101%"],
            "--max-unavailable-ceiling: '101%' is neither a count nor a percentage",
        ),
    ],
)
def test_bad_configuration_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    assert _usage_error(capsys, *args).startswith(f"gpuaccept operator: {expected}")


def test_bad_option_through_the_installed_command_is_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuaccept.cli", "operator", "--probe-timeout", "abc"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == "gpuaccept operator: argument --probe-timeout: invalid int value: 'abc'\n"
    assert proc.stdout == ""


def test_help_is_the_full_usage_and_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["--help"])
    assert raised.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: gpuaccept operator")
    assert "--probe-tolerations" in out
    assert "high availability" in out


def test_valid_probe_resources_and_tolerations() -> None:
    chart_values = {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "32Gi"}}
    assert probe_resources(json.dumps(chart_values)) == chart_values
    # Helm renders an unquoted `cpu: 2` as a JSON number: still a quantity.
    assert probe_resources('{"requests": {"cpu": 2, "memory": "500m"}}') == {
        "requests": {"cpu": "2", "memory": "500m"}
    }
    assert probe_resources("") == {}
    tolerations = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "a", "value": "b"},
        {"key": "c", "operator": "Equal", "value": "d", "effect": "NoExecute",
         "tolerationSeconds": 300},
    ]  # fmt: skip
    assert probe_tolerations(json.dumps(tolerations)) == tuple(tolerations)
    assert probe_tolerations("") == ()


def test_missing_kubeconfig(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--kubeconfig", "/does/not/exist"]) == 2
    err = capsys.readouterr().err
    assert err == "gpuaccept operator: --kubeconfig: /does/not/exist does not exist\n"


def test_workers_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--workers", "0"]) == 2
    assert capsys.readouterr().err == "gpuaccept operator: --workers: must be at least 1 (got 0)\n"


def test_chart_arguments_parse() -> None:
    args = parser().parse_args(
        [
            "--namespace=gpuaccept-system",
            "--peering=gpuaccept",
            "--log-level=info",
            "--health-port=8081",
            "--metrics-port=8080",
            "--probe-image=ghcr.io/x/probe:1",
            "--probe-image-pull-policy=IfNotPresent",
            "--probe-service-account=gpuaccept-probe",
            "--probe-runtime-class=nvidia",
            "--probe-priority-class=",
            "--probe-timeout=900",
            "--probe-shm-size=16Gi",
            '--probe-resources={"requests":{"cpu":"1"}}',
            "--probe-tolerations=[]",
        ]
    )
    assert args.lease_name == "gpuaccept"
    assert args.probe_timeout == 900
    assert args.workers >= 1
    assert args.probe_image_pull_secrets == []


def test_max_unavailable_ceiling_is_a_count_or_a_percentage() -> None:
    assert parser().parse_args([]).max_unavailable_ceiling == "100%"  # none by default
    assert parser().parse_args(["--max-unavailable-ceiling=50%"]).max_unavailable_ceiling == "50%"
    assert parser().parse_args(["--max-unavailable-ceiling", "7"]).max_unavailable_ceiling == 7


def test_probe_image_pull_secrets_repeat() -> None:
    args = parser().parse_args(
        ["--probe-image-pull-secret=regcred", "--probe-image-pull-secret=mirror.io"]
    )
    assert args.probe_image_pull_secrets == ["regcred", "mirror.io"]


def test_bad_probe_image_pull_secret_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = _usage_error(capsys, "--probe-image-pull-secret", "Reg Cred")
    assert line == (
        "gpuaccept operator: --probe-image-pull-secret: 'Reg Cred' is not a Secret name "
        "(a DNS subdomain)"
    )


CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
MASTER = "node-role.kubernetes.io/master"


def test_node_selector_parsing() -> None:
    assert base_node_selector("") == ()
    assert base_node_selector("a=b, c") == (("a", "b"), ("c", None))
    with pytest.raises(OptionError, match="empty key"):
        base_node_selector("=x")
    with pytest.raises(OptionError, match="a is named twice"):
        base_node_selector("a=b,a")


def test_control_plane_nodes_are_outside_the_watch_unless_allowed() -> None:
    """The watch's label filters: the base selector, and neither control-plane role
    label unless --allow-control-plane-nodes."""
    selector = base_node_selector("a=b, c")
    assert node_watch_filters(selector, allow_control_plane=False) == {
        "a": "b",
        "c": kopf.PRESENT,
        CONTROL_PLANE: kopf.ABSENT,
        MASTER: kopf.ABSENT,
    }
    assert node_watch_filters(selector, allow_control_plane=True) == {"a": "b", "c": kopf.PRESENT}
    assert node_watch_filters((), allow_control_plane=True) == {}


def test_a_control_plane_selector_needs_the_control_plane_allowed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = _usage_error(capsys, "--node-selector", CONTROL_PLANE)
    assert line == (
        f"gpuaccept operator: --node-selector: {CONTROL_PLANE} is a control-plane role "
        "label; control-plane nodes are outside the operator's reach without "
        "--allow-control-plane-nodes"
    )
    assert base_node_selector(CONTROL_PLANE, allow_control_plane=True) == ((CONTROL_PLANE, None),)


def test_tune_gc_freezes_what_exists_and_collects_the_young_generation_less_often() -> None:
    thresholds = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 0  # the imported modules are out of every collection
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
