"""The probe's time budget: the default suite on an 8-GPU node in at most 60 s
of wall time, process start, CUDA and NCCL initialisation included (issue 13).

:func:`suite_budget` gives one :class:`PhaseBudget` per phase of a probe run
under a policy: how many seconds it may take, how that figure is derived and
from what source. The figures that follow from the policy (the throttle load's
warm-up and window, the all-reduce sweep) are computed from it; the others are
estimates stated here. ``docs/probe.md``'s budget table is generated from this
function (``make docs``), a test holds the default policy's total to
:data:`SUITE_LIMIT_S`, and the simulated backend reports these seconds as each
check's ``durationS`` unless a profile states its own (``durations:``), so the
docs, the test and the simulation use one set of numbers.

No figure here was measured on a GPU (none was lent to this work); each row
says what it rests on.
"""

from dataclasses import dataclass

from gpuaccept.checks import (
    gpu_compute,
    gpu_memory_bandwidth,
    nccl_allreduce,
    peer_bandwidth,
    throttle_reasons,
)
from gpuaccept.checks.policy import ProbePolicy

SUITE_LIMIT_S = 60.0
BUDGET_GPUS = 8
START_PHASE = "start"
"""The phase before the first check (process start, imports, NVML init, the summary)."""

# What the probe's measuring code does, as the budget assumes it (a test ties each
# to the probe's own constant).
LOAD_RAMP_S = 0.5  # real backend: the load threads start before sampling begins
THROTTLE_SAMPLE_INTERVAL_S = 0.25  # measure/throttle_reasons.py
COPY_BYTES = 256 << 20  # measure/pcie_link.py: one pinned copy
COPY_WARMUP = 2  # real backend: untimed copies
COPY_REPETITIONS = 20  # real backend: timed copies per direction
SWEEP_STEPS = 5  # measure/nccl_allreduce.py: message sizes, each 8x the previous
SWEEP_FACTOR = 8

# Estimates (no GPU here): each is named in the row it feeds.
CUDA_CONTEXT_S = 0.4  # cuInit share and one primary context per GPU (lazy loading)
COPY_SETUP_S = 0.1  # per GPU: 256 MiB pinned host buffer, device buffer, copy thread
COPY_GBPS = 50.0  # pinned copy at Gen5 x16 (the default policy's minimum is 40 GB/s)
NVML_SAMPLE_S = 0.0005  # one NVML query (reasons, or SM clock)
RANK_START_S = 4.0  # spawn 8 interpreters that each import torch and gpuaccept
RANK_CUDA_S = 0.5  # each rank's CUDA context, in parallel
NCCL_INIT_S = 2.0  # ncclCommInitRank over 8 GPUs
RANK_TEARDOWN_S = 1.0  # destroy_process_group, the ranks' exit, the join
FALLBACK_BUSBW_GBPS = 320.0  # no minimum in the policy: the h100-sxm/h200-sxm default
FP8_WARMUP_S = 1.0  # measure/gpu_compute.py: OWN_WARMUP_S
TRIAD_SETUP_S = 0.5  # per GPU, in parallel: 3 arrays allocated and filled
PEER_SETUP_S = 0.02  # per ordered pair: buffers and CUDA events
FALLBACK_PEER_GBPS = 300.0  # no minimum in the policy: the h100-sxm/h200-sxm default
TRIAD_GBPS = 2000.0  # a low HBM3 triad rate, so the row is an upper bound

NOT_ON_GPU = "estimate, not measured on a GPU"


@dataclass(frozen=True)
class PhaseBudget:
    """One phase of a probe run: the check it belongs to (``start``/``end`` are
    outside every check), its seconds, how they are derived, and the source."""

    phase: str
    check: str
    seconds: float
    derivation: str
    source: str
    counts_in_wall: bool = True  # False: after the last check (not in the report's wallS)


END_PHASE = "end"
GPU_COMPUTE = "gpu_compute"
GPU_MEMORY_BANDWIDTH = "gpu_memory_bandwidth"
PEER_BANDWIDTH = "peer_bandwidth"


def sweep_bytes(max_bytes: int) -> list[int]:
    """The all-reduce sweep's message sizes (the probe's ``sweep_sizes``)."""
    sizes: list[int] = []
    size = max_bytes
    while len(sizes) < SWEEP_STEPS and size >= 1024:
        sizes.insert(0, size)
        size //= SWEEP_FACTOR
    return sizes


def slowest_passing_busbw(policy: ProbePolicy) -> float:
    """The lowest bus bandwidth the policy accepts (the slowest sweep that passes)."""
    section = policy.section(nccl_allreduce.SPEC)
    minimums = [v for v in section.min_busbw_gbps_by_model.values() if v > 0]
    if section.min_busbw_gbps:
        minimums.append(section.min_busbw_gbps)
    return min(minimums) if minimums else FALLBACK_BUSBW_GBPS


