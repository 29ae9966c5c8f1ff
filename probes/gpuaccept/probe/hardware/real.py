"""The real backend: NVML (nvidia-ml-py), sysfs, /proc and torch.

pynvml and torch are imported lazily, inside this module's methods, so that
nothing else in the package needs them. GPU indices are NVML's, and
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` is set before torch initializes CUDA so that
torch's device ``cuda:i`` is NVML's GPU ``i``.

In a probe pod, ``/proc/sys/kernel/random/boot_id`` is the host's boot ID
(it is not namespaced), and ``/sys`` is the host's sysfs.
"""

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from gpuaccept.contracts.report import HardwareMode
from gpuaccept.probe.hardware.base import (
    AllreduceMeasurement,
    CopyMeasurement,
    GpuInfo,
    PcieLinkState,
    Unavailable,
    VersionInfo,
)
from gpuaccept.probe.hardware.sysfs import (
    NoCpufreq,
    SysfsError,
    nvml_bus_id_to_sysfs,
    read_boot_id,
    read_cpu_governors,
    read_kernel_module_version,
    read_pcie_link,
)

NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
COPY_REPETITIONS = 20
LINK_SAMPLE_INTERVAL_S = 0.002
LOAD_RAMP_S = 0.5
LOAD_MATRIX = 8192


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_error_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


