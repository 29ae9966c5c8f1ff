"""A probe pod that never ran the probe: the reason comes from its status as the
kubelet and the container runtime write it (issue 11 item 4)."""

import dataclasses
from typing import Any

import pytest
from world import World, spec

from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.core import NodeView, OperatorConfig
from gpuaccept.operator.core.phases.startfailure import create_refused
from gpuaccept.operator.core.podspec import ProbeAttempt, probe_pod_manifest
from gpuaccept.operator.core.reconcile import reconcile
from gpuaccept.operator.views import node_view, pod_view

# What containerd + the NVIDIA container toolkit (legacy mode) leave in the pod
# status when the kernel module and the user-space driver differ.
TOOLKIT_MISMATCH = (
    "failed to create containerd task: failed to create shim task: OCI runtime create "
    "failed: runc create failed: unable to start container process: error during container "
    "init: error running prestart hook #0: exit status 1, stdout: , stderr: Auto-detected "
    "mode as 'legacy'\nnvidia-container-cli: initialization error: nvml error: "
    "driver/library version mismatch: unknown"
)
TOOLKIT_CUDA = (
    "failed to create containerd task: failed to create shim task: OCI runtime create "
    "failed: runc create failed: unable to start container process: error during container "
    "init: error running prestart hook #0: exit status 1, stdout: , stderr: Auto-detected "
    "mode as 'legacy'\nnvidia-container-cli: requirement error: unsatisfied condition: "
    "cuda>=13.2, please update your driver to a newer version, or use an earlier cuda "
    "container: unknown"
)


def probing() -> World:
    world = World()
    world.settle()
    assert world.status.phase == Phase.PROBING
    return world


def raw_pod(world: World, status: dict[str, Any]) -> dict[str, Any]:
    pod = world.current_pod()
    return {**world.bodies[pod.name], "status": status}  # the pod as created, this status


def set_status(world: World, status: dict[str, Any]) -> None:
    view = pod_view(raw_pod(world, status))
    world.pods[view.name] = view


def start_error(message: str) -> dict[str, Any]:
    return {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "probe",
                "state": {
                    "terminated": {"exitCode": 128, "reason": "StartError", "message": message}
                },
            }
        ],
    }


def test_toolkit_driver_mismatch_quarantines_as_driver_libraries() -> None:
    world = probing()
    set_status(world, start_error(TOOLKIT_MISMATCH))
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "DriverLibrariesFailed")
    assert st.reasons[0].check == "driver_libraries"
    assert st.reasons[0].message is not None
    assert st.reasons[0].message.endswith(
        "nvidia-container-cli: initialization error: nvml error: driver/library version "
        "mismatch: unknown"
    )
    assert world.pods == {}  # the failed pod is cleaned up


@pytest.mark.parametrize(
    ("status", "reason", "needle"),
    [
        (start_error(TOOLKIT_CUDA), "CudaRequirementRefused", "cuda>=13.2"),
        (start_error('exec: "gpuaccept": not found'), "ProbeStartError", "exit code 128"),
        (
            {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "probe",
                        "state": {
                            "waiting": {
                                "reason": "ErrImagePull",
                                "message": "failed to pull and unpack image "
                                '"ghcr.io/gpuaccept/probe:0.1.0": not found',
                            }
                        },
                    }
                ],
            },
            "ImageUnavailable",
            "failed to pull and unpack image",
        ),
        (
            # the kubelet's admission (pkg/kubelet/kubelet.go rejectPod): no containers
            {
                "phase": "Failed",
                "reason": "OutOfnvidia.com/gpu",
                "message": "Pod was rejected: Node didn't have enough resource: "
                "nvidia.com/gpu, requested: 8, used: 0, capacity: 7",
            },
            "NodeBusy",
            "OutOfnvidia.com/gpu",
        ),
    ],
    ids=["cuda-requirement", "start-error", "image-pull", "out-of-gpus"],
)
def test_other_start_failures_have_their_own_reasons(
    status: dict[str, Any], reason: str, needle: str
) -> None:
    world = probing()
    set_status(world, status)
    world.settle()
    st = world.status
    # an image that cannot be pulled and a kubelet refusing for resources other pods
    # hold are not the node's doing: phase Waiting, the attempt given back
    not_the_nodes = reason in ("ImageUnavailable", "NodeBusy")
    phase = Phase.WAITING if not_the_nodes else Phase.PENDING
    assert (st.phase, st.reason) == (phase, reason), st.message
    assert st.attempts == (0 if not_the_nodes else 1)
    assert needle in (st.message or "")


