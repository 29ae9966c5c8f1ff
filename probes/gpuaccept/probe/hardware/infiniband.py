"""Reader for InfiniBand / RoCE HCAs under ``<sysfs>/class/infiniband``, shared by
both backends.

Formats, from the kernel (``Documentation/ABI/stable/sysfs-class-infiniband``
and ``drivers/infiniband/core/sysfs.c``):

* ``ports/<n>/state``: ``"4: ACTIVE"`` (``"<number>: <name>"``: NOP, DOWN, INIT,
  ARMED, ACTIVE, ACTIVE_DEFER);
* ``ports/<n>/phys_state``: ``"5: LinkUp"`` (Sleep, Polling, Disabled,
  PortConfigurationTraining, LinkUp, LinkErrorRecovery, Phy Test);
* ``ports/<n>/rate``: ``"400 Gb/sec (4X NDR)"`` (``"2.5 Gb/sec (1X SDR)"``):
  active width x active speed;
* ``ports/<n>/link_layer``: ``InfiniBand`` or ``Ethernet`` (RoCE);
* ``ports/<n>/counters/{link_downed,symbol_error}``: the port's PMA PortCounters
  (since the counters were last cleared; the IB specification makes
  LinkDownedCounter 8 bits and SymbolErrorCounter 16 bits, both saturating);
* ``fw_ver`` (v4.10+), and ``board_id`` / ``hca_type`` where the driver has them
  (mlx4, mlx5, ...);
* ``device``: the link to the HCA's PCI function (``../../../0000:17:00.1``); its
  ``physfn`` link exists only on an SR-IOV virtual function
  (``Documentation/ABI/testing/sysfs-bus-pci``).

mlx5 (ConnectX-4 and later) registers each port of a multi-port card as its own
PCI function and its own single-port IB device, both with the card's ``board_id``
(``mlx5_0/1`` on ``0000:17:00.0``, ``mlx5_1/1`` on ``0000:17:00.1``); one two-port
device appears only in RoCE multiport mode (linux-rdma "Dual Port IB Device for
RoCE", rdma-next 2018-01-04). So the PCI function tells which port of its card a
device is. mlx4 (ConnectX-3) registers one device with both ports.

What a probe pod sees depends on the RDMA network-namespace mode (``rdma system``;
``<sysfs>/module/ib_core/parameters/netns_mode``: ``Y`` shared, the default;
``N`` exclusive). Shared: every HCA is visible in every network namespace.
Exclusive: a pod's sysfs lists only the HCAs moved into its namespace.
"""

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from gpuaccept.probe.hardware.sysfs import SysfsError

NetnsMode = Literal["shared", "exclusive", "unknown"]
_STATE_RE = re.compile(r"^\s*[0-9]+:\s*(.+?)\s*$")
_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")
# drivers/infiniband/core/sysfs.c, rate_show: "%d%s Gb/sec (%dX %s)" (active width x
# active speed name: SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR, XDR)
_LANES_RE = re.compile(r"\(([0-9]+)X\s+([A-Z0-9]+)\)")
_PORT_MAX = 64
_PCI_ADDRESS_RE = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.([0-7])$")


@dataclass(frozen=True)
class IbPort:
    hca: str
    port: int
    state: str  # ACTIVE, DOWN, INIT ...
    phys_state: str  # LinkUp, Polling, Disabled ...
    rate_gbps: float
    link_layer: str  # InfiniBand | Ethernet
    link_downed: int | None
    symbol_error: int | None
    width: int | None = None  # active lanes, from the rate text ("4X")
    speed: str | None = None  # the lanes' speed name ("NDR")
    board_id: str | None = None  # its HCA's board_id (PSID)
    function: int | None = None  # its HCA's PCI function (which port of the card)

    @property
    def name(self) -> str:
        return f"{self.hca}/{self.port}"

    @property
    def up(self) -> bool:
        return self.state == "ACTIVE" and self.phys_state == "LinkUp"


@dataclass(frozen=True)
class IbHca:
    name: str
    fw_ver: str | None
    board_id: str | None
    ports: tuple[IbPort, ...]
    pci_path: str | None = None  # the resolved sysfs path of its PCI function


@dataclass(frozen=True)
class InfinibandView:
    """The HCAs this process can see, and the RDMA netns mode."""

    hcas: tuple[IbHca, ...]
    netns_mode: NetnsMode
    # ports whose files could not be read: (hca/port, why); the others are judged
    not_read: tuple[tuple[str, str], ...] = ()
    # SR-IOV virtual functions (``device/physfn``) left out: their port state is the
    # subnet manager's view of a guest's GUID, not of the cable
    virtual_functions: tuple[str, ...] = ()
    gpu_pci_paths: tuple[str, ...] = ()  # the GPUs' resolved PCI paths (for locality)


def parse_port_state(text: str) -> str:
    """``"4: ACTIVE"`` → ``"ACTIVE"``; ``"5: LinkUp"`` → ``"LinkUp"``."""
    match = _STATE_RE.match(text)
    if match is None:
        raise SysfsError(f"unrecognised port state {text.strip()!r}")
    return match.group(1)


def parse_rate(text: str) -> float:
    """``"400 Gb/sec (4X NDR)"`` → 400.0."""
    match = _RATE_RE.match(text)
    if match is None:
        raise SysfsError(f"unrecognised port rate {text.strip()!r}")
    return float(match.group(1))


