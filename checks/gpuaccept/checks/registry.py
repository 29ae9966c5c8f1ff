"""The check registry: the one hand-written list of checks, in the order the
probe runs them: the order listed, except that a check that needs a fact another
check provides runs after it (``CheckSpec.needs`` / ``provides``,
:func:`gpuaccept.checks.dataflow.in_data_order`; importing this module fails on a
need without a provider).

Everything else that lists checks is built from :data:`CHECKS`: the
``ProbePolicy`` sections (:mod:`gpuaccept.checks.policy`), the key-figure
printer columns of the NodeAcceptance CRD (:mod:`gpuaccept.checks.gen.crds`),
the probe CLI help and the docs' check tables (``make docs``).

Importing this module imports no torch, no NVML and no Kubernetes client.
"""

from gpuaccept.checks import (
    cpu_governor,
    driver_libraries,
    gpu_compute,
    gpu_config,
    gpu_count,
    gpu_memory_bandwidth,
    gpu_numa,
    infiniband_ports,
    memory_health,
    nccl_allreduce,
    nvlink,
    nvswitch_fabric,
    pcie_link,
    peer_bandwidth,
    throttle_reasons,
    xid_errors,
)
from gpuaccept.checks.dataflow import in_data_order
from gpuaccept.checks.spec import AnyCheckSpec

CHECKS: tuple[AnyCheckSpec, ...] = in_data_order(
    (
        # The driver first: when it is broken (a driver/library mismatch), NVML sees no
        # GPU and gpu_count fails too; the first reason names the cause.
        driver_libraries.SPEC,
        gpu_count.SPEC,
        cpu_governor.SPEC,
        pcie_link.SPEC,
        throttle_reasons.SPEC,
        # The GPU-to-GPU bandwidth matrix and peer access, before the
        # all-reduce: without peer access NCCL falls back to host memory, and the first
        # reason must name the cause
        peer_bandwidth.SPEC,
        nccl_allreduce.SPEC,
        # NVLink, the NVSwitch fabric, power and GPU configuration (gpu_config needs the
        # throttle_reasons samples under load: declared, so it runs after it wherever listed)
        nvlink.SPEC,
        nvswitch_fabric.SPEC,
        gpu_config.SPEC,
        gpu_numa.SPEC,
        infiniband_ports.SPEC,
        # Xid errors under load (measured last: the listener spans every load),
        # memory health
        xid_errors.SPEC,
        memory_health.SPEC,
        # Per-GPU compute (timed in the throttle_reasons load: declared) and memory
        # bandwidth, each against the model minimum and the node's median GPU
        gpu_compute.SPEC,
        gpu_memory_bandwidth.SPEC,
    )
)

BY_NAME: dict[str, AnyCheckSpec] = {check.name: check for check in CHECKS}


def get_check(name: str) -> AnyCheckSpec | None:
    return BY_NAME.get(name)
