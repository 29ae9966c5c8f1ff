"""``gpuaccept operator`` command-line errors: one line, non-zero, before any API call."""

from __future__ import annotations

import kopf
import pytest

from gpuaccept.operator.cli import main, parser
from gpuaccept.operator.handlers import parse_node_selector


def test_bad_json_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["--kubeconfig", "/dev/null", "--probe-resources", "{nope"])
    assert "--probe-resources is not valid JSON" in str(raised.value.code)


def test_missing_kubeconfig(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--kubeconfig", "/does/not/exist"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "does not exist" in err


def test_workers_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err


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


def test_node_selector_parsing() -> None:
    assert parse_node_selector("") == {}
    assert parse_node_selector("a=b, c") == {"a": "b", "c": kopf.PRESENT}
    with pytest.raises(ValueError, match="empty key"):
        parse_node_selector("=x")
