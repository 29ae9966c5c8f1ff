"""Readers for sysfs and procfs, shared by the real and the simulated backend.

Every reader takes a root (``/sys``, ``/proc``, or a directory laid out the
same way) and parses the kernel's own file formats, so the simulated backend
materializes a profile as a real sysfs-shaped tree and reads it with the same
code that reads a real host.
"""

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path

# "32.0 GT/s PCIe" (recent kernels), "8 GT/s" or "8.0 GT/s" (older kernels).
_SPEED_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s")
_GT_PER_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}
GEN_TO_SPEED = {gen: f"{gt} GT/s PCIe" for gt, gen in _GT_PER_GEN.items()}
_CPU_DIR_RE = re.compile(r"^cpu([0-9]+)$")
_VERSION_RE = re.compile(r"[0-9]+(?:\.[0-9]+){1,3}")


class SysfsError(Exception):
    """A sysfs/procfs file is missing or not in the expected format."""


def parse_link_speed(text: str) -> int:
    """``"32.0 GT/s PCIe"`` → 5 (the PCIe generation)."""
    match = _SPEED_RE.match(text)
    if match is None:
        raise SysfsError(f"unrecognised PCIe link speed {text.strip()!r}")
    gen = _GT_PER_GEN.get(float(match.group(1)))
    if gen is None:
        raise SysfsError(f"unrecognised PCIe link speed {text.strip()!r}")
    return gen


def parse_link_width(text: str) -> int:
    """``"16"`` (or ``"x16"``) → 16."""
    value = text.strip().removeprefix("x")
    if not value.isdigit():
        raise SysfsError(f"unrecognised PCIe link width {text.strip()!r}")
    return int(value)


@dataclass(frozen=True)
class SysfsPcieLink:
    generation: int
    width: int
    max_generation: int
    max_width: int


def pci_device_dir(sysfs_root: Path, bus_id: str) -> Path:
    return sysfs_root / "bus" / "pci" / "devices" / bus_id.lower()


def read_pcie_link(sysfs_root: Path, bus_id: str) -> SysfsPcieLink:
    """The link of PCI device ``bus_id`` (``"0000:1b:00.0"``) from sysfs."""
    device = pci_device_dir(sysfs_root, bus_id)
    try:
        return SysfsPcieLink(
            generation=parse_link_speed((device / "current_link_speed").read_text()),
            width=parse_link_width((device / "current_link_width").read_text()),
            max_generation=parse_link_speed((device / "max_link_speed").read_text()),
            max_width=parse_link_width((device / "max_link_width").read_text()),
        )
    except OSError as exc:
        raise SysfsError(f"cannot read PCIe link of {bus_id}: {exc.strerror}") from exc


def nvml_bus_id_to_sysfs(bus_id: str) -> str:
    """NVML's ``"00000000:1B:00.0"`` → sysfs ``"0000:1b:00.0"``."""
    domain, _, rest = bus_id.partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}"


class NoCpufreq(SysfsError):  # noqa: N818
    """The kernel exposes no cpufreq (common in VMs)."""


def read_cpu_governors(sysfs_root: Path) -> dict[int, str]:
    """``{cpu: governor}`` from ``<root>/devices/system/cpu/cpuN/cpufreq/scaling_governor``.

    Only online CPUs are listed when ``online`` is present. Raises
    :class:`NoCpufreq` when no CPU has a cpufreq directory: the kernel has no cpufreq
    driver (the kernel's sysfs ABI, Documentation/ABI/testing/sysfs-devices-system-cpu:
    ``cpuX/cpufreq`` exists only while a driver is registered; VMs, and hosts whose BIOS
    owns the P-states, have none). A missing ``devices/system/cpu`` is a sysfs that
    could not be read (:class:`SysfsError`), not a platform without cpufreq.
    """
    cpu_root = sysfs_root / "devices" / "system" / "cpu"
    if not cpu_root.is_dir():
        raise SysfsError(f"{cpu_root} does not exist (sysfs not mounted?)")
    online: set[int] | None = None
    online_file = cpu_root / "online"
    if online_file.is_file():
        online = set(parse_cpu_list(online_file.read_text()))
    governors: dict[int, str] = {}
    for entry in cpu_root.iterdir():
        match = _CPU_DIR_RE.match(entry.name)
        if match is None:
            continue
        cpu = int(match.group(1))
        if online is not None and cpu not in online:
            continue
        governor_file = entry / "cpufreq" / "scaling_governor"
        if governor_file.is_file():
            governors[cpu] = governor_file.read_text().strip()
    if not governors:
        raise NoCpufreq(f"no cpufreq scaling_governor under {cpu_root} (no cpufreq driver)")
    return dict(sorted(governors.items()))