class RealBackend:
    mode = HardwareMode.REAL

    def __init__(self, sysfs_root: Path = Path("/sys"), proc_root: Path = Path("/proc")) -> None:
        self._sysfs_root = sysfs_root
        self._proc_root = proc_root
        self._nvml: ModuleType | None = None
        self._problem: str | None = None
        self._mismatch = False
        self._gpus: list[GpuInfo] = []
        self._handles: list[Any] = []
        self._device_max: dict[int, tuple[int, int]] = {}
        # torch's cuda:i must be NVML's GPU i (CUDA's default order is fastest first).
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        self._init_nvml()

    # --- NVML -------------------------------------------------------------
    def _init_nvml(self) -> None:
        try:
            import pynvml  # noqa: PLC0415 - NVML only in the real backend
        except ImportError:
            self._problem = "nvidia-ml-py (pynvml) is not installed"
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            if _nvml_error_code(exc) == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
                self._mismatch = True
                self._problem = "NVML: driver/library version mismatch"
            else:
                self._problem = f"NVML unavailable: {exc} (no NVIDIA driver?)"
            return
        self._nvml = pynvml
        try:
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                bus = None
                with contextlib.suppress(pynvml.NVMLError):
                    bus = nvml_bus_id_to_sysfs(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId))
                uuid = None
                with contextlib.suppress(pynvml.NVMLError):
                    uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
                name = _text(pynvml.nvmlDeviceGetName(handle))
                self._handles.append(handle)
                self._gpus.append(GpuInfo(index=index, name=name, bus_id=bus, uuid=uuid))
        except pynvml.NVMLError as exc:
            if _nvml_error_code(exc) == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
                self._mismatch = True
            self._problem = f"NVML cannot enumerate GPUs: {exc}"
            self._gpus, self._handles = [], []
        if not self._gpus and self._problem is None:
            self._problem = "NVML reports no GPU"

    def _require_nvml(self) -> ModuleType:
        if self._nvml is None:
            raise Unavailable(self._problem or "NVML unavailable")
        return self._nvml

    def gpus(self) -> list[GpuInfo]:
        return list(self._gpus)

    def gpu_problem(self) -> str | None:
        return self._problem

    def sysfs_root(self) -> Path:
        return self._sysfs_root

    def cpu_governors(self) -> dict[int, str]:
        try:
            return read_cpu_governors(self._sysfs_root)
        except NoCpufreq as exc:
            raise Unavailable(f"no cpufreq: {exc}") from exc

    def boot_id(self) -> str | None:
        try:
            return read_boot_id(self._proc_root)
        except SysfsError:
            return None

    def pcie_link(self, gpu: int) -> PcieLinkState:
        """NVML's current link, against the GPU's own maximum.

        NVML's ``nvmlDeviceGetMaxPcieLink*`` is the max "possible with this device
        and system": a x16 GPU behind a slot or riser limited to x8 reports 8, and
        would then look "at max" at x8. So the maximum is the larger of that and the
        GPU's own capability (its sysfs ``max_link_speed``/``max_link_width``, and
        ``nvmlDeviceGetGpuMaxPcieLinkGeneration``), read once per GPU.
        Falls back to the GPU's sysfs PCI device files when NVML cannot answer.
        """
        state = self._nvml_pcie_link(gpu)
        max_generation, max_width = self._device_max_link(gpu)
        return PcieLinkState(
            state.generation,
            state.width,
            max(state.max_generation, max_generation),
            max(state.max_width, max_width),
        )

    def _device_max_link(self, gpu: int) -> tuple[int, int]:
        """The GPU's own max generation and width (0 where unknown), cached."""
        cached = self._device_max.get(gpu)
        if cached is not None:
            return cached
        nvml = self._require_nvml()
        generation = width = 0
        getter = getattr(nvml, "nvmlDeviceGetGpuMaxPcieLinkGeneration", None)
        if getter is not None:
            with contextlib.suppress(nvml.NVMLError):
                generation = int(getter(self._handles[gpu]))
        bus = self._gpus[gpu].bus_id
        if bus is not None:
            with contextlib.suppress(SysfsError):
                link = read_pcie_link(self._sysfs_root, bus)
                generation = max(generation, link.max_generation)
                width = link.max_width
        self._device_max[gpu] = (generation, width)
        return generation, width

    def _nvml_pcie_link(self, gpu: int) -> PcieLinkState:
        nvml = self._require_nvml()
        handle = self._handles[gpu]
        try:
            return PcieLinkState(
                generation=nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle),
                width=nvml.nvmlDeviceGetCurrPcieLinkWidth(handle),
                max_generation=nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle),
                max_width=nvml.nvmlDeviceGetMaxPcieLinkWidth(handle),
            )
        except nvml.NVMLError as exc:
            bus = self._gpus[gpu].bus_id
            if bus is None:
                raise Unavailable(f"GPU {gpu}: NVML cannot report the PCIe link: {exc}") from exc
            try:
                link = read_pcie_link(self._sysfs_root, bus)
            except SysfsError as sysfs_exc:
                raise Unavailable(f"GPU {gpu}: {exc}; {sysfs_exc}") from sysfs_exc
            return PcieLinkState(link.generation, link.width, link.max_generation, link.max_width)

    def clock_event_reasons(self, gpu: int) -> int:
        nvml = self._require_nvml()
        handle = self._handles[gpu]
        getter = (
            getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        try:
            return int(getter(handle))
        except nvml.NVMLError as exc:
            raise Unavailable(f"GPU {gpu}: NVML cannot report clock event reasons: {exc}") from exc

    # --- torch --------------------------------------------------------------
    def _torch_cuda(self) -> ModuleType:
        try:
            import torch  # noqa: PLC0415 - torch only when needed
        except ImportError as exc:
            raise Unavailable("torch is not installed") from exc
        if not torch.cuda.is_available():
            raise Unavailable(f"torch {torch.__version__} sees no CUDA device")
        return torch

    def copy_bandwidth(self, gpu: int, nbytes: int) -> CopyMeasurement:
        torch = self._torch_cuda()
        device = torch.device("cuda", gpu)
        with torch.cuda.device(device):
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
            stream = torch.cuda.Stream(device=device)
            samples: list[PcieLinkState] = []

            def timed(dst: Any, src: Any, reps: int) -> float:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                with torch.cuda.stream(stream):
                    start.record(stream)
                    for _ in range(reps):
                        dst.copy_(src, non_blocking=True)
                    end.record(stream)
                while not end.query():  # sample the link while the copies are in flight
                    with contextlib.suppress(Unavailable):
                        samples.append(self.pcie_link(gpu))
                    time.sleep(LINK_SAMPLE_INTERVAL_S)
                end.synchronize()
                seconds = start.elapsed_time(end) / 1000.0
                return float(nbytes * reps / seconds / 1e9)

            timed(dev, host, 2)  # warm-up
            samples.clear()
            h2d = timed(dev, host, COPY_REPETITIONS)
            d2h = timed(host, dev, COPY_REPETITIONS)
            del host, dev
        if not samples:  # the copies were too quick to sample: best effort
            samples.append(self.pcie_link(gpu))
        best = max(samples, key=lambda s: (s.generation, s.width))
        return CopyMeasurement(h2d, d2h, best)

    @contextlib.contextmanager
    def gpu_load(self) -> Iterator[None]:
        """A bf16 matmul loop on every GPU, one thread each, until the block ends."""
        torch = self._torch_cuda()
        stop = threading.Event()
        errors: list[BaseException] = []

        def burn(index: int) -> None:
            try:
                device = torch.device("cuda", index)
                a = torch.randn(LOAD_MATRIX, LOAD_MATRIX, device=device, dtype=torch.bfloat16)
                b = torch.randn(LOAD_MATRIX, LOAD_MATRIX, device=device, dtype=torch.bfloat16)
                while not stop.is_set():
                    for _ in range(8):
                        a = torch.matmul(a, b).clamp_(-1, 1)
                    torch.cuda.synchronize(device)
            except BaseException as exc:  # reported after the block
                errors.append(exc)

        threads = [threading.Thread(target=burn, args=(g.index,), daemon=True) for g in self._gpus]
        for thread in threads:
            thread.start()
        time.sleep(LOAD_RAMP_S)
        try:
            yield
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
            torch.cuda.empty_cache()  # leave the memory to the all-reduce processes
        if errors:
            raise RuntimeError(f"GPU load failed: {errors[0]}")

    def allreduce(self, sizes: list[int], iterations: int, warmup: int) -> AllreduceMeasurement:
        from gpuaccept.probe.allreduce import AllreduceTiming, run_allreduce  # noqa: PLC0415

        torch = self._torch_cuda()
        if not torch.distributed.is_nccl_available():
            raise Unavailable("torch was built without NCCL")
        timing = AllreduceTiming(iterations=iterations, warmup=warmup)
        return run_allreduce(len(self._gpus), "nccl", sizes, timing)

    # --- versions -----------------------------------------------------------
    @cache  # noqa: B019 - one backend per process
    def versions(self) -> VersionInfo:
        notes: list[str] = []
        kernel_module = None
        try:
            kernel_module = read_kernel_module_version(self._proc_root)
        except SysfsError as exc:
            notes.append(str(exc))
        nvml_library = driver = cuda_driver = None
        nvml = self._nvml
        if nvml is not None:
            with contextlib.suppress(nvml.NVMLError):
                driver = _text(nvml.nvmlSystemGetDriverVersion())
            with contextlib.suppress(nvml.NVMLError):
                # "12.550.54.15": the CUDA major, then the driver branch the library belongs to.
                nvml_library = _text(nvml.nvmlSystemGetNVMLVersion()).split(".", 1)[1]
            with contextlib.suppress(nvml.NVMLError):
                v = int(nvml.nvmlSystemGetCudaDriverVersion_v2())
                cuda_driver = f"{v // 1000}.{(v % 1000) // 10}"
        elif self._problem:
            notes.append(self._problem)
        cuda_runtime = nccl = None
        try:
            import torch  # noqa: PLC0415 - torch only when needed

            cuda_runtime = torch.version.cuda
            if torch.cuda.is_available() and torch.distributed.is_nccl_available():
                nccl = ".".join(str(p) for p in torch.cuda.nccl.version())  # type: ignore[no-untyped-call]
        except ImportError:
            notes.append("torch is not installed")
        except Exception as exc:  # a broken CUDA stack still reports what it can
            notes.append(f"torch: {exc}")
        return VersionInfo(
            kernel_module=kernel_module,
            nvml_library=nvml_library,
            nvml_mismatch=self._mismatch,
            gpu_drivers=tuple(driver for _ in self._gpus) if driver else (),
            cuda_driver=cuda_driver,
            cuda_runtime=cuda_runtime,
            nccl=nccl,
            notes=tuple(notes),
        )

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None
