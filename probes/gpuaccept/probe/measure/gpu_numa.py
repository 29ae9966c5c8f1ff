"""Measures :mod:`gpuaccept.checks.gpu_numa`: each GPU's NUMA node, socket and local CPUs."""

from gpuaccept.checks.gpu_numa import CPULIST_MAX, GpuNumaObserved, GpuNumaPolicy
from gpuaccept.checks.spec import clip
from gpuaccept.probe.hardware.base import GpuFailedError, HardwareBackend, Unavailable
from gpuaccept.probe.hardware.sysfs import format_cpu_list
from gpuaccept.probe.measure.context import ProbeContext

FAILURE_MAX = 120


def measure(
    hardware: HardwareBackend, policy: GpuNumaPolicy, context: ProbeContext
) -> GpuNumaObserved:
    gpus = hardware.gpus()
    if not gpus:
        raise Unavailable("no GPU to place")
    topology = hardware.host_topology()
    numa: list[int] = []
    sockets: list[int] = []
    cpulists: dict[str, list[int]] = {}
    failed: dict[str, str] = {}
    for gpu in gpus:
        try:
            placement = hardware.gpu_numa(gpu.index)
        except GpuFailedError as exc:
            failed[str(gpu.index)] = f"{exc.step}: {exc.detail}"[:FAILURE_MAX]
            numa.append(-1)
            sockets.append(-1)
            continue
        numa.append(-1 if placement.node is None else placement.node)
        socket = topology.socket_of(placement.local_cpus)
        sockets.append(-1 if socket is None else socket)
        cpulist = clip(format_cpu_list(sorted(placement.local_cpus)), CPULIST_MAX)
        cpulists.setdefault(cpulist, []).append(gpu.index)
    return GpuNumaObserved(
        sockets=topology.sockets,
        numa_nodes=topology.numa_nodes,
        numa_node=numa,
        socket=sockets,
        local_cpulist=cpulists or None,
        failed_gpus=failed or None,
    )
