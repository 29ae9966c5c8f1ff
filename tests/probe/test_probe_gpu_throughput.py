"""Per-GPU compute and memory bandwidth (issue 13 items 1, 2): the judges (table
tests, both observed forms), the simulated faults and traps, and the real
backend's measuring code against a fake torch whose CUDA events read a clock per
device that each kernel advances."""

import contextlib
import dataclasses
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from probe_scenarios import PROFILES, default_policy, fault, probe
from test_probe_real_backend import fake_nvml

from gpuaccept.checks import gpu_compute
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import BY_NAME
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.hardware import real
from gpuaccept.probe.hardware.gpu_throughput import MatmulTimer
from gpuaccept.probe.hardware.profile import ClockEventReasons, load_profile
from gpuaccept.probe.hardware.real import RealBackend
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.runner import RunSetup, hardware_summary, run_check, run_probe

SXM = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)
FLOP = 2 * 8192**3


def compute(
    bf16: list[float], fp8: list[float] | None = None, **extra: Any
) -> gpu_compute.GpuComputeObserved:
    return gpu_compute.GpuComputeObserved(bf16_tflops=bf16, fp8_tflops=fp8, **extra)


# --- gpu_compute judge ---------------------------------------------------------------


# --- gpu_memory_bandwidth judge --------------------------------------------------------


# --- simulated: faults and traps ---------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "check", "words"),
    [
        (fault("gpu-compute-slow"), "gpu_compute",
         "GPU 5: 519 TFLOPS bf16 at 1386 MHz, 30 % below the node median 742"),
        (fault("gpu-memory-bandwidth-degraded"), "gpu_memory_bandwidth",
         "GPU 2: 2412 GB/s triad, 20 % below the node median 3015"),
    ],
)  # fmt: skip
def test_faults_name_the_gpu(profile: Path, check: str, words: str) -> None:
    result = probe(profile).result(check)
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert words in result.message


@pytest.mark.parametrize(
    "name",
    [
        "h100-nvl-8gpu-throughput.yaml",
        "h200-sxm-8gpu-throughput.yaml",
        "h100-sxm-8gpu-throughput-spread.yaml",
    ],
)
def test_traps_pass_both_checks(name: str) -> None:
    report = probe(PROFILES / name)
    for check in ("gpu_compute", "gpu_memory_bandwidth"):
        result = report.result(check)
        assert result is not None
        assert result.status is CheckStatus.PASS, result.message


def test_a_thermal_reason_that_only_warns_still_fails_the_slow_gpu() -> None:
    """A badly seated heatsink: GPU 5 held by a sustained sw_thermal_slowdown (a warn
    reason by default) runs its matmuls 30 % slower: throttle_reasons warns, and the
    sibling rule fails the GPU."""
    profile = load_profile(fault("gpu-compute-slow"))
    gpus = profile.gpus
    slow = gpus.overrides[5].model_copy(
        update={
            "clock_event_reasons": ClockEventReasons.model_validate(
                {"idle": ["gpu_idle"], "load": ["sw_thermal_slowdown"]}
            )
        }
    )
    hot = profile.model_copy(
        update={"gpus": gpus.model_copy(update={"overrides": {**gpus.overrides, 5: slow}})}
    )
    report = probe(hot)
    throttle, compute = report.result("throttle_reasons"), report.result("gpu_compute")
    assert throttle is not None
    assert compute is not None
    assert throttle.status is CheckStatus.WARN, throttle.message
    assert compute.status is CheckStatus.FAIL
    assert "GPU 5: 519 TFLOPS bf16 at 1386 MHz, 30 % below the node median" in compute.message


def test_with_throttle_reasons_off_gpu_compute_runs_its_own_load() -> None:
    policy = default_policy().model_copy(
        update={"throttle_reasons": BY_NAME["throttle_reasons"].policy_model(enabled=False)}
    )
    hw = SimulatedBackend(load_profile(fault("gpu-compute-slow")))
    try:
        report = run_probe(hw, policy, RunSetup(node_name="n"))
    finally:
        hw.close()
    result = report.result("gpu_compute")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert "GPU 5: 519 TFLOPS bf16 at 1386 MHz" in result.message
    assert isinstance(result.observed, dict)
    assert result.observed["timedSeconds"] == 5.0  # ownLoadSeconds, not the throttle window


