"""The two-node fabric all-reduce: one node's rank group (docs/fabric.md).

Each node of a pair runs ``gpuaccept probe fabric``; this module starts its
local ranks (one process per GPU with NCCL; gloo processes in tests and on
simulated nodes), meets the partner's through a ``torch.distributed`` TCPStore
at the rendezvous address (the rank-0 pod's IP), and times a sweep of
all-reduces as :mod:`gpuaccept.probe.hardware.allreduce` does, with every rank of both
nodes: per rank the host clock over a batch, divided by the iterations; then the
times are averaged over all ranks with one more all-reduce, so both nodes report
the same figure (nccl-tests' ``Allreduce(deltaSec, average)``).

The parent process never imports torch: it starts each rank as its own
``python -m gpuaccept.probe.fabric_rank`` process, waits for them up to a
deadline, and stops them when the deadline passes, so a partner that never comes
cannot hang the pod.
Each rank leaves a phase marker (``rendezvous``, then ``allreduce``) so that a
failure says how far it got: pods that never met are evidence against neither
node.

The rendezvous port is open to anyone who can reach the pod's IP, and a TCPStore
has no authentication. The pair's nonce (the operator's, in both pods' spec) is the
prefix of every key the ranks and their process group use: a peer without it can
connect but never sees or writes the pair's keys, so it cannot take a rank's place or
read where the ranks' transports listen; the pair then fails at the rendezvous, which
is evidence against neither node.

A rank bound to an address (``bind_address``, the pod's IP) listens there and
nowhere else: the rank-0 store on ``bind_address:port`` (its socket is bound
here and handed to the TCPStore) and gloo's pairs on ``bind_address``. The kubelet
stand-in gives each pod its own 127.0.0.x, so pairs on one machine do not meet
each other's ports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuaccept.checks.fabric_allreduce import SOCKET_TRANSPORT, FabricRunStep, parse_nccl_transport
from gpuaccept.probe.hardware.allreduce import FLOAT_BYTES, AllreduceTiming, Backend, bus_bandwidth

PHASE_RENDEZVOUS: FabricRunStep = "rendezvous"
PHASE_ALLREDUCE: FabricRunStep = "allreduce"
STOP_GRACE_S = 5.0


class FabricError(RuntimeError):
    """The fabric all-reduce did not complete; ``phase`` says how far it got."""

    def __init__(self, message: str, phase: FabricRunStep) -> None:
        super().__init__(message)
        self.phase = phase


@dataclass(frozen=True)
class Rendezvous:
    """Where the ranks of the pair meet, and which node this is."""

    address: str
    port: int
    nodes: int
    node_rank: int
    local_ranks: int
    bind_address: str | None = None
    timeout_s: float = 300.0
    """How long to wait for every rank of both nodes to reach the store."""
    nonce: str = ""
    """The pair's secret (env GPUACCEPT_FABRIC_NONCE): every key of the pair lives under
    it in the store, so a peer without it reaches the port but never the pair."""

    @property
    def world(self) -> int:
        return self.nodes * self.local_ranks

    @property
    def endpoint(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class FabricJob:
    rendezvous: Rendezvous
    backend: Backend
    sizes: tuple[int, ...]
    timing: AllreduceTiming = field(default_factory=AllreduceTiming)
    hold_gbps: float | None = None
    """Simulated nodes: hold each all-reduce of b bytes on this node's ranks to at
    least b x 2(n-1)/n / (hold_gbps x 1e9) s, a NIC of that busbw."""
    devices: tuple[int, ...] = field(default=())
    """CUDA ordinal of each local rank (NCCL); default 0..local_ranks-1."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> FabricJob:
        data: dict[str, Any] = json.loads(text)
        return cls(
            rendezvous=Rendezvous(**data["rendezvous"]),
            backend=data["backend"],
            sizes=tuple(data["sizes"]),
            timing=AllreduceTiming(**data["timing"]),
            hold_gbps=data["hold_gbps"],
            devices=tuple(data["devices"]),
        )


@dataclass(frozen=True)
class FabricMeasurement:
    backend: str
    ranks: int
    sweep: tuple[tuple[int, float, float, float], ...]
    """(bytes, seconds per all-reduce averaged over every rank, algbw GB/s, busbw GB/s)"""
    transport: str | None = None  # the network transport NCCL's debug output names

    @property
    def busbw_gbps(self) -> float:
        return self.sweep[-1][3] if self.sweep else 0.0

    @property
    def algbw_gbps(self) -> float:
        return self.sweep[-1][2] if self.sweep else 0.0


def _phase(out: Path, ranks: int) -> FabricRunStep:
    """How far the ranks got: ``allreduce`` once any rank met the partner."""
    for local_rank in range(ranks):
        marker = out / f"phase{local_rank}"
        if marker.exists() and marker.read_text() == PHASE_ALLREDUCE:
            return PHASE_ALLREDUCE
    return PHASE_RENDEZVOUS


def _first_error(out: Path, ranks: int) -> str | None:
    for local_rank in range(ranks):
        error = out / f"error{local_rank}"
        if error.exists():
            lines = error.read_text().strip().splitlines()
            return lines[0] if lines else None
    return None


JOB_FILE = "job.json"
TIMES_FILE = "times.json"


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait(processes: list[subprocess.Popen[bytes]], deadline_s: float) -> bool:
    """Wait for every rank to exit (or one to fail), then stop them all; True when the
    deadline passed first."""
    stop_at = time.monotonic() + deadline_s
    try:
        while any(p.poll() is None for p in processes):
            if any(p.poll() not in (None, 0) for p in processes):
                return False
            if time.monotonic() > stop_at:
                return True
            time.sleep(0.1)
        return False
    finally:
        _stop(processes)


