"""``gpu_memory_bandwidth``: every GPU's memory bandwidth, against a per-model
minimum and against the node's other GPUs.

A STREAM triad (``a = b + s·c``, float32, three arrays of
``gpuMemoryBandwidth.bufferBytes`` each, far larger than the L2 cache) runs on
every GPU at once: ``warmupIterations`` untimed, then ``iterations`` timed with
CUDA events. Bytes are counted as STREAM and BabelStream count them: every
array read or written once per iteration, so 3 x bufferBytes per triad (two
reads, one write), in GB/s (10⁹ bytes). A triad kernel, not a device-to-device
``cudaMemcpy``: that one may run on a copy engine, which need not reach the
HBM's bandwidth.

A GPU fails when its figure is below the policy's minimum for the model, or more
than ``maxBelowMedianPercent`` below the median of the node's measured GPUs
(:mod:`gpuaccept.checks.per_gpu_figures`: 3 GPUs or more; with exactly 2, the
lower against the higher, naming both). A GPU without a figure fails by name.

observed::

    {"source": "measured", "bytes": 1073741824, "iterations": 100,
     "gbps": [3012.4, 3008.9, ...]}

(``failedGpus``: GPU → what happened; a failed GPU's figure is 0.) Condensed:
``memory`` = ``[lowest, median, GPU of the lowest, GPUs measured, the faster
half's median]`` (earlier probes: the first four) and
``failed`` (GPU ranges).
"""

from typing import Annotated

from pydantic import Field, JsonValue

from gpuaccept.checks.claims import Claims, hbm_bound
from gpuaccept.checks.gpu_models import per_model_value
from gpuaccept.checks.gpu_ranges import format_gpus, parse_gpus
from gpuaccept.checks.per_gpu_figures import (
    FigureRule,
    NodeGpus,
    Spread,
    failed_text,
    judge_figure,
    measured,
    spread,
    without_figure,
)
from gpuaccept.checks.phase_estimate import NOT_ON_GPU, PhaseEstimate
from gpuaccept.checks.spec import (
    CheckJudgement,
    CheckSpec,
    FailureOwnership,
    ObservedModel,
    RunbookEntry,
    clip,
)
from gpuaccept.contracts.policy_fields import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REASON = "GpuMemoryBandwidthFailed"
GBps = Annotated[float, Field(ge=0, le=1_000_000)]


class GpuMemoryBandwidthPolicy(CheckSwitch):
    min_gbps: float | None = Field(
        default=None,
        ge=0,
        alias="minGBps",
        description="Lowest acceptable triad bandwidth of any GPU, GB/s; unset: no minimum.",
    )
    min_gbps_by_model: dict[str, GBps] = Field(
        default_factory=dict,
        alias="minGBpsByModel",
        description="Per GPU model (exact NVML name or model class such as h100-sxm); "
        "overrides minGBps for that model.",
    )
    max_below_median_percent: float = Field(
        default=5.0,
        ge=0,
        le=100,
        description="A GPU fails when its bandwidth is more than this many percent below the "
        "median of the node's GPUs (3 GPUs or more; with 2, the lower against the higher, "
        "naming both).",
    )
    buffer_bytes: int = Field(
        default=1 << 30,
        ge=1 << 20,
        le=16 << 30,
        description="The size of each of the triad's three arrays (well beyond the L2 cache).",
    )
    iterations: int = Field(default=100, ge=1, le=10000, description="Timed triads per GPU.")
    warmup_iterations: int = Field(
        default=3, ge=0, le=100, description="Untimed triads before the timed ones."
    )

    def minimum(self, gpu_model: str | None) -> float | None:
        return per_model_value(self.min_gbps_by_model, gpu_model, self.min_gbps)


class GpuMemoryBandwidthObserved(ObservedModel):
    source: str | None = Field(default=None, max_length=16)  # "measured" | "profile"
    bytes: int | None = Field(default=None, ge=0)  # each array
    iterations: int | None = Field(default=None, ge=0)
    gbps: list[GBps] | None = Field(default=None, max_length=64)
    failed_gpus: dict[str, str] | None = None  # GPU -> what happened
    # condensed: [lowest, median, GPU of the lowest, GPUs measured, the faster half's
    # median]; failed GPUs as ranges
    memory: Spread | None = None
    failed: str | None = Field(default=None, max_length=200)


