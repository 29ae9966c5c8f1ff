"""The real backend's NVML logic against a fake ``pynvml`` module (no GPU here;
the real thing runs in tests/device via scripts/device-check.sh)."""

import contextlib
import sys
import types
from typing import Any

import pytest
import torch
from probe_scenarios import FIXTURES, UntimedLoad

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import BY_NAME
from gpuaccept.contracts.report import CheckStatus
from gpuaccept.probe import clocks
from gpuaccept.probe.hardware.base import Unavailable
from gpuaccept.probe.hardware.real import RealBackend
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.runner import hardware_summary, run_check


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def fake_nvml(
    *,
    init_error: int | None = None,
    gpus: int = 2,
    pcie_error: bool = False,
    system_max_width: int = 16,
    system_max_generation: int = 5,
) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVMLError = FakeNVMLError  # type: ignore[attr-defined]

    def init() -> None:
        if init_error is not None:
            raise FakeNVMLError(init_error)

    def pcie(value: int) -> Any:
        def get(_handle: int) -> int:
            if pcie_error:
                raise FakeNVMLError(3)  # NOT_SUPPORTED
            return value

        return get

    pci = types.SimpleNamespace
    functions: dict[str, Any] = {
        "nvmlInit": init,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: gpus,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: b"NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": lambda h: f"GPU-{h}",
        "nvmlDeviceGetPciInfo": lambda h: pci(busId=["00000000:1B:00.0", "00000000:43:00.0"][h]),
        "nvmlDeviceGetCurrPcieLinkGeneration": pcie(4),
        "nvmlDeviceGetCurrPcieLinkWidth": pcie(16),
        "nvmlDeviceGetMaxPcieLinkGeneration": pcie(system_max_generation),
        "nvmlDeviceGetMaxPcieLinkWidth": pcie(system_max_width),
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: clocks.GPU_IDLE | clocks.HW_SLOWDOWN,
        "nvmlDeviceGetClockInfo": lambda h, clock: 1410,
        "nvmlDeviceGetMaxClockInfo": lambda h, clock: 1980,
        "nvmlSystemGetDriverVersion": lambda: "550.54.15",
        "nvmlSystemGetNVMLVersion": lambda: "12.550.54.15",
        "nvmlSystemGetCudaDriverVersion_v2": lambda: 12040,
    }
    for name, fn in functions.items():
        setattr(m, name, fn)
    return m


def backend(monkeypatch: pytest.MonkeyPatch, module: types.ModuleType | None) -> RealBackend:
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return RealBackend(sysfs_root=FIXTURES / "sysfs", proc_root=FIXTURES / "proc")


def test_enumerates_gpus_and_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = backend(monkeypatch, fake_nvml())
    assert [(g.index, g.name, g.bus_id) for g in hw.gpus()] == [
        (0, "NVIDIA H100 80GB HBM3", "0000:1b:00.0"),
        (1, "NVIDIA H100 80GB HBM3", "0000:43:00.0"),
    ]
    assert hw.gpu_problem() is None
    v = hw.versions()
    assert v.kernel_module == "550.54.15"  # from the fixture /proc
    assert v.nvml_driver == "550.54.15"
    assert v.cuda_driver == "12.4"  # 12040 (no libcuda.so.1 here: NVML's answer)
    assert not v.nvml_mismatch
    assert hw.boot_id() == "6f1c1a4e-5d1b-4c8a-9a43-2f5b8e1d7c90"
    summary = hardware_summary(hw)
    assert summary.gpu_count == 2
    assert summary.driver_version == "550.54.15"
    hw.close()


def test_pcie_from_nvml_and_sysfs_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = backend(monkeypatch, fake_nvml())
    link = hw.pcie_link(0)
    assert (link.generation, link.width, link.max_generation, link.max_width) == (4, 16, 5, 16)
    fallback = backend(monkeypatch, fake_nvml(pcie_error=True))
    link = fallback.pcie_link(1)  # 0000:43:00.0 in the fixture sysfs: 2.5 GT/s x8 of 32 GT/s x16
    assert (link.generation, link.width, link.max_generation, link.max_width) == (1, 8, 5, 16)


