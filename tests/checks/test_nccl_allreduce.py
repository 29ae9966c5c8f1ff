"""nccl_allreduce: its judge table (a row per branch,
with the policy section that decides it) and
its judge's other tests."""

import pytest
from judge_table import (
    Case,
    assert_row,
    default_policy,
    ids,
    judge_json,
)
from pydantic import JsonValue

from gpuaccept.checks.nccl_allreduce import SPEC as NCCL
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


GIB = 1 << 30


def test_nccl_judge() -> None:
    observed: dict[str, JsonValue] = {
        "backend": "nccl",
        "source": "measured",
        "ranks": 8,
        "busbwGBps": 370.0,
    }
    p = default_policy()
    assert judge_json(NCCL, observed, p, SUMMARY).status is CheckStatus.PASS
    h200 = HardwareSummary(gpu_model="NVIDIA H200", gpu_count=8)
    by_model = judge_json(NCCL, {**observed, "busbwGBps": 300.0}, p, h200)  # 320 for h200-sxm
    assert by_model.status is CheckStatus.FAIL
    assert by_model.expected == {"minBusbwGBps": 320.0}
    unset = judge_json(NCCL, observed, ProbePolicy(), SUMMARY)
    assert unset.status is CheckStatus.PASS
    assert "no minimum set" in unset.message
    zero = judge_json(NCCL, {**observed, "busbwGBps": 0}, ProbePolicy(), SUMMARY)
    assert zero.status is CheckStatus.FAIL


def test_condensed_curve_is_rounded_and_rejudgeable() -> None:
    observed = NCCL.parse(
        {"ranks": 8, "busbwGBps": 465.3, "sweep": [[GIB, 446.21], [8 * GIB, 465.3]]}
    )
    condensed = NCCL.condense(observed)
    assert condensed.sweep == [(GIB, 446.0), (8 * GIB, 465.0)]
    assert condensed.busbw_gbps == 465.3


MEASURED: dict[str, JsonValue] = {
    "backend": "nccl",
    "source": "measured",
    "ranks": 8,
    "busbwGBps": 370.0,
}
H200 = HardwareSummary(gpu_model="NVIDIA H200", gpu_count=8)

CASES = [
    Case("above-the-model-minimum", MEASURED, CheckStatus.PASS, shipped=True),
    Case("below-the-model-minimum", {**MEASURED, "busbwGBps": 300.0}, CheckStatus.FAIL,
         summary=H200, shipped=True),
    Case("no-minimum-set", MEASURED, CheckStatus.PASS, "no minimum set"),
    Case("zero-fails-without-a-minimum", {**MEASURED, "busbwGBps": 0}, CheckStatus.FAIL),
    Case("global-minimum", MEASURED, CheckStatus.FAIL, section={"minBusbwGBps": 400}),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(NCCL, case)
