"""gpu_count against the strongest evidence, CUDA minor-version compatibility,
and the node's versions (not the probe image's) (issue 11 items 1-3)."""

import ctypes
from pathlib import Path

import pytest
from probe_scenarios import HEALTHY, fault, probe

from gpuaccept.checks.driver_libraries import serves_cuda_major
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus
from gpuaccept.probe.hardware.libraries import (
    cuda_version_text,
    loaded_library,
    nccl_version_text,
    query_version,
)
from gpuaccept.probe.hardware.sysfs import SysfsError, read_kernel_module_version

PROFILES = Path(__file__).resolve().parents[2] / "profiles"


def policy(**sections: dict[str, object]) -> ProbePolicy:
    return ProbePolicy.model_validate(sections)


# --- item 1: gpu_count --------------------------------------------------------


def test_gpu_missing_profile_is_caught_although_visible_equals_allocatable() -> None:
    result = probe(fault("gpu-missing")).result("gpu_count")
    assert result is not None
    assert result.observed == {
        "visible": 7,
        "allocatable": 7,
        "capacity": 8,
        "labelled": 8,
        "pciDevices": 8,
    }
    assert result.status is CheckStatus.FAIL
    assert "the device plugin marks 1 GPU(s) unhealthy" in result.message


def test_gpu_missing_after_restart_is_caught_on_the_pci_bus() -> None:
    result = probe(fault("gpu-missing-after-restart")).result("gpu_count")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert result.message == "7 of 8 GPUs visible (expected from PCI bus)"


def test_the_healthy_profile_counts_its_gpus_on_the_pci_bus() -> None:
    result = probe(HEALTHY).result("gpu_count")
    assert result is not None
    assert isinstance(result.observed, dict)
    assert result.observed["pciDevices"] == 8
    assert result.status is CheckStatus.PASS


# --- item 2: CUDA minor-version compatibility ---------------------------------


@pytest.mark.parametrize(
    ("driver", "cuda", "major", "fails"),
    [
        ("525.60.13", "12.0", 12, False),  # the 12.x minimum
        ("525.60.12", "12.0", 12, True),  # just below it
        ("520.61.05", "11.8", 12, True),  # an 11.x driver
        ("575.57.08", "12.9", 12, False),
        ("580.65.06", "13.0", 13, False),  # the 13.x branch
        ("575.57.08", "12.9", 13, True),  # the last 12.x branch cannot run 13.x
        ("580.65.06", "13.0", 12, False),  # backward compatibility
        ("590.44.01", "13.1", 11, False),
    ],
)
def test_cuda_major_boundaries(driver: str, cuda: str, major: int, fails: bool) -> None:
    assert (serves_cuda_major(driver, cuda, major) is not None) is fails


@pytest.mark.parametrize(
    "name", ["h100-sxm-8gpu-r580-cuda13-image", "h100-sxm-8gpu-r535-cuda12-minor"]
)
def test_minor_version_trap_profiles_pass(name: str) -> None:
    result = probe(PROFILES / f"{name}.yaml").result("driver_libraries")
    assert result is not None
    assert result.status is CheckStatus.PASS, result.message


def test_an_11x_driver_fails_a_cuda_12_cluster() -> None:
    result = probe(fault("driver-cuda11")).result("driver_libraries")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert "workloads need CUDA 12.x" in result.message


# --- item 3: the node's versions, the image's reported ------------------------


def test_simulated_mismatch_is_what_nvml_does_in_cdi_mode() -> None:
    report = probe(fault("driver-library-mismatch"))
    driver = report.result("driver_libraries")
    count = report.result("gpu_count")
    assert driver is not None
    assert count is not None
    assert isinstance(driver.observed, dict)
    assert driver.observed["nvmlMismatch"] is True
    assert "nvmlDriver" not in driver.observed  # NVML did not initialise
    assert count.message == "no GPU found (NVML: driver/library version mismatch)"


def test_image_libraries_are_reported_with_their_files() -> None:
    result = probe(PROFILES / "h100-sxm-8gpu-r580-cuda13-image.yaml").result("driver_libraries")
    assert result is not None
    assert isinstance(result.observed, dict)
    assert result.observed["image"] == {
        "cudaRuntime": "13.2",
        "cudaRuntimeLibrary": "libcudart.so.13",
        "nccl": "2.27.7",
        "ncclLibrary": "libnccl.so.2",
    }
    assert result.observed["cudaDriver"] == "13.0"


MAPS = """\
7f00a0000000-7f00a0200000 r-xp 00000000 00:2f 123 /usr/lib/x86_64-linux-gnu/libcuda.so.580.82.07
7f00b0000000-7f00b0100000 r-xp 00000000 00:2f 124 /opt/venv/nvidia/cuda_runtime/lib/libcudart.so.13
7f00c0000000-7f00c0100000 r-xp 00000000 00:2f 125 /opt/venv/nvidia/nccl/lib/libnccl.so.2
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
"""


def test_loaded_libraries_are_found_in_the_process_maps() -> None:
    assert loaded_library(MAPS, "libcudart.so") == (
        "/opt/venv/nvidia/cuda_runtime/lib/libcudart.so.13"
    )
    assert loaded_library(
        MAPS,
        "libnccl.so",
    ).endswith("libnccl.so.2")  # type: ignore[union-attr]
    assert loaded_library(MAPS, "libcublas.so") is None


@pytest.mark.parametrize(
    ("code", "text"), [(13020, "13.2"), (12040, "12.4"), (13000, "13.0"), (11080, "11.8")]
)
def test_cuda_version_encoding(code: int, text: str) -> None:
    assert cuda_version_text(code) == text


@pytest.mark.parametrize(("code", "text"), [(22707, "2.27.7"), (21805, "2.18.5"), (2804, "2.8.4")])
def test_nccl_version_encoding(code: int, text: str) -> None:
    assert nccl_version_text(code) == text


class FakeLibrary:
    """A loaded C library as ctypes presents it: ``int f(int *out)`` functions."""

    def __init__(self, values: dict[str, tuple[int, int]]) -> None:
        self._values = values

    def __getattr__(self, symbol: str) -> object:
        if symbol not in self._values:
            raise AttributeError(symbol)
        status, value = self._values[symbol]

        def call(pointer: object) -> int:
            ctypes.cast(pointer, ctypes.POINTER(ctypes.c_int))[0] = value  # type: ignore[call-overload]
            return status

        return call


def test_query_version_calls_the_library_by_its_own_api() -> None:
    loaded: list[str] = []

    def load(path: str) -> ctypes.CDLL:
        loaded.append(path)
        return FakeLibrary({"ncclGetVersion": (0, 22707), "cudaRuntimeGetVersion": (35, 0)})  # type: ignore[return-value]

    assert query_version("/x/libnccl.so.2", "ncclGetVersion", load) == 22707
    assert loaded == ["/x/libnccl.so.2"]
    with pytest.raises(OSError, match="returned 35"):  # cudaErrorInsufficientDriver
        query_version("/x/libcudart.so.13", "cudaRuntimeGetVersion", load)


def test_kernel_module_version_falls_back_to_sys_module(tmp_path: Path) -> None:
    (tmp_path / "sys" / "module" / "nvidia").mkdir(parents=True)
    (tmp_path / "sys" / "module" / "nvidia" / "version").write_text("580.82.07\n")
    proc = tmp_path / "proc"
    assert read_kernel_module_version(proc, tmp_path / "sys") == "580.82.07"
    with pytest.raises(SysfsError):
        read_kernel_module_version(proc)