def test_pcie_max_is_the_gpus_own_not_the_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML's max width is "possible with this device and system": behind a x8 slot
    it says 8, and a x16 GPU running x8 would look at max. The GPU's own sysfs
    max_link_width (16 for 0000:1b:00.0 in the fixture) is the maximum."""
    nvml = fake_nvml(system_max_width=8)
    nvml.nvmlDeviceGetCurrPcieLinkWidth = lambda _h: 8  # type: ignore[attr-defined]
    hw = backend(monkeypatch, nvml)
    link = hw.pcie_link(0)
    assert (link.width, link.max_width) == (8, 16)
    hw.close()


def test_pcie_generation_is_judged_against_the_systems_max(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """nvml.h: nvmlDeviceGetMaxPcieLinkGeneration is the max "possible with this device
    and system". A Gen5 GPU (sysfs max_link_speed 32 GT/s for 0000:1b:00.0 in the
    fixture) in a Gen4 server reports 4 there: a link at Gen4 is at its best, and the
    GPU's own 5 is kept beside it (issue 37, item 8)."""
    hw = backend(monkeypatch, fake_nvml(system_max_generation=4))
    link = hw.pcie_link(0)
    assert (link.generation, link.max_generation, link.device_max_generation) == (4, 4, 5)
    assert link.max_width == 16
    hw.close()


def test_clock_event_reasons_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = backend(monkeypatch, fake_nvml())
    monkeypatch.setattr(hw, "gpu_load", _no_load)
    policy = ProbePolicy.model_validate(
        {"throttleReasons": {"sampleSeconds": 0.25, "warmupSeconds": 0}}
    )
    monkeypatch.setattr(hw, "sleep", lambda _s: None)
    result = run_check(
        BY_NAME["throttle_reasons"], hw, policy, ProbeContext(), hardware_summary(hw)
    )
    assert result.observed == {
        "samples": 1,
        "warmupSamples": 0,
        "activeFraction": {"hw_slowdown": [1.0, 1.0]},
        "smClockMHz": [1410, 1410],
        "smClockMaxMHz": [1980, 1980],
    }
    assert result.status is CheckStatus.FAIL


def _no_load(_precision: str = "bf16") -> Any:
    return contextlib.nullcontext(UntimedLoad())


def test_no_nvml_library(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = backend(monkeypatch, fake_nvml(init_error=12))  # LIBRARY_NOT_FOUND
    assert hw.gpus() == []
    assert "NVML unavailable" in (hw.gpu_problem() or "")
    with pytest.raises(Unavailable):
        hw.pcie_link(0)
    gpu_count = run_check(
        BY_NAME["gpu_count"], hw, ProbePolicy(), ProbeContext(), hardware_summary(hw)
    )
    assert gpu_count.status is CheckStatus.FAIL
    assert gpu_count.message.startswith("no GPU found (NVML unavailable")


def test_driver_library_mismatch_from_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = backend(monkeypatch, fake_nvml(init_error=18))  # LIB_RM_VERSION_MISMATCH
    assert hw.versions().nvml_mismatch
    result = run_check(
        BY_NAME["driver_libraries"], hw, ProbePolicy(), ProbeContext(), hardware_summary(hw)
    )
    assert result.status is CheckStatus.FAIL
    assert "driver/library version mismatch" in result.message


def test_pynvml_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = backend(monkeypatch, None)
    assert hw.gpu_problem() == "nvidia-ml-py (pynvml) is not installed"


def test_torch_without_cuda_skips_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    hw = backend(monkeypatch, fake_nvml())
    with pytest.raises(Unavailable, match="sees no CUDA device"):
        hw.copy_bandwidth(0, 1024)
    result = run_check(
        BY_NAME["pcie_link"], hw, ProbePolicy(), ProbeContext(), hardware_summary(hw)
    )
    assert result.status is CheckStatus.SKIP
