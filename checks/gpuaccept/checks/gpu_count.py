"""``gpu_count``: every GPU the node should have is there and usable.

The probe pod requests the node's *allocatable* ``nvidia.com/gpu``, so NVML
inside it sees at most that many GPUs. When the device plugin marks a GPU
unhealthy, allocatable drops below capacity and the pod sees one fewer GPU:
comparing NVML's count with allocatable would pass a dead GPU (7 = 7). So the
count is judged against the strongest evidence of what the node *should* have:

* the policy's ``gpuCount.expected`` when set (the administrator's word);
* else the largest of: the node's capacity (``GPUACCEPT_NODE_GPU_CAPACITY``;
  the device plugin counts unhealthy devices in capacity, not allocatable), the
  GPU feature discovery label ``nvidia.com/gpu.count``
  (``GPUACCEPT_GFD_GPU_COUNT``) and the NVIDIA display/3D controllers the probe
  finds in ``/sys/bus/pci/devices`` (vendor 0x10de, class 0x0300xx/0x0302xx).

Under GPU sharing (time-slicing or MPS) the NVIDIA device plugin advertises each
GPU ``replicas`` times (32 for 8 GPUs x 4), and GPU feature discovery labels the
node ``nvidia.com/gpu.replicas`` (``GPUACCEPT_GFD_GPU_REPLICAS``) and
``nvidia.com/gpu.count`` with the physical count: capacity and allocatable are
divided by the replicas before they are compared with what NVML sees (a capacity
that is not a multiple of them fails: the node's counts are inconsistent).

On a node whose GPUs a DRA driver publishes (ResourceSlices, no
``nvidia.com/gpu``), the operator passes the pool's GPU count as allocatable and
capacity, and the pool's UUIDs (``GPUACCEPT_EXPECTED_GPU_UUIDS``): a GPU the pool
publishes that NVML does not see, or one NVML sees that the pool does not publish,
is a failure (``missing``, ``unpublished``); when NVML gives no UUID for a GPU the
UUIDs are not compared, and the message says so.

Allocatable below capacity is a failure by itself (the device plugin has
marked GPUs unhealthy). Every count used is recorded in ``observed`` so
judging is pure.

observed: ``{"visible": 7, "allocatable": 7, "capacity": 8, "labelled": 8,
"pciDevices": 8, "problem": "...", "published": 8, "uuidsCompared": true,
"missing": ["GPU-..."], "unpublished": ["GPU-..."]}``
"""

from pydantic import Field, JsonValue

from gpuaccept.checks.claims import Claims
from gpuaccept.checks.phase_estimate import fixed_phase
from gpuaccept.checks.spec import CheckJudgement, CheckSpec, ObservedModel, RunbookEntry, clip
from gpuaccept.contracts.policy import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REASON = "GpuCountFailed"


class GpuCountPolicy(CheckSwitch):
    expected: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="GPUs the node must have; unset means the largest of the node's "
        "nvidia.com/gpu capacity, its nvidia.com/gpu.count label and the NVIDIA GPUs on "
        "its PCI bus.",
    )


class GpuCountObserved(ObservedModel):
    visible: int = Field(ge=0)  # GPUs NVML sees in the probe pod
    allocatable: int | None = Field(default=None, ge=0)  # the pod requested these
    capacity: int | None = Field(default=None, ge=0)  # node status.capacity
    labelled: int | None = Field(default=None, ge=0)  # GFD label nvidia.com/gpu.count
    pci_devices: int | None = Field(default=None, ge=0)  # NVIDIA GPUs in /sys/bus/pci
    replicas: int | None = Field(default=None, ge=2)  # GFD label nvidia.com/gpu.replicas
    problem: str | None = None  # why no GPU could be seen, when none was
    # A DRA node: the GPUs its pool publishes (the UUIDs the operator passed), whether
    # NVML gave a UUID for every GPU (else they were not compared), and the differences.
    published: int | None = Field(default=None, ge=0)
    uuids_compared: bool | None = None
    missing: list[str] | None = Field(default=None, max_length=64)  # published, not seen
    unpublished: list[str] | None = Field(default=None, max_length=64)  # seen, not published


