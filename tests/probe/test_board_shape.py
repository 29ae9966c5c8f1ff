"""What a node must have comes from what it has (NVSwitches on its PCI bus, its GPU
count), not from the NVML name alone: an HGX 4-GPU board and a one-GPU slice report
the same name as an 8-GPU HGX board."""

from pathlib import Path

import pytest
from probe_scenarios import PROFILES, default_policy, probe

from gpuaccept.checks.nccl_allreduce import SPEC as NCCL
from gpuaccept.checks.nvswitch_fabric import SPEC as FABRIC
from gpuaccept.checks.peer_bandwidth import SPEC as PEERS
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.hardware.sysfs import SysfsError, count_nvidia_gpus, count_nvswitches

H100 = "NVIDIA H100 80GB HBM3"


def summary(gpus: int, nvswitches: int | None) -> HardwareSummary:
    return HardwareSummary(gpu_model=H100, gpu_count=gpus, nvswitch_devices=nvswitches)


@pytest.mark.parametrize(
    "name", ["h100-sxm-4gpu-hgx-no-nvswitch", "h100-sxm-1gpu-hgx-slice"], ids=str
)
def test_the_board_shapes_that_share_the_hgx_name_are_accepted(name: str) -> None:
    report = probe(PROFILES / f"{name}.yaml")
    verdict = evaluate(report, default_policy())
    assert verdict.accepted, verdict.message


def test_the_summary_counts_the_nvswitches_on_the_pci_bus() -> None:
    assert probe(PROFILES / "h100-sxm-8gpu-healthy.yaml").summary.nvswitch_devices == 4
    assert probe(PROFILES / "h100-sxm-4gpu-hgx-no-nvswitch.yaml").summary.nvswitch_devices == 0


def _device(root: Path, bus: str, vendor: str, klass: str) -> None:
    device = root / "bus" / "pci" / "devices" / bus
    device.mkdir(parents=True)
    (device / "vendor").write_text(vendor + "\n")
    (device / "class").write_text(klass + "\n")


def test_nvswitches_are_nvidia_devices_of_class_068000(tmp_path: Path) -> None:
    _device(tmp_path, "0000:05:00.0", "0x10de", "0x068000")  # NVSwitch
    _device(tmp_path, "0000:06:00.0", "0x10de", "0x068000")
    _device(tmp_path, "0000:07:00.0", "0x10de", "0x068001")  # IBM NVLink bridge: not one
    _device(tmp_path, "0000:08:00.0", "0x8086", "0x068000")  # not NVIDIA
    _device(tmp_path, "0000:18:00.0", "0x10de", "0x030200")  # a GPU
    assert count_nvswitches(tmp_path) == 2
    assert count_nvidia_gpus(tmp_path) == 1
    with pytest.raises(SysfsError):  # an unlisted bus is not one without NVSwitches
        count_nvswitches(tmp_path / "absent")


def test_no_nvswitch_on_the_bus_means_no_fabric_expected() -> None:
    observed = FABRIC.parse({"gpus": 4, "completed": 0, "notCompleted": {"0-3": "not_supported"}})
    section = default_policy().section(FABRIC)
    judged = FABRIC.judge(observed, section, summary(4, 0))
    assert judged.status is CheckStatus.PASS
    assert "no NVSwitch on the PCI bus" in judged.message
    # With NVSwitches on the bus (or an older report that did not count them) it fails.
    assert FABRIC.judge(observed, section, summary(8, 4)).status is CheckStatus.FAIL
    assert FABRIC.judge(observed, section, summary(8, None)).status is CheckStatus.FAIL


def test_the_8_gpu_busbw_applies_only_to_a_full_nvswitch_board() -> None:
    observed = NCCL.parse({"ranks": 4, "busbwGBps": 245.0})
    section = default_policy().section(NCCL)
    assert NCCL.judge(observed, section, summary(4, 0)).status is CheckStatus.PASS
    assert NCCL.judge(observed, section, summary(4, 4)).status is CheckStatus.PASS  # a slice
    full = NCCL.parse({"ranks": 8, "busbwGBps": 245.0})
    assert NCCL.judge(full, section, summary(8, 4)).status is CheckStatus.FAIL
    assert NCCL.judge(full, section, summary(8, None)).status is CheckStatus.FAIL


def test_the_nvswitch_pair_minimum_does_not_apply_without_nvswitch() -> None:
    healthy = probe(PROFILES / "h100-sxm-4gpu-hgx-no-nvswitch.yaml")
    result = healthy.result("peer_bandwidth")
    assert result is not None
    assert result.observed is not None
    section = default_policy().section(PEERS)
    observed = PEERS.parse(result.observed)
    assert PEERS.judge(observed, section, summary(4, 0)).status is CheckStatus.PASS
    # The same 135 GB/s pairs on a board with NVSwitches are below its 300 GB/s.
    assert PEERS.judge(observed, section, summary(4, 4)).status is CheckStatus.FAIL
