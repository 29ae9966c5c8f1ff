"""gpu_memory_bandwidth: its judge table (a row per branch,
with the policy section that decides it) and
its judge's other tests."""

from typing import Any

import pytest
from judge_table import Case, assert_row, ids
from pydantic import JsonValue

from gpuaccept.checks import gpu_memory_bandwidth
from gpuaccept.checks.gpu_memory_bandwidth import SPEC as GPU_MEMORY_BANDWIDTH
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

SXM = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


SXM2 = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=2)


@pytest.mark.parametrize(
    ("gbps", "policy", "status", "words"),
    [
        ([3015.0, 3021.0, 2998.4, 3030.2, 2972.9, 3012.7, 3025.5, 3004.6], None,
         CheckStatus.PASS, "triad lowest 2973 GB/s, median 3014"),
        ([3015.0] * 7 + [2412.0], None, CheckStatus.FAIL,
         "GPU 7: 2412 GB/s triad, 20 % below the node median 3015"),
        ([3015.0] * 7 + [2900.0], None, CheckStatus.PASS, "lowest 4 % below it (fail > 5)"),
        ([3015.0] * 7 + [2900.0], {"maxBelowMedianPercent": 3}, CheckStatus.FAIL, "4 % below"),
        ([4320.0] * 8, {"minGBpsByModel": {"h200-sxm": 4000}}, CheckStatus.PASS,
         "no model minimum"),
        ([3015.0] * 8, {"minGBpsByModel": {"h100-sxm": 3100}}, CheckStatus.FAIL,
         "< minimum 3100"),
        # two GPUs 20 % apart: a bad node either way, both named
        ([3015.0, 2412.0], None, CheckStatus.FAIL, "GPU 1: 2412 GB/s triad, 20 % below GPU 0's"),
        ([3015.0, 2990.0], None, CheckStatus.PASS, "the 2 GPUs 1 % apart (fail > 5)"),
        # fail-safe: a GPU without a figure, or figures for fewer GPUs than the node has
        ([3015.0] * 7 + [0.0], None, CheckStatus.FAIL, "GPU 7: no triad figure"),
        ([3000.0], None, CheckStatus.FAIL, "triad: 1 figures for 8 GPUs"),
    ],
)  # fmt: skip
def test_memory_judge(
    gbps: list[float], policy: dict[str, Any] | None, status: CheckStatus, words: str
) -> None:
    section = gpu_memory_bandwidth.GpuMemoryBandwidthPolicy.model_validate(policy or {})
    observed = gpu_memory_bandwidth.GpuMemoryBandwidthObserved(gbps=gbps)
    summary = SXM2 if len(gbps) == 2 else SXM
    full = gpu_memory_bandwidth.judge(observed, section, summary)
    condensed = gpu_memory_bandwidth.judge(
        gpu_memory_bandwidth.condense(observed), section, summary
    )
    assert full.status is status, full.message
    assert condensed.status is status, condensed.message
    assert words in full.message


def triad(gbps: list[float]) -> JsonValue:
    return {"gbps": list[JsonValue](gbps)}


CASES = [
    Case("healthy", triad([3015.0, 3021.0, 2998.4, 3030.2, 2972.9, 3012.7, 3025.5, 3004.6]),
         CheckStatus.PASS, "triad lowest 2973 GB/s, median 3014", summary=SXM),
    Case("one-gpu-20-percent-slow", triad([3015.0] * 7 + [2412.0]), CheckStatus.FAIL,
         "GPU 7: 2412 GB/s triad, 20 % below the node median 3015", summary=SXM),
    # 4 GPUs at 3015, 4 at 2800 (7 % slower): each 4 % below the node median 2908,
    # inside 5 %; 7 % below the faster half's median fails them
    Case("four-of-eight-7-percent-slow", triad([3015.0] * 4 + [2800.0] * 4), CheckStatus.FAIL,
         "GPU 4: 2800 GB/s triad, 7 % below the faster half's median 3015", summary=SXM),
    Case("policy-band", triad([3015.0] * 7 + [2900.0]), CheckStatus.FAIL, "4 % below",
         section={"maxBelowMedianPercent": 3}, summary=SXM),
    Case("model-minimum", triad([3015.0] * 8), CheckStatus.FAIL, "< minimum 3100",
         section={"minGBpsByModel": {"h100-sxm": 3100}}, summary=SXM),
    Case("no-figure", triad([3015.0] * 7 + [0.0]), CheckStatus.FAIL, "GPU 7: no triad figure",
         summary=SXM),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(GPU_MEMORY_BANDWIDTH, case)
