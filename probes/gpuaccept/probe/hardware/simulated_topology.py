"""The simulated node's CPU sockets, NUMA nodes and InfiniBand HCAs, written as
the kernel shows them (read back by :mod:`.topology` and :mod:`.infiniband`).

PCI placement, as on an HGX baseboard: GPU ``i`` sits behind PCIe switch ``i``
(``/sys/devices/pci0000:00/0000:00:<10+i>.0/0000:<80+4i>:00.0/0000:<81+4i>:00.0/
<gpu>``), and ``/sys/bus/pci/devices/<gpu>`` links to it. A compute HCA card
(``pcie: gpuSwitch``) sits on another downstream port of the next GPU's switch;
a storage or management card (``pcie: rootPort``) on a root port of its own. Each
port of a card is a PCI function of the card and its own single-port ``mlx5_<n>``,
as mlx5 registers them; a card's SR-IOV virtual functions follow the physical ones,
each with a ``physfn`` link.
"""

import os
from pathlib import Path

from gpuaccept.probe.hardware.profile import HardwareProfile, IbHcaGroup, IbPortSpec, Infiniband
from gpuaccept.probe.hardware.sysfs import format_cpu_list, parse_cpu_list

# The number before each name in the state / phys_state files (IB spec PortInfo).
STATE_NUMBERS = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4}
PHYS_STATE_NUMBERS = {
    "Sleep": 1,
    "Polling": 2,
    "Disabled": 3,
    "LinkUp": 5,
    "LinkErrorRecovery": 6,
}


def _cpu_sockets(profile: HardwareProfile) -> dict[int, int]:
    cpus = profile.cpus
    sockets = cpus.sockets or cpus.numa_nodes
    out = dict.fromkeys(range(cpus.count), 0)
    for socket, cpulist in sockets.items():
        for cpu in parse_cpu_list(cpulist):
            if cpu < cpus.count:
                out[cpu] = socket
    return out


def materialize_topology(profile: HardwareProfile, sys_root: Path) -> None:
    cpu_root = sys_root / "devices" / "system" / "cpu"
    for cpu, socket in _cpu_sockets(profile).items():
        topology = cpu_root / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True, exist_ok=True)
        (topology / "physical_package_id").write_text(f"{socket}\n")
    node_root = sys_root / "devices" / "system" / "node"
    node_root.mkdir(parents=True)
    nodes = sorted(profile.cpus.numa_nodes) or [0]
    (node_root / "online").write_text(format_cpu_list(nodes) + "\n")
    if profile.infiniband is not None:
        materialize_infiniband(profile.infiniband, sys_root, profile.gpus.count)


def gpu_switch_port(sys_root: Path, gpu: int) -> Path:
    """The downstream bus of GPU ``gpu``'s PCIe switch (see the module's docstring)."""
    root_port = sys_root / "devices" / "pci0000:00" / f"0000:00:{0x10 + gpu % 0x30:02x}.0"
    upstream = root_port / f"0000:{0x80 + 4 * (gpu % 0x1F):02x}:00.0"
    return upstream / f"0000:{0x81 + 4 * (gpu % 0x1F):02x}:00.0"


def link_device(link: Path, target: Path) -> None:
    """``link`` → ``target``, relative, as sysfs writes its device links."""
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def _card_dir(sys_root: Path, group: IbHcaGroup, card: int, gpus: int) -> Path:
    """Where card ``card`` (over every group) sits on the PCI bus."""
    bus = f"{0xC0 + card % 0x40:02x}"
    if group.pcie == "gpuSwitch" and gpus:
        upstream = gpu_switch_port(sys_root, card % gpus).parent
        downstream = upstream / f"0000:{upstream.name[5:7]}:{1 + card // gpus:02x}.0"
        return downstream / f"0000:{bus}:00"
    return sys_root / "devices" / "pci0000:00" / f"0000:00:{0x40 + card % 0x30:02x}.0" / bus


