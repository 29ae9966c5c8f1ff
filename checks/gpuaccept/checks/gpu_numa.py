"""``gpu_numa``: every GPU has a NUMA node, and the GPUs sit on the sockets as expected.

The probe reads each GPU's PCI ``numa_node`` and ``local_cpulist`` from sysfs
(``/sys/bus/pci/devices/<bdf>/``), and the socket of every online CPU
(``cpuN/topology/physical_package_id``). A GPU's socket is the one socket that
holds all of its local CPUs.

``numa_node`` -1 means the kernel has no NUMA node for the device. On a
single-socket host that is harmless (there is one node). On a host with more
than one socket it means NUMA is off in the BIOS (memory interleaving, or the
kernel's ``numa=off``; the kernel then sees one node), or the firmware gives no
proximity data for the device (no ACPI ``_PXM``); VMs show both. Copies and
NCCL's CPU threads then run from the wrong socket, unseen.

observed::

    {"sockets": 2, "numaNodes": 2, "numaNode": [0, 0, 0, 0, 1, 1, 1, 1],
     "socket": [0, 0, 0, 0, 1, 1, 1, 1],
     "localCpulist": {"0-55,112-167": [0, 1, 2, 3], "56-111,168-223": [4, 5, 6, 7]}}

(``socket`` -1: the GPU's local CPUs are on no single socket; ``localCpulist``,
cpulist → GPUs, is dropped when condensed; ``failedGpus`` names the GPUs whose
PCI device could not be read.) Condensed, the two columns become
``placement``: ``"numa node,socket"`` → the GPUs there, as ranges
(``{"0,0": "0-3", "1,1": "4-7"}``).
"""

import re
from collections import Counter
from typing import Literal

from pydantic import Field, JsonValue, model_validator

from gpuaccept.checks.claims import Claims
from gpuaccept.checks.gpu_ranges import group, parse_gpus
from gpuaccept.checks.phase_estimate import fixed_phase
from gpuaccept.checks.spec import (
    CheckJudgement,
    CheckSpec,
    FailureOwnership,
    ObservedModel,
    RunbookEntry,
    clip,
    gpu_list,
)
from gpuaccept.contracts.policy_fields import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REASON = "GpuNumaFailed"
CPULIST_MAX = 96


class GpuNumaPolicy(CheckSwitch):
    require_numa_node: bool = Field(
        default=True,
        description="On a host with more than one CPU socket, every GPU must have a NUMA "
        "node (sysfs numa_node not -1).",
    )
    socket_spread: Literal["any", "even"] = Field(
        default="any",
        description="even: on a multi-socket host, the GPU counts of any two sockets differ "
        "by at most 1 (8 GPUs on 2 sockets: 4 + 4). any: not judged.",
    )
    gpus_per_socket: list[int] | None = Field(
        default=None,
        max_length=16,
        description="The GPU count of each socket, in any order (e.g. [4, 4]); sockets "
        "without GPUs count as 0. Overrides socketSpread.",
    )


class GpuNumaObserved(ObservedModel):
    sockets: int = Field(ge=1, le=64)  # CPU sockets (packages) with online CPUs
    numa_nodes: int | None = Field(default=None, ge=1, le=1024)  # online NUMA nodes
    numa_node: list[int] | None = None  # per GPU; -1: none
    socket: list[int] | None = None  # per GPU; -1: its local CPUs are on no single socket
    local_cpulist: dict[str, list[int]] | None = None  # detail: cpulist -> GPUs
    failed_gpus: dict[str, str] | None = None
    # condensed: "numa node,socket" -> GPUs (ranges), instead of the two columns
    placement: dict[str, str] | None = None

    @model_validator(mode="after")
    def _columns(self) -> "GpuNumaObserved":
        if self.placement is not None and self.numa_node is None:
            if not self.placement:
                raise ValueError("placement must not be empty")
            _placed(self.placement)
            return self
        if not self.numa_node or self.socket is None or len(self.socket) != len(self.numa_node):
            raise ValueError("numaNode and socket must be non-empty and of equal length")
        return self

    def columns(self) -> tuple[list[int], list[int]]:
        """(numa node, socket) per GPU, from either form."""
        if self.numa_node is not None and self.socket is not None:
            return self.numa_node, self.socket
        return _placed(self.placement or {})


