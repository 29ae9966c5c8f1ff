"""The all-reduce bandwidth benchmark (torch.distributed), NCCL or gloo.

One process per rank, started with ``torch.multiprocessing`` (spawn) and
rendezvousing through a file store in a private temporary directory (no TCP
port to pick). Each rank warms up, then times ``iterations`` all-reduces of
each message size as nccl-tests' ``src/common.cu`` (``BenchTime``) does: a
barrier, the host clock started, the batch launched back to back, the host
clock stopped once the device has completed them (``torch.cuda.synchronize``),
the time divided by the iterations, and that time **averaged across ranks**
(``Allreduce(args, &deltaSec, average)``). As nccl-tests defines them::

    algbw = bytes / time
    busbw = algbw * 2 (n - 1) / n

The same code runs with gloo on CPU processes (the tests run it for real with
2 and 4 ranks) and with NCCL on GPUs.

torch is imported only inside the functions here.
"""

import inspect
import json
import os
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

from gpuaccept.probe.hardware.base import AllreduceMeasurement

Backend = Literal["nccl", "gloo"]
FLOAT_BYTES = 4


class AllreduceError(RuntimeError):
    pass


def rank_mean_seconds(per_rank: list[list[float]], size_index: int) -> float:
    """nccl-tests' figure for one size: the mean over ranks of each rank's time
    per iteration (not the slowest rank's)."""
    times = [float(times[size_index]) for times in per_rank]
    return sum(times) / len(times)


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: ``algbw × 2(n−1)/n``."""  # noqa: RUF002
    return algbw * 2 * (ranks - 1) / ranks


@dataclass(frozen=True)
class AllreduceTiming:
    """How each message size is timed: untimed warm-up rounds, then timed rounds,
    all within ``timeout_s``."""

    iterations: int = 20
    warmup: int = 5
    timeout_s: float = 300.0


@dataclass(frozen=True)
class _Job:
    world: int
    backend: Backend
    store_dir: str
    sizes: list[int]
    timing: AllreduceTiming
    # CUDA device ordinal of each rank (NCCL); ranks map to the GPUs the backend chose
    devices: tuple[int, ...] = ()


def _worker(rank: int, job: _Job) -> None:
    import torch  # noqa: PLC0415 - torch only where it is used
    import torch.distributed as dist  # noqa: PLC0415

    world, backend, store_dir = job.world, job.backend, job.store_dir
    sizes, iterations, warmup = job.sizes, job.timing.iterations, job.timing.warmup
    timeout_s = job.timing.timeout_s

    if backend == "gloo":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    device = torch.device("cpu")
    if backend == "nccl":
        ordinal = job.devices[rank] if job.devices else rank
        torch.cuda.set_device(ordinal)
        device = torch.device("cuda", ordinal)
    init: dict[str, object] = {}
    if backend == "nccl" and "device_id" in inspect.signature(dist.init_process_group).parameters:
        init["device_id"] = device  # binds the communicator to this GPU (torch >= 2.3)
    dist.init_process_group(
        backend,
        init_method=f"file://{store_dir}/store",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=timeout_s),
        **init,  # type: ignore[arg-type]
    )
    try:
        check = torch.ones(1024, dtype=torch.float32, device=device)
        dist.all_reduce(check)
        if float(check[0].item()) != float(world):
            raise AllreduceError(f"rank {rank}: all-reduce returned {check[0].item()}, not {world}")
        times: list[float] = []
        for size in sizes:
            tensor = torch.zeros(max(1, size // FLOAT_BYTES), dtype=torch.float32, device=device)
            for _ in range(warmup):
                dist.all_reduce(tensor)
            if backend == "nccl":
                torch.cuda.synchronize(device)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iterations):
                dist.all_reduce(tensor)
            if backend == "nccl":
                torch.cuda.synchronize(device)  # nccl-tests' completeColl
            times.append((time.perf_counter() - t0) / iterations)
            del tensor
        Path(store_dir, f"rank{rank}.json").write_text(json.dumps(times))
    finally:
        dist.destroy_process_group()


def run_allreduce(
    ranks: int,
    backend: Backend,
    sizes: list[int],
    timing: AllreduceTiming = AllreduceTiming(),
    devices: tuple[int, ...] = (),
) -> AllreduceMeasurement:
    """Run the benchmark with ``ranks`` processes; raises AllreduceError on failure."""
    if ranks < 1:
        raise AllreduceError("need at least one rank")
    if not sizes:
        raise AllreduceError("no message sizes")
    from torch.multiprocessing.spawn import (  # noqa: PLC0415
        ProcessExitedException,
        ProcessRaisedException,
        start_processes,
    )

    with tempfile.TemporaryDirectory(prefix="gpuaccept-allreduce-") as store_dir:
        args = (_Job(ranks, backend, store_dir, sizes, timing, devices),)
        timeout_s = timing.timeout_s
        context = start_processes(  # type: ignore[no-untyped-call]
            _worker, args=args, nprocs=ranks, join=False, start_method="spawn"
        )
        deadline = time.monotonic() + timeout_s
        try:
            while not context.join(timeout=0.2):
                if time.monotonic() > deadline:
                    raise AllreduceError(
                        f"all-reduce hung: not finished in {timeout_s:.0f} s "
                        f"(step: all-reduce over {ranks} GPUs, sizes up to {sizes[-1]} bytes)"
                    )
        except ProcessRaisedException as exc:
            last = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
            raise AllreduceError(f"all-reduce worker failed: {last}") from exc
        except ProcessExitedException as exc:
            raise AllreduceError(f"all-reduce worker exited: {exc}") from exc
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.terminate()
        per_rank = [
            json.loads(Path(store_dir, f"rank{rank}.json").read_text()) for rank in range(ranks)
        ]
    sweep = []
    for i, size in enumerate(sizes):
        nbytes = max(1, size // FLOAT_BYTES) * FLOAT_BYTES
        seconds = rank_mean_seconds(per_rank, i)
        algbw = nbytes / seconds / 1e9 if seconds > 0 else 0.0
        sweep.append((nbytes, seconds, algbw, bus_bandwidth(algbw, ranks)))
    return AllreduceMeasurement(backend=backend, ranks=ranks, sweep=tuple(sweep))
