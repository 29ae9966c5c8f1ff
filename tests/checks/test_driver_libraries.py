"""driver_libraries: its judge table (a row per branch,
with the policy section that decides it) and
its judge's other tests."""

import pytest
from judge_table import Case, assert_row, default_policy, ids, judge_json
from pydantic import JsonValue

from gpuaccept.checks.driver_libraries import SPEC as DRIVER_LIBRARIES
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


def policy(**sections: dict[str, object]) -> ProbePolicy:
    return ProbePolicy.model_validate(sections)


NODE_R580: dict[str, JsonValue] = {
    "kernelModule": "580.82.07",
    "nvmlDriver": "580.82.07",
    "cudaDriver": "13.0",
    # the probe image's torch is built for 13.2: reported, never judged
    "image": {"cudaRuntime": "13.2", "cudaRuntimeLibrary": "libcudart.so.13", "nccl": "2.27.7"},
}


def test_an_r580_node_with_a_newer_image_runtime_is_healthy() -> None:
    judgement = judge_json(DRIVER_LIBRARIES, NODE_R580, default_policy(), SUMMARY)
    assert judgement.status is CheckStatus.PASS, judgement.message


@pytest.mark.parametrize(
    ("change", "section", "needle"),
    [
        ({}, {"requiredCudaMajors": [13]}, None),
        (
            {"kernelModule": "575.57.08", "nvmlDriver": "575.57.08", "cudaDriver": "12.9"},
            {"requiredCudaMajors": [13]},
            "driver supports CUDA 12.9, workloads need CUDA 13.x",
        ),
        (
            {"kernelModule": "520.61.05", "nvmlDriver": "520.61.05", "cudaDriver": "11.8"},
            {"requiredCudaMajors": [12]},
            "driver supports CUDA 11.8, workloads need CUDA 12.x",
        ),
        ({}, {"minCudaDriverVersion": "13.1"}, "CUDA driver 13.0 < 13.1"),
        ({}, {"driverVersions": {"min": "590"}}, "driver 580.82.07 outside [590, *]"),
        ({"nvmlMismatch": True}, {}, "driver/library version mismatch"),
        # an image NCCL or runtime the policy would once have failed: never judged
        ({"image": {"cudaRuntime": "99.9", "nccl": "1.0.0"}}, {}, None),
    ],
)
def test_driver_libraries_judges_the_node(
    change: dict[str, JsonValue], section: dict[str, object], needle: str | None
) -> None:
    judgement = judge_json(
        DRIVER_LIBRARIES, {**NODE_R580, **change}, policy(driverLibraries=section), SUMMARY
    )
    if needle is None:
        assert judgement.status is CheckStatus.PASS, judgement.message
    else:
        assert judgement.status is CheckStatus.FAIL
        assert needle in judgement.message


def test_an_unknown_cuda_driver_is_not_a_pass_when_the_policy_needs_one() -> None:
    observed = {k: v for k, v in NODE_R580.items() if k != "cudaDriver"}
    p = policy(driverLibraries={"requiredCudaMajors": [12]})
    judgement = judge_json(DRIVER_LIBRARIES, observed, p, SUMMARY)
    assert judgement.status is CheckStatus.SKIP
    assert "CUDA driver version" in judgement.message


def test_the_policy_can_no_longer_judge_the_image_nccl() -> None:
    with pytest.raises(ValueError, match="ncclVersions"):
        policy(driverLibraries={"ncclVersions": {"min": "2.18.1"}})


CASES = [
    Case("r580-newer-image-runtime", NODE_R580, CheckStatus.PASS, shipped=True),
    Case("cuda-major-not-served",
         {**NODE_R580, "kernelModule": "575.57.08", "nvmlDriver": "575.57.08",
          "cudaDriver": "12.9"},
         CheckStatus.FAIL, "driver supports CUDA 12.9, workloads need CUDA 13.x",
         section={"requiredCudaMajors": [13]}),
    Case("driver-outside-the-range", NODE_R580, CheckStatus.FAIL,
         "driver 580.82.07 outside [590, *]", section={"driverVersions": {"min": "590"}}),
    Case("nvml-mismatch", {**NODE_R580, "nvmlMismatch": True}, CheckStatus.FAIL,
         "driver/library version mismatch"),
    Case("cuda-driver-unknown", {k: v for k, v in NODE_R580.items() if k != "cudaDriver"},
         CheckStatus.SKIP, "CUDA driver version", section={"requiredCudaMajors": [12]}),
    Case("no-driver-version", {"image": NODE_R580["image"]}, CheckStatus.SKIP,
         "no driver version reported"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(DRIVER_LIBRARIES, case)
