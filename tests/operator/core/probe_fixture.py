"""The in-process probe's full (uncondensed) report of a 4-GPU H100 node."""

from __future__ import annotations

import functools
from pathlib import Path

from world import BOOT, T0

from gpuaccept.contracts.report import ProbeReport
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.inputs import load_policy
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.measure.context import NodeGpuCounts
from gpuaccept.probe.runner import RunSetup, run_probe

REPO = Path(__file__).resolve().parents[3]
FOUR_GPUS = REPO / "profiles" / "h100-sxm-4gpu-hgx-no-nvswitch.yaml"


@functools.cache
def full_report(profile: Path = FOUR_GPUS) -> ProbeReport:
    loaded = load_profile(profile)
    hardware = SimulatedBackend(loaded)
    try:
        counts = NodeGpuCounts(
            allocatable=loaded.node.allocatable,
            capacity=loaded.node.gpu_capacity,
            labelled=loaded.node.gfd_gpu_count,
            replicas=loaded.node.gfd_gpu_replicas,
        )
        run = RunSetup(node_name="gpu-1", boot_id=BOOT, context=ProbeContext(node_gpus=counts))
        policy = load_policy(REPO / "policies" / "default-h100-h200.yaml")
        report = run_probe(hardware, policy, run)
    finally:
        hardware.close()
    return report.model_copy(update={"started_at": T0, "finished_at": T0})
