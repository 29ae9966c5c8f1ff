"""The torch side of the per-GPU throughput measurements of the real backend:
the matmul step the load loop runs, its timer (CUDA events around each batch),
and the STREAM triad.

Each function takes the ``torch`` module it is given (the real backend imports
it lazily), so that tests can hand it a fake.
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuaccept.probe.hardware.base import MatmulPrecision, PerGpuFigures, Unavailable

LOAD_MATRIX = 8192  # n: 2·n³ = 1.1 TFLOP a matmul, about 1.5 ms on an H100 in bf16
BATCH = 8  # matmuls between two CUDA events (one synchronize per batch)
MIN_TIMED_BATCHES = 3  # figures() waits for these on every loaded GPU
FP8_CAPABILITY = (8, 9)  # torch._scaled_mm: compute capability 8.9 (Ada) or later


def matmul_step(torch: Any, device: Any, precision: MatmulPrecision) -> Callable[[], None]:
    """One ``n x n x n`` matmul on ``device`` into a fixed output (the inputs stay
    random, so the power drawn is that of real data, and nothing overflows)."""
    n = LOAD_MATRIX
    if precision == "bf16":
        a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        out = torch.empty((n, n), device=device, dtype=torch.bfloat16)
        return lambda: torch.matmul(a, b, out=out)
    # fp8 e4m3 inputs (max 448: randn fits), the second column-major as _scaled_mm
    # requires, per-tensor float32 scales, bf16 output
    a8 = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
    b8 = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()
    scale = torch.tensor(1.0, device=device)
    return lambda: torch._scaled_mm(a8, b8, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)


def check_precision(torch: Any, ordinals: list[int], precision: MatmulPrecision) -> None:
    """Raise :class:`Unavailable` when a GPU or this torch cannot run ``precision``."""
    if precision == "bf16":
        return
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        raise Unavailable(f"torch {torch.__version__} has no fp8 matmul (_scaled_mm)")
    for ordinal in ordinals:
        capability = tuple(torch.cuda.get_device_capability(ordinal))
        if capability < FP8_CAPABILITY:
            major, minor = capability
            raise Unavailable(f"compute capability {major}.{minor} < 8.9: no fp8 tensor cores")


@dataclass
class MatmulTimer:
    """The real backend's :class:`~gpuaccept.probe.hardware.base.LoadTimer`: each load
    thread adds its counted batches; :meth:`figures` turns them into TFLOPS."""

    deadline_s: float  # how long figures() waits for a GPU's first counted batches
    matrix: int = LOAD_MATRIX
    started: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)  # the load's end
    # GPU -> per counted batch: (matmuls, GPU seconds between its two events)
    batches: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    running: dict[int, threading.Thread] = field(default_factory=dict)
    errors: dict[int, BaseException] = field(default_factory=dict)  # GPU -> why its loop ended
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        self.started.set()

    def add(self, gpu: int, matmuls: int, seconds: float) -> None:
        with self.lock:
            self.batches.setdefault(gpu, []).append((matmuls, seconds))

    def _counted(self, gpu: int) -> int:
        with self.lock:
            return len(self.batches.get(gpu, ()))

    def figures(self) -> PerGpuFigures:
        deadline = time.monotonic() + self.deadline_s
        waiting = set(self.running)
        while waiting and time.monotonic() < deadline:
            waiting = {
                gpu
                for gpu in waiting
                if self.running[gpu].is_alive() and self._counted(gpu) < MIN_TIMED_BATCHES
            }
            if waiting:
                time.sleep(0.01)
        values: dict[int, float] = {}
        failed: dict[int, str] = {}
        flop = 2 * self.matrix**3
        with self.lock:
            for gpu in self.running:
                done = self.batches.get(gpu, [])
                error = self.errors.get(gpu)
                if error is not None:  # its figure would not be the GPU's
                    failed[gpu] = f"load: {type(error).__name__}: {error}"
                    continue
                seconds = sum(s for _m, s in done)
                if done and seconds > 0:
                    values[gpu] = round(flop * sum(m for m, _s in done) / seconds / 1e12, 1)
                else:
                    failed[gpu] = f"load: no timed matmul within {self.deadline_s:g} s"
        return PerGpuFigures(values, failed)


def timed_batches(
    torch: Any, device: Any, step: Callable[[], None], timer: MatmulTimer, gpu: int
) -> None:
    """The load loop of one GPU: batches of :data:`BATCH` matmuls until ``timer.stop``, each
    between two CUDA events; a batch that began after ``timer.start()`` is counted."""
    with torch.cuda.device(device):
        while not timer.stop.is_set():
            counted = timer.started.is_set()
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(BATCH):
                step()
            end.record()
            torch.cuda.synchronize(device)
            if counted:
                timer.add(gpu, BATCH, begin.elapsed_time(end) / 1000.0)


def triad_gbps(torch: Any, device: Any, nbytes: int, iterations: int, warmup: int) -> float:
    """STREAM triad ``a = b + s·c`` (float32) on ``device``: GB/s over ``iterations``,
    counting 3 x ``nbytes`` per triad (two arrays read, one written)."""
    count = nbytes // 4
    with torch.cuda.device(device):
        a = torch.empty(count, device=device, dtype=torch.float32)
        b = torch.full((count,), 1.0, device=device, dtype=torch.float32)
        c = torch.full((count,), 2.0, device=device, dtype=torch.float32)
        for _ in range(warmup):
            torch.add(b, c, alpha=0.4, out=a)
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(iterations):
            torch.add(b, c, alpha=0.4, out=a)
        end.record()
        torch.cuda.synchronize(device)
        seconds = begin.elapsed_time(end) / 1000.0
        del a, b, c
    moved = 3 * count * 4 * iterations
    return round(moved / seconds / 1e9, 1) if seconds > 0 else 0.0
