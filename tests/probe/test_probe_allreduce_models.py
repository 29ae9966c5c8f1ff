"""All-reduce busbw comparable with nccl-tests, and per-model limits matched to the
names NVML really reports (issue 11 items 9 and 10)."""

import pytest
from probe_scenarios import (
    H200_16,
    HEALTHY,
    PROFILES,
    WORST_16,
    default_policy,
    fault,
    probe,
)

from gpuaccept.checks.gpu_models import gpu_model_class
from gpuaccept.checks.nccl_allreduce import NcclAllreducePolicy
from gpuaccept.contracts.api import TERMINATION_MESSAGE_MAX_BYTES
from gpuaccept.contracts.report import CheckStatus, decode_termination_message
from gpuaccept.probe.compact import termination_message
from gpuaccept.probe.hardware.allreduce import rank_mean_seconds
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.measure.nccl_allreduce import sweep_sizes

GIB = 1 << 30
LONG_NODE_NAME = "gpu-node-" + "x" * 244  # 253 characters, the longest node name


@pytest.mark.parametrize(
    ("nvml_name", "model_class"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA  H200 ", "h200-sxm"),  # whitespace as some tools pad it
        ("NVIDIA A100-SXM4-80GB", None),
        ("mixed: NVIDIA H100 80GB HBM3, NVIDIA H100 NVL", None),
        (None, None),
    ],
)
def test_nvml_names_map_to_model_classes(nvml_name: str | None, model_class: str | None) -> None:
    assert gpu_model_class(nvml_name) == model_class


@pytest.mark.parametrize(
    ("nvml_name", "minimum"),
    [
        ("NVIDIA H100 80GB HBM3", 320),
        ("NVIDIA H200", 320),
        ("NVIDIA H100 NVL", None),  # PCIe/NVL parts never get the SXM limit
        ("NVIDIA H200 NVL", None),
        ("NVIDIA H100 PCIe", None),
        ("NVIDIA B200", None),
    ],
)
def test_default_policy_limits_by_model(nvml_name: str, minimum: float | None) -> None:
    assert default_policy().nccl_allreduce.min_busbw_for(nvml_name) == minimum


def test_an_exact_nvml_name_beats_its_class() -> None:
    policy = NcclAllreducePolicy.model_validate(
        {"minBusbwGBps": 10, "minBusbwGBpsByModel": {"h200-sxm": 320, "NVIDIA H200": 400}}
    )
    assert policy.min_busbw_for("NVIDIA H200") == 400
    assert policy.min_busbw_for("NVIDIA H200 NVL") == 10


def test_times_are_averaged_across_ranks_as_nccl_tests_does() -> None:
    per_rank = [[1.0, 0.010], [1.0, 0.012], [1.0, 0.011], [1.0, 0.011]]
    assert rank_mean_seconds(per_rank, 1) == pytest.approx(0.011)  # not the slowest, 0.012


def test_the_sweep_reaches_the_plateau() -> None:
    policy = default_policy().nccl_allreduce
    assert policy.max_message_bytes == 8 * GIB == NcclAllreducePolicy().max_message_bytes
    sizes = sweep_sizes(policy.max_message_bytes)
    assert sizes == [2 << 20, 16 << 20, 128 << 20, GIB, 8 * GIB]


def test_simulated_curve_matches_published_shape() -> None:
    """1 GiB at ~95 % of the plateau (published H100: 446 of 465 GB/s)."""
    allreduce = load_profile(HEALTHY).allreduce
    assert allreduce.busbw_at(GIB) / allreduce.busbw_gbps == pytest.approx(446 / 465, abs=0.01)
    assert allreduce.busbw_at(8 * GIB) / allreduce.busbw_gbps > 0.99


def test_judged_at_the_largest_size_with_the_curve_reported() -> None:
    result = probe(PROFILES / "h100-sxm-8gpu-ring-only.yaml").result("nccl_allreduce")
    assert result is not None
    assert result.status is CheckStatus.PASS, result
    assert isinstance(result.observed, dict)
    curve = dict(result.observed["sweep"])
    assert curve[GIB] < 360 < curve[8 * GIB]  # the old 1 GiB judgement failed this node
    assert result.observed["bytes"] == 8 * GIB
    assert result.observed["timing"] == "host-batch-mean"


@pytest.mark.parametrize(
    ("path", "status"),
    [
        (PROFILES / "h100-sxm-8gpu-ring-only.yaml", CheckStatus.PASS),
        (PROFILES / "h100-nvl-8gpu-healthy.yaml", CheckStatus.PASS),
        (fault("nccl-below-sxm-minimum"), CheckStatus.FAIL),
        (fault("nccl-slow"), CheckStatus.FAIL),
    ],
    ids=lambda v: getattr(v, "stem", str(v)),
)
def test_profiles_on_both_sides_of_the_minimum(path: object, status: CheckStatus) -> None:
    result = probe(path).result("nccl_allreduce")  # type: ignore[arg-type]
    assert result is not None
    assert result.status is status, result.message


@pytest.mark.parametrize("path", [H200_16, WORST_16], ids=lambda p: p.stem)
def test_the_curve_survives_the_termination_message(path: object) -> None:
    report = probe(path, node_name=LONG_NODE_NAME)  # type: ignore[arg-type]
    message = termination_message(report)
    assert len(message.encode()) <= TERMINATION_MESSAGE_MAX_BYTES
    nccl = decode_termination_message(message).result("nccl_allreduce")
    assert nccl is not None
    assert isinstance(nccl.observed, dict)
    assert len(nccl.observed["sweep"]) == 5
