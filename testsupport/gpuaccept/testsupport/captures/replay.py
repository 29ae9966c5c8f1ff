"""The real probe over a capture: :class:`~gpuaccept.probe.hardware.real.RealBackend`,
unchanged, with ``pynvml`` answered by :mod:`.fake_nvml` and ``/sys`` built from the
capture; then the real measurements, the checks' judges and the verdict.

Which checks are replayed: those whose every input the capture holds
(:func:`missing_inputs`). The others are *not replayable*, with the reason, and
are left out of the verdict (never counted as passed). Nothing that needs load is
replayed: bandwidths, the GEMM, the all-reduce, peer copies. One exception is
stated: ``throttle_reasons`` samples its reasons while the probe loads the GPUs;
a capture is one instant of the GPU, which the replay holds for the whole
window with no load (the GPU's own ``Idle`` reason shows it was idle). A
hardware slowdown (power brake, thermal) is asserted by the board whatever the
load, which is what this replay can judge; a software power cap appears only
under load, which it cannot.
"""

import contextlib
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import BY_NAME
from gpuaccept.checks.spec import AnyCheckSpec
from gpuaccept.checks.verdict import Verdict, evaluate
from gpuaccept.contracts.report import CheckResult, HardwareMode, ProbeReport
from gpuaccept.probe.hardware.base import PerGpuFigures
from gpuaccept.probe.hardware.real import RealBackend
from gpuaccept.probe.measure.context import ProbeContext
from gpuaccept.probe.runner import hardware_summary, measuring_order, run_check
from gpuaccept.testsupport.captures import fake_nvml
from gpuaccept.testsupport.captures.model import (
    ABSENT,
    NOT_AVAILABLE,
    GpuCapture,
    Missing,
    NodeCapture,
)

# Checks no capture can replay, and why.
NEVER = {
    "pcie_link": "measures the link while copying 256 MiB each way (load); an idle capture's "
    "generation is the power-saving one",
    "peer_bandwidth": "GPU-to-GPU copies (load)",
    "nccl_allreduce": "an NCCL all-reduce (load)",
    "gpu_compute": "a bf16 GEMM (load)",
    "gpu_memory_bandwidth": "a STREAM triad (load)",
    "xid_errors": "Xid events arrive through NVML while the probe runs; a capture holds none",
    "driver_libraries": "the CUDA and NCCL libraries loaded into the probe's own process",
    "cpu_governor": "no capture holds /sys/devices/system/cpu/cpu*/cpufreq",
    "gpu_numa": "no capture holds the GPUs' sysfs numa_node and local_cpulist",
    "gpu_count": "no capture lists the PCI devices apart from NVML's GPUs (lspci -d 10de:)",
}


def _every_gpu(capture: NodeCapture, what: str, *names: str) -> str | None:
    if not capture.gpus:
        return "the capture holds no NVML answer"
    if any(gpu.name is ABSENT for gpu in capture.gpus):
        return "the capture lacks a GPU's name, without which RealBackend does not open it"
    for gpu in capture.gpus:
        for name in names:
            if getattr(gpu, name) is ABSENT:
                return f"{what}: the capture lacks {name}"
    return None


def _memory_inputs(gpu: GpuCapture) -> str | None:
    if gpu.ecc_mode is ABSENT:
        return "ecc_mode"
    ecc_on = not isinstance(gpu.ecc_mode, Missing) and gpu.ecc_mode[0]
    if ecc_on and ABSENT in (gpu.volatile_uncorrected, gpu.aggregate_uncorrected):
        return "the ECC error counts"
    if gpu.remapped_rows is ABSENT:
        return "remapped rows"
    if gpu.remapped_rows is NOT_AVAILABLE and ABSENT in (
        gpu.retired_single_bit,
        gpu.retired_double_bit,
    ):
        return "retired pages"
    return None


def missing_inputs(check: str, capture: NodeCapture) -> str | None:
    """Why ``check`` cannot be replayed from ``capture``; None when it can."""
    if check in NEVER:
        return NEVER[check]
    if check == "throttle_reasons":
        return _every_gpu(capture, "clock event reasons", "clock_event_reasons")
    if check == "memory_health":
        opened = _every_gpu(capture, "memory health")
        if opened:
            return opened
        for gpu in capture.gpus:
            lacking = _memory_inputs(gpu)
            if lacking:
                return f"memory health: the capture lacks {lacking}"
        return None
    if check == "gpu_config":
        lacking = _every_gpu(
            capture,
            "configuration",
            "power_limit_mw",
            "default_power_limit_mw",
            "persistence",
            "mig_mode",
            "compute_mode",
        )
        if lacking:
            return lacking
        if any(g.persistence is False for g in capture.gpus):
            return (
                "persistence mode is off, and the capture cannot tell whether "
                "nvidia-persistenced's socket answers"
            )
        return None
    if check == "nvswitch_fabric":
        return _every_gpu(capture, "fabric", "fabric")
    if check == "nvlink":
        lacking = _every_gpu(capture, "NVLink", "nvlink_active")
        return lacking or "NVLink: the capture lacks the error counters (nvidia-smi nvlink -e)"
    if check == "infiniband_ports":
        return "the capture lacks ibstat" if capture.infiniband is ABSENT else None
    return f"no replay rule for the check {check!r}"


