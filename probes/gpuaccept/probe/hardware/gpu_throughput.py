"""The torch side of the per-GPU throughput measurements of the real backend:
the matmul step the load loop runs, its timer (CUDA events around each batch),
and the STREAM triad.

Timing against host stalls (8 load threads share the GIL and the pod's CPU limit):
a CUDA event pair measures GPU time between two points of a stream, so it counts
any time the GPU sat idle waiting for the host to enqueue the next kernel. Each
timed interval therefore starts with work already queued (a matmul batch's first
event is recorded after its first matmul), and each figure is a robust statistic
of many short intervals instead of one long one: the median batch for the
matmuls (a sustained figure under load, as the throttle check samples it), the
fastest triad for memory bandwidth (:func:`triad_gbps`).

Each function takes the ``torch`` module it is given (the real backend imports
it lazily), so that tests can hand it a fake.
"""

import statistics
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


PROBE_MATRIX = 16  # the smallest _scaled_mm: every dimension a multiple of 16


def check_precision(torch: Any, ordinals: list[int], precision: MatmulPrecision) -> None:
    """Raise :class:`Unavailable` when a GPU or this torch cannot run ``precision``:
    no ``_scaled_mm``, compute capability below 8.9, or one tiny ``_scaled_mm`` that
    fails on a GPU (cuBLASLt answering NOT_SUPPORTED for this torch, CUDA and driver
    is a software limit, not a faulty GPU)."""
    if precision == "bf16":
        return
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        raise Unavailable(f"torch {torch.__version__} has no fp8 matmul (_scaled_mm)")
    for ordinal in ordinals:
        capability = tuple(torch.cuda.get_device_capability(ordinal))
        if capability < FP8_CAPABILITY:
            major, minor = capability
            raise Unavailable(f"compute capability {major}.{minor} < 8.9: no fp8 tensor cores")
    for ordinal in ordinals:
        device = torch.device("cuda", ordinal)
        n = PROBE_MATRIX
        try:
            with torch.cuda.device(device):
                a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
                b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()
                scale = torch.tensor(1.0, device=device)
                torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
                torch.cuda.synchronize(device)
        except RuntimeError as exc:  # torch raises CUDA and cuBLAS errors as RuntimeError
            failure = f"{type(exc).__name__}: {exc}"
            raise Unavailable(f"a 16x16 fp8 _scaled_mm failed: {failure}") from exc


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
                done = [(m, s) for m, s in self.batches.get(gpu, []) if s > 0]
                error = self.errors.get(gpu)
                if error is not None:  # its figure would not be the GPU's
                    failed[gpu] = f"load: {type(error).__name__}: {error}"
                    continue
                if done:  # the median batch: a host stall slows some batches, not most
                    rates = [flop * m / s / 1e12 for m, s in done]
                    values[gpu] = round(statistics.median(rates), 1)
                else:
                    failed[gpu] = f"load: no timed matmul within {self.deadline_s:g} s"
        return PerGpuFigures(values, failed)


def timed_batches(
    torch: Any, device: Any, step: Callable[[], None], timer: MatmulTimer, gpu: int
) -> None:
    """The load loop of one GPU: batches of :data:`BATCH` matmuls until ``timer.stop``, each
    between two CUDA events; a batch that began after ``timer.start()`` is counted.

    Each batch's first event is recorded after one untimed matmul: after the
    synchronize that ends a batch the GPU is idle, and an event recorded on an idle
    GPU completes at once, so the time the host takes to enqueue the first matmul
    (a thread waiting for the GIL or for the pod's CPU quota) would count as GPU
    time. With one matmul (~1.5 ms) queued ahead, the host enqueues the rest while
    the GPU is busy."""
    with torch.cuda.device(device):
        while not timer.stop.is_set():
            counted = timer.started.is_set()
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            step()  # keeps the GPU's queue non-empty while the timed batch is enqueued
            begin.record()
            for _ in range(BATCH):
                step()
            end.record()
            torch.cuda.synchronize(device)
            if counted:
                timer.add(gpu, BATCH, begin.elapsed_time(end) / 1000.0)


class TriadTimingError(Exception):
    """The triad's CUDA events gave no positive time: no figure for this GPU."""


def triad_gbps(torch: Any, device: Any, nbytes: int, iterations: int, warmup: int) -> float:
    """STREAM triad ``a = b + s·c`` (float32) on ``device``: GB/s of the fastest of
    ``iterations`` triads, each between its own two CUDA events, counting 3 x
    ``nbytes`` per triad (two arrays read, one written).

    The fastest, as STREAM ("best rate") and BabelStream (its reported bandwidth)
    take it: the triad's time on the GPU is set by the HBM; anything else (a host
    stall that leaves the GPU idle between one triad's events, another process's
    kernel) only adds time, so the minimum is the least disturbed measurement, and
    it is the figure published STREAM and BabelStream results are comparable with.
    A GPU whose HBM is slow is slow in every triad, the fastest included. Raises
    :class:`TriadTimingError` when no triad has a positive time."""
    count = nbytes // 4
    with torch.cuda.device(device):
        a = torch.empty(count, device=device, dtype=torch.float32)
        b = torch.full((count,), 1.0, device=device, dtype=torch.float32)
        c = torch.full((count,), 2.0, device=device, dtype=torch.float32)
        for _ in range(warmup):
            torch.add(b, c, alpha=0.4, out=a)
        events = []
        for _ in range(iterations):
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            torch.add(b, c, alpha=0.4, out=a)
            end.record()
            events.append((begin, end))
        torch.cuda.synchronize(device)
        times = [float(begin.elapsed_time(end)) / 1000.0 for begin, end in events]
        del a, b, c
    positive = [t for t in times if t > 0]
    if not positive:
        raise TriadTimingError(f"no triad of {iterations} had a positive CUDA event time")
    return round(3 * count * 4 / min(positive) / 1e9, 1)
