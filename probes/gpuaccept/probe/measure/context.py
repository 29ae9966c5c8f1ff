"""Facts from outside the hardware that a measurement may need."""

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeGpuCounts:
    """What Kubernetes says of the node's GPUs (the operator passes them; None: unknown)."""

    allocatable: int | None = None  # GPUACCEPT_EXPECTED_GPUS: what the probe pod requested
    capacity: int | None = None  # GPUACCEPT_NODE_GPU_CAPACITY
    labelled: int | None = None  # GPUACCEPT_GFD_GPU_COUNT (label nvidia.com/gpu.count)


@dataclass
class ProbeContext:
    node_gpus: NodeGpuCounts = NodeGpuCounts()
    # Called with a short progress note while a long measurement runs.
    progress: Callable[[str], None] = field(default=lambda _note: None)
