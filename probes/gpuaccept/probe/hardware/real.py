"""The real backend: NVML (nvidia-ml-py), sysfs, /proc and torch.

pynvml and torch are imported lazily, inside this module's methods, so that
nothing else in the package needs them. GPU indices are NVML's; each is mapped
to its CUDA device by UUID (or PCI bus id), never by index order
(:func:`gpuaccept.probe.hardware.device_map.cuda_ordinals`).

A GPU that NVML has lost (``NVML_ERROR_GPU_IS_LOST``) raises
:class:`~gpuaccept.probe.hardware.base.GpuFailedError` for that GPU only, and every
wait on a GPU (copy events, load threads, the all-reduce) has its own deadline,
well below the probe pod's, after which it raises
:class:`~gpuaccept.probe.hardware.base.GpuHungError` naming the GPU and the step.

In a probe pod, ``/proc/sys/kernel/random/boot_id`` is the host's boot ID
(it is not namespaced), and ``/sys`` is the host's sysfs.
"""

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from gpuaccept.contracts.report import HardwareMode
from gpuaccept.probe.hardware import persistenced, topology_backend
from gpuaccept.probe.hardware.allreduce import AllreduceTiming, run_allreduce
from gpuaccept.probe.hardware.base import (
    AllreduceMeasurement,
    ConfComputeMode,
    CopyMeasurement,
    FabricInfo,
    GpuFailedError,
    GpuHungError,
    GpuInfo,
    GpuMemoryHealth,
    GpuSettings,
    LoadTimer,
    MatmulPrecision,
    NoSuchInterface,
    NvlinkLinks,
    PcieLinkState,
    PeerAccess,
    PeerCopyFailedError,
    PerGpuFigures,
    Unavailable,
    VersionInfo,
)
from gpuaccept.probe.hardware.device_map import CudaDevice, cuda_ordinals
from gpuaccept.probe.hardware.gpu_throughput import (
    MatmulTimer,
    check_precision,
    matmul_step,
    timed_batches,
    triad_gbps,
)
from gpuaccept.probe.hardware.infiniband import InfinibandView
from gpuaccept.probe.hardware.libraries import (
    CUDA_DRIVER_LIBRARY,
    CUDA_RUNTIME_PREFIX,
    NCCL_PREFIX,
    cuda_version_text,
    loaded_library,
    nccl_version_text,
    query_version,
)
from gpuaccept.probe.hardware.nvml_errors import (
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    NVML_ERROR_NOT_SUPPORTED,
    nvml_error_code,
    nvml_failure,
)
from gpuaccept.probe.hardware.nvml_health import (
    FIRST_RESET_STATUS_BRANCH,
    read_memory_health,
    read_recovery_action,
    read_reset_status,
    read_volatile_corrected,
    recovery_action_field_id,
    reset_status_field_ids,
)
from gpuaccept.probe.hardware.nvml_links import read_fabric, read_nvlink, read_settings
from gpuaccept.probe.hardware.peer_copies import (
    PEER_COPY_DEADLINE_S,
    PeerCopies,
    PeerCopyHungError,
    read_p2p_status,
)
from gpuaccept.probe.hardware.sysfs import (
    NoCpufreq,
    PciNuma,
    SysfsError,
    copy_cpus,
    count_nvidia_gpus,
    count_nvswitches,
    nvml_bus_id_to_sysfs,
    read_boot_id,
    read_cpu_governors,
    read_kernel_module_version,
    read_pci_numa,
    read_pcie_link,
)
from gpuaccept.probe.hardware.topology import HostTopology
from gpuaccept.probe.hardware.xid_events import XidLog, nvml_xid_listener

