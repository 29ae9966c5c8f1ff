"""nvswitch_fabric: its judge table (a row per branch,
with the policy section that decides it) and
its judge's other tests."""

import pytest
from judge_table import Case, assert_row, ids, status_and_message
from pydantic import JsonValue

from gpuaccept.checks.nvswitch_fabric import SPEC as FABRIC
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

H100 = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


H100_NVL = HardwareSummary(gpu_model="NVIDIA H100 NVL", gpu_count=8)


judged = status_and_message  # H100 summary, the shipped policy


@pytest.mark.parametrize(
    ("observed", "summary", "status", "says"),
    [
        ({"gpus": 8, "completed": 8, "structVersion": 3}, H100, CheckStatus.PASS, "8 GPUs"),
        (
            {"gpus": 8, "completed": 0, "notCompleted": {"0-7": "not_started"}},
            H100,
            CheckStatus.FAIL,
            "GPUs 0, 1, 2, 3, 4, 5, 6, 7: fabric registration not started",
        ),
        (
            {"gpus": 8, "completed": 7, "notCompleted": {"5": "in_progress"}},
            H100,
            CheckStatus.FAIL,
            "GPU 5: fabric registration still in progress",
        ),
        (
            {"gpus": 8, "completed": 8, "statusErrors": {"3": 999}},
            H100,
            CheckStatus.FAIL,
            "GPU 3: fabric registration failed (NVML error 999)",
        ),
        (
            {"gpus": 8, "completed": 8, "health": {"degraded_bandwidth": "2"}},
            H100,
            CheckStatus.FAIL,
            "GPU 2: degraded bandwidth",
        ),
        (
            {"gpus": 8, "completed": 8, "health": {"route_recovery": "2"}},
            H100,
            CheckStatus.WARN,
            "GPU 2: route recovery",
        ),
        (
            {"gpus": 8, "completed": 0, "notCompleted": {"0-7": "unsupported"}},
            H100_NVL,
            CheckStatus.PASS,
            "",
        ),
        (
            {"gpus": 8, "completed": 0, "notCompleted": {"0-7": "not_supported"}},
            H100_NVL,
            CheckStatus.PASS,
            "",
        ),
        # an SXM node must be on its fabric: no fabric fails, no answer is no pass
        (
            {"gpus": 8, "completed": 0, "notCompleted": {"0-7": "not_supported"}},
            H100,
            CheckStatus.FAIL,
            "",
        ),
        (
            {"gpus": 8, "completed": 0, "notCompleted": {"0-7": "unsupported"}},
            H100,
            CheckStatus.SKIP,
            "",
        ),
    ],
)
def test_fabric_judge(
    observed: JsonValue, summary: HardwareSummary, status: CheckStatus, says: str
) -> None:
    got, message = judged(FABRIC, observed, summary)
    assert got is status
    assert says in message


CASES = [
    Case("completed", {"gpus": 8, "completed": 8, "structVersion": 3}, CheckStatus.PASS,
         summary=H100, shipped=True),
    Case("in-progress", {"gpus": 8, "completed": 7, "notCompleted": {"5": "in_progress"}},
         CheckStatus.FAIL, "GPU 5: fabric registration still in progress", summary=H100,
         shipped=True),
    Case("route-recovery-warns", {"gpus": 8, "completed": 8, "health": {"route_recovery": "2"}},
         CheckStatus.WARN, "GPU 2: route recovery", summary=H100, shipped=True),
    Case("nvl-part-without-fabric",
         {"gpus": 8, "completed": 0, "notCompleted": {"0-7": "not_supported"}},
         CheckStatus.PASS, summary=H100_NVL, shipped=True),
    Case("sxm-no-answer", {"gpus": 8, "completed": 0, "notCompleted": {"0-7": "unsupported"}},
         CheckStatus.SKIP, summary=H100, shipped=True),
    Case("policy-only-warns-on-degraded",
         {"gpus": 8, "completed": 8, "health": {"degraded_bandwidth": "2"}}, CheckStatus.WARN,
         section={"failOn": [], "warnOn": ["degraded_bandwidth"]}, summary=H100, shipped=True),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(FABRIC, case)


SLICE = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=1, nvswitch_devices=0)
NO_SWITCH = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=4, nvswitch_devices=0)


@pytest.mark.parametrize("summary", [SLICE, NO_SWITCH, H100_NVL], ids=["slice", "4gpu", "nvl"])
@pytest.mark.parametrize(
    "observed",
    [
        {"gpus": 1, "completed": 0, "notCompleted": {"0": "not_started"}},
        {"gpus": 1, "completed": 0, "notCompleted": {"0": "in_progress"}},
        {"gpus": 1, "completed": 1, "statusErrors": {"0": 999}},
        {"gpus": 1, "completed": 1, "health": {"degraded_bandwidth": "0"}},
    ],
    ids=["not-started", "in-progress", "status-error", "degraded"],
)
def test_where_no_fabric_is_expected_its_state_is_recorded_and_passes(
    observed: JsonValue, summary: HardwareSummary
) -> None:
    """A board without an NVSwitch (or a model the policy expects on none): whatever
    state NVML reports is recorded, not judged (issue 37, item 17)."""
    got, message = judged(FABRIC, observed, summary)
    assert got is CheckStatus.PASS, message
    assert "no NVSwitch fabric expected" in message
    assert "recorded, not judged" in message


def test_a_lost_gpu_still_fails_where_no_fabric_is_expected() -> None:
    observed = {"gpus": 1, "completed": 0, "failedGpus": {"0": "fabric: GPU is lost"}}
    assert judged(FABRIC, observed, SLICE)[0] is CheckStatus.FAIL
