"""The simulated node's CPU sockets, NUMA nodes and InfiniBand HCAs, written as
the kernel shows them (read back by :mod:`.topology` and :mod:`.infiniband`)."""

from pathlib import Path

from gpuaccept.probe.hardware.profile import HardwareProfile, Infiniband
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
        materialize_infiniband(profile.infiniband, sys_root)


def materialize_infiniband(spec: Infiniband, sys_root: Path) -> None:
    if spec.netns_mode is not None:
        params = sys_root / "module" / "ib_core" / "parameters"
        params.mkdir(parents=True)
        (params / "netns_mode").write_text("Y\n" if spec.netns_mode == "shared" else "N\n")
    class_dir = sys_root / "class" / "infiniband"
    class_dir.mkdir(parents=True)
    index = 0
    for group in spec.hcas:
        for _ in range(group.count):
            name = f"mlx5_{index}"
            index += 1
            if spec.netns_mode == "exclusive" and not group.in_pod_netns:
                continue  # in exclusive mode the pod's sysfs does not list it
            hca = class_dir / name
            hca.mkdir()
            (hca / "fw_ver").write_text(group.fw_ver + "\n")
            (hca / "board_id").write_text(group.board_id + "\n")
            for number, port in enumerate(group.ports, start=1):
                port_dir = hca / "ports" / str(number)
                (port_dir / "counters").mkdir(parents=True)
                (port_dir / "state").write_text(f"{STATE_NUMBERS[port.state]}: {port.state}\n")
                phys = PHYS_STATE_NUMBERS[port.phys_state]
                (port_dir / "phys_state").write_text(f"{phys}: {port.phys_state}\n")
                (port_dir / "rate").write_text(port.rate + "\n")
                (port_dir / "link_layer").write_text(port.link_layer + "\n")
                for unreadable in port.unreadable:
                    (port_dir / unreadable).unlink()
                (port_dir / "counters" / "link_downed").write_text(f"{port.link_downed}\n")
                (port_dir / "counters" / "symbol_error").write_text(f"{port.symbol_error}\n")