NVML_CLOCK_SM = 1
# Deadlines of the waits on one GPU; all well below the pod's (policy timeoutSeconds,
# 900 s by default), so that a hung GPU is named in a report, not a bare timeout.
COPY_DEADLINE_S = 60.0  # 2 x 20 copies of 256 MiB: well under 1 s at Gen5, 10 s at Gen1
# The copy thread's own deadline: later than the in-flight wait's (which names the step),
# for a thread stuck inside a CUDA call (allocation, synchronize).
COPY_THREAD_MARGIN_S = 10.0
LOAD_STOP_DEADLINE_S = 60.0  # one batch of 8 matmuls of 8192^2 bf16: milliseconds
ALLREDUCE_DEADLINE_S = 300.0
COPY_REPETITIONS = 20
LINK_SAMPLE_INTERVAL_S = 0.002
LOAD_RAMP_S = 0.5
TRIAD_DEADLINE_S = 60.0  # 100 triads of 3 GiB: a fraction of a second at 1 TB/s


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _library_version(
    maps: str, prefix: str, symbol: str, text: Callable[[int], str], notes: list[str]
) -> tuple[str | None, str | None]:
    """(version, library file name) of the loaded library named ``prefix*``."""
    path = loaded_library(maps, prefix)
    if path is None:
        notes.append(f"{prefix} is not loaded")
        return None, None
    try:
        return text(query_version(path, symbol)), Path(path).name
    except (OSError, AttributeError) as exc:
        notes.append(f"{symbol} ({Path(path).name}): {exc}")
        return None, Path(path).name


# nvml.h: NVML_CC_SYSTEM_FEATURE_ENABLED, NVML_CC_SYSTEM_DEVTOOLS_MODE_ON
CC_FEATURE_ENABLED = 1
CC_DEVTOOLS_ON = 1


