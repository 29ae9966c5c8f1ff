"""Why a probe pod never ran the probe, read from its status (pure).

The container runtime and the kubelet say why in the pod's status, in places
that differ by failure:

* the NVIDIA container toolkit's prestart hook fails (containerd): the
  container ends ``terminated.reason: StartError``, exit code 128, and the
  message ends with the toolkit's own error, e.g. ``nvidia-container-cli:
  initialization error: nvml error: driver/library version mismatch: unknown``
  (kernel module and user-space driver differ) or ``requirement error:
  unsatisfied condition: cuda>=13.2`` (the image's ``NVIDIA_REQUIRE_CUDA``);
* the image cannot be pulled: the container waits with ``ErrImagePull`` /
  ``ImagePullBackOff``;
* the kubelet's admission refuses the pod (it is pinned by ``nodeName``, so no
  scheduler checked it first): pod phase ``Failed``, pod ``status.reason``
  ``OutOf<resource>`` (``OutOfnvidia.com/gpu``) or ``UnexpectedAdmissionError``,
  message ``Pod was rejected: ...``. When other pods hold the GPUs (or fewer are
  healthy than the pod asks for), a kubelet with the device plugin registered
  refuses in its device manager, before the resource-fit predicate:
  ``UnexpectedAdmissionError``, ``Pod was rejected: Allocate failed due to
  requested number of devices unavailable for nvidia.com/gpu. Requested: 8,
  Available: 0, which is unexpected`` (kubelet 1.37 on the real node,
  tests/realnode/test_standin_vs_kubelet.py; pkg/kubelet/cm/devicemanager);
* the node no longer matches the pod's required node affinity (core/podspec.py
  ``node_affinity``: the operator's base selector, no control-plane role label;
  its labels changed after the pod was created): the kubelet's predicate admission
  refuses it, phase ``Failed``, reason ``NodeAffinity``, message ``Pod was
  rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node
  affinity/selector`` (pkg/kubelet/lifecycle/predicate.go; the scheduler plugin's
  ``ErrReasonPod``);
* the runtime has no handler for the RuntimeClass: the sandbox is never
  created (a ``FailedCreatePodSandBox`` event), the container waits in
  ``ContainerCreating`` until the deadline.

A driver/library mismatch is the node's fault and is judged as the
``driver_libraries`` check would (``DriverLibrariesFailed``). What is not the
node's doing (an image that cannot be pulled, the kubelet refusing the pod for
GPUs other pods hold, an eviction, an untolerated NoExecute taint, a node that
no longer matches the pod's node affinity, a pod the API server refuses) is
``blocked``: the node waits in phase ``Waiting`` (:mod:`.waiting`), no attempt
spent. Every other start failure is a failed attempt with its own reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuaccept.checks import driver_libraries
from gpuaccept.contracts.api import GPU_RESOURCE
from gpuaccept.operator.core.model import PodView
from gpuaccept.operator.core.phases.waiting import (
    REASON_EVICTED,
    REASON_IMAGE_UNAVAILABLE,
    REASON_NODE_AFFINITY,
    REASON_NODE_BUSY,
    REASON_POD_REFUSED,
    REASON_UNTOLERATED_TAINT,
)

START_ERROR = "StartError"  # the container's terminated reason when the runtime could not start it
DRIVER_MISMATCH_TEXT = "driver/library version mismatch"
CUDA_REQUIREMENT_TEXT = "unsatisfied condition: cuda"
IMAGE_PULL_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
ADMISSION_REJECTED_PREFIX = "OutOf"  # kubelet lifecycle.InsufficientResourcePrefix
ADMISSION_REJECTED_REASONS = frozenset({"UnexpectedAdmissionError"})
# The device manager's refusal (pkg/kubelet/cm/devicemanager/manager.go devicesToAllocate):
# fewer free devices than the pod asks for.
DEVICES_UNAVAILABLE_TEXT = f"requested number of devices unavailable for {GPU_RESOURCE}."
NEVER_STARTED_WAITING = "ContainerCreating"
RUNTIME_CLASS_NOT_FOUND = re.compile(r'RuntimeClass "[^"]*" not found')

REASON_CUDA_REQUIREMENT = "CudaRequirementRefused"
REASON_START_ERROR = "ProbeStartError"
REASON_REJECTED = "ProbePodRejected"
REASON_NEVER_STARTED = "ProbeContainerNeverStarted"
REASON_RUNTIME_CLASS_MISSING = "RuntimeClassMissing"
MESSAGE_MAX = 500
EVICTED_REASONS = frozenset({"Evicted", "Preempting", "Terminated", "Shutdown"})
CONFIG_ERROR = "CreateContainerConfigError"  # a missing Secret or ConfigMap the pod names
TAINT_REJECTED_REASON = "TaintToleration"  # the kubelet's admission: an untolerated NoExecute
# The kubelet's admission: the node does not match the pod's required node affinity
# (the predicate's name, pkg/scheduler/framework/plugins/nodeaffinity Name).
AFFINITY_REJECTED_REASON = "NodeAffinity"
# The executor's refusal of a create while GPU pods still run on the node (it lists
# the node's pods by spec.nodeName just before the create).
NODE_BUSY_PREFIX = "node busy: "


@dataclass(frozen=True)
class StartFailure:
    """Why the probe never ran. ``check`` names the check whose failure this is when
    it is the node's fault (the node is judged on it); None: a failed attempt."""

    reason: str
    message: str
    check: str | None = None
    blocked: bool = False  # not the node's doing: the node waits, the attempt given back


