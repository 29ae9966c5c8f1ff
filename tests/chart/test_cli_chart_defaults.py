"""The operator run by hand and the chart's Deployment listen on the same ports and
elect on the same Lease: the CLI's defaults are the chart's (and the image's EXPOSE)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from gpuaccept.testsupport.chart_rbac import render_chart

ROOT = Path(__file__).resolve().parents[2]


def _chart_args() -> Any:
    docs = render_chart(release="gpuaccept", namespace="gpuaccept-system")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "operator"
    options = importlib.import_module("gpuaccept.operator.options")
    return options.parser().parse_args(container["args"][1:])


def test_the_operator_clis_defaults_are_the_charts() -> None:
    options = importlib.import_module("gpuaccept.operator.options")
    cli = options.parser().parse_args([])
    chart = _chart_args()
    got = {k: getattr(cli, k) for k in ("health_port", "metrics_port", "lease_name")}
    want = {k: getattr(chart, k) for k in ("health_port", "metrics_port", "lease_name")}
    assert got == want


def test_cleanup_looks_for_the_lease_the_chart_names() -> None:
    cleanup = importlib.import_module("gpuaccept.operator.cleanup")
    assert cleanup.parser().parse_args([]).lease_name == _chart_args().lease_name


def test_the_operator_image_exposes_the_default_ports() -> None:
    options = importlib.import_module("gpuaccept.operator.options")
    cli = options.parser().parse_args([])
    exposed = next(
        line.split()[1:]
        for line in (ROOT / "operator" / "Dockerfile").read_text().splitlines()
        if line.startswith("EXPOSE ")
    )
    assert sorted(exposed) == sorted([str(cli.health_port), str(cli.metrics_port)])
