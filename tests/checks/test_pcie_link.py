"""pcie_link: its judge table (a row per branch,
with the policy section that decides it) and
its judge's other tests."""

import pytest
from judge_table import (
    Case,
    assert_row,
    condense_json,
    default_policy,
    ids,
    judge_json,
)
from pydantic import JsonValue

from gpuaccept.checks.pcie_link import SPEC as PCIE_LINK
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


def policy(**sections: dict[str, object]) -> ProbePolicy:
    return ProbePolicy.model_validate(sections)


FULL_PCIE: dict[str, JsonValue] = {
    "gen": [5, 5, 4],
    "width": [16, 16, 16],
    "maxGen": [5, 5, 5],
    "maxWidth": [16, 16, 16],
    "idleGen": [1, 1, 1],
    "h2dGBps": [53.0, 52.0, 30.0],
    "d2hGBps": [52.0, 51.0, 29.0],
}


def test_pcie_gen_below_max_under_load_fails_and_condensed_agrees() -> None:
    p = default_policy()
    full = judge_json(PCIE_LINK, FULL_PCIE, p, SUMMARY)
    condensed_observed = condense_json(PCIE_LINK, FULL_PCIE)
    condensed = judge_json(PCIE_LINK, condensed_observed, p, SUMMARY)
    assert full.status is condensed.status is CheckStatus.FAIL
    assert "GPU 2 below max generation under load" in full.message
    assert "GPU 2 below max generation under load" in condensed.message
    assert condensed_observed == {
        "gpus": 3,
        "minGen": 4,
        "minWidth": 16,
        "belowMaxGen": "2",
        "belowMaxWidth": "",
        "minH2DGBps": 30.0,
        "minD2HGBps": 29.0,
        "slowH2D": [2],
        "slowD2H": [2],
    }


def test_pcie_rules_without_require_max() -> None:
    relaxed = policy(pcieLink={"requireMax": False, "minGeneration": 4, "minH2DGBps": 25})
    assert judge_json(PCIE_LINK, FULL_PCIE, relaxed, SUMMARY).status is CheckStatus.PASS
    stricter = policy(pcieLink={"requireMax": False, "minGeneration": 5})
    assert judge_json(PCIE_LINK, FULL_PCIE, stricter, SUMMARY).message == "Gen4 < Gen5"
    narrow = policy(pcieLink={"requireMax": False, "minWidth": 32})
    assert judge_json(PCIE_LINK, FULL_PCIE, narrow, SUMMARY).status is CheckStatus.FAIL


def test_pcie_malformed_observed_raises() -> None:
    with pytest.raises(ValueError, match="equal length"):
        judge_json(PCIE_LINK, {**FULL_PCIE, "width": [16]}, ProbePolicy(), SUMMARY)
    with pytest.raises(ValueError, match="should be an object"):
        judge_json(PCIE_LINK, [1, 2], ProbePolicy(), SUMMARY)


HEALTHY_PCIE: dict[str, JsonValue] = {
    **FULL_PCIE,
    "gen": [5, 5, 5],
    "h2dGBps": [53.0, 52.0, 52.5],
    "d2hGBps": [52.0, 51.0, 52.0],
}

CASES = [
    Case("at-max-and-fast", HEALTHY_PCIE, CheckStatus.PASS, shipped=True),
    Case(
        "gen-below-max-under-load",
        FULL_PCIE,
        CheckStatus.FAIL,
        "GPU 2 below max generation under load",
        shipped=True,
    ),
    Case(
        "width-below-max",
        {**HEALTHY_PCIE, "width": [16, 8, 16]},
        CheckStatus.FAIL,
        "GPU 1 below max width",
        shipped=True,
    ),
    Case(
        "slow-h2d",
        {**HEALTHY_PCIE, "h2dGBps": [53.0, 26.4, 52.5]},
        CheckStatus.FAIL,
        "H2D 26.4 GB/s < 40",
        shipped=True,
    ),
    Case(
        "relaxed-policy",
        FULL_PCIE,
        CheckStatus.PASS,
        section={"requireMax": False, "minGeneration": 4, "minH2DGBps": 25},
    ),
    Case(
        "minimum-generation",
        FULL_PCIE,
        CheckStatus.FAIL,
        "Gen4 < Gen5",
        section={"requireMax": False, "minGeneration": 5},
    ),
    Case(
        "minimum-width",
        FULL_PCIE,
        CheckStatus.FAIL,
        section={"requireMax": False, "minWidth": 32},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(PCIE_LINK, case)