def _physical(count: int | None, replicas: int | None) -> int | None:
    """A device plugin count in GPUs (each advertised ``replicas`` times when shared)."""
    if count is None or not replicas:
        return count
    return -(-count // replicas)  # a partial set of replicas is still a GPU


def _evidence(observed: GpuCountObserved) -> dict[str, int]:
    """What the node should have, by source; 0 (a device plugin that has not
    reported yet, a label not set) is no evidence."""
    found = {
        "capacity": _physical(observed.capacity, observed.replicas),
        "label nvidia.com/gpu.count": observed.labelled,
        "PCI bus": observed.pci_devices,
    }
    return {source: count for source, count in found.items() if count}


def _expected(observed: GpuCountObserved, policy: GpuCountPolicy) -> tuple[int | None, str]:
    """The count the node must show and where it comes from."""
    if policy.expected is not None:
        return policy.expected, "policy"
    evidence = _evidence(observed)
    if not evidence:
        return None, ""
    most = max(evidence.values())
    return most, ", ".join(source for source, count in evidence.items() if count == most)


def _problems(observed: GpuCountObserved, expected: int | None, source: str) -> list[str]:
    replicas = observed.replicas
    visible = observed.visible
    allocatable = _physical(observed.allocatable, replicas)
    capacity = _physical(observed.capacity, replicas)
    problems: list[str] = []
    if replicas and observed.capacity and observed.capacity % replicas:
        problems.append(
            f"capacity nvidia.com/gpu {observed.capacity} is not a multiple of the "
            f"{replicas} replicas (label nvidia.com/gpu.replicas)"
        )
    if capacity and allocatable is not None and allocatable < capacity:
        problems.append(
            f"allocatable nvidia.com/gpu {allocatable} < capacity {capacity}: the device "
            f"plugin marks {capacity - allocatable} GPU(s) unhealthy"
        )
    if allocatable and visible < allocatable:
        problems.append(f"the probe was given {allocatable} GPUs but NVML sees {visible}")
    if expected is not None and visible != expected:
        problems.append(f"{visible} of {expected} GPUs visible (expected from {source})")
    if observed.missing:
        problems.append(
            f"the DRA pool publishes GPU(s) NVML does not see: {', '.join(observed.missing)}"
        )
    if observed.unpublished:
        problems.append(
            "NVML sees GPU(s) the DRA pool does not publish: " + ", ".join(observed.unpublished)
        )
    return problems


def _uuid_note(observed: GpuCountObserved) -> str:
    """What the pass says of a DRA pool's UUIDs (nothing on a device-plugin node)."""
    if observed.published is None:
        return ""
    if observed.uuids_compared:
        return f"; the {observed.published} UUIDs the DRA pool publishes are the GPUs NVML sees"
    return "; the DRA pool's UUIDs not compared (NVML gave no UUID for some GPU)"


def judge(
    observed: GpuCountObserved, policy: GpuCountPolicy, summary: HardwareSummary
) -> CheckJudgement:
    visible = observed.visible
    expected, source = _expected(observed, policy)
    expectation: JsonValue = {"count": expected, "from": source} if expected else None
    if visible == 0:
        detail = f" ({observed.problem})" if observed.problem else ""
        return CheckJudgement(CheckStatus.FAIL, expectation, clip(f"no GPU found{detail}"))
    problems = _problems(observed, expected, source)
    if problems:
        return CheckJudgement(CheckStatus.FAIL, expectation, clip("; ".join(problems)))
    if expected is None:
        return CheckJudgement(
            CheckStatus.SKIP,
            None,
            f"{visible} GPUs visible, but no expected count: set gpuCount.expected in the "
            "policy (no capacity, nvidia.com/gpu.count label or PCI count known)",
        )
    shared = (
        f"; shared: {observed.replicas} replicas each (capacity {observed.capacity})"
        if observed.replicas
        else ""
    )
    return CheckJudgement(
        CheckStatus.PASS,
        expectation,
        clip(
            f"{visible} of {expected} GPUs visible (expected from {source}){shared}"
            + _uuid_note(observed)
        ),
    )


def claims(observed: GpuCountObserved, _summary: HardwareSummary) -> Claims:
    """The GPUs NVML saw are the report's (allocatable and capacity are held to the
    node's own by the operator), and no more than the NVIDIA GPUs on the PCI bus. The
    probe writes no ``pciDevices`` when the bus shows none (probe/measure/gpu_count.py:
    ``pci_gpu_count() or None``): a report that names 0 beside GPUs NVML sees is
    inconsistent and is refused, not read as "the bus was not read"."""
    out = Claims().count("visible", observed.visible)
    if observed.pci_devices is not None:
        out.figure("visible", observed.visible, observed.pci_devices)
    return out


SPEC = CheckSpec(
    measuring=frozenset(),
    judging=frozenset({"expected"}),
    name="gpu_count",
    title="GPU count",
    summary="allocatable = capacity, and the GPUs visible equal the policy's count, else the "
    "most of capacity, the nvidia.com/gpu.count label and the NVIDIA GPUs on the PCI bus",
    reason=REASON,
    policy_model=GpuCountPolicy,
    observed_model=GpuCountObserved,
    judge=judge,
    claims=claims,
    budget=fixed_phase("GPU counts: NVML, the PCI bus", 0.1, "sysfs scan"),
    runbook=RunbookEntry(
        meaning=(
            "fewer GPUs than the node should have: allocatable below capacity (the device plugin "
            "marked a GPU unhealthy), or fewer than the capacity, the `nvidia.com/gpu.count` "
            "label or the NVIDIA GPUs on the PCI bus"
        ),
        fix=(
            "a GPU fell off the bus (Xid 79) or did not initialise: `dmesg`, `nvidia-smi`, reseat"
            " or replace"
        ),
    ),
)
