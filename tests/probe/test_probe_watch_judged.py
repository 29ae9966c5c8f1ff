"""Each in-service profile end to end: ``gpuaccept probe watch --profile`` plays its
timeline for one window, and its report is judged as the operator judges it (the
pure ``watch_evidence`` and ``evaluate`` of ``core/inservice``, the default
``inService`` policy, the Node as the profile describes it). The verdict each
profile must give in service is in :data:`IN_SERVICE`.

The round-3 truth profiles (issue 37): a node time-sliced 4 ways stays accepted
(its ``nvidia.com/gpu`` capacity of 32 counts replicas, not GPUs); an NVLink that
goes down and uncorrected ECC errors with no Xid delivered take the node out."""

import dataclasses
import os
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from probe_scenarios import PROFILES, REPO, run_cli

from gpuaccept.contracts.inservice import InService
from gpuaccept.contracts.probe_invocation import WATCH_SUBCOMMAND
from gpuaccept.contracts.watch_report import decode_watch_message
from gpuaccept.operator.core.inservice.evidence import NodeSignals
from gpuaccept.operator.core.inservice.rules import Observed, evaluate
from gpuaccept.operator.core.inservice.watchreport import watch_evidence
from gpuaccept.operator.core.model import NodeView, PodView, WatchEvidence
from gpuaccept.operator.core.watchreservation import ledger_for
from gpuaccept.probe.hardware.profile import GpuOverride, load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.hardware.simulated_watch import SimulatedWatch
from gpuaccept.probe.watch import WatchSettings, run_watch

INSERVICE = PROFILES / "inservice"
BOOT = "7d3b1a52-0000-4000-8000-000000000002"
NODE = "gpu-9"

# profile -> the in-service verdict's reason (None: stays accepted), window 60 s
IN_SERVICE: dict[str, str | None] = {
    "quiet": None,
    "time-sliced-quiet": None,
    "nvlink-down": "NVLinkDown",
    "ecc-uncorrected-no-xid": "EccUncorrected",
    "remap-pending": None,  # DCGM judges a failed remap; a pending one is recorded
    "xid79-after-acceptance": "XidFatal",
    "xid45-burst": None,
    "xid13-twice-one-gpu": None,
    "no-device-access": None,  # no evidence, never a loss
}


def test_every_in_service_profile_has_its_verdict() -> None:
    assert sorted(IN_SERVICE) == sorted(p.stem for p in INSERVICE.glob("*.yaml"))


def _watch(profile: Path, env: dict[str, str]) -> str:
    log = REPO / ".pytest_cache" / f"judged-{os.getpid()}-{threading.get_ident()}.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text("")
    run_cli(
        WATCH_SUBCOMMAND,
        "--profile",
        profile,
        "--termination-log",
        log,
        "--window-s",
        "60",
        env={"NODE_NAME": NODE, "GPUACCEPT_BOOT_ID": BOOT, **env},
    )
    text = log.read_text()
    log.unlink()
    return text


def _node(profile: Path) -> tuple[NodeView, NodeSignals]:
    hw = load_profile(profile)
    capacity = hw.node.gpu_capacity if hw.node.gpu_capacity is not None else hw.gpus.count
    allocatable = hw.node.allocatable if hw.node.allocatable is not None else capacity
    labels = {}
    if hw.node.gfd_gpu_count is not None:
        labels["nvidia.com/gpu.count"] = str(hw.node.gfd_gpu_count)
    if hw.node.gfd_gpu_replicas is not None:
        labels["nvidia.com/gpu.replicas"] = str(hw.node.gfd_gpu_replicas)
    node = NodeView(name=NODE, boot_id=BOOT, gpus=allocatable, gpu_capacity=capacity, labels=labels)
    # the acceptance saw the node's physical GPUs through NVML
    signals = NodeSignals(BOOT, capacity, allocatable, accepted_gpus=hw.gpus.count)
    return node, signals