def _failed(observed: GpuMemoryBandwidthObserved) -> dict[int, str]:
    if observed.failed_gpus is not None:
        return {int(g): what for g, what in observed.failed_gpus.items()}
    return dict.fromkeys(parse_gpus(observed.failed), "triad") if observed.failed else {}


def judge(
    observed: GpuMemoryBandwidthObserved,
    policy: GpuMemoryBandwidthPolicy,
    summary: HardwareSummary,
) -> CheckJudgement:
    rule = FigureRule(
        "triad", "GB/s", policy.minimum(summary.gpu_model), policy.max_below_median_percent
    )
    expected: JsonValue = {
        "minGBps": rule.minimum,
        "maxBelowMedianPercent": policy.max_below_median_percent,
    }
    failed = _failed(observed)
    verdict = judge_figure(
        observed.gbps, observed.memory, NodeGpus(summary.gpu_count, frozenset(failed)), rule
    )
    bad = failed_text(failed) + verdict.failures
    note = verdict.note
    label = " (simulated profile)" if observed.source == "profile" else ""
    if bad:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(bad) + label))
    if note is None:
        return CheckJudgement(CheckStatus.FAIL, expected, "no GPU produced a bandwidth figure")
    return CheckJudgement(CheckStatus.PASS, expected, clip(note + label))


def condense(observed: GpuMemoryBandwidthObserved) -> GpuMemoryBandwidthObserved:
    failed = set(_failed(observed))
    failed |= set(without_figure(observed.gbps or [], failed))  # "no figure": failed here
    update: dict[str, object] = {
        "source": None,  # the report says simulated or real
        "bytes": None,
        "iterations": None,
        "failed_gpus": None,
        "failed": format_gpus(failed) or None,
    }
    if observed.gbps is not None:
        update.update(gbps=None, memory=spread(measured(observed.gbps, failed)))
    return observed.model_copy(update=update)


TRIAD_SETUP_S = 0.5  # per GPU, in parallel: 3 arrays allocated and filled (an estimate)
TRIAD_GBPS = 2000.0  # a low HBM3 triad rate, so the row is an upper bound


def budget(section: GpuMemoryBandwidthPolicy, _gpus: int) -> PhaseEstimate:
    """The triads on every GPU at once, at a rate below HBM3's."""
    triads = section.warmup_iterations + section.iterations
    moved = triads * 3 * section.buffer_bytes
    return PhaseEstimate(
        "STREAM triad on every GPU at once",
        TRIAD_SETUP_S + moved / (TRIAD_GBPS * 1e9),
        f"{TRIAD_SETUP_S:g} s to allocate and fill 3 arrays of "
        f"{section.buffer_bytes >> 20} MiB + {triads} triads x 3 arrays at "
        f"{TRIAD_GBPS:g} GB/s (a floor: H100 SXM HBM3 peaks at 3350)",
        f"the policy; {NOT_ON_GPU}",
    )


