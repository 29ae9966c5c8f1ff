"""The NUMA, socket and InfiniBand questions of :class:`~.base.HardwareBackend`,
answered from a sysfs root: the same code for the real backend (``/sys``) and the
simulated one (its materialized tree)."""

from pathlib import Path

from gpuaccept.probe.hardware.base import GpuFailedError, Unavailable
from gpuaccept.probe.hardware.infiniband import InfinibandView, read_infiniband
from gpuaccept.probe.hardware.sysfs import PciNuma, SysfsError, read_pci_numa
from gpuaccept.probe.hardware.topology import HostTopology, read_host_topology


def gpu_numa(sysfs_root: Path, gpu: int, bus_id: str | None) -> PciNuma:
    if bus_id is None:
        raise GpuFailedError(gpu, "NUMA placement", "no PCI bus id")
    try:
        return read_pci_numa(sysfs_root, bus_id)
    except SysfsError as exc:
        raise GpuFailedError(gpu, "NUMA placement", str(exc)) from exc


def host_topology(sysfs_root: Path) -> HostTopology:
    try:
        return read_host_topology(sysfs_root)
    except SysfsError as exc:
        raise Unavailable(f"no CPU topology: {exc}") from exc


def infiniband(sysfs_root: Path, gpu_bus_ids: list[str | None]) -> InfinibandView:
    try:
        return read_infiniband(sysfs_root, tuple(b for b in gpu_bus_ids if b))
    except (SysfsError, OSError) as exc:
        raise Unavailable(f"cannot read {sysfs_root}/class/infiniband: {exc}") from exc