def test_a_container_never_created_is_named_at_the_deadline() -> None:
    world = probing()
    creating = {
        "phase": "Pending",
        "containerStatuses": [
            {"name": "probe", "state": {"waiting": {"reason": "ContainerCreating"}}}
        ],
    }
    set_status(world, creating)
    world.settle()
    assert world.status.phase == Phase.PROBING  # an image may take a while: wait
    world.advance(60 + world.config.deadline_grace_seconds + 1)
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.PENDING, "ProbeContainerNeverStarted"), st.message
    assert "FailedCreatePodSandBox" in (st.message or "")


def test_a_pod_the_kubelet_ended_before_its_container_was_created() -> None:
    world = probing()
    set_status(
        world,
        {
            "phase": "Failed",
            "reason": "DeadlineExceeded",
            "message": "Pod was active on the node longer than the specified deadline",
            "containerStatuses": [
                {"name": "probe", "state": {"waiting": {"reason": "ContainerCreating"}}}
            ],
        },
    )
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.PENDING, "ProbeContainerNeverStarted"), st.message
    assert "(DeadlineExceeded)" in (st.message or "")


def test_a_missing_runtime_class_is_named() -> None:
    world = probing()
    world.pods.clear()
    world.advance(world.config.pod_missing_grace_seconds + 1)
    refused = (
        'pods "gpuaccept-probe-gpu-1-1" is forbidden: pod rejected: RuntimeClass "nvidia" not found'
    )
    observed = dataclasses.replace(world.observe(), pod_create_error=refused)
    world.apply(reconcile(observed, world.judge))
    assert world.status.reason == "RuntimeClassMissing"
    assert 'RuntimeClass "nvidia" not found' in (world.status.message or "")


def test_any_other_create_refusal_is_a_refused_pod_never_the_nodes() -> None:
    failure = create_refused('serviceaccount "gpuaccept-probe" not found')
    assert failure.reason == "PodRefused"
    assert failure.check is None
    assert failure.blocked


def test_node_view_reads_capacity_and_allocatable_apart() -> None:
    view = node_view(
        {
            "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.count": "8"}},
            "status": {
                "capacity": {"nvidia.com/gpu": "8"},
                "allocatable": {"nvidia.com/gpu": "7"},
            },
        }
    )
    assert (view.gpus, view.gpu_capacity) == (7, 8)


def test_pod_view_keeps_pod_and_container_reasons_apart() -> None:
    view = pod_view({"metadata": {"name": "p"}, "status": start_error(TOOLKIT_MISMATCH)})
    assert view.container_reason == "StartError"
    assert view.pod_reason is None
    assert view.exit_code == 128


@pytest.mark.parametrize(
    ("labels", "gfd"),
    [({"nvidia.com/gpu.count": "8"}, "8"), ({}, None), ({"nvidia.com/gpu.count": "x"}, None)],
)
def test_the_probe_is_told_capacity_and_the_gfd_label(
    labels: dict[str, str], gfd: str | None
) -> None:
    node = NodeView(name="gpu-1", gpus=7, gpu_capacity=8, labels=labels, boot_id="b")
    attempt = ProbeAttempt(name="p", serial=1, node=node, policy_name="default", spec=spec())
    container = probe_pod_manifest(attempt, OperatorConfig())["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "7"  # allocatable
    assert env["GPUACCEPT_EXPECTED_GPUS"] == "7"
    assert env["GPUACCEPT_NODE_GPU_CAPACITY"] == "8"
    assert env.get("GPUACCEPT_GFD_GPU_COUNT") == gfd
