"""The report contract refuses what no probe can have measured (issue 10 item 6)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from gpuaccept.contracts.report import decode_termination_message, first_non_finite

BASE: dict[str, Any] = {
    "apiVersion": "gpuaccept.io/v1alpha1",
    "kind": "ProbeReport",
    "nodeName": "gpu-1",
    "bootID": "boot-1",
    "probeVersion": "0.1.0",
    "startedAt": "2026-01-01T00:00:00Z",
    "finishedAt": "2026-01-01T00:00:10Z",
    "hardware": "real",
    "summary": {"gpuCount": 8},
    "results": [
        {
            "check": "nccl_allreduce",
            "status": "pass",
            "observed": {"ranks": 8, "busbwGBps": 450.0},
            "durationS": 3.0,
        }
    ],
}


def _message(report: dict[str, Any]) -> str:
    return json.dumps(report, separators=(",", ":"))


def test_a_clean_report_decodes() -> None:
    assert decode_termination_message(_message(BASE)).result("nccl_allreduce") is not None


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize(
    "where",
    ['"busbwGBps":450.0', '"durationS":3.0', '"gpuCount":8'],
)
def test_non_finite_numbers_are_refused(token: str, where: str) -> None:
    key = where.split(":", maxsplit=1)[0]
    message = _message(BASE).replace(where, f"{key}:{token}")
    assert message != _message(BASE)
    with pytest.raises(ValidationError):
        decode_termination_message(message)


def test_non_finite_number_deep_in_expected_is_refused() -> None:
    report = json.loads(_message(BASE))
    report["results"][0]["expected"] = {"byModel": [{"min": 1.0}]}
    message = _message(report).replace('"min":1.0', '"min":NaN')
    with pytest.raises(ValidationError, match=r"byModel\[0\]\.min"):
        decode_termination_message(message)


def test_a_check_reported_twice_is_refused() -> None:
    report = json.loads(_message(BASE))
    failing = dict(report["results"][0], status="fail", observed={"ranks": 8, "busbwGBps": 1.0})
    report["results"] = [failing, report["results"][0]]
    with pytest.raises(ValidationError, match="reported twice"):
        decode_termination_message(_message(report))


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"a": [1.0, {"b": 2}], "c": "x", "d": None, "e": True}, None),
        (float("nan"), "(value)"),
        ({"a": [1.0, {"b": float("inf")}]}, "a[1].b"),
        ([0.5, float("-inf"), float("nan")], "[1]"),
        ({"x": {"y": [[], [float("nan")]]}, "z": float("nan")}, "x.y[1][0]"),
        ([], None),
    ],
)
def test_the_first_non_finite_number_is_named_by_its_path(value: Any, where: str | None) -> None:
    assert first_non_finite(value) == where