def _tail(text: str, limit: int = MESSAGE_MAX) -> str:
    """The end of a runtime message, where the toolkit's own error is."""
    text = " ".join(text.split())
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def _toolkit_error(message: str) -> str:
    """``nvidia-container-cli: ...`` out of a runtime's long StartError message."""
    at = message.rfind("nvidia-container-cli:")
    return _tail(message[at:] if at >= 0 else message)


def _start_error(pod: PodView) -> StartFailure:
    message = pod.message or ""
    if DRIVER_MISMATCH_TEXT in message:
        return StartFailure(
            driver_libraries.REASON,
            "the container toolkit could not start the probe (kernel module and user-space "
            f"driver differ): {_toolkit_error(message)}",
            check=driver_libraries.SPEC.name,
        )
    if CUDA_REQUIREMENT_TEXT in message:
        return StartFailure(
            REASON_CUDA_REQUIREMENT,
            "the container toolkit refused the probe image's NVIDIA_REQUIRE_CUDA (the "
            "image's CUDA is newer than the driver's; build the probe image without a CUDA "
            f"base image, see docs/policy.md): {_toolkit_error(message)}",
        )
    code = f"exit code {pod.exit_code}: " if pod.exit_code is not None else ""
    return StartFailure(
        REASON_START_ERROR, f"the container could not be started: {code}{_tail(message)}"
    )


def _rejected(pod: PodView) -> bool:
    reason = pod.pod_reason or ""
    return reason.startswith(ADMISSION_REJECTED_PREFIX) or reason in ADMISSION_REJECTED_REASONS


def _refused_for_gpus(pod: PodView) -> bool:
    """The kubelet refused the pod for resources other pods hold: its resource-fit
    predicate (``OutOf<resource>``) or its device manager (too few free GPUs)."""
    reason = pod.pod_reason or ""
    if reason.startswith(ADMISSION_REJECTED_PREFIX):
        return True
    return reason in ADMISSION_REJECTED_REASONS and DEVICES_UNAVAILABLE_TEXT in (
        pod.pod_message or ""
    )


def _not_the_nodes(pod: PodView) -> StartFailure | None:
    """A pod that did not run for a reason that is not evidence about the node."""
    reason = pod.pod_reason or ""
    if pod.waiting_reason == CONFIG_ERROR:  # the pod's own config (a Secret, a ConfigMap)
        return StartFailure(
            REASON_POD_REFUSED,
            _tail(f"{CONFIG_ERROR}: {pod.waiting_message or 'the container cannot be created'}"),
            blocked=True,
        )
    detail = f"({reason}): {pod.pod_message or ''}"
    if pod.phase == "Failed" and reason in EVICTED_REASONS:
        return StartFailure(
            REASON_EVICTED, _tail(f"the probe pod was evicted {detail}"), blocked=True
        )
    if pod.waiting_reason in IMAGE_PULL_REASONS:
        return StartFailure(
            REASON_IMAGE_UNAVAILABLE,
            _tail(f"{pod.waiting_reason}: {pod.waiting_message or 'cannot pull the probe image'}"),
            blocked=True,
        )
    if pod.phase == "Failed" and not pod.terminated:
        return _kubelet_refusal(pod, detail)
    return None