def _load_phase(policy: ProbePolicy, gpus: int) -> PhaseBudget:
    section = policy.section(throttle_reasons.SPEC)
    # each judged sample queries every GPU twice (reasons, SM clock), then sleeps
    per_sample = THROTTLE_SAMPLE_INTERVAL_S + 2 * gpus * NVML_SAMPLE_S
    window = section.sample_seconds * per_sample / THROTTLE_SAMPLE_INTERVAL_S
    stop = 0.5
    seconds = LOAD_RAMP_S + section.warmup_seconds + window + stop
    return PhaseBudget(
        "load: bf16 matmul on every GPU, clock event reasons sampled",
        "throttle_reasons",
        seconds,
        f"{LOAD_RAMP_S:g} s ramp + {section.warmup_seconds:g} s warm-up "
        f"(`warmupSeconds`) + {section.sample_seconds:g} s window (`sampleSeconds`) "
        f"x {per_sample / THROTTLE_SAMPLE_INTERVAL_S:.3f} ({2 * gpus} NVML queries of "
        f"{NVML_SAMPLE_S * 1000:g} ms per {THROTTLE_SAMPLE_INTERVAL_S:g} s sample) + "
        f"{stop:g} s to stop the load and free its memory",
        "the policy; the NVML query time is an estimate, not measured on a GPU",
    )


def _pcie_phase(gpus: int) -> PhaseBudget:
    copies = COPY_WARMUP + 2 * COPY_REPETITIONS
    per_gpu = copies * COPY_BYTES / (COPY_GBPS * 1e9) + COPY_SETUP_S
    seconds = gpus * (CUDA_CONTEXT_S + per_gpu)
    return PhaseBudget(
        "CUDA initialisation; pinned H2D/D2H copies, one GPU at a time",
        "pcie_link",
        seconds,
        f"{gpus} GPUs x ({CUDA_CONTEXT_S:g} s CUDA context (the first CUDA use) + "
        f"{copies} copies of {COPY_BYTES >> 20} MiB at {COPY_GBPS:g} GB/s + "
        f"{COPY_SETUP_S:g} s buffers and thread)",
        f"copy rate: Gen5 x16 (63 GB/s raw); context time: {NOT_ON_GPU}",
    )


def _allreduce_phase(policy: ProbePolicy, gpus: int) -> PhaseBudget:
    section = policy.section(nccl_allreduce.SPEC)
    gpus = max(gpus, 2)  # one GPU: the check skips; the row keeps its two-GPU figure
    busbw = slowest_passing_busbw(policy)
    algbw = busbw * gpus / (2 * (gpus - 1))
    rounds = section.warmup_iterations + section.iterations
    moved = rounds * sum(sweep_bytes(section.max_message_bytes))
    sweep = moved / (algbw * 1e9)
    fixed = RANK_START_S + RANK_CUDA_S + NCCL_INIT_S + RANK_TEARDOWN_S
    return PhaseBudget(
        "all-reduce: spawn one process per GPU, NCCL init, the sweep",
        "nccl_allreduce",
        fixed + sweep,
        f"{RANK_START_S:g} s {gpus} processes start (spawn, import torch) + "
        f"{RANK_CUDA_S:g} s CUDA contexts + {NCCL_INIT_S:g} s NCCL init + "
        f"{rounds} x {sum(sweep_bytes(section.max_message_bytes)) / 2**30:.2f} GiB swept at "
        f"algbw {algbw:.0f} GB/s (busbw {busbw:g}, the lowest that passes) = {sweep:.1f} s + "
        f"{RANK_TEARDOWN_S:g} s teardown",
        "NCCL init: nccl-tests issue 273 logs 0.66 s on 8 GPUs (NCCL_DEBUG Init timings); "
        f"the rest {NOT_ON_GPU}",
    )


def _compute_phase(policy: ProbePolicy) -> PhaseBudget:
    section = policy.section(gpu_compute.SPEC)
    seconds = LOAD_RAMP_S + FP8_WARMUP_S + section.fp8_seconds + 0.5 if section.fp8 else 0.1
    return PhaseBudget(
        "fp8 matmul phase (bf16 TFLOPS come from the throttle load)",
        GPU_COMPUTE,
        seconds,
        f"{LOAD_RAMP_S:g} s ramp + {FP8_WARMUP_S:g} s warm-up + {section.fp8_seconds:g} s "
        "timed (`fp8Seconds`) + 0.5 s to stop; 0.1 s with `fp8: false`",
        f"the policy; {NOT_ON_GPU}",
    )


def _memory_phase(policy: ProbePolicy) -> PhaseBudget:
    section = policy.section(gpu_memory_bandwidth.SPEC)
    triads = section.warmup_iterations + section.iterations
    moved = triads * 3 * section.buffer_bytes
    seconds = TRIAD_SETUP_S + moved / (TRIAD_GBPS * 1e9)
    return PhaseBudget(
        "STREAM triad on every GPU at once",
        GPU_MEMORY_BANDWIDTH,
        seconds,
        f"{TRIAD_SETUP_S:g} s to allocate and fill 3 arrays of "
        f"{section.buffer_bytes >> 20} MiB + {triads} triads x 3 arrays at "
        f"{TRIAD_GBPS:g} GB/s (a floor: H100 SXM HBM3 peaks at 3350)",
        f"the policy; {NOT_ON_GPU}",
    )