def parse_lanes(text: str) -> tuple[int | None, str | None]:
    """``"200 Gb/sec (2X NDR)"`` → ``(2, "NDR")``; no parenthesis → ``(None, None)``."""
    match = _LANES_RE.search(text)
    if match is None:
        return None, None
    return int(match.group(1)), match.group(2)


def _optional(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _counter(path: Path) -> int | None:
    text = _optional(path)
    return int(text) if text is not None and text.isdigit() else None


def read_netns_mode(sysfs_root: Path) -> NetnsMode:
    value = _optional(sysfs_root / "module" / "ib_core" / "parameters" / "netns_mode")
    if value in ("Y", "1"):
        return "shared"
    if value in ("N", "0"):
        return "exclusive"
    return "unknown"


def pci_function(pci_path: str | None) -> int | None:
    """``/sys/devices/pci0000:16/.../0000:17:00.1`` → 1 (None when not a PCI address)."""
    if pci_path is None:
        return None
    match = _PCI_ADDRESS_RE.match(pci_path.rpartition("/")[2])
    return int(match.group(1), 16) if match else None


def _pci_chain(path: str) -> list[str]:
    """The PCI devices from the root port down (``pci0000:16`` is the host bridge)."""
    parts = path.split("/")
    roots = [i for i, part in enumerate(parts) if part.startswith("pci") and ":" in part]
    return parts[roots[0] + 1 :] if roots else []


def shares_pcie_switch(a: str, b: str) -> bool:
    """Two PCI devices behind one PCIe switch: below one root port they share at least
    one more bridge (nvidia-smi topo's PIX or PXB, where NCCL uses GPUDirect RDMA by
    default); a common root port only (PHB) or none (NODE, SYS) is not."""
    chain_a, chain_b = _pci_chain(a), _pci_chain(b)
    common = 0
    for x, y in zip(chain_a[:-1], chain_b[:-1], strict=False):  # the devices themselves apart
        if x != y:
            break
        common += 1
    return common >= 2


def _pci_path(device_link: Path) -> str | None:
    """Where the ``device`` link points, resolved (None: no link, e.g. a soft device)."""
    try:
        return str(device_link.resolve(strict=True)) if device_link.is_symlink() else None
    except OSError:
        return None


def _read_port(hca: str, port_dir: Path, board_id: str | None = None) -> IbPort:
    try:
        rate = (port_dir / "rate").read_text()
        width, speed = parse_lanes(rate)
        return IbPort(
            hca=hca,
            port=int(port_dir.name),
            state=parse_port_state((port_dir / "state").read_text()),
            phys_state=parse_port_state((port_dir / "phys_state").read_text()),
            rate_gbps=parse_rate(rate),
            width=width,
            speed=speed,
            board_id=board_id,
            link_layer=(port_dir / "link_layer").read_text().strip(),
            link_downed=_counter(port_dir / "counters" / "link_downed"),
            symbol_error=_counter(port_dir / "counters" / "symbol_error"),
        )
    except OSError as exc:
        raise SysfsError(f"cannot read port {hca}/{port_dir.name}: {exc.strerror}") from exc


def _natural(path: Path) -> tuple[str, int]:
    """``mlx5_10`` after ``mlx5_9``."""
    stem = path.name.rstrip("0123456789")
    digits = path.name[len(stem) :]
    return stem, int(digits) if digits else -1


def read_infiniband(sysfs_root: Path, gpu_bus_ids: tuple[str, ...] = ()) -> InfinibandView:
    """Every HCA under ``<sysfs>/class/infiniband`` with its ports (empty when none), and
    the PCI paths of the GPUs ``gpu_bus_ids`` (sysfs form) for locality."""
    class_dir = sysfs_root / "class" / "infiniband"
    hcas: list[IbHca] = []
    not_read: list[tuple[str, str]] = []
    virtual_functions: list[str] = []
    entries = sorted(class_dir.iterdir(), key=_natural) if class_dir.is_dir() else []
    for entry in entries:
        if (entry / "device" / "physfn").exists():
            virtual_functions.append(entry.name)
            continue
        pci_path = _pci_path(entry / "device")
        function = pci_function(pci_path)
        ports_dir = entry / "ports"
        listed = ports_dir.iterdir() if ports_dir.is_dir() else iter(())
        port_dirs = sorted((p for p in listed if p.name.isdigit()), key=lambda p: int(p.name))
        board_id = _optional(entry / "board_id")
        ports: list[IbPort] = []
        for port_dir in port_dirs[:_PORT_MAX]:
            try:
                port = _read_port(entry.name, port_dir, board_id)
                ports.append(replace(port, function=function))
            except SysfsError as exc:  # this port's, not the check's
                not_read.append((f"{entry.name}/{port_dir.name}", str(exc)))
        hcas.append(
            IbHca(
                name=entry.name,
                fw_ver=_optional(entry / "fw_ver"),
                board_id=board_id,
                ports=tuple(ports),
                pci_path=pci_path,
            )
        )
    return InfinibandView(
        hcas=tuple(hcas),
        netns_mode=read_netns_mode(sysfs_root),
        not_read=tuple(not_read),
        virtual_functions=tuple(virtual_functions),
        gpu_pci_paths=tuple(
            path
            for bus in gpu_bus_ids
            if (path := _pci_path(sysfs_root / "bus" / "pci" / "devices" / bus.lower()))
        ),
    )
