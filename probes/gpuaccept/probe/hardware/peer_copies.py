"""GPU-to-GPU peer copies with torch, and NVML's word on P2P between two GPUs.

What torch does (``aten/src/ATen/native/cuda/Copy.cu``): ``dst.copy_(src)`` between
two CUDA devices first enables peer access if CUDA allows it
(``at::cuda::get_p2p_access``: ``cudaDeviceCanAccessPeer``, then
``cudaDeviceEnablePeerAccess``, cached). A contiguous copy of one dtype is always a
``cudaMemcpyAsync`` (``cudaMemcpyPeerAsync`` under the cudaMallocAsync allocator
without peer access) on the **source device's current stream**: with peer access the
copy engines move the data over NVLink or PCIe directly, without it the driver stages
it through host memory. Around the copy torch records an event on the destination
device's current stream that the source stream waits on, and one after the copy that
the destination's current stream waits on.

So a copy is timed with CUDA events on the source device's current stream, and the two
directions at once need care: the direction b→a enqueued while a's current stream is
the a→b stream would wait for it (torch's barrier). Each direction therefore runs with
its own stream current on its source device and a spare, otherwise idle stream current
on its destination device, so the barriers tie each direction only to itself.
"""

import time
from typing import Any

from gpuaccept.probe.hardware.nvml_errors import (
    NVML_ERROR_GPU_IS_LOST,
    nvml_error_code,
    nvml_failure,
)

# nvmlGpuP2PCapsIndex_t: READ = 0, NVLINK = 2 (pynvml spells READ "= 0," -- a tuple)
P2P_CAPS_READ = 0
P2P_CAPS_NVLINK = 2
# nvmlGpuP2PStatus_t, 0-6 (pynvml: NVML_P2P_STATUS_OK ... NVML_P2P_STATUS_UNKNOWN)
P2P_STATUS_WORDS = (
    "ok",
    "chipset_not_supported",
    "gpu_not_supported",
    "ioh_topology_not_supported",
    "disabled_by_regkey",
    "not_supported",
    "unknown",
)
PEER_COPY_DEADLINE_S = 60.0  # 12 copies of 256 MiB: ~10 ms over NVLink, ~0.3 s staged
POLL_S = 0.001


class PeerCopyHungError(Exception):
    """The copies did not complete within their deadline."""


def _word(nvml: Any, first: Any, second: Any, index: int) -> str:
    status = int(nvml.nvmlDeviceGetP2PStatus(first, second, index))
    return P2P_STATUS_WORDS[status] if 0 <= status < len(P2P_STATUS_WORDS) else "unknown"


def read_p2p_status(nvml: Any, first: Any, second: Any, gpu: int) -> str:
    """``nvlink`` when NVML reports NVLink P2P between the two, else NVML's word for the
    read capability (``ok`` over PCIe, ``chipset_not_supported``, ...); ``unknown`` when
    NVML answers with an error (a lost GPU raises GpuFailedError naming ``gpu``)."""
    try:
        if _word(nvml, first, second, P2P_CAPS_NVLINK) == "ok":
            return "nvlink"
        return _word(nvml, first, second, P2P_CAPS_READ)
    except nvml.NVMLError as exc:
        if nvml_error_code(exc) == NVML_ERROR_GPU_IS_LOST:
            raise nvml_failure(gpu, "P2P status", exc) from exc
        return "unknown"


class PeerCopies:
    """Timed peer copies of ``nbytes`` between two CUDA devices (torch ordinals)."""

    def __init__(self, torch: Any, nbytes: int, deadline_s: float) -> None:
        self.torch = torch
        self.nbytes = nbytes
        self.deadline_s = deadline_s

    def _buffers(self, src: int, dst: int) -> tuple[Any, Any]:
        torch = self.torch
        a = torch.empty(self.nbytes, dtype=torch.uint8, device=torch.device("cuda", src))
        b = torch.empty(self.nbytes, dtype=torch.uint8, device=torch.device("cuda", dst))
        return a, b

    def _wait(self, event: Any) -> None:
        deadline = time.monotonic() + self.deadline_s
        while not event.query():
            if time.monotonic() > deadline:
                raise PeerCopyHungError
            time.sleep(POLL_S)
        event.synchronize()

    def _gbps(self, start: Any, end: Any, nbytes: int) -> float:
        self._wait(end)
        seconds = start.elapsed_time(end) / 1000.0
        return float(nbytes / seconds / 1e9) if seconds > 0 else 0.0

    def one_way(self, src: int, dst: int, iterations: int, warmup: int) -> float:
        """GB/s of ``iterations`` copies src → dst after ``warmup``."""
        torch = self.torch
        source, target = self._buffers(src, dst)
        stream = torch.cuda.Stream(device=torch.device("cuda", src))
        spare = torch.cuda.Stream(device=torch.device("cuda", dst))
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(spare), torch.cuda.stream(stream):
            for _ in range(warmup):
                target.copy_(source, non_blocking=True)
            start.record(stream)
            for _ in range(iterations):
                target.copy_(source, non_blocking=True)
            end.record(stream)
        return self._gbps(start, end, self.nbytes * iterations)

    def both_ways(self, first: int, second: int, iterations: int, warmup: int) -> float:
        """GB/s of both directions at once (summed), as peerBandwidthLatencyTest: the
        second stream waits on the first's start event, the first on the second's end."""
        torch = self.torch
        a_out, b_in = self._buffers(first, second)
        b_out, a_in = self._buffers(second, first)
        dev_a, dev_b = torch.device("cuda", first), torch.device("cuda", second)
        forward, spare_b = torch.cuda.Stream(device=dev_a), torch.cuda.Stream(device=dev_b)
        backward, spare_a = torch.cuda.Stream(device=dev_b), torch.cuda.Stream(device=dev_a)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        backward_done = torch.cuda.Event()

        def enqueue(count: int) -> None:
            for _ in range(count):
                with torch.cuda.stream(spare_b), torch.cuda.stream(forward):
                    b_in.copy_(a_out, non_blocking=True)
                with torch.cuda.stream(spare_a), torch.cuda.stream(backward):
                    a_in.copy_(b_out, non_blocking=True)

        enqueue(warmup)
        start.record(forward)
        backward.wait_event(start)
        enqueue(iterations)
        backward_done.record(backward)
        forward.wait_event(backward_done)
        end.record(forward)
        return self._gbps(start, end, 2 * self.nbytes * iterations)