def _peer_phase(policy: ProbePolicy, gpus: int) -> PhaseBudget:
    section = policy.section(peer_bandwidth.SPEC)
    minimums = [v for v in section.min_gbps_by_model.values() if v > 0]
    rate = min(minimums) if minimums else FALLBACK_PEER_GBPS
    ordered = gpus * (gpus - 1)
    copies = section.warmup_iterations + section.iterations
    one_way = ordered * copies * section.buffer_bytes / (rate * 1e9)
    both = one_way if section.bidirectional else 0.0  # half the pairs, twice the bytes each
    setup = ordered * PEER_SETUP_S
    return PhaseBudget(
        "GPU-pair peer copy matrix (and both directions at once)",
        PEER_BANDWIDTH,
        one_way + both + setup,
        f"{ordered} ordered pairs x {copies} copies of {section.buffer_bytes >> 20} MiB at "
        f"{rate:g} GB/s (the lowest that passes) = {one_way:.1f} s, the same again for "
        f"both directions at once, + {ordered} x {PEER_SETUP_S:g} s buffers and streams",
        f"the policy; {NOT_ON_GPU}; a node without peer access stages every copy through "
        "host memory and takes about 18 s (docs/probe.md)",
    )


def _fixed(
    check: str, phase: str, seconds: float, derivation: str, source: str = NOT_ON_GPU
) -> PhaseBudget:
    return PhaseBudget(phase, check, seconds, derivation, source)


def suite_budget(policy: ProbePolicy, gpus: int = BUDGET_GPUS) -> tuple[PhaseBudget, ...]:
    """Every phase of a probe run under ``policy`` on a node of ``gpus`` GPUs (the
    probe measures them in registry order; this list keeps the GPU-loading phases
    together); phases of checks the policy disables are left out."""
    phases = (
        _fixed(
            START_PHASE,
            "process start to the first check",
            5.0,
            "interpreter, imports (gpuaccept 0.2 s, torch 1.8 s measured here), x2 for a "
            "cold image on a fresh node; nvmlInit and 8 device handles ~1 s",
            "imports: `python -X importtime`, `time python -c 'import torch'` on the 2-core "
            f"work machine (2026-11-30); nvmlInit {NOT_ON_GPU}",
        ),
        _fixed(
            "driver_libraries",
            "versions: kernel module, NVML, cuDriverGetVersion",
            0.2,
            "a few file reads and library calls",
        ),
        _fixed("gpu_count", "GPU counts: NVML, the PCI bus", 0.1, "sysfs scan"),
        _fixed(
            "cpu_governor",
            "cpufreq governor of every CPU",
            0.1,
            "one sysfs file per CPU (224)",
        ),
        _pcie_phase(gpus),
        _load_phase(policy, gpus),
        _compute_phase(policy),
        _memory_phase(policy),
        _peer_phase(policy, gpus),
        _allreduce_phase(policy, gpus),
        _fixed("nvlink", "NVLink state and counters", 0.5, "8 x 18 links x 4 NVML queries"),
        _fixed("nvswitch_fabric", "fabric state per GPU", 0.1, "one NVML query per GPU"),
        _fixed("gpu_config", "power, persistence, MIG, compute mode", 0.1, "NVML queries"),
        _fixed("gpu_numa", "GPU NUMA placement", 0.1, "sysfs reads"),
        _fixed("infiniband_ports", "InfiniBand ports", 0.1, "sysfs reads"),
        _fixed("memory_health", "ECC, row remapping", 0.1, "NVML queries"),
        _fixed(  # measured last (RUNS_LAST)
            "xid_errors",
            "Xids seen, recovery actions",
            0.1,
            "one NVML query per GPU (the listener stops after the last check)",
        ),
        PhaseBudget(
            "report, termination log, exit (not in the report's wallS)",
            END_PHASE,
            1.0,
            "the Xid listener's last wait (at most 0.5 s), fit and write the report; "
            "interpreter, torch and NVML shutdown",
            NOT_ON_GPU,
            counts_in_wall=False,
        ),
    )
    return tuple(p for p in phases if _enabled(policy, p.check))


def _enabled(policy: ProbePolicy, check: str) -> bool:
    switch = policy.switch(check)
    return switch is None or switch.enabled


def suite_seconds(phases: tuple[PhaseBudget, ...]) -> float:
    """The whole probe run: every phase."""
    return sum(p.seconds for p in phases)


def phase_seconds(policy: ProbePolicy, gpus: int = BUDGET_GPUS) -> dict[str, float]:
    """Seconds per registered check and for :data:`START_PHASE`, rounded to 0.1 s:
    what a simulated node reports when its profile states no duration."""
    out: dict[str, float] = {}
    for p in suite_budget(policy, gpus):
        if p.counts_in_wall:
            out[p.check] = round(out.get(p.check, 0.0) + p.seconds, 1)
    return out
