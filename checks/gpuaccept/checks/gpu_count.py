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
from gpuaccept.checks.spec import (
    CheckJudgement,
    CheckSpec,
    FailureOwnership,
    ObservedModel,
    RunbookEntry,
    clip,
)
from gpuaccept.contracts.policy_fields import CheckSwitch
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


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = """\
| field | default | meaning |
|-------|---------|---------|
| `expected` | unset | GPUs the node must have. Unset: the strongest evidence of what it should have (below). No GPU at all always fails; no evidence at all gives `skip`. |

The probe pod requests the node's **allocatable** `nvidia.com/gpu`, so NVML in
the pod sees at most that many GPUs. When the NVIDIA device plugin marks a GPU
unhealthy (an Xid 79, a GPU fallen off the bus), the kubelet keeps it in the
node's **capacity** but drops it from allocatable (the kubelet's device
manager counts unhealthy devices in capacity only); the pod then sees 7 of 7
and a count against allocatable would pass a dead GPU. So the count is judged
against, in order:

1. `gpuCount.expected` when the policy sets it (the administrator's word, e.g.
   for a node with GPUs passed through to VMs);
2. else the largest of: the node's capacity (env `GPUACCEPT_NODE_GPU_CAPACITY`),
   the GPU feature discovery label `nvidia.com/gpu.count` (env
   `GPUACCEPT_GFD_GPU_COUNT`, when the node has the label), and the NVIDIA
   display and 3D controllers on the host's PCI bus (`/sys/bus/pci/devices/*`
   with `vendor` 0x10de and `class` 0x0300xx VGA or 0x0302xx 3D controller,
   per the PCI code and ID assignment specification; NVSwitches, class
   0x0680xx, are not counted). The pod reads the host's sysfs, which is not
   namespaced. A GPU the driver cannot bring up after a reboot is missing from
   NVML, the device plugin and the GFD label alike, but stays on the PCI bus.

**GPU sharing.** Under time-slicing or MPS the NVIDIA device plugin advertises
every GPU `replicas` times (capacity 32 for 8 GPUs shared 4 ways), and GPU
feature discovery labels the node `nvidia.com/gpu.replicas` (with
`nvidia.com/gpu.count` the physical count and `nvidia.com/gpu.sharing-strategy`
`time-slicing` or `mps`; NVIDIA/k8s-device-plugin README, "Shared Access to
GPUs"). The operator passes the replicas label (env
`GPUACCEPT_GFD_GPU_REPLICAS`), and capacity and allocatable are divided by it
before they are compared; a capacity that is not a multiple of it fails. Before,
every shared node failed "8 of 32 GPUs visible". Trap:
`h100-sxm-8gpu-time-sliced.yaml`. Where the probe's request of every GPU cannot be
admitted, the node is not probed and not convicted: it waits in phase
`Waiting` with reason `GPUSharing` (`operator/core/gpusharing.py`), under the
pending taint, and is probed as soon as the sharing is off. That is the case
under MPS (`sharing-strategy=mps`: since device plugin v0.15.0 the plugin
disallows requests for multiple devices when MPS sharing is configured, its
release notes), with `renameByDefault: true` (the shared resource is
`nvidia.com/gpu.shared` and the node has no `nvidia.com/gpu`), and when the
kubelet refuses the pod with `UnexpectedAdmissionError` on a node labelled with
more than one replica (time-slicing with `failRequestsGreaterThanOne`). Probe a
node before sharing is turned on (the device plugin's per-node configuration
label), then share it. Tests: `tests/operator/core/test_gpu_sharing_wait.py`. The
kubelet stand-in registers a shared-node profile as the device plugin does
(capacity GPUs × replicas and the `nvidia.com/gpu.replicas` label;
`tests/probe/test_gpu_sharing.py`); no integration test of a shared node on
the real API server was run (no kube-apiserver was built on the machine of
2026-12-02).

Each also fails on its own: allocatable below capacity ("the device plugin
marks N GPU(s) unhealthy"), and NVML seeing fewer GPUs than the pod was given.
Every count is recorded in `observed` (`visible`, `allocatable`, `capacity`,
`labelled`, `pciDevices`), so judging stays pure. Profiles:
`faults/gpu-missing` (capacity 8, allocatable 7, PCI 8, NVML 7) and
`faults/gpu-missing-after-restart` (capacity, allocatable and label 7, PCI 8).
"""  # noqa: E501, RUF001


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
{}                # expected: the most of capacity, nvidia.com/gpu.count and the PCI bus
"""


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why="a missing GPU has no device left to fence; the count is the node's",
        source="k8s device plugin (capacity per node); DRA ResourceSlice of the node's pool",
    ),
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
    shipped=SHIPPED,
    docs=DOCS,
    needs=frozenset({"node_gpus"}),  # what Kubernetes says of the node's GPUs (the probe run)
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
