"""Facts from outside the hardware that a measurement may need: what the run provides
before the first check, and what one check leaves for later ones. A check sees the
context through :meth:`ProbeContext.view`, which lets it read only what its spec
``needs`` and write only what it ``provides`` (:mod:`gpuaccept.checks.dataflow`)."""

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from gpuaccept.checks.dataflow import UNDECLARED_READABLE
from gpuaccept.probe.hardware.base import NvlinkLinks, PerGpuFigures
from gpuaccept.probe.hardware.xid_events import XidLog


@dataclass(frozen=True)
class LoadClocks:
    """What ``throttle_reasons`` saw under load, kept for ``gpu_config`` (which judges
    clocks held low by configuration from the same samples, without a second load)."""

    samples: int  # judged samples per GPU
    app_clocks_fraction: dict[int, float]  # GPU -> fraction with applications_clocks_setting
    sm_clock_fraction: dict[int, float]  # GPU -> median SM clock / its max
    limited: frozenset[int]  # GPUs on which a power or thermal reason was sustained


@dataclass(frozen=True)
class MatmulLoad:
    """The bf16 matmuls of the ``throttle_reasons`` load, timed after its warm-up, kept
    for ``gpu_compute`` (so the GPUs are loaded once for both)."""

    tflops: PerGpuFigures
    matrix: int  # n of the n x n x n matmuls
    timed_seconds: float  # the judged window the matmuls were timed in
    sm_clock_mhz: dict[int, int]  # GPU -> median SM clock of the judged samples


@dataclass(frozen=True)
class NodeGpuCounts:
    """What Kubernetes says of the node's GPUs (the operator passes them; None: unknown)."""

    allocatable: int | None = None  # GPUACCEPT_EXPECTED_GPUS: what the probe pod requested
    capacity: int | None = None  # GPUACCEPT_NODE_GPU_CAPACITY
    labelled: int | None = None  # GPUACCEPT_GFD_GPU_COUNT (label nvidia.com/gpu.count)
    # GPUACCEPT_GFD_GPU_REPLICAS (label nvidia.com/gpu.replicas): each GPU is advertised
    # this many times under time-slicing or MPS sharing
    replicas: int | None = None
    # GPUACCEPT_EXPECTED_GPU_UUIDS: a DRA node's pool, the UUIDs of its GPUs (None: not
    # a DRA node, or not passed)
    published_uuids: tuple[str, ...] | None = None


@dataclass
class ProbeContext:
    node_gpus: NodeGpuCounts = NodeGpuCounts()
    # Called with a short progress note while a long measurement runs.
    progress: Callable[[str], None] = field(default=lambda _note: None)
    # Set by the throttle_reasons measurement; None until it has sampled under load.
    under_load: LoadClocks | None = None
    # The Xid listener the runner keeps open over every check (None outside a probe run).
    xids: XidLog | None = None
    # Set by the throttle_reasons measurement: its load's bf16 matmuls, timed (gpu_compute).
    matmul_load: MatmulLoad | None = None
    # Read by the runner before the first check: each GPU's NVLink counters then (the
    # nvlink check judges the increase over the run); None outside a probe run.
    nvlink_before: dict[int, NvlinkLinks] | None = None
    # Set by the pcie_link measurement: GPU -> its pinned host-to-device GB/s, for the GPUs
    # it measured (peer_bandwidth's host-staged floor for pairs with peer access over PCIe).
    h2d_gbps: dict[int, float] = field(default_factory=dict)

    def view(
        self, check: str, *, needs: frozenset[str], provides: frozenset[str]
    ) -> "ProbeContext":
        """This context as check ``check`` sees it: reads of what it ``needs`` or
        ``provides`` (and the progress note), writes of what it ``provides``, each
        passed through to this context; any other read or write raises
        :class:`UndeclaredContextError`."""
        return CheckContext(self, check, needs=needs, provides=provides)


CONTEXT_FIELDS = frozenset(f.name for f in fields(ProbeContext))


class UndeclaredContextError(RuntimeError):
    """A check read or wrote a context field its spec does not declare."""


class CheckContext(ProbeContext):
    """One check's view of the run's shared context (:meth:`ProbeContext.view`)."""

    def __init__(
        self, shared: ProbeContext, check: str, *, needs: frozenset[str], provides: frozenset[str]
    ) -> None:
        unknown = sorted((needs | provides) - CONTEXT_FIELDS)
        if unknown:
            raise UndeclaredContextError(f"check {check} declares {unknown}: no such context field")
        readable = needs | provides | UNDECLARED_READABLE
        object.__setattr__(self, "_declared", (shared, check, readable, provides))

    def __getattribute__(self, name: str) -> Any:
        if name not in CONTEXT_FIELDS:
            return object.__getattribute__(self, name)
        shared, check, readable, _provides = object.__getattribute__(self, "_declared")
        if name not in readable:
            raise UndeclaredContextError(
                f"check {check} reads context.{name} without declaring it (CheckSpec.needs)"
            )
        return getattr(shared, name)

    def __setattr__(self, name: str, value: Any) -> None:
        shared, check, _readable, provides = object.__getattribute__(self, "_declared")
        if name not in provides:
            raise UndeclaredContextError(
                f"check {check} writes context.{name} without declaring it (CheckSpec.provides)"
            )
        setattr(shared, name, value)
