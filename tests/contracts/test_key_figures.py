"""Key figures: the contract keeps the summary fields and bounds the rest; the
checks declare their own figures, and the CRD schema and printer columns of
``status.figures`` come from those declarations."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuaccept.checks.gen import crds as crdgen
from gpuaccept.checks.registry import CHECKS
from gpuaccept.contracts.nodeacceptance import MAX_CHECK_FIGURES, KeyFigures

SUMMARY_FIGURES = {field.alias or name for name, field in KeyFigures.model_fields.items()}


def _declared() -> list[str]:
    return [
        field.alias or name
        for check in CHECKS
        if check.figures_model is not None
        for name, field in check.figures_model.model_fields.items()
    ]


def test_check_figures_have_one_owner_each() -> None:
    declared = _declared()
    assert declared, "no check declares a key figure"
    assert len(declared) == len(set(declared)), "two checks declare the same figure"
    assert not set(declared) & SUMMARY_FIGURES, "a check figure shadows a summary field"
    assert len(declared) <= MAX_CHECK_FIGURES


def test_every_column_shows_a_figure_of_its_own_check() -> None:
    for check in CHECKS:
        for column in check.columns:
            assert check.figures_model is not None, check.name
            names = {f.alias or n for n, f in check.figures_model.model_fields.items()}
            assert column.figure in names, (check.name, column.figure)


def test_crd_schema_names_every_declared_figure() -> None:
    status = crdgen.acceptance_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    figures = status["properties"]["status"]["properties"]["figures"]["properties"]
    assert set(figures) == SUMMARY_FIGURES | set(_declared())


def test_columns_follow_their_declared_position() -> None:
    declared = sorted((c for check in CHECKS for c in check.columns), key=lambda c: c.position)
    shown = [c["name"] for c in crdgen.figure_columns()]
    assert shown == [c.name for c in declared]
    assert len({c.position for c in declared}) == len(declared), "two columns share a position"


@pytest.mark.parametrize(
    ("wire", "error"),
    [
        ({"busbw_gbps": 1.0}, "camelCase"),
        ({"busbwGBps": [1.0]}, "valid"),
        ({"pcie": "x" * 65}, "at most 64"),
        ({f"figure{i}": i for i in range(MAX_CHECK_FIGURES + 1)}, "at most"),
    ],
)
def test_check_figures_are_bounded(wire: dict[str, object], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        KeyFigures.model_validate(wire)


def test_check_figures_travel_flat() -> None:
    wire = {"gpuCount": 8, "busbwGBps": 80.5, "pcie": "Gen5x16", "minPcieWidth": 16}
    figures = KeyFigures.model_validate(wire)
    assert figures.to_wire() == wire
    assert figures.gpu_count == 8
    assert figures.check_figures == {"busbwGBps": 80.5, "pcie": "Gen5x16", "minPcieWidth": 16}
    assert (figures.figure("busbwGBps"), figures.figure("absent")) == (80.5, None)
