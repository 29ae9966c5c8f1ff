"""A node's baseline from its reports, and drift against it: pure tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaccept.checks.baseline import drift, report_figures
from gpuaccept.contracts.reverify import BaselineFigure

REPO = Path(__file__).resolve().parents[2]


def fig(check: str, figure: str, value: float, gpu: int | None = None) -> BaselineFigure:
    return BaselineFigure(
        check=check,
        figure=figure,
        value=value,
        gpu=gpu,
        where=f"GPU {gpu}" if gpu is not None else None,
    )


BASE = [
    fig("gpu_compute", "bf16Tflops.lowest", 742.0, 0),
    fig("gpu_compute", "bf16Tflops.median", 742.0),
    fig("nccl_allreduce", "busbwGBps", 465.0),
    fig("fabric_allreduce", "busbwGBps", 390.0),
]

ROWS = {
    "the same: nothing": ([fig("gpu_compute", "bf16Tflops.median", 742.0)], []),
    "faster: nothing": ([fig("nccl_allreduce", "busbwGBps", 480.0)], []),
    "4 % down: below the warning": ([fig("nccl_allreduce", "busbwGBps", 446.4)], []),
    "7 % down: warns": ([fig("nccl_allreduce", "busbwGBps", 432.5)], [("busbwGBps", "warn")]),
    "15 % down on GPU 3: fails, names the GPU": (
        [fig("gpu_compute", "bf16Tflops.lowest", 630.7, 3)],
        [("bf16Tflops.lowest", "fail")],
    ),
    "the fabric pair only warns": (
        [fig("fabric_allreduce", "busbwGBps", 200.0)],
        [("busbwGBps", "warn")],
    ),
    "a figure without a baseline: nothing": ([fig("pcie_link", "h2dGBps.lowest", 10.0, 1)], []),
}


@pytest.mark.parametrize(("now", "expected"), ROWS.values(), ids=list(ROWS))
def test_drift(now: list[BaselineFigure], expected: list[tuple[str, str]]) -> None:
    found = drift(BASE, now, warn_percent=5.0, fail_percent=10.0)
    assert [(f.figure, f.level) for f in found] == expected


def test_a_finding_names_the_figure_the_gpu_and_both_values() -> None:
    (found,) = drift(
        BASE, [fig("gpu_compute", "bf16Tflops.lowest", 630.7, 3)], warn_percent=5, fail_percent=10
    )
    assert found.gpu == 3
    assert found.baseline == 742.0
    assert found.value == 630.7
    assert found.percent == 15.0
    assert "GPU 3" in found.message
    assert "631" in found.message
    assert "742" in found.message
    assert "GPU 0" in found.message  # the GPU lowest at acceptance


def test_without_fail_percent_drift_only_warns() -> None:
    found = drift(
        BASE, [fig("gpu_compute", "bf16Tflops.median", 600.0)], warn_percent=5, fail_percent=None
    )
    assert [f.level for f in found] == ["warn"]


def test_worst_first() -> None:
    now = [
        fig("nccl_allreduce", "busbwGBps", 432.5),
        fig("gpu_compute", "bf16Tflops.median", 600.0),
    ]
    found = drift(BASE, now, warn_percent=5, fail_percent=10)
    assert [f.figure for f in found] == ["bf16Tflops.median", "busbwGBps"]


def _report(profile: str):  # type: ignore[no-untyped-def]
    import sys  # noqa: PLC0415

    sys.path.insert(0, str(REPO / "tests" / "operator"))
    from world import probed  # noqa: PLC0415

    return probed(REPO / "profiles" / profile)


def test_figures_of_a_report_and_of_its_drifted_self() -> None:
    healthy = report_figures(_report("h100-sxm-8gpu-healthy.yaml"))
    drifted = report_figures(_report("reverify/h100-sxm-8gpu-drifted.yaml"))
    names = {(f.check, f.figure) for f in healthy}
    assert ("gpu_compute", "bf16Tflops.lowest") in names
    assert ("gpu_memory_bandwidth", "triadGBps.median") in names
    assert ("peer_bandwidth", "nvlinkGBps.weakest") in names
    assert ("pcie_link", "h2dGBps.lowest") in names
    assert ("nccl_allreduce", "busbwGBps") in names
    found = drift(healthy, drifted, warn_percent=5, fail_percent=10)
    assert {f.figure for f in found if f.level == "fail"} == {
        "bf16Tflops.lowest",
        "bf16Tflops.median",
        "fp8Tflops.lowest",
        "fp8Tflops.median",
    }
    assert drift(healthy, healthy, warn_percent=5, fail_percent=10) == []
