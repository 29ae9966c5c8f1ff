"""The shared sysfs/procfs readers against a fixture tree in real kernel formats."""

from pathlib import Path

import pytest
from probe_scenarios import FIXTURES

from gpuaccept.probe.hardware.sysfs import (
    NoCpufreq,
    SysfsError,
    count_nvidia_gpus,
    count_nvswitches,
    format_cpu_list,
    nvml_bus_id_to_sysfs,
    parse_cpu_list,
    parse_link_speed,
    parse_link_width,
    read_boot_id,
    read_cpu_governors,
    read_kernel_module_version,
    read_pcie_link,
)

SYSFS = FIXTURES / "sysfs"
PROC = FIXTURES / "proc"


@pytest.mark.parametrize(
    ("text", "gen"),
    [
        ("2.5 GT/s PCIe\n", 1),
        ("5.0 GT/s PCIe\n", 2),
        ("8.0 GT/s PCIe\n", 3),
        ("16.0 GT/s PCIe\n", 4),
        ("32.0 GT/s PCIe\n", 5),
        ("64.0 GT/s PCIe\n", 6),
        ("8 GT/s\n", 3),  # kernels before 5.x
        ("5 GT/s", 2),
    ],
)
def test_link_speed_formats(text: str, gen: int) -> None:
    assert parse_link_speed(text) == gen


@pytest.mark.parametrize("text", ["Unknown\n", "Unknown speed", "", "12 GT/s"])
def test_unrecognised_link_speed(text: str) -> None:
    with pytest.raises(SysfsError):
        parse_link_speed(text)


def test_link_width() -> None:
    assert parse_link_width("16\n") == 16
    assert parse_link_width("x8") == 8
    with pytest.raises(SysfsError):
        parse_link_width("wide")


def test_read_pcie_link_from_fixture() -> None:
    healthy = read_pcie_link(SYSFS, "0000:1b:00.0")
    assert (healthy.generation, healthy.width) == (5, 16)
    assert (healthy.max_generation, healthy.max_width) == (5, 16)
    downshifted = read_pcie_link(SYSFS, "0000:43:00.0")
    assert (downshifted.generation, downshifted.width) == (1, 8)
    assert (downshifted.max_generation, downshifted.max_width) == (5, 16)
    old_format = read_pcie_link(SYSFS, "0000:00:01.0")
    assert (old_format.generation, old_format.max_width) == (3, 4)


def test_read_pcie_link_missing_device() -> None:
    with pytest.raises(SysfsError, match=r"0000:99:00\.0"):
        read_pcie_link(SYSFS, "0000:99:00.0")


def test_nvml_bus_id() -> None:
    assert nvml_bus_id_to_sysfs("00000000:1B:00.0") == "0000:1b:00.0"
    assert nvml_bus_id_to_sysfs("00000001:C3:00.0") == "0001:c3:00.0"


def test_count_nvidia_gpus_by_vendor_and_class() -> None:
    # Two 3D controllers and one VGA controller from NVIDIA; a bridge and a NIC are not GPUs.
    assert count_nvidia_gpus(SYSFS) == 3
    assert count_nvidia_gpus(FIXTURES / "sysfs-nocpufreq") == 0


def test_an_unreadable_pci_bus_is_not_one_without_nvswitches(tmp_path: Path) -> None:
    """No /sys/bus/pci/devices (a capture's replay, a pod without /sys): the NVSwitch
    count is not read (SysfsError), never 0, which would make an 8-GPU HGX board a 4-GPU
    one whose fabric is not judged."""
    with pytest.raises(SysfsError, match="bus/pci/devices"):
        count_nvswitches(tmp_path)
    assert count_nvswitches(SYSFS) == 0  # a bus that was read and holds none


def test_governors_only_online_cpus() -> None:
    governors = read_cpu_governors(SYSFS)
    # cpu6 exists but is offline ("online" lists 0-5).
    assert governors == {
        0: "performance",
        1: "performance",
        2: "powersave",
        3: "powersave",
        4: "performance",
        5: "performance",
    }


def test_no_cpufreq() -> None:
    with pytest.raises(NoCpufreq):
        read_cpu_governors(FIXTURES / "sysfs-nocpufreq")
    with pytest.raises(SysfsError) as missing:
        read_cpu_governors(Path("/nonexistent-sysfs"))
    assert not isinstance(missing.value, NoCpufreq)  # unreadable sysfs, not "no cpufreq"


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3,8,10-11\n", [0, 1, 2, 3, 8, 10, 11]), ("5", [5]), ("", []), ("0-1,3", [0, 1, 3])],
)
def test_cpu_list_round_trip(text: str, cpus: list[int]) -> None:
    assert parse_cpu_list(text) == cpus
    assert parse_cpu_list(format_cpu_list(cpus)) == cpus


def test_format_cpu_list() -> None:
    assert format_cpu_list([3, 0, 1, 2, 8, 10, 11]) == "0-3,8,10-11"
    assert format_cpu_list([]) == ""


def test_kernel_module_version_open_and_proprietary(tmp_path: Path) -> None:
    assert read_kernel_module_version(PROC) == "550.54.15"  # open kernel module format
    proprietary = tmp_path / "driver" / "nvidia"
    proprietary.mkdir(parents=True)
    (proprietary / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
        "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n"
    )
    assert read_kernel_module_version(tmp_path) == "535.104.05"
    (proprietary / "version").write_text("garbage\n")
    with pytest.raises(SysfsError):
        read_kernel_module_version(tmp_path)
    with pytest.raises(SysfsError):
        read_kernel_module_version(tmp_path / "nowhere")


def test_boot_id() -> None:
    assert read_boot_id(PROC) == "6f1c1a4e-5d1b-4c8a-9a43-2f5b8e1d7c90"