class RealBackend:
    mode = HardwareMode.REAL

    def __init__(
        self,
        sysfs_root: Path = Path("/sys"),
        proc_root: Path = Path("/proc"),
        persistenced_sockets: tuple[Path, ...] = persistenced.SOCKET_PATHS,
    ) -> None:
        self._sysfs_root = sysfs_root
        self._proc_root = proc_root
        self._persistenced_sockets = persistenced_sockets
        self._nvml: ModuleType | None = None
        self._problem: str | None = None
        self._mismatch = False
        self._gpus: list[GpuInfo] = []
        self._handles: list[Any] = []
        self._device_max: dict[int, tuple[int, int]] = {}
        self._max_sm_mhz: dict[int, int] = {}  # constant per GPU; read once, not per sample
        self._ordinals: dict[int, int] | None = None
        # GPUs that hung in this run: no later step waits on them again.
        self._hung: dict[int, str] = {}
        # Only a default for torch's own numbering; every mapping goes by UUID.
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
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
            if nvml_error_code(exc) == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
                self._mismatch = True
                self._problem = "NVML: driver/library version mismatch"
            else:
                self._problem = f"NVML unavailable: {exc} (no NVIDIA driver?)"
            return
        self._nvml = pynvml
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            if nvml_error_code(exc) == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
                self._mismatch = True
            self._problem = f"NVML cannot enumerate GPUs: {exc}"
            return
        for index in range(count):
            self._add_gpu(pynvml, index)
        if not self._gpus and self._problem is None:
            self._problem = "NVML reports no GPU"

    def _add_gpu(self, pynvml: ModuleType, index: int) -> None:
        """One GPU; a GPU NVML cannot open (GPU_IS_LOST...) is kept, with its problem."""
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(pynvml.nvmlDeviceGetName(handle))
        except pynvml.NVMLError as exc:
            self._handles.append(None)
            lost = " (GPU_IS_LOST)" if nvml_error_code(exc) == NVML_ERROR_GPU_IS_LOST else ""
            self._gpus.append(GpuInfo(index=index, name="unknown", problem=f"NVML: {exc}{lost}"))
            return
        bus = None
        with contextlib.suppress(pynvml.NVMLError):
            bus = nvml_bus_id_to_sysfs(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId))
        uuid = None
        with contextlib.suppress(pynvml.NVMLError):
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
        self._handles.append(handle)
        self._gpus.append(GpuInfo(index=index, name=name, bus_id=bus, uuid=uuid))

    def _handle(self, gpu: int, step: str) -> Any:
        handle = self._handles[gpu]
        if handle is None:
            raise GpuFailedError(gpu, step, self._gpus[gpu].problem or "NVML cannot open it")
        return handle

    def _require_nvml(self) -> ModuleType:
        if self._nvml is None:
            raise Unavailable(self._problem or "NVML unavailable")
        return self._nvml

    def gpus(self) -> list[GpuInfo]:
        """NVML's GPUs; one that hung earlier in this run carries that as its problem."""
        return [
            dataclasses.replace(g, problem=self._hung[g.index]) if g.index in self._hung else g
            for g in self._gpus
        ]

    def gpu_problem(self) -> str | None:
        return self._problem

    def sysfs_root(self) -> Path:
        return self._sysfs_root

    def cpu_governors(self) -> dict[int, str]:
        try:
            return read_cpu_governors(self._sysfs_root)
        except NoCpufreq as exc:
            raise NoSuchInterface(f"no cpufreq driver: {exc}") from exc

    def boot_id(self) -> str | None:
        try:
            return read_boot_id(self._proc_root)
        except SysfsError:
            return None

    def pcie_link(self, gpu: int) -> PcieLinkState:
        """NVML's current link, against the best the link can train at here.

        Generation: NVML's ``nvmlDeviceGetMaxPcieLinkGeneration`` is the max "possible
        with this device and system" (nvml.h: a generation 2 device on a generation 1
        bus reports 1), so a Gen5 GPU in a Gen4 server reports 4, and a link at Gen4
        there is at its best; the GPU's own generation (sysfs ``max_link_speed``,
        ``nvmlDeviceGetGpuMaxPcieLinkGeneration``) is kept beside it. Where NVML cannot
        say, the GPU's own is the bar. Width: the GPU's own maximum, the larger of NVML's
        and sysfs ``max_link_width``: a x16 GPU in a slot or riser wired x8 reports 8
        in NVML and would otherwise look at max at x8.
        Falls back to the GPU's sysfs PCI device files when NVML cannot answer.
        """
        state = self._nvml_pcie_link(gpu)
        device_generation, device_width = self._device_max_link(gpu)
        device_generation = max(device_generation, state.max_generation)
        system_generation = min(state.max_generation, device_generation) or device_generation
        return PcieLinkState(
            state.generation,
            state.width,
            system_generation,
            max(state.max_width, device_width),
            device_max_generation=device_generation,
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
                generation = int(getter(self._handle(gpu, "PCIe link")))
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
        handle = self._handle(gpu, "PCIe link")
        try:
            return PcieLinkState(
                generation=nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle),
                width=nvml.nvmlDeviceGetCurrPcieLinkWidth(handle),
                max_generation=nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle),
                max_width=nvml.nvmlDeviceGetMaxPcieLinkWidth(handle),
            )
        except nvml.NVMLError as exc:
            if nvml_error_code(exc) == NVML_ERROR_GPU_IS_LOST:
                raise nvml_failure(gpu, "PCIe link", exc) from exc
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
        handle = self._handle(gpu, "clock event reasons")
        newer = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        older = getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        try:
            try:
                return int((newer or older)(handle))  # type: ignore[misc]
            except nvml.NVMLError as exc:
                # A binding newer than the driver: the library has no ...EventReasons
                # symbol (pynvml raises FUNCTION_NOT_FOUND at the call); the older
                # getter answers the same mask (nvml.h keeps it as a deprecated alias).
                if (
                    newer is None
                    or older is None
                    or nvml_error_code(exc) != NVML_ERROR_FUNCTION_NOT_FOUND
                ):
                    raise
                return int(older(handle))
        except nvml.NVMLError as exc:
            raise nvml_failure(gpu, "clock event reasons", exc) from exc

    def sm_clock(self, gpu: int) -> tuple[int, int]:
        nvml = self._require_nvml()
        handle = self._handle(gpu, "SM clock")
        try:
            current = int(nvml.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM))
            if gpu not in self._max_sm_mhz:
                self._max_sm_mhz[gpu] = int(nvml.nvmlDeviceGetMaxClockInfo(handle, NVML_CLOCK_SM))
        except nvml.NVMLError as exc:
            raise nvml_failure(gpu, "SM clock", exc) from exc
        return current, self._max_sm_mhz[gpu]

    # --- torch --------------------------------------------------------------
    def _torch_cuda(self) -> ModuleType:
        try:
            import torch  # noqa: PLC0415 - torch only when needed
        except ImportError as exc:
            raise Unavailable("torch is not installed") from exc
        if not torch.cuda.is_available():
            raise Unavailable(f"torch {torch.__version__} sees no CUDA device")
        return torch

    def cuda_ordinal(self, gpu: int) -> int:
        """The CUDA device of NVML's GPU ``gpu``, matched by UUID (or PCI bus id)."""
        if self._ordinals is None:
            torch = self._torch_cuda()
            devices = []
            for ordinal in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(ordinal)
                bus = None
                if hasattr(props, "pci_bus_id"):
                    domain = int(getattr(props, "pci_domain_id", 0))
                    bus = (
                        f"{domain:04x}:{int(props.pci_bus_id):02x}:{int(props.pci_device_id):02x}.0"
                    )
                uuid = getattr(props, "uuid", None)
                devices.append(CudaDevice(ordinal, str(uuid) if uuid else None, bus))
            self._ordinals = cuda_ordinals(self._gpus, devices)
        found = self._ordinals.get(gpu)
        if found is None:
            raise GpuFailedError(
                gpu, "CUDA device", "CUDA does not see this NVML GPU (UUID/bus id)"
            )
        return found

    def _copy_cpus(self, gpu: int) -> tuple[int | None, frozenset[int]]:
        """(NUMA node, CPUs to pin the copy to: local ∩ our affinity; empty: unpinned)."""
        bus = self._gpus[gpu].bus_id
        if bus is None:
            return None, frozenset()
        try:
            numa = read_pci_numa(self._sysfs_root, bus)
        except SysfsError:
            return None, frozenset()
        return numa.node, copy_cpus(numa, frozenset(os.sched_getaffinity(0)))

    def copy_bandwidth(self, gpu: int, nbytes: int) -> CopyMeasurement:
        """Pinned copies from a thread pinned to the GPU's NUMA node (its buffer is
        allocated, so first touched, there); the thread has :data:`COPY_DEADLINE_S`."""
        torch = self._torch_cuda()
        ordinal = self.cuda_ordinal(gpu)
        node, cpus = self._copy_cpus(gpu)
        result: list[tuple[float, float, PcieLinkState]] = []
        errors: list[BaseException] = []

        def run() -> None:
            try:
                if cpus:
                    os.sched_setaffinity(0, cpus)  # 0: this thread only
                result.append(self._copies(torch, gpu, ordinal, nbytes))
            except BaseException as exc:  # re-raised in the caller
                errors.append(exc)

        thread = threading.Thread(target=run, name=f"gpuaccept-copy-{gpu}", daemon=True)
        thread.start()
        thread.join(COPY_DEADLINE_S + COPY_THREAD_MARGIN_S)
        if thread.is_alive():
            errors.insert(0, GpuHungError(gpu, "copy", COPY_DEADLINE_S + COPY_THREAD_MARGIN_S))
        if errors:
            if isinstance(errors[0], GpuHungError):
                self._hung[gpu] = f"{errors[0].step}: {errors[0].detail}"
            raise errors[0]
        h2d, d2h, link = result[0]
        return CopyMeasurement(h2d, d2h, link, numa_node=node, pinned_local=bool(cpus))

    def _copies(
        self, torch: Any, gpu: int, ordinal: int, nbytes: int
    ) -> tuple[float, float, PcieLinkState]:
        device = torch.device("cuda", ordinal)
        deadline = time.monotonic() + COPY_DEADLINE_S
        with torch.cuda.device(device):
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
            stream = torch.cuda.Stream(device=device)
            samples: list[PcieLinkState] = []

            def timed(dst: Any, src: Any, reps: int, step: str) -> float:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                with torch.cuda.stream(stream):
                    start.record(stream)
                    for _ in range(reps):
                        dst.copy_(src, non_blocking=True)
                    end.record(stream)
                while not end.query():  # sample the link while the copies are in flight
                    if time.monotonic() > deadline:
                        raise GpuHungError(gpu, step, COPY_DEADLINE_S)
                    with contextlib.suppress(Unavailable):
                        samples.append(self.pcie_link(gpu))
                    time.sleep(LINK_SAMPLE_INTERVAL_S)
                end.synchronize()
                seconds = start.elapsed_time(end) / 1000.0
                return float(nbytes * reps / seconds / 1e9)

            timed(dev, host, 2, "copy warm-up")
            samples.clear()
            h2d = timed(dev, host, COPY_REPETITIONS, "copy H2D")
            d2h = timed(host, dev, COPY_REPETITIONS, "copy D2H")
            del host, dev
        # torch caches freed pinned blocks and would hand this one (on this GPU's node)
        # to the next GPU's copy thread: release it, so each buffer is allocated afresh.
        host_empty_cache = getattr(getattr(torch, "_C", None), "_host_emptyCache", None)
        if host_empty_cache is not None:
            host_empty_cache()
        if not samples:  # the copies were too quick to sample: best effort
            samples.append(self.pcie_link(gpu))
        best = max(samples, key=lambda s: (s.generation, s.width))
        return h2d, d2h, best

    @contextlib.contextmanager
    def gpu_load(self, precision: MatmulPrecision = "bf16") -> Iterator[LoadTimer]:
        """A matmul loop on every usable GPU, one thread each, until the block ends; the
        timer it yields times its batches with CUDA events (:mod:`.gpu_throughput`).

        A thread that has not stopped :data:`LOAD_STOP_DEADLINE_S` after the block
        (its GPU no longer completes work) raises :class:`GpuHungError` naming the GPU."""
        torch = self._torch_cuda()
        ordinals = {
            g.index: self.cuda_ordinal(g.index)
            for g in self._gpus
            if g.problem is None and g.index not in self._hung
        }
        check_precision(torch, list(ordinals.values()), precision)
        timer = MatmulTimer(deadline_s=LOAD_STOP_DEADLINE_S)
        stop, errors = timer.stop, timer.errors

        def burn(gpu: int, ordinal: int) -> None:
            try:
                device = torch.device("cuda", ordinal)
                step = matmul_step(torch, device, precision)
                timed_batches(torch, device, step, timer, gpu)
            except BaseException as exc:  # reported after the block
                errors[gpu] = exc

        threads = {
            gpu: threading.Thread(
                target=burn, args=(gpu, ordinal), name=f"gpuaccept-load-{gpu}", daemon=True
            )
            for gpu, ordinal in ordinals.items()
        }
        timer.running = threads
        for thread in threads.values():
            thread.start()
        time.sleep(LOAD_RAMP_S)
        try:
            yield timer
        finally:
            stop.set()
            deadline = time.monotonic() + LOAD_STOP_DEADLINE_S
            for thread in threads.values():
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
        hung = [gpu for gpu, thread in threads.items() if thread.is_alive()]
        for gpu in hung:
            self._hung[gpu] = f"load: hung: no completion within {LOAD_STOP_DEADLINE_S:g} s"
        if hung:
            raise GpuHungError(hung[0], "load", LOAD_STOP_DEADLINE_S)
        with contextlib.suppress(Exception):
            torch.cuda.empty_cache()  # leave the memory to the all-reduce processes
        for gpu, exc in errors.items():
            raise GpuFailedError(gpu, "load", f"{type(exc).__name__}: {exc}")

    def allreduce(self, sizes: list[int], iterations: int, warmup: int) -> AllreduceMeasurement:
        torch = self._torch_cuda()
        if not torch.distributed.is_nccl_available():
            raise Unavailable("torch was built without NCCL")
        for g in self._gpus:
            problem = g.problem or self._hung.get(g.index)
            if problem is not None:
                raise GpuFailedError(g.index, "all-reduce", f"not attempted: {problem}")
        devices = tuple(self.cuda_ordinal(g.index) for g in self._gpus)
        timing = AllreduceTiming(
            iterations=iterations, warmup=warmup, timeout_s=ALLREDUCE_DEADLINE_S
        )
        return run_allreduce(len(devices), "nccl", sizes, timing, devices)

    # --- versions -----------------------------------------------------------
    @cache  # noqa: B019 - one backend per process
    def versions(self) -> VersionInfo:
        notes: list[str] = []
        kernel_module = None
        try:
            kernel_module = read_kernel_module_version(self._proc_root, self._sysfs_root)
        except SysfsError as exc:
            notes.append(str(exc))
        driver = cuda_driver = None
        nvml = self._nvml
        if nvml is not None:
            with contextlib.suppress(nvml.NVMLError):
                driver = _text(nvml.nvmlSystemGetDriverVersion())
            with contextlib.suppress(nvml.NVMLError):
                cuda_driver = cuda_version_text(int(nvml.nvmlSystemGetCudaDriverVersion_v2()))
        elif self._problem:
            notes.append(self._problem)
        try:  # the driver's own answer (libcuda.so.1, injected by the container toolkit)
            cuda_driver = cuda_version_text(
                query_version(CUDA_DRIVER_LIBRARY, "cuDriverGetVersion")
            )
        except (OSError, AttributeError) as exc:
            notes.append(f"cuDriverGetVersion: {exc}")
        image = self._image_libraries(notes)
        return dataclasses.replace(
            image,
            kernel_module=kernel_module,
            nvml_driver=driver,
            nvml_mismatch=self._mismatch,
            cuda_driver=cuda_driver,
            notes=tuple(notes),
        )

    def _image_libraries(self, notes: list[str]) -> VersionInfo:
        """The probe image's CUDA runtime and NCCL, from the library files loaded
        into this process: torch's CUDA build links both (libtorch_cuda.so needs
        libcudart and libnccl), so importing it maps them."""
        try:
            import torch  # noqa: PLC0415 - torch only when needed

            torch.cuda.is_available()
        except ImportError:
            notes.append("torch is not installed")
        except Exception as exc:  # a broken CUDA stack still reports what it can
            notes.append(f"torch: {exc}")
        try:
            maps = (self._proc_root / "self" / "maps").read_text()
        except OSError as exc:
            notes.append(f"cannot read the loaded libraries: {exc}")
            return VersionInfo()
        runtime, runtime_file = _library_version(
            maps, CUDA_RUNTIME_PREFIX, "cudaRuntimeGetVersion", cuda_version_text, notes
        )
        nccl, nccl_file = _library_version(
            maps, NCCL_PREFIX, "ncclGetVersion", nccl_version_text, notes
        )
        return VersionInfo(
            cuda_runtime=runtime,
            cuda_runtime_library=runtime_file,
            nccl=nccl,
            nccl_library=nccl_file,
        )

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def phase_seconds(self, phase: str, measured_s: float | None, budget_s: float) -> float | None:
        return measured_s

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None

    # --- NVLink, fabric, configuration (gpuaccept.probe.hardware.nvml_links) ---
    def nvlink(self, gpu: int) -> NvlinkLinks:
        return read_nvlink(self._require_nvml(), self._handle(gpu, "NVLink"), gpu)

    def gpu_fabric(self, gpu: int) -> FabricInfo:
        return read_fabric(self._require_nvml(), self._handle(gpu, "fabric state"), gpu)

    def gpu_settings(self, gpu: int) -> GpuSettings:
        return read_settings(self._require_nvml(), self._handle(gpu, "configuration"), gpu)

    def persistenced_socket(self) -> bool:
        return persistenced.socket_reachable(self._persistenced_sockets)

    def gpu_numa(self, gpu: int) -> PciNuma:
        bus = self._gpus[gpu].bus_id if gpu < len(self._gpus) else None
        return topology_backend.gpu_numa(self._sysfs_root, gpu, bus)

    def host_topology(self) -> HostTopology:
        return topology_backend.host_topology(self._sysfs_root)

    def conf_compute(self) -> ConfComputeMode | None:
        """``nvmlSystemGetConfComputeState`` (R535+): ``ccFeature`` 1 is CC on,
        ``devToolsMode`` 1 its developer mode. NotSupported or a driver without the
        function: no CC (off). A binding without it or another error: not read."""
        nvml = self._require_nvml()
        getter = getattr(nvml, "nvmlSystemGetConfComputeState", None)
        if getter is None:
            return None
        try:
            state = getter()
        except nvml.NVMLError as exc:
            no_cc = (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND)
            return "off" if nvml_error_code(exc) in no_cc else None
        if int(state.ccFeature) != CC_FEATURE_ENABLED:
            return "off"
        return "devtools" if int(state.devToolsMode) == CC_DEVTOOLS_ON else "on"

    def infiniband(self) -> InfinibandView:
        return topology_backend.infiniband(self._sysfs_root, [g.bus_id for g in self._gpus])

    # --- state earlier faults left; Xid events ----------------------------------
    def xid_listener(self) -> AbstractContextManager[XidLog]:
        """NVML critical-Xid events of every GPU (a thread on one event set)."""
        return nvml_xid_listener(self._nvml, list(self._handles), self._problem)

    def gpu_recovery_action(self, gpu: int) -> int:
        nvml = self._require_nvml()
        handle = self._handle(gpu, "recovery action")
        driver = None
        with contextlib.suppress(nvml.NVMLError):
            driver = _text(nvml.nvmlSystemGetDriverVersion())
        field_id = recovery_action_field_id(driver)
        reset_fields = reset_status_field_ids(driver)
        try:
            if field_id is not None:
                return read_recovery_action(nvml, handle, gpu, field_id)
            if reset_fields is not None:
                return read_reset_status(nvml, handle, gpu, reset_fields)
        except ValueError as exc:
            raise Unavailable(f"GPU {gpu}: {exc}") from exc
        raise Unavailable(
            f"driver {driver or 'unknown'}: no recovery action or reset status field before "
            f"R{FIRST_RESET_STATUS_BRANCH}"
        )

    def memory_health(self, gpu: int) -> GpuMemoryHealth:
        return read_memory_health(self._require_nvml(), self._handle(gpu, "memory health"), gpu)

    def ecc_corrected(self, gpu: int) -> int:
        """Corrected ECC errors since the driver loaded (the in-service watch)."""
        nvml = self._require_nvml()
        return read_volatile_corrected(nvml, self._handle(gpu, "corrected ECC errors"), gpu)

    def pci_gpu_count(self) -> int:
        return count_nvidia_gpus(self._sysfs_root)

    def pci_nvswitch_count(self) -> int:
        return count_nvswitches(self._sysfs_root)

    # --- per-GPU memory bandwidth (gpuaccept.probe.hardware.gpu_throughput) ------
    def memory_bandwidth(self, nbytes: int, iterations: int, warmup: int) -> PerGpuFigures:
        """A STREAM triad on every usable GPU at once, one thread each; a GPU whose
        thread has not finished within :data:`TRIAD_DEADLINE_S` is named as hung."""
        torch = self._torch_cuda()
        ordinals = {
            g.index: self.cuda_ordinal(g.index)
            for g in self._gpus
            if g.problem is None and g.index not in self._hung
        }
        values: dict[int, float] = {}
        failed: dict[int, str] = {}

        def run(gpu: int, ordinal: int) -> None:
            try:
                device = torch.device("cuda", ordinal)
                values[gpu] = triad_gbps(torch, device, nbytes, iterations, warmup)
            except BaseException as exc:  # reported by GPU
                failed[gpu] = f"triad: {type(exc).__name__}: {exc}"

        threads = {
            gpu: threading.Thread(
                target=run, args=(gpu, ordinal), name=f"gpuaccept-triad-{gpu}", daemon=True
            )
            for gpu, ordinal in ordinals.items()
        }
        for thread in threads.values():
            thread.start()
        deadline = time.monotonic() + TRIAD_DEADLINE_S
        for thread in threads.values():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for gpu, thread in threads.items():
            if thread.is_alive():
                self._hung[gpu] = f"triad: hung: no completion within {TRIAD_DEADLINE_S:g} s"
                failed[gpu] = self._hung[gpu]
                values.pop(gpu, None)
        with contextlib.suppress(Exception):
            torch.cuda.empty_cache()
        return PerGpuFigures(dict(values), dict(failed))

    # --- GPU-to-GPU peer copies (peer_bandwidth; gpuaccept.probe.hardware.peer_copies) ---
    def peer_access(self, src: int, dst: int) -> PeerAccess:
        nvml = self._require_nvml()
        word = read_p2p_status(
            nvml, self._handle(src, "P2P status"), self._handle(dst, "P2P status"), src
        )
        torch = self._torch_cuda()
        granted = torch.cuda.can_device_access_peer(self.cuda_ordinal(src), self.cuda_ordinal(dst))
        return PeerAccess(nvml=word, cuda=bool(granted))

    def _peer_devices(self, first: int, second: int, step: str) -> tuple[Any, int, int]:
        for gpu in (first, second):
            if gpu in self._hung:
                raise GpuFailedError(gpu, step, f"not attempted: {self._hung[gpu]}")
        return self._torch_cuda(), self.cuda_ordinal(first), self.cuda_ordinal(second)

    def peer_copy(self, src: int, dst: int, nbytes: int, iterations: int, warmup: int) -> float:
        step = f"peer copy {src}>{dst}"
        torch, s, d = self._peer_devices(src, dst, step)
        copies = PeerCopies(torch, nbytes, PEER_COPY_DEADLINE_S)
        return self._peer_timed(src, step, lambda: copies.one_way(s, d, iterations, warmup))

    def peer_copy_bidirectional(
        self, first: int, second: int, nbytes: int, iterations: int, warmup: int
    ) -> float:
        step = f"peer copy {first}<>{second}"
        torch, a, b = self._peer_devices(first, second, step)
        copies = PeerCopies(torch, nbytes, PEER_COPY_DEADLINE_S)
        return self._peer_timed(first, step, lambda: copies.both_ways(a, b, iterations, warmup))

    def _peer_timed(self, gpu: int, step: str, run: Callable[[], float]) -> float:
        try:
            return run()
        except PeerCopyHungError as exc:
            self._hung[gpu] = f"{step}: hung"
            raise GpuHungError(gpu, step, PEER_COPY_DEADLINE_S) from exc
        except RuntimeError as exc:  # torch's C10_CUDA_CHECK, e.g. enabling peer access
            raise PeerCopyFailedError(f"{type(exc).__name__}: {exc}") from exc
