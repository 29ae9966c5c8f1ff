"""One rank of the two-node fabric all-reduce, as its own process (imports torch).

:func:`gpuaccept.probe.fabric_run.run_fabric` starts one per local GPU as
``python -m gpuaccept.probe.fabric_rank OUT_DIR LOCAL_RANK``; the job is
``OUT_DIR/job.json``. The rank leaves its phase (``phase<local rank>``), its
error (``error<local rank>``) and, on local rank 0, the times averaged over
every rank of both nodes (``times.json``) in ``OUT_DIR``.
"""

import json
import socket
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import PrefixStore, ProcessGroupGloo, Store, TCPStore

from gpuaccept.probe.fabric_run import (
    JOB_FILE,
    PHASE_ALLREDUCE,
    PHASE_RENDEZVOUS,
    TIMES_FILE,
    FabricJob,
)
from gpuaccept.probe.hardware.allreduce import FLOAT_BYTES


def _listening_socket(address: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    sock.listen(128)
    return sock


def _hold(seconds: float, started: float) -> None:
    left = seconds - (time.perf_counter() - started)
    if left > 0:
        time.sleep(left)


def _timed_sweep(
    job: FabricJob,
    allreduce: Callable[[torch.Tensor], None],
    barrier: Callable[[], None],
    device: torch.device,
) -> list[float]:
    world = job.rendezvous.world
    times: list[float] = []
    for size in job.sizes:
        elements = max(1, size // FLOAT_BYTES)
        tensor = torch.zeros(elements, dtype=torch.float32, device=device)
        bus_bytes = elements * FLOAT_BYTES * 2 * (world - 1) / world
        hold_s = bus_bytes / (job.hold_gbps * 1e9) if job.hold_gbps else 0.0
        for _ in range(job.timing.warmup):
            started = time.perf_counter()
            allreduce(tensor)
            _hold(hold_s, started)
        if job.backend == "nccl":
            torch.cuda.synchronize(device)
        barrier()
        t0 = time.perf_counter()
        for _ in range(job.timing.iterations):
            started = time.perf_counter()
            allreduce(tensor)
            _hold(hold_s, started)
        if job.backend == "nccl":
            torch.cuda.synchronize(device)  # nccl-tests' completeColl
        if hold_s:
            barrier()  # the slowest node's last hold counts on every rank
        times.append((time.perf_counter() - t0) / job.timing.iterations)
        del tensor
    return times


Collectives = tuple[Callable[[torch.Tensor], None], Callable[[], None], torch.device]
"""An all-reduce, a barrier, and the device their tensors live on."""


def _nccl(job: FabricJob, local_rank: int, rank: int, store: Store) -> Collectives:
    ordinal = job.devices[local_rank] if job.devices else local_rank
    torch.cuda.set_device(ordinal)
    device = torch.device("cuda", ordinal)
    dist.init_process_group(
        "nccl",
        store=store,
        rank=rank,
        world_size=job.rendezvous.world,
        timeout=timedelta(seconds=job.timing.timeout_s),
        device_id=device,
    )

    def allreduce(tensor: torch.Tensor) -> None:
        dist.all_reduce(tensor)

    def barrier() -> None:
        dist.barrier()

    return allreduce, barrier, device


def _gloo(job: FabricJob, rank: int, store: Store) -> Collectives:
    """A gloo group whose pairs listen on the bind address only (init_process_group
    would pick the address the hostname resolves to)."""
    rdv = job.rendezvous
    # the stubs lack ProcessGroupGloo's (store, rank, size, options) constructor
    gloo: Any = ProcessGroupGloo
    options = gloo._Options()
    device = (
        gloo.create_device(hostname=rdv.bind_address)
        if rdv.bind_address
        else gloo.create_default_device()
    )
    options._devices = [device]
    options._timeout = timedelta(seconds=job.timing.timeout_s)
    group = gloo(PrefixStore("fabric", store), rank, rdv.world, options)

    def allreduce(tensor: torch.Tensor) -> None:
        group.allreduce([tensor]).wait()

    def barrier() -> None:
        group.barrier().wait()

    return allreduce, barrier, torch.device("cpu")


def _run_rank(local_rank: int, job: FabricJob, out: Path) -> None:
    rdv = job.rendezvous
    rank = rdv.node_rank * rdv.local_ranks + local_rank
    is_master = rank == 0
    listener = (
        _listening_socket(rdv.bind_address, rdv.port) if is_master and rdv.bind_address else None
    )
    store = TCPStore(
        rdv.address,
        rdv.port,
        world_size=rdv.world,
        is_master=is_master,
        timeout=timedelta(seconds=rdv.timeout_s),
        wait_for_workers=True,
        master_listen_fd=listener.fileno() if listener else None,
    )
    # The pair's keys live under its nonce: a peer without it never sees or writes them.
    pair: Store = PrefixStore(f"pair/{rdv.nonce}", store) if rdv.nonce else store
    # every rank of both nodes reached the store: from here on a failure is the pair's
    pair.set(f"arrived/{rank}", "1")
    pair.wait([f"arrived/{r}" for r in range(rdv.world)], timedelta(seconds=rdv.timeout_s))
    (out / f"phase{local_rank}").write_text(PHASE_ALLREDUCE)
    if job.backend == "nccl":
        allreduce, barrier, device = _nccl(job, local_rank, rank, pair)
    else:
        allreduce, barrier, device = _gloo(job, rank, pair)
    try:
        check = torch.ones(1024, dtype=torch.float32, device=device)
        allreduce(check)
        if float(check[0].item()) != float(rdv.world):
            raise RuntimeError(f"all-reduce returned {check[0].item()}, not {rdv.world}")
        times = _timed_sweep(job, allreduce, barrier, device)
        total = torch.tensor(times, dtype=torch.float64, device=device)
        allreduce(total)
        if local_rank == 0:
            mean = [float(t) / rdv.world for t in total.tolist()]
            (out / TIMES_FILE).write_text(json.dumps(mean))
    finally:
        if job.backend == "nccl":
            dist.destroy_process_group()
        if listener is not None:
            listener.close()


def main(argv: list[str]) -> int:
    out, local_rank = Path(argv[0]), int(argv[1])
    (out / f"phase{local_rank}").write_text(PHASE_RENDEZVOUS)
    try:
        _run_rank(local_rank, FabricJob.from_json((out / JOB_FILE).read_text()), out)
    except Exception as exc:
        (out / f"error{local_rank}").write_text(f"{type(exc).__name__}: {exc}".strip())
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
