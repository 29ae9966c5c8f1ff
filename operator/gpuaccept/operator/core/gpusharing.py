"""GPU sharing by the NVIDIA device plugin: when the probe's request cannot be admitted (pure).

The probe pod asks for every GPU the node advertises (``nvidia.com/gpu``
allocatable), exclusively. The device plugin's sharing modes change what that
means:

* **time-slicing** advertises each GPU ``replicas`` times under
  ``nvidia.com/gpu``; GPU feature discovery labels the node
  ``nvidia.com/gpu.sharing-strategy=time-slicing`` and
  ``nvidia.com/gpu.replicas=N``. The probe still runs (the ``gpu_count`` check
  divides by the replicas), unless the plugin's ``failRequestsGreaterThanOne``
  makes it refuse a request for more than one replica: the kubelet then fails
  the pod with ``UnexpectedAdmissionError``, which on such a node is the
  sharing configuration, not the node.
* **MPS** (``sharing-strategy=mps``): the plugin refuses any request for more
  than one device (device plugin v0.15.0 release notes: "disallow requests for
  multiple devices if MPS sharing is configured"; ``failRequestsGreaterThanOne``
  is always true). A whole-node probe cannot be admitted.
* **renameByDefault**: the shared devices are advertised as
  ``nvidia.com/gpu.shared`` and ``nvidia.com/gpu`` is 0.

On the last two the probe is not started: the node waits (phase Waiting,
reason ``GPUSharing``, under the pending taint), never convicted, and starts
as soon as the sharing is off. Accept a node first, then turn sharing on (the
device plugin's per-node configuration label), so the probe runs on whole
GPUs. Label values: the device plugin's GPU feature discovery docs.
"""

from __future__ import annotations

from gpuaccept.operator.core.model import NodeView

SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"  # none | time-slicing | mps
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"  # the renamed resource (renameByDefault)
REASON_GPU_SHARING = "GPUSharing"

_HOW = (
    "the probe needs every GPU of the node, whole: probe the node before sharing is "
    "turned on (the device plugin's per-node configuration label), or turn it off to re-probe"
)


def replicas(node: NodeView) -> int:
    """The device plugin's replicas per GPU (1 when not shared or not labelled)."""
    value = node.labels.get(REPLICAS_LABEL, "")
    return int(value) if value.isdigit() and int(value) > 0 else 1


def sharing_refusal(node: NodeView) -> str | None:
    """Why the probe's whole-node GPU request cannot be admitted here, or None."""
    if node.labels.get(SHARING_STRATEGY_LABEL) == "mps":
        return (
            f"the device plugin shares this node's GPUs with MPS ({SHARING_STRATEGY_LABEL}="
            "mps), which admits no request for more than one device: " + _HOW
        )
    if node.gpus <= 0 and node.shared_gpus > 0:
        return (
            f"the device plugin advertises {node.shared_gpus} {SHARED_GPU_RESOURCE} and no "
            "nvidia.com/gpu (sharing with renameByDefault): " + _HOW
        )
    return None


def admission_refused_by_sharing(node: NodeView, kubelet_message: str) -> str | None:
    """A kubelet ``UnexpectedAdmissionError`` on a node whose GPUs are shared: the
    device plugin refused a request for more than one replica
    (``failRequestsGreaterThanOne``). None on a node that does not share its GPUs."""
    if replicas(node) <= 1 and node.labels.get(SHARING_STRATEGY_LABEL) in (None, "none"):
        return None
    return (
        f"the kubelet refused the probe pod ({kubelet_message.strip() or 'admission error'}) on "
        f"a node whose GPUs are shared ({REPLICAS_LABEL}={replicas(node)}): the device plugin "
        "refuses requests for more than one replica (failRequestsGreaterThanOne); " + _HOW
    )