def _kubelet_refusal(pod: PodView, detail: str) -> StartFailure | None:
    """The kubelet's admission refused the pod for what is not evidence about the node:
    GPUs other pods hold, an untolerated NoExecute taint, a node that does not match
    the pod's required node affinity (its labels changed since the pod was created)."""
    reason = pod.pod_reason or ""
    if _refused_for_gpus(pod):
        why = f"the kubelet refused the probe pod, other pods hold the resource {detail}"
        return StartFailure(REASON_NODE_BUSY, _tail(why), blocked=True)
    if reason == TAINT_REJECTED_REASON:
        why = f"the kubelet refused the probe pod {detail}"
        return StartFailure(REASON_UNTOLERATED_TAINT, _tail(why), blocked=True)
    if reason == AFFINITY_REJECTED_REASON:
        why = (
            "the kubelet refused the probe pod: the node does not match its required node "
            "affinity (the operator's --node-selector, no control-plane role label; the "
            f"node's labels changed?) {detail}"
        )
        return StartFailure(REASON_NODE_AFFINITY, _tail(why), blocked=True)
    return None


def start_failure(pod: PodView) -> StartFailure | None:
    """Why ``pod`` could not run the probe, or None (it ran, or may still)."""
    if pod.container_reason == START_ERROR:
        return _start_error(pod)
    elsewhere = _not_the_nodes(pod)
    if elsewhere is not None:
        return elsewhere
    if pod.phase == "Failed" and not pod.terminated and _rejected(pod):
        return StartFailure(
            REASON_REJECTED,
            _tail(f"the kubelet refused the probe pod ({pod.pod_reason}): {pod.pod_message or ''}"),
        )
    if pod.phase == "Failed" and not pod.terminated:
        # Ended (its deadline) with the container never created: it stays waiting.
        return never_started(pod, None)
    return None


def never_started(pod: PodView, timeout: int | None) -> StartFailure | None:
    """A container still waiting to be created at the deadline (the kubelet's, which
    ends the pod ``DeadlineExceeded`` with the container still waiting, or the
    operator's own when the kubelet is gone) never started."""
    if pod.terminated or pod.waiting_reason != NEVER_STARTED_WAITING:
        return None
    after = f" after {timeout}s" if timeout is not None else f" ({pod.pod_reason or pod.phase})"
    return StartFailure(
        REASON_NEVER_STARTED,
        f"the probe container was still {NEVER_STARTED_WAITING}{after}: its pod sandbox was "
        "never created (the pod's events say why, e.g. FailedCreatePodSandBox when the "
        "node's container runtime has no handler for the RuntimeClass)",
    )


def create_refused(message: str) -> StartFailure:
    """Why the probe pod was not created: the API server refused it (admission, a
    quota, a LimitRange, a missing RuntimeClass or ServiceAccount), or the
    executor found GPU pods on the node. Neither is the node's fault."""
    if message.startswith(NODE_BUSY_PREFIX):
        return StartFailure(
            REASON_NODE_BUSY,
            _tail(f"GPU pods still run on the node: {message[len(NODE_BUSY_PREFIX) :]}"),
            blocked=True,
        )
    if RUNTIME_CLASS_NOT_FOUND.search(message):
        return StartFailure(
            REASON_RUNTIME_CLASS_MISSING,
            _tail(
                "the probe pod's RuntimeClass does not exist (operator flag --probe-runtime-class; "
                f"the GPU operator creates 'nvidia'): {message}"
            ),
            blocked=True,
        )
    return StartFailure(
        REASON_POD_REFUSED, _tail(f"the probe pod could not be created: {message}"), blocked=True
    )