def _write_port(port_dir: Path, port: IbPortSpec, state: str) -> None:
    (port_dir / "counters").mkdir(parents=True)
    (port_dir / "state").write_text(f"{STATE_NUMBERS[state]}: {state}\n")
    phys = PHYS_STATE_NUMBERS[port.phys_state]
    (port_dir / "phys_state").write_text(f"{phys}: {port.phys_state}\n")
    (port_dir / "rate").write_text(port.rate + "\n")
    (port_dir / "link_layer").write_text(port.link_layer + "\n")
    for unreadable in port.unreadable:
        (port_dir / unreadable).unlink()
    (port_dir / "counters" / "link_downed").write_text(f"{port.link_downed}\n")
    (port_dir / "counters" / "symbol_error").write_text(f"{port.symbol_error}\n")


def ib_port_state(port: IbPortSpec, now_s: float) -> str:
    """The port's logical state ``now_s`` after the probe first read the ports (a
    subnet manager's sweep moves a LinkUp port from INIT to ACTIVE ``activeAfterS`` in)."""
    if port.active_after_s is not None and now_s < port.active_after_s:
        return "INIT"
    return port.state


IbDevice = tuple[IbHcaGroup, IbPortSpec, Path, Path | None]


def ib_layout(spec: Infiniband, sys_root: Path, gpus: int) -> list[IbDevice]:
    """Each ``mlx5_<n>`` in order: (its group, its port, its PCI function's path, the
    physical function of a VF). The physical functions card by card, then the VFs
    (created later, by ``sriov_numvfs``)."""
    devices: list[IbDevice] = []
    virtual: list[IbDevice] = []
    card = 0
    for group in spec.hcas:
        for _ in range(group.count):
            card_dir = _card_dir(sys_root, group, card, gpus)
            card += 1
            pf = card_dir.with_name(f"{card_dir.name}.0")
            for function, port in enumerate(group.ports):
                devices.append(
                    (group, port, card_dir.with_name(f"{card_dir.name}.{function}"), None)
                )
            vf_port = IbPortSpec(state=group.virtual_function_state, rate=group.ports[0].rate)
            for vf in range(group.virtual_functions):
                path = card_dir.with_name(f"{card_dir.name}.{len(group.ports) + vf}")
                virtual.append((group, vf_port, path, pf))
    return [*devices, *virtual]


def refresh_ib_states(spec: Infiniband, sys_root: Path, gpus: int, now_s: float) -> None:
    """Rewrite the state of the ports a subnet manager activates later (``activeAfterS``)."""
    class_dir = sys_root / "class" / "infiniband"
    for index, (_, port, _, _) in enumerate(ib_layout(spec, sys_root, gpus)):
        state_file = class_dir / f"mlx5_{index}" / "ports" / "1" / "state"
        if port.active_after_s is not None and state_file.exists():
            state = ib_port_state(port, now_s)
            state_file.write_text(f"{STATE_NUMBERS[state]}: {state}\n")


def materialize_infiniband(spec: Infiniband, sys_root: Path, gpus: int = 0) -> None:
    if spec.netns_mode is not None:
        params = sys_root / "module" / "ib_core" / "parameters"
        params.mkdir(parents=True)
        (params / "netns_mode").write_text("Y\n" if spec.netns_mode == "shared" else "N\n")
    class_dir = sys_root / "class" / "infiniband"
    class_dir.mkdir(parents=True)
    for index, (group, port, pci, physfn) in enumerate(ib_layout(spec, sys_root, gpus)):
        if spec.netns_mode == "exclusive" and not group.in_pod_netns:
            continue  # in exclusive mode the pod's sysfs does not list it
        pci.mkdir(parents=True)
        hca = class_dir / f"mlx5_{index}"
        hca.mkdir()
        link_device(hca / "device", pci)
        if physfn is not None:
            link_device(pci / "physfn", physfn)
        (hca / "fw_ver").write_text(group.fw_ver + "\n")
        (hca / "board_id").write_text(group.board_id + "\n")
        _write_port(hca / "ports" / "1", port, ib_port_state(port, 0.0))