def test_a_model_without_figures_is_skipped_with_the_reason() -> None:
    profile = load_profile(PROFILES / "h100-sxm-8gpu-healthy.yaml")
    unknown = profile.model_copy(
        update={"gpus": profile.gpus.model_copy(update={"model": "NVIDIA A100-SXM4-80GB"})}
    )
    report = probe(unknown)
    result = report.result("gpu_compute")
    assert result is not None
    assert result.status is CheckStatus.SKIP  # no figures for an unknown model at all
    assert "no GPU timed a matmul" in result.message


# --- the real backend against a fake torch -------------------------------------------------


@dataclasses.dataclass
class ClockedTorch:
    """Just enough of torch: each device has a GPU clock in milliseconds that every
    kernel advances by its configured time; a CUDA event records the clock of the
    thread's current device, so ``elapsed_time`` is the GPU time of the kernels
    between two."""

    matmul_ms: list[float]
    fp8_ms: list[float]
    triad_ms: list[float]
    capability: tuple[int, int] = (9, 0)
    # host stalls the GPU waits out: device -> {its kernel number: idle ms before it}
    idle_before: dict[int, dict[int, float]] = dataclasses.field(default_factory=dict)
    # the first kernel after a synchronize finds the GPU idle for this long
    idle_after_sync_ms: float = 0.0
    # _scaled_mm raises RuntimeError(fp8_error) on matrices larger than fp8_error_above
    fp8_error: str | None = None
    fp8_error_above: int = 0

    def __post_init__(self) -> None:
        self.synced = [False] * len(self.matmul_ms)
        self.kernels = [0] * len(self.matmul_ms)
        self.clock = [0.0] * len(self.matmul_ms)
        self.scaled_mm_calls: list[dict[str, Any]] = []
        self.local = threading.local()  # CUDA's current device is per host thread

    def module(self) -> types.ModuleType:
        fake = self
        m = types.ModuleType("torch")
        m.__version__ = "fake"  # type: ignore[attr-defined]
        for name in ("bfloat16", "float32", "float8_e4m3fn", "uint8"):
            setattr(m, name, name)
        m.device = lambda _kind, ordinal: ordinal  # type: ignore[attr-defined]

        class Tensor:
            def __init__(
                self, device: int, dtype: Any, transposed: bool = False, rows: int = 0
            ) -> None:
                self.device, self.dtype, self.transposed = device, dtype, transposed
                self.rows = rows

            def to(self, dtype: Any) -> "Tensor":
                return Tensor(self.device, dtype, self.transposed, self.rows)

            def t(self) -> "Tensor":
                return Tensor(self.device, self.dtype, not self.transposed, self.rows)

        def make(*shape: Any, device: int = 0, dtype: Any = "float32", **_k: Any) -> Tensor:
            rows = shape[0] if shape and isinstance(shape[0], int) else 0
            return Tensor(device, dtype, rows=rows)

        def kernel(device: int, ms: float) -> None:
            """One kernel on ``device``: the idle time before it (a host stall), then its own."""
            idle = fake.idle_before.get(device, {}).get(fake.kernels[device], 0.0)
            if fake.synced[device]:
                idle += fake.idle_after_sync_ms
                fake.synced[device] = False
            fake.kernels[device] += 1
            fake.clock[device] += idle + ms

        def matmul(a: Tensor, _b: Tensor, out: Tensor) -> Tensor:
            kernel(a.device, fake.matmul_ms[a.device])
            return out

        def scaled_mm(a: Tensor, b: Tensor, **kwargs: Any) -> Tensor:
            fake.scaled_mm_calls.append({"a": a, "b": b, **kwargs})
            if fake.fp8_error is not None and a.rows > fake.fp8_error_above:
                raise RuntimeError(fake.fp8_error)
            kernel(a.device, fake.fp8_ms[a.device])
            return Tensor(a.device, kwargs["out_dtype"])

        def add(b: Tensor, _c: Tensor, alpha: float, out: Tensor) -> Tensor:
            kernel(b.device, fake.triad_ms[b.device])
            return out

        def synchronize(device: int) -> None:
            fake.synced[device] = True

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at = 0.0

            def record(self, _stream: Any = None) -> None:
                self.at = fake.clock[fake.local.device]

            def elapsed_time(self, end: "Event") -> float:
                return end.at - self.at

        @contextlib.contextmanager
        def on_device(ordinal: int) -> Iterator[None]:
            fake.local.device = ordinal
            yield

        m.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
            is_available=lambda: True,
            device_count=lambda: len(fake.clock),
            get_device_properties=lambda i: types.SimpleNamespace(uuid=str(i)),
            get_device_capability=lambda _i: fake.capability,
            device=on_device,
            Event=Event,
            synchronize=synchronize,
            empty_cache=lambda: None,
        )
        m.randn = make  # type: ignore[attr-defined]
        m.empty = make  # type: ignore[attr-defined]
        m.full = lambda shape, _v, **k: make(shape, **k)  # type: ignore[attr-defined]
        m.tensor = lambda _v, device=0: Tensor(device, "float32")  # type: ignore[attr-defined]
        m.matmul = matmul  # type: ignore[attr-defined]
        m._scaled_mm = scaled_mm  # type: ignore[attr-defined]
        m.add = add  # type: ignore[attr-defined]
        return m


