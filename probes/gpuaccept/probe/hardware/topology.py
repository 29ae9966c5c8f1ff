"""Readers for the host's CPU sockets and NUMA nodes (sysfs), shared by both backends.

* ``<sysfs>/devices/system/cpu/cpuN/topology/physical_package_id``: the socket
  (package) of each CPU (``Documentation/ABI/stable/sysfs-devices-system-cpu``);
  only online CPUs count when ``cpu/online`` exists.
* ``<sysfs>/devices/system/node/online``: the online NUMA nodes, a cpulist-style
  range list (``"0-1"``); absent on a kernel built without NUMA (one node).
* A GPU's placement is its PCI device's ``numa_node`` and ``local_cpulist``
  (:func:`gpuaccept.probe.hardware.sysfs.read_pci_numa`). With ``numa_node`` -1
  the kernel gives ``local_cpulist`` as every CPU, which then spans every socket.
"""

import re
from dataclasses import dataclass
from pathlib import Path

from gpuaccept.probe.hardware.sysfs import SysfsError, parse_cpu_list

_CPU_DIR_RE = re.compile(r"^cpu([0-9]+)$")


@dataclass(frozen=True)
class HostTopology:
    """The host's sockets and NUMA nodes as the kernel shows them."""

    cpu_socket: dict[int, int]  # online CPU -> physical_package_id
    numa_nodes: int | None  # online NUMA nodes (None: the kernel does not say)

    @property
    def sockets(self) -> int:
        return len(set(self.cpu_socket.values())) or 1

    def socket_of(self, local_cpus: frozenset[int]) -> int | None:
        """The one socket that holds every one of ``local_cpus``; None when they span
        sockets or are unknown."""
        sockets = {self.cpu_socket[c] for c in local_cpus if c in self.cpu_socket}
        return sockets.pop() if len(sockets) == 1 else None


def read_host_topology(sysfs_root: Path) -> HostTopology:
    """The sockets of the online CPUs and the count of online NUMA nodes."""
    cpu_root = sysfs_root / "devices" / "system" / "cpu"
    if not cpu_root.is_dir():
        raise SysfsError(f"{cpu_root} does not exist")
    online: set[int] | None = None
    if (cpu_root / "online").is_file():
        online = set(parse_cpu_list((cpu_root / "online").read_text()))
    cpu_socket: dict[int, int] = {}
    for entry in cpu_root.iterdir():
        match = _CPU_DIR_RE.match(entry.name)
        if match is None or (online is not None and int(match.group(1)) not in online):
            continue
        package = entry / "topology" / "physical_package_id"
        try:
            cpu_socket[int(match.group(1))] = int(package.read_text().strip())
        except (OSError, ValueError):
            continue
    if not cpu_socket:
        raise SysfsError(f"no CPU under {cpu_root} has topology/physical_package_id")
    node_online = sysfs_root / "devices" / "system" / "node" / "online"
    try:
        nodes: int | None = len(parse_cpu_list(node_online.read_text()))
    except (OSError, ValueError):
        nodes = None
    return HostTopology(cpu_socket=dict(sorted(cpu_socket.items())), numa_nodes=nodes)
