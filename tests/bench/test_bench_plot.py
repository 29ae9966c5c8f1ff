"""The benchmark plot's pure parts: CPU per node from several runs' result files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bench.plot import cpu_ms_per_node, cpu_points, main, medians


def _run(label: str, *rows: tuple[str, int, int, float]) -> dict[str, Any]:
    return {
        "label": label,
        "results": [
            {"arm": arm, "nodes": nodes, "decided": decided, "cpu_s": cpu}
            for arm, nodes, decided, cpu in rows
        ],
    }


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"nodes": 500, "cpu_s": 10.0}, 20.0),
        ({"nodes": 5000, "cpu_s": 182.6}, 36.52),
        ({"nodes": 0, "cpu_s": 1.0}, None),  # no nodes
        ({"nodes": 10, "cpu_s": 0.0}, None),  # not measured
        ({"nodes": 10}, None),
    ],
)
def test_cpu_ms_per_node(result: dict[str, Any], expected: float | None) -> None:
    value = cpu_ms_per_node(result)
    assert value == pytest.approx(expected) if expected is not None else value is None


def test_cpu_points_come_from_every_run_and_skip_undecided_arms() -> None:
    documents = [
        _run("a", ("floor", 500, 500, 4.0), ("operator", 500, 500, 10.0)),
        _run("b", ("operator", 2000, 2000, 44.0), ("operator", 500, 500, 11.0)),
        _run("c", ("operator", 5000, 4990, 1.0)),  # not every node decided: left out
    ]
    assert cpu_points(documents) == {
        "floor": [(500, 8.0)],
        "operator": [(500, 20.0), (500, 22.0), (2000, 22.0)],
    }


def test_medians_per_n() -> None:
    assert medians([(500, 20.0), (500, 22.0), (500, 30.0), (2000, 22.0)]) == [
        (500, 22.0),
        (2000, 22.0),
    ]


def test_plot_from_result_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps(_run("a", ("operator", 500, 500, 10.0))))
    second.write_text(json.dumps(_run("b", ("operator", 5000, 5000, 100.0))))
    png = tmp_path / "cpu.png"
    assert main([str(png), str(first), str(second)]) == 0
    assert png.read_bytes().startswith(b"\x89PNG")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main([str(png), str(bad)]) == 2
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"{bad}: results: ")
