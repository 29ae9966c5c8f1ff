"""The real backend with one bad GPU, a hung GPU, CUDA's own device order and
two NUMA nodes, against fakes of pynvml and torch (issue 11 items 6, 7 and 8)."""

import contextlib
import os
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from probe_scenarios import FIXTURES, probe
from test_probe_real_backend import FakeNVMLError, fake_nvml

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import BY_NAME
from gpuaccept.contracts.report import CheckStatus
from gpuaccept.probe.hardware import real
from gpuaccept.probe.hardware.base import GpuFailedError, GpuHungError, GpuInfo
from gpuaccept.probe.hardware.device_map import CudaDevice, cuda_ordinals
from gpuaccept.probe.hardware.real import RealBackend
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.runner import hardware_summary, run_check

GPU_IS_LOST = 15
NVML_UUIDS = [
    "GPU-aaaa0000-0000-0000-0000-000000000000",
    "GPU-bbbb1111-1111-1111-1111-111111111111",
]
LOST_LOG = "tests/fixtures/profiles/h100-sxm-8gpu-gpu-lost.yaml"
HANG_LOG = "tests/fixtures/profiles/h100-sxm-8gpu-gpu-hangs.yaml"


class FakeTorch:
    """Just enough of torch for the real backend's copies and load: CUDA sees the
    GPUs in ``cuda_uuids`` order, and a GPU in ``hung`` never completes work."""

    def __init__(self, cuda_uuids: list[str], hung: frozenset[int] = frozenset()) -> None:
        self.uuids = cuda_uuids
        self.hung = hung
        self.copy_affinity: dict[int, set[int]] = {}
        self.used_ordinals: list[int] = []
        self.never = threading.Event()
        self.pinned_cache_emptied = 0

    def empty_pinned_cache(self) -> None:
        self.pinned_cache_emptied += 1

    def module(self) -> types.ModuleType:
        fake = self
        m = types.ModuleType("torch")
        m.__version__ = "fake"  # type: ignore[attr-defined]
        m.uint8 = m.bfloat16 = "dtype"  # type: ignore[attr-defined]
        m.device = lambda _kind, ordinal: ordinal  # type: ignore[attr-defined]

        class Tensor:
            def __init__(self, ordinal: int | None) -> None:
                self.ordinal = ordinal

            def copy_(self, _src: Any, non_blocking: bool = False) -> None:
                return None

            def clamp_(self, *_a: Any) -> "Tensor":
                return self

        current: list[int] = [0]

        def empty(_n: int, dtype: Any = None, pin_memory: bool = False, device: Any = None) -> Any:
            if pin_memory:  # where the pinned host buffer is first touched
                fake.copy_affinity[current[0]] = set(os.sched_getaffinity(0))
            return Tensor(device)

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.ordinal = current[0]

            def record(self, _stream: Any = None) -> None:
                return None

            def query(self) -> bool:
                return self.ordinal not in fake.hung

            def synchronize(self) -> None:
                return None

            def elapsed_time(self, _end: Any) -> float:
                return 100.0  # ms

        @contextlib.contextmanager
        def on_device(ordinal: int) -> Iterator[None]:
            current[0] = ordinal
            fake.used_ordinals.append(ordinal)
            yield

        def synchronize(ordinal: int) -> None:
            if ordinal in fake.hung:
                fake.never.wait()

        cuda = types.SimpleNamespace(
            is_available=lambda: True,
            device_count=lambda: len(fake.uuids),
            get_device_properties=lambda i: types.SimpleNamespace(uuid=fake.uuids[i]),
            device=on_device,
            Stream=lambda device=None: None,
            Event=Event,
            stream=lambda _s: contextlib.nullcontext(),
            synchronize=synchronize,
            empty_cache=lambda: None,
        )
        m.cuda = cuda  # type: ignore[attr-defined]
        m._C = types.SimpleNamespace(_host_emptyCache=fake.empty_pinned_cache)  # type: ignore[attr-defined]
        m.distributed = types.SimpleNamespace(is_nccl_available=lambda: True)  # type: ignore[attr-defined]
        m.empty = empty  # type: ignore[attr-defined]
        m.randn = lambda *_a, **_k: Tensor(None)  # type: ignore[attr-defined]
        m.matmul = lambda a, _b, out=None: a if out is None else out  # type: ignore[attr-defined]
        return m


