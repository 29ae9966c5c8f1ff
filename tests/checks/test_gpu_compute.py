"""gpu_compute: its judge table (a row per branch,
with the policy section that decides it) and
its judge's other tests."""

from typing import Any

import pytest
from judge_table import Case, assert_row, ids

from gpuaccept.checks import gpu_compute
from gpuaccept.checks.gpu_compute import SPEC as GPU_COMPUTE
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

SXM = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


NVL = HardwareSummary(gpu_model="NVIDIA H100 NVL", gpu_count=8)


SXM2 = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=2)


SXM1 = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=1)


HEALTHY = [742.0, 738.5, 745.1, 740.2, 736.9, 743.3, 739.8, 741.0]


def compute(
    bf16: list[float], fp8: list[float] | None = None, **extra: Any
) -> gpu_compute.GpuComputeObserved:
    return gpu_compute.GpuComputeObserved(bf16_tflops=bf16, fp8_tflops=fp8, **extra)


def judge_compute(
    observed: gpu_compute.GpuComputeObserved,
    policy: dict[str, Any] | None = None,
    summary: HardwareSummary = SXM,
) -> tuple[CheckStatus, str]:
    section = gpu_compute.GpuComputePolicy.model_validate(policy or {})
    full = gpu_compute.judge(observed, section, summary)
    condensed = gpu_compute.judge(gpu_compute.condense(observed), section, summary)
    assert condensed.status is full.status, (full.message, condensed.message)
    return full.status, full.message


@pytest.mark.parametrize(
    ("bf16", "policy", "summary", "status", "words"),
    [
        (HEALTHY, None, SXM, CheckStatus.PASS, "lowest 0 % below it (warn > 8, fail > 25)"),
        # one GPU 15 % slower than its siblings (issue 13): no within-node spread was
        # measured, so it warns by default (issue 37, item 19)
        ([*HEALTHY[:5], 630.7, *HEALTHY[6:]], None, SXM, CheckStatus.WARN,
         "GPU 5: 631 TFLOPS bf16, 15 % below the node median 740"),
        # 30 % slower: past the 22 % most identical GPUs differ across clusters (SC22)
        ([*HEALTHY[:5], 519.4, *HEALTHY[6:]], None, SXM, CheckStatus.FAIL,
         "GPU 5: 519 TFLOPS bf16, 30 % below the node median 740"),
        # 4 % spread: within the 8 %
        ([748.2, 731.4, 744.9, 719.6, 739.0, 747.1, 735.8, 726.3], None, SXM, CheckStatus.PASS,
         "lowest 720 TFLOPS"),
        # 10 % below: beyond the 8 % warning, short of the 25 % failure
        ([*HEALTHY[:5], 666.0, *HEALTHY[6:]], None, SXM, CheckStatus.WARN,
         "GPU 5: 666 TFLOPS bf16, 10 % below the node median 740"),
        # the lines are the policy's
        ([*HEALTHY[:5], 700.0, *HEALTHY[6:]],
         {"warnBelowMedianPercent": 3, "maxBelowMedianPercent": 5}, SXM,
         CheckStatus.FAIL, "GPU 5: 700 TFLOPS bf16, 5 % below"),
        # two GPUs: either may be the slow one, but 30 % apart is a bad node: both named
        ([742.0, 519.4], None, SXM2, CheckStatus.FAIL,
         "GPU 1: 519 TFLOPS bf16, 30 % below GPU 0's 742 (2 GPUs"),
        ([519.4, 742.0], None, SXM2, CheckStatus.FAIL,
         "GPU 0: 519 TFLOPS bf16, 30 % below GPU 1's"),
        ([742.0, 630.7], None, SXM2, CheckStatus.WARN, "15 % below GPU 0's 742"),
        ([742.0, 670.0], None, SXM2, CheckStatus.WARN, "10 % below GPU 0's 742"),
        ([742.0, 730.0], None, SXM2, CheckStatus.PASS, "the 2 GPUs 2 % apart"),
        ([742.0], None, SXM1, CheckStatus.PASS, "no sibling comparison with 1 GPU"),
        # every GPU of the summary has a figure: a 0 not in failedGpus is no figure
        ([0.0] * 7 + [700.0], None, SXM, CheckStatus.FAIL, "GPU 0: no bf16 figure"),
        ([700.0], None, SXM, CheckStatus.FAIL, "bf16: 1 figures for 8 GPUs"),
        # per-model minimum, by model class: the NVL node is not an h100-sxm
        ([600.0] * 8, {"minBf16TflopsByModel": {"h100-sxm": 650}}, NVL, CheckStatus.PASS,
         "no model minimum"),
        ([600.0] * 8, {"minBf16TflopsByModel": {"h100-sxm": 650}}, SXM, CheckStatus.FAIL,
         "GPU 0: 600 TFLOPS bf16 < minimum 650"),
        ([600.0] * 8, {"minBf16Tflops": 550}, NVL, CheckStatus.PASS, "min 550"),
    ],
)  # fmt: skip
def test_compute_judge(
    bf16: list[float],
    policy: dict[str, Any] | None,
    summary: HardwareSummary,
    status: CheckStatus,
    words: str,
) -> None:
    got, message = judge_compute(compute(bf16), policy, summary)
    assert got is status, message
    assert words in message