# ibstat's words → the sysfs "<number>: <NAME>" (include/rdma/ib_verbs.h ib_port_state;
# drivers/infiniband/core/sysfs.c phys_state_to_str)
IB_STATES = {
    "Down": "1: DOWN",
    "Initializing": "2: INIT",
    "Armed": "3: ARMED",
    "Active": "4: ACTIVE",
}
IB_PHYS = {
    "Sleep": "1: Sleep",
    "Polling": "2: Polling",
    "Disabled": "3: Disabled",
    "PortConfigurationTraining": "4: PortConfigurationTraining",
    "LinkUp": "5: LinkUp",
    "LinkErrorRecovery": "6: LinkErrorRecovery",
    "Phy Test": "7: Phy Test",
}


def build_tree(capture: NodeCapture, root: Path) -> tuple[Path, Path]:
    """``(sys, proc)`` under ``root`` with what the capture holds, and nothing else."""
    sysfs, proc = root / "sys", root / "proc"
    sysfs.mkdir(parents=True)
    proc.mkdir(parents=True)
    if isinstance(capture.driver, str):
        (sysfs / "module" / "nvidia").mkdir(parents=True)
        (sysfs / "module" / "nvidia" / "version").write_text(capture.driver + "\n")
    if not isinstance(capture.infiniband, Missing):
        for hca in capture.infiniband:
            folder = sysfs / "class" / "infiniband" / hca.name
            folder.mkdir(parents=True)
            if isinstance(hca.fw_ver, str):
                (folder / "fw_ver").write_text(hca.fw_ver + "\n")
            if isinstance(hca.ca_type, str):
                (folder / "hca_type").write_text(hca.ca_type + "\n")
            if isinstance(hca.board_id, str):
                (folder / "board_id").write_text(hca.board_id + "\n")
            for port in hca.ports:
                pdir = folder / "ports" / str(port.port)
                pdir.mkdir(parents=True)
                (pdir / "state").write_text(IB_STATES[port.state] + "\n")
                (pdir / "phys_state").write_text(IB_PHYS[port.phys_state] + "\n")
                rate = (
                    port.rate_text
                    if isinstance(port.rate_text, str)
                    else f"{port.rate_gbps:g} Gb/sec"
                )
                (pdir / "rate").write_text(rate + "\n")
                (pdir / "link_layer").write_text(port.link_layer + "\n")
    return sysfs, proc


@contextlib.contextmanager
def installed(module: ModuleType) -> Iterator[None]:
    saved = sys.modules.get("pynvml")
    sys.modules["pynvml"] = module
    try:
        yield
    finally:
        if saved is None:
            sys.modules.pop("pynvml", None)
        else:
            sys.modules["pynvml"] = saved


class _NoLoad:
    """The load replaced by nothing (not replayed): a timer that timed nothing."""

    matrix = 0

    def start(self) -> None:
        return None

    def figures(self) -> PerGpuFigures:
        return PerGpuFigures({})


@dataclass(frozen=True)
class Outcome:
    capture: str
    results: dict[str, CheckResult]  # the replayed checks
    not_replayable: dict[str, str]  # check → why
    # the probe's verdict over the replayed checks; None where the capture holds no NVML
    # answer (an ibstat alone): the verdict needs the GPUs, so there the checks are judged alone
    verdict: Verdict | None

    @property
    def quarantined(self) -> bool:
        if self.verdict is not None:
            return not self.verdict.accepted
        return any(r.status.value in ("fail", "error") for r in self.results.values())


def replay(capture: NodeCapture, policy: ProbePolicy | None = None) -> Outcome:
    policy = policy or ProbePolicy()
    not_replayable: dict[str, str] = {}
    checks: list[AnyCheckSpec] = []
    for name, check in BY_NAME.items():
        why = missing_inputs(name, capture)
        if why is None:
            checks.append(check)
        else:
            not_replayable[name] = why
    results: dict[str, CheckResult] = {}
    with tempfile.TemporaryDirectory(prefix="gpuaccept-capture-") as tmp:
        sysfs, proc = build_tree(capture, Path(tmp))
        with installed(fake_nvml.module(capture)):
            hardware = RealBackend(sysfs_root=sysfs, proc_root=proc, persistenced_sockets=())
            # the load and the waits between samples are not replayed (see the module doc)
            no_load: Any = lambda _precision="bf16": contextlib.nullcontext(_NoLoad())  # noqa: E731
            no_wait: Any = lambda _seconds: None  # noqa: E731
            hardware.gpu_load = no_load  # type: ignore[method-assign]
            hardware.sleep = no_wait  # type: ignore[method-assign]
            try:
                summary = hardware_summary(hardware)
                for check in measuring_order(checks):
                    # each check on its own context: the load's figures one check leaves
                    # for another (clocks under load) are not replayed
                    results[check.name] = run_check(
                        check, hardware, policy, ProbeContext(), summary
                    )
            finally:
                hardware.close()
    verdict = None
    if checks and capture.gpus:
        now = datetime.now(UTC)
        report = ProbeReport(
            node_name=capture.name[:253],
            boot_id="",
            probe_version="capture-replay",
            started_at=now,
            finished_at=now,
            hardware=HardwareMode.REAL,
            summary=summary,
            results=list(results.values()),
        )
        verdict = evaluate(report, policy, checks)
    return Outcome(capture.name, results, not_replayable, verdict)