PLACE = re.compile(r"^-?\d{1,4},-?\d{1,2}$")


def _placed(placement: dict[str, str]) -> tuple[list[int], list[int]]:
    """``{"0,0": "0-3", "1,1": "4-7"}`` → the two columns; raises ValueError."""
    where: dict[int, tuple[int, int]] = {}
    for key, gpus in placement.items():
        if not PLACE.match(key):
            raise ValueError(f"placement key {key[:20]!r} is not 'numa node,socket'")
        node, socket = (int(x) for x in key.split(","))
        for gpu in parse_gpus(gpus):
            where[gpu] = (node, socket)
    if sorted(where) != list(range(len(where))):
        raise ValueError("placement must name every GPU from 0 once")
    return [where[g][0] for g in sorted(where)], [where[g][1] for g in sorted(where)]


def _causes(observed: GpuNumaObserved) -> str:
    if observed.numa_nodes is None or observed.numa_nodes <= 1:
        return (
            f"the kernel sees {observed.numa_nodes or 1} NUMA node: NUMA off in the BIOS "
            "(memory interleaving) or numa=off, or a VM without a NUMA topology"
        )
    return "the firmware gives no proximity data (ACPI _PXM) for them, or a VM hides it"


def _per_socket(observed: GpuNumaObserved) -> list[int]:
    """GPUs per socket, most first; sockets without GPUs count as 0."""
    counts = Counter(s for s in observed.columns()[1] if s >= 0)
    zeros = max(observed.sockets - len(counts), 0)
    return sorted([*counts.values(), *[0] * zeros], reverse=True)


def one_node_over_sockets(observed: GpuNumaObserved) -> bool:
    """One NUMA node spanning every socket, and every GPU on it: a BIOS that
    interleaves memory over both sockets and says so (AMD EPYC NPS0: one NUMA node
    per system), where each GPU's local CPUs are every CPU. No GPU can be placed on
    a socket from sysfs, which is the platform's choice, not a fault."""
    return (
        observed.sockets > 1
        and observed.numa_nodes == 1
        and all(n >= 0 for n in observed.columns()[0])
    )


def _spread(observed: GpuNumaObserved, policy: GpuNumaPolicy) -> str | None:
    """What is wrong with the GPUs' spread over the sockets (None: nothing)."""
    if policy.gpus_per_socket is None and (policy.socket_spread == "any" or observed.sockets <= 1):
        return None
    unplaced = [i for i, s in enumerate(observed.columns()[1]) if s < 0]
    if unplaced and one_node_over_sockets(observed):
        return None  # AMD NPS0: the platform says no socket; not judged (the pass names it)
    if unplaced:
        return f"{gpu_list(unplaced)}: on no single socket, spread not known"
    counts = _per_socket(observed)
    shown = "+".join(map(str, counts))
    if policy.gpus_per_socket is not None:
        expected = sorted(policy.gpus_per_socket, reverse=True)
        width = max(len(expected), len(counts))
        if expected + [0] * (width - len(expected)) != counts + [0] * (width - len(counts)):
            return f"GPUs per socket {shown}, expected {'+'.join(map(str, expected))}"
        return None
    if counts[0] - counts[-1] > 1:
        return f"GPUs per socket {shown} over {observed.sockets} sockets, expected even"
    return None


def judge(
    observed: GpuNumaObserved, policy: GpuNumaPolicy, summary: HardwareSummary
) -> CheckJudgement:
    expected: dict[str, JsonValue] = {
        "requireNumaNode": policy.require_numa_node,
        "socketSpread": policy.socket_spread,
    }
    if policy.gpus_per_socket is not None:
        expected["gpusPerSocket"] = list(policy.gpus_per_socket)
    failures = _failures(observed, policy)
    if failures:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(failures)))
    return CheckJudgement(CheckStatus.PASS, expected, clip(_pass_message(observed)))