def test_fp8_is_judged_too_and_a_missing_fp8_is_said() -> None:
    fp8 = [1318.0] * 7 + [1050.0]
    # fp8's sibling rule warns only (its 2 s window's spread is unmeasured) ...
    status, message = judge_compute(compute(HEALTHY, fp8))
    assert status is CheckStatus.WARN
    assert "GPU 7: 1050 TFLOPS fp8, 20 % below the node median 1318" in message
    # ... unless the policy says it fails; its minimum fails either way
    status, message = judge_compute(
        compute(HEALTHY, fp8), {"fp8SiblingsFail": True, "maxBelowMedianPercent": 12}
    )
    assert status is CheckStatus.FAIL
    status, message = judge_compute(compute(HEALTHY, fp8), {"minFp8Tflops": 1200})
    assert status is CheckStatus.FAIL
    assert "GPU 7: 1050 TFLOPS fp8 < minimum 1200" in message
    status, message = judge_compute(
        compute(HEALTHY, fp8_skipped="compute capability 8.0 < 8.9: no fp8 tensor cores")
    )
    assert status is CheckStatus.PASS
    assert "fp8 not measured: compute capability 8.0" in message


def test_a_failed_gpu_is_named_and_not_counted_as_a_sibling() -> None:
    bf16 = [*HEALTHY[:3], 0.0, *HEALTHY[4:]]
    observed = compute(bf16, failed_gpus={"3": "load: hung: no completion within 60 s"})
    status, message = judge_compute(observed)
    assert status is CheckStatus.FAIL
    assert message.startswith("GPU 3 failed: load: hung")
    assert "below the node median" not in message  # its 0 is no figure
    condensed = gpu_compute.condense(observed)
    assert condensed.failed == "3"
    assert condensed.bf16 == (736.9, 741.0, 4, 7, 742.6)


def test_the_sm_clock_reached_is_in_the_message() -> None:
    clocks = [1980] * 5 + [1680] + [1980] * 2
    observed = compute([*HEALTHY[:5], 630.7, *HEALTHY[6:]], sm_clock_mhz=clocks)
    assert "GPU 5: 631 TFLOPS bf16 at 1680 MHz, 15 % below" in judge_compute(observed)[1]


def test_condensed_compute_is_tiny_for_16_failing_gpus() -> None:
    observed = compute(
        [400.0 + i for i in range(16)],
        [700.0 + i for i in range(16)],
        source="measured",
        matrix=8192,
        timed_seconds=60.0,
        sm_clock_mhz=[1980] * 16,
        failed_gpus={str(i): "load: hung: no completion within 60 s" for i in range(0, 16, 2)},
    )
    wire = gpu_compute.condense(observed).model_dump_json(by_alias=True, exclude_none=True)
    assert len(wire) <= 120, wire


CASES = [
    Case("healthy", compute(HEALTHY), CheckStatus.PASS, summary=SXM),
    Case("one-gpu-15-percent-slow-warns", compute([*HEALTHY[:5], 630.7, *HEALTHY[6:]]),
         CheckStatus.WARN, "GPU 5: 631 TFLOPS bf16, 15 % below the node median 740",
         summary=SXM, shipped=True),
    Case("one-gpu-30-percent-slow", compute([*HEALTHY[:5], 519.4, *HEALTHY[6:]]),
         CheckStatus.FAIL, "GPU 5: 519 TFLOPS bf16, 30 % below the node median 740",
         summary=SXM, shipped=True),
    Case("one-gpu-10-percent-slow", compute([*HEALTHY[:5], 666.0, *HEALTHY[6:]]),
         CheckStatus.WARN, summary=SXM),
    # 4 fast, 4 slow by 30 %: the node median (the groups' mean) hides them, the
    # faster half's median does not
    Case("four-of-eight-30-percent-slow", compute([742.0] * 4 + [519.4] * 4),
         CheckStatus.FAIL, "GPU 4: 519 TFLOPS bf16, 30 % below the faster half's median 742",
         summary=SXM),
    # a healthy spread (the throughput-spread trap's figures, 4 % apart) passes it
    Case("healthy-spread-passes-the-faster-half",
         compute([748.2, 731.4, 744.9, 719.6, 739.0, 747.1, 735.8, 726.3]), CheckStatus.PASS,
         summary=SXM),
    # an earlier probe's condensed form (four items) is judged without that rule
    Case("earlier-condensed-four-items", {"bf16": [630.7, 686.4, 4, 8]}, CheckStatus.WARN,
         "8 % below the node median", summary=SXM),
    Case("policy-lines", compute([*HEALTHY[:5], 700.0, *HEALTHY[6:]]), CheckStatus.FAIL,
         section={"warnBelowMedianPercent": 3, "maxBelowMedianPercent": 5}, summary=SXM),
    Case("model-minimum", compute([600.0] * 8), CheckStatus.FAIL, "< minimum 650",
         section={"minBf16TflopsByModel": {"h100-sxm": 650}}, summary=SXM),
    Case("missing-figure", compute([700.0]), CheckStatus.FAIL, "bf16: 1 figures for 8 GPUs",
         summary=SXM),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(GPU_COMPUTE, case)