def real_backend(monkeypatch: pytest.MonkeyPatch, torch: ClockedTorch) -> RealBackend:
    nvml = fake_nvml()
    nvml.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setitem(sys.modules, "torch", torch.module())
    monkeypatch.setattr(real, "LOAD_RAMP_S", 0.0)
    hw = RealBackend(sysfs_root=Path("tests/fixtures/sysfs"), proc_root=Path("tests/fixtures/proc"))
    monkeypatch.setattr(hw, "sleep", lambda _s: None)
    return hw


def run(hw: RealBackend, name: str, policy: ProbePolicy, context: ProbeContext) -> Any:
    return run_check(BY_NAME[name], hw, policy, context, hardware_summary(hw))


def test_real_tflops_from_the_throttle_loads_cuda_events(monkeypatch: pytest.MonkeyPatch) -> None:
    # the host takes 5 ms to enqueue the first matmul after each batch's synchronize
    # (the GIL, the pod's CPU quota): the GPU idles then, outside the timed batch
    torch = ClockedTorch(
        matmul_ms=[1.5, 1.55], fp8_ms=[0.8, 0.8], triad_ms=[1.0, 1.25], idle_after_sync_ms=5.0
    )
    hw = real_backend(monkeypatch, torch)
    policy = ProbePolicy.model_validate({"throttleReasons": {"sampleSeconds": 1}})
    context = ProbeContext()
    run(hw, "throttle_reasons", policy, context)
    assert context.matmul_load is not None
    assert context.matmul_load.tflops.values == pytest.approx(
        {0: FLOP / 1.5e-3 / 1e12, 1: FLOP / 1.55e-3 / 1e12},  # 733.0, 709.4: 2·8192³ per matmul
        abs=0.15,
    )
    assert context.matmul_load.sm_clock_mhz == {0: 1410, 1: 1410}
    result = run(hw, "gpu_compute", policy, context)
    assert result.status is CheckStatus.PASS, result.message
    assert result.observed["bf16Tflops"] == pytest.approx([733.0, 709.4], abs=0.15)
    assert result.observed["fp8Tflops"] == [1374.4, 1374.4]
    assert result.observed["smClockMHz"] == [1410, 1410]
    assert "the 2 GPUs 3 % apart" in result.message
    call = torch.scaled_mm_calls[0]  # what torch._scaled_mm requires
    assert (call["a"].transposed, call["b"].transposed) == (False, True)
    assert (call["a"].dtype, call["b"].dtype) == ("float8_e4m3fn", "float8_e4m3fn")
    assert call["scale_a"].dtype == call["scale_b"].dtype == "float32"
    assert call["out_dtype"] == "bfloat16"