def claims(o: GpuMemoryBandwidthObserved, summary: HardwareSummary) -> Claims:
    """One figure per GPU (or a spread over at most the report's GPUs), within the HBM's peak."""
    out = Claims()
    for name, figures, most in (("gbps", o.gbps, hbm_bound(summary)),):
        out.per_gpu(name, figures).each(name, figures, most)
    out.keys("failedGpus", o.failed_gpus).ranges("failed", o.failed)
    for name, condensed, most in (("memory", o.memory, hbm_bound(summary)),):
        out.spread(name, condensed, most, summary.gpu_count)
    return out


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = """\
| field | default | meaning |
|-------|---------|---------|
| `minGBps`, `minGBpsByModel` | unset | The lowest triad bandwidth a GPU may show, GB/s. |
| `maxBelowMedianPercent` | 5 | A GPU more than this far below the median of the node's measured GPUs fails (3 GPUs or more; with 2, the lower against the higher, naming both). |
| `bufferBytes` | 1 GiB | Each of the triad's three float32 arrays (20 times an H100's 50 MB L2, so the figure is the HBM's). |
| `iterations` | 100 | Timed triads per GPU (about 0.1 s on an H100). |
| `warmupIterations` | 3 | Untimed triads before them. |

The measurement is a STREAM triad, `a = b + 0.4·c`, run with torch on every GPU
at once, each triad between its own two CUDA events; the figure is the
**fastest** triad, as STREAM ("best rate", from the minimum time) and
BabelStream (its reported bandwidth) take it. The triad's time is set by the
HBM; anything else (a host stall that leaves the GPU idle between one triad's
events, the GIL shared by 8 threads, the pod's CPU quota) only adds time, so
the minimum is the least disturbed measurement, and a GPU with a slow memory
path is slow in every triad, the fastest included. (One event pair around all
100 triads, ~0.1 s, would count any such stall.) A GPU whose events give no
positive time fails by name (`TriadTimingError`), as does a GPU with a 0 figure
not in `failedGpus`. Bytes are counted as STREAM and BabelStream
count them: 3 arrays × `bufferBytes` per triad (two reads, one write). It is a
kernel on the SMs, not a device-to-device `cudaMemcpy`: that copy may run on a
copy engine, which need not reach the HBM bandwidth (an H20 reported about
2 TB/s through `cudaMemcpy` and 3.3 TB/s with a copy kernel,
NVIDIA/cuda-samples issue 366). nvbandwidth's `device_local_copy` is such a
copy-engine test.

Why 5 % and not 8 %: the HBM clock does not boost or throttle with the load the
way the SM clock does (Chips and Cheese, "Nvidia's H100: Funny L2, and Tons of
Bandwidth", 2023: the H100's memory clock "does not change under load"), so the
bandwidth of identical GPUs differs by measurement noise, not by power
management; a GPU 5 % below its siblings has a slower memory path. The fault
profile `gpu-memory-bandwidth-degraded.yaml` has one GPU 20 % below; the trap
`h100-sxm-8gpu-throughput-spread.yaml` has the GPUs within 2 %. As for compute,
the spread on real nodes has not been measured here. The faster-half rule of
[`gpuCompute`](#gpucompute) applies with the same 5 %: the fault
`profiles/faults/gpu-memory-bandwidth-slow-half.yaml` (GPUs 4-7 at 2800 GB/s
against 3015, each only 4 % below the node median 2908, 7 % below the faster
half) fails; the spread trap (its lowest 1.7 % below the faster half) passes.

No per-model minimum by default: the datasheet peaks (H100 SXM 3.35 TB/s,
H200 4.8 TB/s) are not reached by a triad, and no published triad figure for
these parts was found to set a floor from. The trap `h200-sxm-8gpu-throughput.yaml`
(4.3 TB/s, well above an H100's 3.0) must pass.
"""  # noqa: E501, RUF001


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
maxBelowMedianPercent: 5  # the HBM clock does not change with load: noise only
bufferBytes: 1073741824   # 3 float32 arrays of 1 GiB (STREAM triad), far beyond L2
iterations: 100
warmupIterations: 3
"""


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why="as `gpu_compute`",
        source="the check's own rule",
    ),
    measuring=frozenset({"buffer_bytes", "iterations", "warmup_iterations"}),
    judging=frozenset({"min_gbps", "min_gbps_by_model", "max_below_median_percent"}),
    name="gpu_memory_bandwidth",
    title="GPU memory bandwidth",
    summary="every GPU's memory bandwidth (STREAM triad) at or above the model minimum and "
    "within a percentage of the node's median GPU",
    reason=REASON,
    policy_model=GpuMemoryBandwidthPolicy,
    observed_model=GpuMemoryBandwidthObserved,
    judge=judge,
    condense=condense,
    claims=claims,
    shipped=SHIPPED,
    docs=DOCS,
    budget=budget,
    runbook=RunbookEntry(
        meaning="a GPU's memory bandwidth below the model minimum or well below its siblings",
        fix="memory clock (nvidia-smi -q -d CLOCK), HBM health (row remaps), GPU replacement",
    ),
)