def backend(
    monkeypatch: pytest.MonkeyPatch, nvml: types.ModuleType, torch: FakeTorch
) -> RealBackend:
    nvml.nvmlDeviceGetUUID = lambda h: NVML_UUIDS[h]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setitem(sys.modules, "torch", torch.module())
    return RealBackend(sysfs_root=FIXTURES / "sysfs", proc_root=FIXTURES / "proc")


# --- item 8: NVML ↔ CUDA by UUID --------------------------------------------------


def test_cuda_ordinals_by_uuid_then_bus_id() -> None:
    gpus = [
        GpuInfo(0, "H100", bus_id="0000:1b:00.0", uuid="GPU-AAAA"),
        GpuInfo(1, "H100", bus_id="0000:43:00.0", uuid="GPU-bbbb"),
        GpuInfo(2, "H100", bus_id="0000:52:00.0", uuid=None),
        GpuInfo(3, "H100", bus_id="0000:61:00.0", uuid="GPU-dddd"),  # hidden from CUDA
    ]
    devices = [
        CudaDevice(0, "bbbb", None),  # CUDA's "fastest first" order differs from NVML's
        CudaDevice(1, "aaaa", None),
        CudaDevice(2, None, "00000000:52:00.0"),
    ]
    assert cuda_ordinals(gpus, devices) == {0: 1, 1: 0, 2: 2}


def test_copies_use_the_cuda_device_with_the_nvml_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = FakeTorch(cuda_uuids=[NVML_UUIDS[1][4:], NVML_UUIDS[0][4:]])  # CUDA order reversed
    hw = backend(monkeypatch, fake_nvml(), torch)
    assert [hw.cuda_ordinal(0), hw.cuda_ordinal(1)] == [1, 0]
    hw.copy_bandwidth(0, 1 << 20)
    assert set(torch.used_ordinals) == {1}


# --- item 6: copies from the GPU's own NUMA node ------------------------------------


def test_copy_thread_and_buffer_pinned_to_the_gpus_numa_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fixture sysfs: GPU 0 (0000:1b:00.0) on node 0 with CPU 0, GPU 1 on node 1 with CPU 1.

    The affinity calls are faked per thread (as the kernel keeps them), so the test
    does not depend on which CPUs this machine's cpuset allows."""
    per_thread = threading.local()
    monkeypatch.setattr(
        os, "sched_getaffinity", lambda _pid: getattr(per_thread, "cpus", {0, 1, 2, 3})
    )
    monkeypatch.setattr(
        os, "sched_setaffinity", lambda _pid, cpus: setattr(per_thread, "cpus", set(cpus))
    )
    torch = FakeTorch(cuda_uuids=[u[4:] for u in NVML_UUIDS])
    hw = backend(monkeypatch, fake_nvml(), torch)
    first = hw.copy_bandwidth(0, 1 << 20)
    second = hw.copy_bandwidth(1, 1 << 20)
    assert torch.copy_affinity == {0: {0}, 1: {1}}
    assert torch.pinned_cache_emptied == 2  # no GPU reuses the other node's cached buffer
    assert (first.numa_node, first.pinned_local) == (0, True)
    assert (second.numa_node, second.pinned_local) == (1, True)
    assert os.sched_getaffinity(0) >= {0, 1}  # the probe's own thread is left alone


def test_copy_unpinned_when_the_cpuset_excludes_the_gpus_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = FakeTorch(cuda_uuids=[u[4:] for u in NVML_UUIDS])
    hw = backend(monkeypatch, fake_nvml(), torch)
    monkeypatch.setattr(real.os, "sched_getaffinity", lambda _pid: {0})
    copy = hw.copy_bandwidth(1, 1 << 20)  # local CPU 1 is outside the cpuset {0}
    assert (copy.numa_node, copy.pinned_local) == (1, False)


