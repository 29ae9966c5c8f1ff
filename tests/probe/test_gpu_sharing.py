"""Under time-slicing or MPS the device plugin advertises GPUs x replicas: gpu_count
divides its counts by the nvidia.com/gpu.replicas label before comparing."""

from probe_scenarios import PROFILES, default_policy, probe, run_cli

from gpuaccept.checks.gpu_count import SPEC as GPU_COUNT
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.output import read_json_output

SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


def _judge(**observed: object) -> tuple[CheckStatus, str]:
    section = default_policy().section(GPU_COUNT)
    judged = GPU_COUNT.judge(GPU_COUNT.parse(observed), section, SUMMARY)
    return judged.status, judged.message


def test_a_time_sliced_node_is_accepted() -> None:
    report = probe(PROFILES / "h100-sxm-8gpu-time-sliced.yaml")
    result = report.result("gpu_count")
    assert result is not None
    assert result.status is CheckStatus.PASS
    assert "shared: 4 replicas each (capacity 32)" in result.message
    assert evaluate(report, default_policy()).accepted


def test_a_shared_node_missing_a_gpu_still_fails() -> None:
    status, message = _judge(visible=7, allocatable=28, capacity=32, labelled=8, replicas=4)
    assert status is CheckStatus.FAIL
    assert "7 of 8 GPUs visible" in message
    status, message = _judge(visible=8, allocatable=28, capacity=32, labelled=8, replicas=4)
    assert status is CheckStatus.FAIL  # the device plugin marked one GPU's replicas unhealthy
    assert "allocatable nvidia.com/gpu 7 < capacity 8" in message


def test_replicas_that_do_not_divide_the_capacity_fail() -> None:
    status, message = _judge(visible=8, allocatable=30, capacity=30, labelled=8, replicas=4)
    assert status is CheckStatus.FAIL
    assert "not a multiple of the 4 replicas" in message


def test_without_the_label_the_count_is_the_device_plugins_as_before() -> None:
    status, _ = _judge(visible=8, allocatable=32, capacity=32, labelled=8)
    assert status is CheckStatus.FAIL


def test_the_kubelet_standin_registers_a_shared_node_as_the_device_plugin_does() -> None:
    """capacity GPUs x replicas, and GFD's nvidia.com/gpu.replicas label, which the
    operator hands to the probe pod."""
    from gpuaccept.operator.core.podspec import GFD_GPU_REPLICAS_LABEL  # noqa: PLC0415
    from gpuaccept.testsupport.standin_nodes import SimNode  # noqa: PLC0415

    node = SimNode("gpu-shared-1", profile=str(PROFILES / "h100-sxm-8gpu-time-sliced.yaml"))
    counts = node.gpu_counts()
    assert (counts.capacity, counts.allocatable, counts.labelled) == (32, 32, 8)
    labels = node.node_labels()
    assert labels[GFD_GPU_REPLICAS_LABEL] == "4"
    assert labels["nvidia.com/gpu.count"] == "8"
    unshared = SimNode("gpu-1", profile=str(PROFILES / "h100-sxm-8gpu-healthy.yaml"))
    assert GFD_GPU_REPLICAS_LABEL not in unshared.node_labels()


def test_the_cli_passes_the_profiles_replicas_to_gpu_count() -> None:
    """``gpuaccept probe --profile`` builds the node's counts itself: the replicas the
    profile states reach gpu_count as they do in the operator's pod (issue 37, item 1)."""
    proc = run_cli("--profile", PROFILES / "h100-sxm-8gpu-time-sliced.yaml", "--output", "json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    result = read_json_output(proc.stdout)[0].result("gpu_count")
    assert result is not None
    assert result.status is CheckStatus.PASS, result.message
    assert "shared: 4 replicas each (capacity 32)" in result.message