def judged(profile: Path, env: dict[str, str] | None = None) -> str | None:
    """The in-service verdict's reason for one window of ``profile`` (None: none)."""
    message = _watch(profile, env or {})
    report = decode_watch_message(message)
    node, signals = _node(profile)
    pod = PodView(
        name="gpuaccept-probe-watch-gpu-9-1",
        phase="Succeeded",
        terminated=True,
        exit_code=0,
        message=message,
        uid="uid-watch-1",
        node_name=NODE,
        watch=1,
    )
    evidence = watch_evidence(pod, node, accept_simulated=True, expected_gpus=signals.accepted_gpus)
    if not isinstance(evidence, WatchEvidence):
        return None  # no evidence: never a verdict
    policy = InService(enabled=True)
    ledger = ledger_for(None, BOOT, report.started_at - timedelta(hours=1))
    later = report.ended_at + timedelta(minutes=5)  # past the settle delay
    result = evaluate(policy, ledger, Observed(signals, later, (evidence,), NODE))
    assert result.verdict is None or not result.verdict.pending
    return result.verdict.reason if result.verdict is not None else None


@pytest.mark.parametrize("name", sorted(IN_SERVICE))
def test_the_profile_in_service(name: str) -> None:
    assert judged(INSERVICE / f"{name}.yaml") == IN_SERVICE[name]


def test_time_sliced_through_the_pods_env_reports_the_physical_gpus() -> None:
    """The watch pod's env (capacity 32, GFD count 8, replicas 4), as the operator
    sets it: the report expects 8 GPUs, not 32."""
    env = {
        "GPUACCEPT_NODE_GPU_CAPACITY": "32",
        "GPUACCEPT_GFD_GPU_COUNT": "8",
        "GPUACCEPT_GFD_GPU_REPLICAS": "4",
    }
    report = decode_watch_message(_watch(INSERVICE / "time-sliced-quiet.yaml", env))
    assert (report.gpus_expected, report.gpus_seen) == (8, 8)
    assert report.gpus_lost() == 0


def test_a_node_without_the_acceptance_count_uses_the_physical_count() -> None:
    """The operator always has the acceptance's count; without it, the report's own
    (physical) count still does not read replicas as lost GPUs."""
    profile = INSERVICE / "time-sliced-quiet.yaml"
    message = _watch(profile, {})
    node, _ = _node(profile)
    pod = PodView(name="w", phase="Succeeded", terminated=True, message=message, node_name=NODE)
    evidence = watch_evidence(pod, node, accept_simulated=True)
    assert isinstance(evidence, WatchEvidence)
    assert [s.what for s in evidence.state if s.what == "GPULost"] == []
    node = dataclasses.replace(node, gpu_capacity=32)
    assert isinstance(watch_evidence(pod, node, accept_simulated=True), WatchEvidence)


def test_a_gpu_in_mig_mode_has_its_links_unread_not_down() -> None:
    """NVML reports the NVLinks of a GPU in MIG mode as down (DCGM's health watch
    treats them as disabled, DcgmHealthWatch.cpp MonitorNVLinkStatus): a node
    repartitioned into MIG is not an NVLink failure; the links are named unread, and
    so are the instances' Xids, which an unprivileged watch does not get (nvml.h,
    nvmlEventSetWait_v2): a blind spot, said."""
    profile = load_profile(INSERVICE / "nvlink-down.yaml")
    mig = GpuOverride.model_validate({"migEnabled": True})
    gpus = profile.gpus.model_copy(update={"overrides": {3: mig}})
    backend = SimulatedBackend(profile.model_copy(update={"gpus": gpus}))
    settings = WatchSettings(NODE, BOOT, 60.0, frozenset({79}), gpus_expected=8)
    report = run_watch(backend, SimulatedWatch(backend, NODE), settings)
    gpu3 = report.gpu(3)
    assert gpu3 is not None
    assert gpu3.nvlink_down == []
    assert "MIG" in report.not_read["nvlinks"]
    assert "instance-level Xids" in report.not_read["xidMig"]