def test_copy_of_a_gpu_without_a_numa_node_is_not_called_pinned(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """numa_node -1 (NUMA off, no _PXM): the kernel gives the device every CPU as its
    local_cpulist, so a thread "pinned" there is pinned nowhere in particular."""
    import shutil  # noqa: PLC0415

    root = tmp_path / "sysfs"
    shutil.copytree(FIXTURES / "sysfs", root, symlinks=True)
    device = root / "bus/pci/devices/0000:43:00.0"
    (device / "numa_node").write_text("-1\n")
    (device / "local_cpulist").write_text("0-3\n")
    torch = FakeTorch(cuda_uuids=[u[4:] for u in NVML_UUIDS])
    backend(monkeypatch, fake_nvml(), torch)  # the fake modules
    hw = RealBackend(sysfs_root=root, proc_root=FIXTURES / "proc")
    monkeypatch.setattr(real.os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    copy = hw.copy_bandwidth(1, 1 << 20)
    assert (copy.numa_node, copy.pinned_local) == (None, False)


def test_simulated_gpus_without_a_numa_node_are_reported_unpinned() -> None:
    report = probe(Path("profiles/faults/numa-off-two-socket.yaml").resolve())
    result = report.result("pcie_link")
    assert result is not None
    assert isinstance(result.observed, dict)
    assert result.observed["unpinned"] == [0, 1, 2, 3, 4, 5, 6, 7]


def test_two_socket_trap_is_pinned_and_the_far_socket_would_fail() -> None:
    report = probe(Path("profiles/h100-sxm-8gpu-two-socket.yaml").resolve())
    result = report.result("pcie_link")
    assert result is not None
    assert result.status is CheckStatus.PASS, result
    assert isinstance(result.observed, dict)
    assert result.observed["numaNode"] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert "unpinned" not in result.observed


# --- item 7: one bad GPU, and a hung one --------------------------------------------


def test_gpu_is_lost_at_enumeration_names_it_and_measures_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nvml = fake_nvml()

    def handle(index: int) -> int:
        if index == 1:
            raise FakeNVMLError(GPU_IS_LOST)
        return index

    nvml.nvmlDeviceGetHandleByIndex = handle  # type: ignore[attr-defined]
    hw = backend(monkeypatch, nvml, FakeTorch(cuda_uuids=[NVML_UUIDS[0][4:]]))
    assert [g.problem is None for g in hw.gpus()] == [True, False]
    monkeypatch.setattr(hw, "sleep", lambda _s: None)
    policy = ProbePolicy.model_validate(
        {"throttleReasons": {"sampleSeconds": 1, "warmupSeconds": 0}}
    )
    result = run_check(
        BY_NAME["throttle_reasons"], hw, policy, ProbeContext(), hardware_summary(hw)
    )
    assert result.status is CheckStatus.FAIL
    assert result.message.startswith("GPU 1 failed: NVML: NVML error 15")
    assert isinstance(result.observed, dict)
    assert result.observed["activeFraction"] == {"hw_slowdown": [1.0, 0.0]}  # GPU 0 measured
    pcie = run_check(BY_NAME["pcie_link"], hw, ProbePolicy(), ProbeContext(), hardware_summary(hw))
    assert pcie.status is CheckStatus.FAIL
    assert isinstance(pcie.observed, dict)
    assert pcie.observed["h2dGBps"][0] > 0
    assert pcie.observed["h2dGBps"][1] == 0
    assert "GPU 1 failed" in pcie.message


def test_gpu_lost_mid_sampling_is_failed_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = fake_nvml()

    def reasons(handle: int) -> int:
        if handle == 0:
            raise FakeNVMLError(GPU_IS_LOST)
        return 0

    nvml.nvmlDeviceGetCurrentClocksEventReasons = reasons  # type: ignore[attr-defined]
    hw = backend(monkeypatch, nvml, FakeTorch(cuda_uuids=[u[4:] for u in NVML_UUIDS]))
    with pytest.raises(GpuFailedError) as info:
        hw.clock_event_reasons(0)
    assert (info.value.gpu, info.value.step) == (0, "clock event reasons")
    assert hw.clock_event_reasons(1) == 0


def test_a_hung_copy_names_the_gpu_and_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(real, "COPY_DEADLINE_S", 0.2)
    torch = FakeTorch(cuda_uuids=[u[4:] for u in NVML_UUIDS], hung=frozenset({1}))
    hw = backend(monkeypatch, fake_nvml(), torch)
    result = run_check(
        BY_NAME["pcie_link"], hw, ProbePolicy(), ProbeContext(), hardware_summary(hw)
    )
    assert result.status is CheckStatus.FAIL
    assert "GPU 1 failed: copy warm-up: hung: no completion within 0.2 s" in result.message
    assert isinstance(result.observed, dict)
    assert result.observed["h2dGBps"][0] > 0  # GPU 0 still measured


def test_a_hung_load_thread_names_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(real, "LOAD_STOP_DEADLINE_S", 0.2)
    monkeypatch.setattr(real, "LOAD_RAMP_S", 0.0)
    torch = FakeTorch(cuda_uuids=[u[4:] for u in NVML_UUIDS], hung=frozenset({0}))
    hw = backend(monkeypatch, fake_nvml(), torch)
    with pytest.raises(GpuHungError) as info, hw.gpu_load():
        pass
    torch.never.set()  # let the stuck thread end
    assert (info.value.gpu, info.value.step) == (0, "load")
    assert hw.gpus()[0].problem == "load: hung: no completion within 0.2 s"  # later steps skip it
    hw = backend(monkeypatch, fake_nvml(), torch)
    monkeypatch.setattr(hw, "sleep", lambda _s: None)
    torch.never.clear()
    policy = ProbePolicy.model_validate(
        {"throttleReasons": {"sampleSeconds": 1, "warmupSeconds": 0}}
    )
    result = run_check(
        BY_NAME["throttle_reasons"], hw, policy, ProbeContext(), hardware_summary(hw)
    )
    torch.never.set()
    assert result.status is CheckStatus.FAIL
    assert result.message.startswith("GPU 0 failed: load: hung: no completion within 0.2 s")


def test_simulated_gpu_lost_under_load_names_it_everywhere() -> None:
    report = probe(Path(LOST_LOG).resolve())
    pcie, throttle, nccl = (
        report.result(c) for c in ("pcie_link", "throttle_reasons", "nccl_allreduce")
    )
    assert pcie is not None
    assert throttle is not None
    assert nccl is not None
    assert pcie.status is CheckStatus.FAIL
    assert pcie.message.startswith("GPU 3 failed: copy")
    assert isinstance(pcie.observed, dict)
    assert pcie.observed["h2dGBps"][4] > 0
    assert throttle.status is CheckStatus.FAIL
    assert throttle.message.startswith("GPU 3 failed: clock event reasons")
    assert nccl.status is CheckStatus.ERROR
    assert "GPU 3: all-reduce" in nccl.message


def test_simulated_hung_gpu_is_named_with_its_step_in_the_report() -> None:
    report = probe(Path(HANG_LOG).resolve())
    pcie, throttle, nccl = (
        report.result(c) for c in ("pcie_link", "throttle_reasons", "nccl_allreduce")
    )
    assert pcie is not None
    assert throttle is not None
    assert nccl is not None
    assert pcie.message.startswith("GPU 5 failed: copy warm-up: hung: no completion within 60 s")
    assert throttle.message.startswith("GPU 5 failed: load: hung")
    assert isinstance(throttle.observed, dict)
    assert throttle.observed["smClockMHz"][0] == 1980  # the others still sampled
    assert nccl.status is CheckStatus.ERROR
    assert "GPU 5: all-reduce: not attempted" in nccl.message


def test_no_later_step_waits_on_a_gpu_that_hung(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(real, "COPY_DEADLINE_S", 0.2)
    monkeypatch.setattr(real, "COPY_THREAD_MARGIN_S", 0.0)
    torch = FakeTorch(cuda_uuids=[u[4:] for u in NVML_UUIDS], hung=frozenset({1}))
    hw = backend(monkeypatch, fake_nvml(), torch)
    with pytest.raises(GpuHungError):
        hw.copy_bandwidth(1, 1 << 20)
    with pytest.raises(GpuFailedError, match="GPU 1: all-reduce: not attempted"):
        hw.allreduce([1 << 20], iterations=1, warmup=0)