def _failure(
    job: FabricJob, out: Path, processes: list[subprocess.Popen[bytes]], timeout_s: float | None
) -> FabricError | None:
    """The run's failure (a rank's error, a rank's exit code, or the deadline: the
    timeout then, else None), naming the step it failed in; None when it succeeded."""
    rdv = job.rendezvous
    phase = _phase(out, rdv.local_ranks)
    error = _first_error(out, rdv.local_ranks)
    if timeout_s is None and error is None and all(p.returncode == 0 for p in processes):
        return None
    where = f"with {rdv.endpoint}" if rdv.node_rank else f"at {rdv.endpoint}"
    step = "meeting the partner" if phase == PHASE_RENDEZVOUS else "the all-reduce"
    cause = error or f"a rank exited with {[p.returncode for p in processes]}"
    if timeout_s is not None:
        cause = f"not finished in {timeout_s:.0f} s"
    return FabricError(f"fabric all-reduce {where} failed in {step}: {cause}", phase)


def run_fabric(job: FabricJob, deadline_s: float) -> FabricMeasurement:
    """Run this node's ranks; raises :class:`FabricError` on failure or at the deadline."""
    rdv = job.rendezvous
    if not job.sizes:
        raise FabricError("no message sizes", PHASE_RENDEZVOUS)
    with tempfile.TemporaryDirectory(prefix="gpuaccept-fabric-") as out_dir:
        out = Path(out_dir)
        (out / JOB_FILE).write_text(job.to_json())
        command = [sys.executable, "-m", "gpuaccept.probe.fabric_rank", out_dir]
        env = nccl_debug_env(os.environ, out) if job.backend == "nccl" else None
        processes = [
            subprocess.Popen([*command, str(local_rank)], stdin=subprocess.DEVNULL, env=env)
            for local_rank in range(rdv.local_ranks)
        ]
        timed_out = _wait(processes, deadline_s)
        failure = _failure(job, out, processes, deadline_s if timed_out else None)
        if failure is not None:
            raise failure
        times: list[float] = json.loads((out / TIMES_FILE).read_text())
        transport = nccl_transport(out) if job.backend == "nccl" else None
    sweep = []
    for size, seconds in zip(job.sizes, times, strict=True):
        nbytes = max(1, size // FLOAT_BYTES) * FLOAT_BYTES
        algbw = nbytes / seconds / 1e9 if seconds > 0 else 0.0
        sweep.append((nbytes, seconds, algbw, bus_bandwidth(algbw, rdv.world)))
    return FabricMeasurement(
        backend=job.backend, ranks=rdv.world, sweep=tuple(sweep), transport=transport
    )


NCCL_LOG_PREFIX = "nccl-debug"


# NCCL_DEBUG levels that print INFO lines (NCCL user guide, Logging: VERSION < WARN <
# INFO < TRACE; NCCL compares them without case)
NCCL_DEBUG_AT_LEAST_INFO = frozenset({"INFO", "TRACE"})
NCCL_NET_SUBSYSTEM = "NET"


def nccl_debug_env(environ: Mapping[str, str], out: Path) -> dict[str, str]:
    """The ranks' environment with NCCL's INFO output on for its NET subsystem, written
    to files in ``out`` (NCCL_DEBUG_FILE, %h host, %p pid), so the transport NCCL chose
    can be read back. A platform's own settings are kept where they still print that
    line: a level below INFO is raised to INFO, NET is added to (or no longer excluded
    from) NCCL_DEBUG_SUBSYS, and the debug file is always the probe's own."""
    env = dict(environ)
    if env.get("NCCL_DEBUG", "").strip().upper() not in NCCL_DEBUG_AT_LEAST_INFO:
        env["NCCL_DEBUG"] = "INFO"
    env["NCCL_DEBUG_SUBSYS"] = _with_net(env.get("NCCL_DEBUG_SUBSYS"))
    env["NCCL_DEBUG_FILE"] = str(out / f"{NCCL_LOG_PREFIX}.%h.%p.log")
    return env


def _with_net(subsystems: str | None) -> str:
    """NCCL_DEBUG_SUBSYS that includes NET: a comma list, or ``^`` and the ones left out
    (NCCL user guide, Logging)."""
    if subsystems is None or not subsystems.strip():
        return f"INIT,{NCCL_NET_SUBSYSTEM}"
    names = [n.strip() for n in subsystems.strip().removeprefix("^").split(",") if n.strip()]
    if subsystems.strip().startswith("^"):
        kept = [n for n in names if n.upper() != NCCL_NET_SUBSYSTEM]
        return "^" + ",".join(kept) if kept else "ALL"
    if {n.upper() for n in names} & {"ALL", NCCL_NET_SUBSYSTEM}:
        return ",".join(names)
    return ",".join([*names, NCCL_NET_SUBSYSTEM])


def nccl_transport(out: Path) -> str | None:
    """The transport named in the ranks' NCCL debug files (Socket if any rank used it)."""
    found: list[str] = []
    for path in sorted(out.glob(f"{NCCL_LOG_PREFIX}.*.log")):
        name = parse_nccl_transport(path.read_text(errors="replace")[:1_000_000])
        if name is not None:
            found.append(name)
    if SOCKET_TRANSPORT in found:
        return SOCKET_TRANSPORT
    return found[0] if found else None