def parse_cpu_list(text: str) -> list[int]:
    """The kernel's cpulist format: ``"0-3,8,10-11"`` → ``[0, 1, 2, 3, 8, 10, 11]``."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def format_cpu_list(cpus: list[int]) -> str:
    """``[0, 1, 2, 3, 8]`` → ``"0-3,8"`` (the kernel's cpulist format)."""
    ranges: list[str] = []
    ordered = sorted(set(cpus))
    start = prev = None
    for cpu in [*ordered, None]:
        if cpu is not None and prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(ranges)


def read_kernel_module_version(proc_root: Path, sysfs_root: Path | None = None) -> str:
    """The NVIDIA kernel module version from ``<proc>/driver/nvidia/version``,
    else ``<sys>/module/nvidia/version``.

    The first line of the procfs file reads e.g. ``NVRM version: NVIDIA UNIX
    x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024`` (open modules
    say ``Open Kernel Module``; aarch64 says ``aarch64``); the sysfs file holds
    only the version (the module's ``MODULE_VERSION``).
    """
    path = proc_root / "driver" / "nvidia" / "version"
    try:
        text = path.read_text()
    except OSError as exc:
        if sysfs_root is not None:
            module = sysfs_root / "module" / "nvidia" / "version"
            with contextlib.suppress(OSError):
                version = module.read_text().strip()
                if _VERSION_RE.fullmatch(version):
                    return version
        raise SysfsError(f"cannot read {path}: {exc.strerror}") from exc
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+([0-9]+(?:\.[0-9]+){1,3})", text)
    if match is None:
        raise SysfsError(f"no kernel module version in {path}")
    return match.group(1)


def read_boot_id(proc_root: Path) -> str:
    path = proc_root / "sys" / "kernel" / "random" / "boot_id"
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise SysfsError(f"cannot read {path}: {exc.strerror}") from exc


NVIDIA_VENDOR = "0x10de"
_GPU_CLASSES = ("0x0300", "0x0302")
# An NVSwitch is an NVIDIA PCI device of class 0x068000 (bridge, other); NCCL tells
# NVSwitches from GPUs the same way (src/include/nvlink.h, ncclDeviceType: class
# "0x068000" is ncclNvLinkDeviceSwitch; 0x068001 is IBM's NVLink bridge, not a switch).
NVSWITCH_CLASS = "0x068000"


def _nvidia_pci_classes(sysfs_root: Path) -> list[str]:
    """The PCI class of every NVIDIA device on the bus (sysfs; works without NVML)."""
    devices = sysfs_root / "bus" / "pci" / "devices"
    if not devices.is_dir():
        return []
    classes = []
    for device in devices.iterdir():
        try:
            vendor = (device / "vendor").read_text().strip()
            klass = (device / "class").read_text().strip()
        except OSError:
            continue
        if vendor == NVIDIA_VENDOR:
            classes.append(klass)
    return classes


def count_nvidia_gpus(sysfs_root: Path) -> int:
    """NVIDIA display/3D controllers on the PCI bus (works without NVML)."""
    return sum(1 for klass in _nvidia_pci_classes(sysfs_root) if klass.startswith(_GPU_CLASSES))


def count_nvswitches(sysfs_root: Path) -> int:
    """NVSwitches on the PCI bus (an HGX 8-GPU baseboard has 4 on Hopper; a 4-GPU HGX
    board, whose GPUs link directly, and PCIe/NVL cards have none). sysfs is not
    namespaced, so a pod given one GPU of an HGX board still sees the board's switches.
    A bus that cannot be listed raises SysfsError: it is not a bus without NVSwitches,
    whose 0 makes an 8-GPU board a 4-GPU one and leaves its fabric unjudged."""
    devices = sysfs_root / "bus" / "pci" / "devices"
    if not devices.is_dir():
        raise SysfsError(f"{devices} is not a directory: the PCI bus cannot be listed")
    return sum(1 for klass in _nvidia_pci_classes(sysfs_root) if klass == NVSWITCH_CLASS)


@dataclass(frozen=True)
class PciNuma:
    """A PCI device's NUMA placement: its node (``None`` where the kernel says -1,
    i.e. a single-node machine or firmware that does not tell) and the CPUs local
    to it (``local_cpulist``)."""

    node: int | None
    local_cpus: frozenset[int]


def read_pci_numa(sysfs_root: Path, bus_id: str) -> PciNuma:
    """``numa_node`` and ``local_cpulist`` of PCI device ``bus_id``."""
    device = pci_device_dir(sysfs_root, bus_id)
    try:
        node_text = (device / "numa_node").read_text().strip()
        cpus_text = (device / "local_cpulist").read_text().strip()
    except OSError as exc:
        raise SysfsError(f"{device}: no NUMA placement: {exc.strerror or exc}") from exc
    try:
        node = int(node_text)
        cpus = frozenset(parse_cpu_list(cpus_text)) if cpus_text else frozenset()
    except ValueError as exc:
        raise SysfsError(f"{device}: unrecognised numa_node/local_cpulist: {exc}") from exc
    return PciNuma(node=node if node >= 0 else None, local_cpus=cpus)


def copy_cpus(numa: PciNuma, allowed: frozenset[int]) -> frozenset[int]:
    """The CPUs to pin a GPU's copy thread to: its local CPUs that the process may
    use (``sched_setaffinity`` outside the cpuset fails with EINVAL); empty when the
    two do not meet, or when the device has no NUMA node (``numa_node`` -1: its
    ``local_cpulist`` is then every CPU, so "pinned" to it says nothing). The copy
    then runs unpinned, and the report says so."""
    if numa.node is None:
        return frozenset()
    return numa.local_cpus & allowed