def _failures(observed: GpuNumaObserved, policy: GpuNumaPolicy) -> list[str]:
    """The GPUs that failed; then the GPUs without a NUMA node on a multi-socket host
    (when the policy requires one), else the spread over the sockets (all GPUs read)."""
    failures = [f"GPU {g} failed: {what}" for g, what in (observed.failed_gpus or {}).items()]
    numa_node, _socket = observed.columns()
    failed = {int(g) for g in observed.failed_gpus or {}}
    no_node = [i for i, n in enumerate(numa_node) if n < 0 and i not in failed]
    if policy.require_numa_node and observed.sockets > 1 and no_node:
        failures.append(
            f"{gpu_list(no_node)}: no NUMA node (numa_node -1) on a {observed.sockets}-socket "
            f"host; {_causes(observed)}"
        )
    elif not failed:
        spread = _spread(observed, policy)
        if spread is not None:
            failures.append(spread)
    return failures


def _pass_message(observed: GpuNumaObserved) -> str:
    """Where the GPUs are: their NUMA nodes and how many on each socket."""
    numa_node, socket = observed.columns()
    nodes = sorted({n for n in numa_node if n >= 0})
    if one_node_over_sockets(observed) and any(s < 0 for s in socket):
        return (
            f"{len(numa_node)} GPUs on NUMA node {nodes[0]}, one node over "
            f"{observed.sockets} sockets (memory interleaved, as AMD NPS0): "
            "spread over the sockets not judged"
        )
    per_socket = (
        f"{'+'.join(map(str, _per_socket(observed)))} over {observed.sockets} socket"
        f"{'s' if observed.sockets > 1 else ''}"
    )
    if not nodes and observed.sockets <= 1:  # numa_node -1 on one socket: nothing to place
        return f"{len(numa_node)} GPUs, {per_socket}; one NUMA node, so every GPU is local"
    if not nodes:
        return f"{len(numa_node)} GPUs, {per_socket}; no NUMA node given (not required)"
    return f"{len(numa_node)} GPUs on NUMA nodes {','.join(map(str, nodes))}; {per_socket}"


def condense(observed: GpuNumaObserved) -> GpuNumaObserved:
    numa_node, socket = observed.columns()
    places = {g: f"{n},{s}" for g, (n, s) in enumerate(zip(numa_node, socket, strict=True))}
    placement = {where: gpus for gpus, where in group(places).items()}
    return observed.model_copy(
        update={"local_cpulist": None, "numa_node": None, "socket": None, "placement": placement}
    )


