"""nvlink: its judge table (a row per branch,
with the policy section that decides it) and
its judge's other tests."""

import pytest
from judge_table import Case, assert_row, ids, status_and_message
from pydantic import JsonValue

from gpuaccept.checks.nvlink import SPEC as NVLINK
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

H100 = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


H100_NVL = HardwareSummary(gpu_model="NVIDIA H100 NVL", gpu_count=8)


judged = status_and_message  # H100 summary, the shipped policy


EIGHTEEN = {"0-7": 18}


@pytest.mark.parametrize(
    ("observed", "summary", "status", "says"),
    [
        ({"links": EIGHTEEN, "active": EIGHTEEN}, H100, CheckStatus.PASS, ">= 18 active"),
        (
            {"links": EIGHTEEN, "active": {"0-4,6-7": 18, "5": 16}, "inactive": {"5": [16, 17]}},
            H100,
            CheckStatus.FAIL,
            "GPU 5: 16 of 18 NVLinks active (inactive: 16, 17)",
        ),
        # an NVL part: no expected count, inactive links are recorded only
        ({"links": EIGHTEEN, "active": {"0-7": 12}}, H100_NVL, CheckStatus.PASS, "not judged"),
        (
            {"links": EIGHTEEN, "active": EIGHTEEN, "errors": {"crc": {"4:3": 14}}},
            H100,
            CheckStatus.WARN,
            "crc errors > 0 on GPU 4 link 3: 14",
        ),
        (
            {"links": EIGHTEEN, "active": EIGHTEEN, "errors": {"recovery": {"3:7": 2}}},
            H100,
            CheckStatus.FAIL,
            "recovery errors > 0 on GPU 3 link 7: 2",
        ),
        (
            {"links": EIGHTEEN, "active": EIGHTEEN, "countersUnsupported": "0-1"},
            H100,
            CheckStatus.PASS,
            "error counters not supported on GPUs 0, 1: not judged",
        ),
        (
            {
                "links": {"0": 18, "1": 0},
                "active": {"0": 18, "1": 0},
                "failedGpus": {"1": "NVLink: lost"},
            },
            H100,
            CheckStatus.FAIL,
            "GPU 1 failed: NVLink: lost",
        ),
    ],
)
def test_nvlink_judge(
    observed: JsonValue, summary: HardwareSummary, status: CheckStatus, says: str
) -> None:
    got, message = judged(NVLINK, observed, summary)
    assert got is status
    assert says in message


def test_nvlink_fail_thresholds_come_from_the_policy() -> None:
    policy = ProbePolicy.model_validate({"nvlink": {"failAbove": {"replay": 100}}})
    observed: JsonValue = {
        "links": {"0": 18},
        "active": {"0": 18},
        "errors": {"replay": {"0:1": 101}},
    }
    assert judged(NVLINK, observed, policy=policy)[0] is CheckStatus.FAIL
    assert judged(NVLINK, observed)[0] is CheckStatus.WARN  # default: replay only warns


CASES = [
    Case("all-active", {"links": EIGHTEEN, "active": EIGHTEEN}, CheckStatus.PASS, ">= 18 active",
         summary=H100, shipped=True),
    Case("two-inactive",
         {"links": EIGHTEEN, "active": {"0-4,6-7": 18, "5": 16}, "inactive": {"5": [16, 17]}},
         CheckStatus.FAIL, "GPU 5: 16 of 18 NVLinks active", summary=H100, shipped=True),
    Case("nvl-part-not-judged", {"links": EIGHTEEN, "active": {"0-7": 12}}, CheckStatus.PASS,
         "not judged", summary=H100_NVL, shipped=True),
    Case("crc-warns", {"links": EIGHTEEN, "active": EIGHTEEN, "errors": {"crc": {"4:3": 14}}},
         CheckStatus.WARN, "crc errors > 0 on GPU 4 link 3: 14", summary=H100, shipped=True),
    Case("recovery-fails",
         {"links": EIGHTEEN, "active": EIGHTEEN, "errors": {"recovery": {"3:7": 2}}},
         CheckStatus.FAIL, summary=H100, shipped=True),
    Case("policy-fails-on-replay",
         {"links": {"0": 18}, "active": {"0": 18}, "errors": {"replay": {"0:1": 101}}},
         CheckStatus.FAIL, section={"failAbove": {"replay": 100}}, summary=H100, shipped=True),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(NVLINK, case)


ONE_GPU_SLICE = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=1, nvswitch_devices=0)


def test_a_one_gpu_slice_of_an_hgx_board_has_its_links_recorded_not_judged() -> None:
    """A VM or partition with one GPU of an HGX board: Fabric Manager trains no NVLink
    for a one-GPU partition, so its 18 links are inactive (issue 37, item 17)."""
    observed = {"links": {"0": 18}, "active": {"0": 0}, "inactive": {"0": list(range(18))}}
    got, message = judged(NVLINK, observed, ONE_GPU_SLICE)
    assert got is CheckStatus.PASS, message
    assert "not judged" in message
    assert "one GPU" in message
    # eight GPUs of the same model are still held to 18 each
    assert judged(NVLINK, {"links": EIGHTEEN, "active": {"0-7": 17}}, H100)[0] is CheckStatus.FAIL