def test_real_fp8_skipped_below_compute_capability_8_9(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = ClockedTorch([1.5, 1.5], [0.8, 0.8], [1.0, 1.0], capability=(8, 0))
    hw = real_backend(monkeypatch, torch)
    policy = ProbePolicy.model_validate({"throttleReasons": {"enabled": False}})
    result = run(hw, "gpu_compute", policy, ProbeContext())  # no throttle load: its own
    assert result.status is CheckStatus.PASS, result.message
    assert result.observed["bf16Tflops"] == [733.0, 733.0]
    assert result.observed["timedSeconds"] == 5.0
    assert "fp8Tflops" not in result.observed
    assert result.observed["fp8Skipped"] == "compute capability 8.0 < 8.9: no fp8 tensor cores"
    assert torch.scaled_mm_calls == []


def test_real_triad_counts_three_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = ClockedTorch([1.5, 1.5], [0.8, 0.8], triad_ms=[1.0, 1.02])
    hw = real_backend(monkeypatch, torch)
    policy = ProbePolicy.model_validate({"gpuMemoryBandwidth": {"iterations": 10}})
    result = run(hw, "gpu_memory_bandwidth", policy, ProbeContext())
    moved = 3 * (1 << 30)  # two arrays read, one written, per triad
    assert result.observed["gbps"] == [
        round(moved / 1e-3 / 1e9, 1),  # the fastest triad: 1 ms
        round(moved / 1.02e-3 / 1e9, 1),
    ]
    assert result.status is CheckStatus.PASS, result.message


def test_real_triad_takes_the_fastest_triad_not_one_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GPU 1's host thread stalls 20 ms before its 6th kernel (the 3rd timed triad): the
    # GPU idles inside that triad's events; the fastest triad is the HBM's figure
    torch = ClockedTorch([1.5, 1.5], [0.8, 0.8], triad_ms=[1.0, 1.0], idle_before={1: {5: 20.0}})
    hw = real_backend(monkeypatch, torch)
    policy = ProbePolicy.model_validate({"gpuMemoryBandwidth": {"iterations": 10}})
    result = run(hw, "gpu_memory_bandwidth", policy, ProbeContext())
    assert result.observed["gbps"][0] == result.observed["gbps"][1] == 3221.2
    assert result.status is CheckStatus.PASS, result.message


def test_real_triad_without_a_positive_time_fails_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = ClockedTorch([1.5, 1.5], [0.8, 0.8], triad_ms=[1.0, 0.0])
    hw = real_backend(monkeypatch, torch)
    result = run(hw, "gpu_memory_bandwidth", ProbePolicy(), ProbeContext())
    assert result.status is CheckStatus.FAIL
    assert result.observed["failedGpus"]["1"].startswith("triad: TriadTimingError")
    assert result.message.startswith("GPU 1 failed: triad: TriadTimingError")


def test_the_matmul_figure_is_the_median_batch() -> None:
    done = threading.Thread(target=lambda: None)
    done.start()
    done.join()
    timer = MatmulTimer(deadline_s=0.0, running={0: done})
    for seconds in (0.012, 0.0121, 0.060):  # one batch held up by a 48 ms host stall
        timer.add(0, 8, seconds)
    assert timer.figures().values == {0: round(FLOP * 8 / 0.0121 / 1e12, 1)}


@pytest.mark.parametrize("above", [0, 16])  # the 16x16 check fails; only the load's fail
def test_real_fp8_not_supported_everywhere_is_skipped_not_failed_gpus(
    monkeypatch: pytest.MonkeyPatch, above: int
) -> None:
    error = "CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmul"
    torch = ClockedTorch([1.5, 1.5], [0.8, 0.8], [1.0, 1.0], fp8_error=error, fp8_error_above=above)
    hw = real_backend(monkeypatch, torch)
    policy = ProbePolicy.model_validate({"throttleReasons": {"enabled": False}})
    result = run(hw, "gpu_compute", policy, ProbeContext())
    assert result.status is CheckStatus.PASS, result.message
    assert "failedGpus" not in result.observed
    assert "fp8Tflops" not in result.observed
    assert "CUBLAS_STATUS_NOT_SUPPORTED" in result.observed["fp8Skipped"]