def claims(o: GpuNumaObserved, _summary: HardwareSummary) -> Claims:
    """One placement per GPU (either form); the GPUs named are the report's."""
    out = Claims().per_gpu("numaNode", o.numa_node).per_gpu("socket", o.socket)
    if o.numa_node is None and o.placement is not None:
        out.values("placement", o.placement)
        try:
            out.per_gpu("placement", o.columns()[0])
        except ValueError:
            out.unreadable.append("placement")
    for gpus in (o.local_cpulist or {}).values():
        out.indices("localCpulist", gpus)
    return out.keys("failedGpus", o.failed_gpus)


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = """\
| field | default | `default-h100-h200.yaml` | meaning |
|-------|---------|--------------------------|---------|
| `requireNumaNode` | `true` | `true` | On a host with more than one CPU socket, every GPU has a NUMA node. |
| `socketSpread` | `any` | `even` | `even`: on a multi-socket host the GPU counts of any two sockets differ by at most 1. |
| `gpusPerSocket` | unset | unset | The exact counts per socket, in any order (`[4, 4]`); overrides `socketSpread`. |

What the probe reads, per GPU: `/sys/bus/pci/devices/<bdf>/numa_node` and
`local_cpulist` (the same reader the `pcie_link` copies use to pin
themselves), and for the host every online CPU's
`cpuN/topology/physical_package_id` and `devices/system/node/online`. A GPU's
socket is the one socket that holds all of its local CPUs. Each GPU's
`local_cpulist` is recorded in the report (`observed.localCpulist`, cpulist →
GPUs; dropped when the report must shrink).

* **`numa_node` -1.** The kernel's ABI document
  ([sysfs-bus-pci](https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-bus-pci),
  `numa_node`): "the NUMA node to which the PCI device is attached, or -1 if
  the node is unknown. The initial value comes from an ACPI _PXM method or a
  similar firmware source." On a single-socket host -1 is normal (one node)
  and passes: every healthy single-node profile shows it. On a host with two
  or more sockets it fails, and the reason names the causes that fit what the
  kernel shows: with one online NUMA node, NUMA is off in the BIOS (memory
  interleaving) or the kernel booted with `numa=off`, or the node is a VM
  without a virtual NUMA topology; with several nodes, the firmware gives the
  GPU no proximity data (`_PXM`) or a VM hides it. Either way the probe's
  copies and NCCL's CPU-side threads cannot be placed on the GPU's socket.
  Fault: `numa-off-two-socket.yaml`. A fleet of VMs that knowingly run without
  NUMA sets `requireNumaNode: false`. Such a GPU's `local_cpulist` is every
  CPU, so `pcie_link` does not call its copy pinned: it names it under
  `unpinned` (earlier probes reported `pinned_local` true there;
  `tests/probe/test_probe_real_gpu_faults.py`).
* **Sockets, not NUMA nodes.** With sub-NUMA clustering (Intel SNC, AMD
  NPS2/NPS4) one socket has several NUMA nodes, so GPUs per NUMA node look
  uneven (2+2+2+2) on a healthy HGX board; per socket they are 4+4. The check
  counts sockets (`physical_package_id`). Trap: `h100-sxm-8gpu-snc.yaml`.
* **One NUMA node over several sockets (AMD NPS0).** AMD EPYC's BIOS setting
  NPS0 makes the whole two-socket system one NUMA node, memory interleaved over
  every channel of both sockets (AMD's EPYC 9004 BIOS and workload tuning guide,
  "NUMA nodes per socket"). The kernel sees one node, each GPU is on it
  (`numa_node` 0) and its `local_cpulist` is every CPU, so no GPU sits on one
  socket. The spread over the sockets cannot be read there; it is a platform
  choice, not a fault, so the check passes and says the spread was not judged
  (`gpu_numa.one_node_over_sockets`; trap: `h100-sxm-8gpu-amd-nps0.yaml`; table
  row in `tests/checks/test_gpu_numa.py`). NUMA off with `numa_node` -1 still
  fails as above. Whether an NPS0 host's devices read 0 or -1 is what one SRAT
  proximity domain gives, not read on such a host here.
* **`even` in the default policy.** An HGX H100/H200 8-GPU baseboard hangs
  its GPUs off four PCIe switches, two per CPU socket on a two-socket host, so
  a healthy node shows 4+4 (trap: `h100-sxm-8gpu-two-socket.yaml`, and
  the NUMA pinning of `pcie_link` relies on it). A single-socket host is not
  judged for spread. PCIe servers that put every GPU behind one socket
  ("single root" designs for peer-to-peer) are healthy at 8+0: use
  `socketSpread: any` or `gpusPerSocket: [8]` for them.
"""  # noqa: E501


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
requireNumaNode: true     # numa_node -1 on a multi-socket host: NUMA off, no _PXM, or a VM
socketSpread: even        # HGX: 4 GPUs per socket on 2-socket hosts (single-socket: not judged)
"""


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why="the GPUs' NUMA placement is the platform's (BIOS/ACPI SRAT)",
        source="kernel `Documentation/ABI/testing/sysfs-bus-pci` (`numa_node`)",
    ),
    measuring=frozenset(),
    judging=frozenset({"require_numa_node", "socket_spread", "gpus_per_socket"}),
    name="gpu_numa",
    title="GPU NUMA placement",
    summary="every GPU has a NUMA node on a multi-socket host; GPUs spread over the sockets "
    "as the policy expects; each GPU's local_cpulist recorded",
    reason=REASON,
    policy_model=GpuNumaPolicy,
    observed_model=GpuNumaObserved,
    judge=judge,
    condense=condense,
    claims=claims,
    shipped=SHIPPED,
    docs=DOCS,
    budget=fixed_phase("GPU NUMA placement", 0.1, "sysfs reads"),
    runbook=RunbookEntry(
        meaning=(
            "a GPU has no NUMA node on a multi-socket host, or the GPUs are not spread over the "
            "sockets as the policy expects"
        ),
        fix="[below](#gpunumafailed)",
    ),
)
