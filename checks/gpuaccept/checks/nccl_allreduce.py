"""``nccl_allreduce``: all-reduce bus bandwidth across every local GPU.

One process per GPU with ``torch.distributed`` (NCCL on GPUs; the same code
runs with gloo on CPU processes in the tests), a sweep of message sizes up to
``ncclAllreduce.maxMessageBytes`` (8 GiB by default, on the bandwidth
plateau) after warm-up. Timed as nccl-tests' ``src/common.cu`` does: per rank
a batch of back-to-back launches timed on the host up to completion, divided
by the iterations, then averaged across ranks; ``algbw = bytes / time``,
``busbw = algbw x 2(n-1)/n``. The figure judged is the busbw of the largest
message; the whole curve is reported. With one GPU busbw is undefined
(``skip``).

observed::

    {"backend": "nccl", "source": "measured", "ranks": 8, "bytes": 8589934592,
     "busbwGBps": 467.1, "algbwGBps": 266.9, "timing": "host-batch-mean",
     "sweep": [[2097152, 61.2], ..., [8589934592, 467.1]]}

(``sweep``: [bytes, busbw GB/s]; condensed, the busbw figures are rounded to
whole GB/s but the curve stays, and ``backend``, ``algbwGBps``, ``timing`` and
``bytes`` (the sweep's last size), never judged, are dropped).
``source: "profile"`` means the figure came from a simulated hardware profile.
"""

from pydantic import Field, JsonValue

from gpuaccept.checks.claims import Claims, busbw_bound
from gpuaccept.checks.gpu_models import not_a_full_board, per_model_value
from gpuaccept.checks.phase_estimate import NOT_ON_GPU, PhaseEstimate
from gpuaccept.checks.spec import (
    CheckJudgement,
    CheckSpec,
    FailureOwnership,
    FigureColumn,
    FiguresModel,
    ObservedModel,
    RunbookEntry,
    clip,
)
from gpuaccept.contracts.policy_fields import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REASON = "NcclAllreduceFailed"
BUSBW_FIGURE = "busbwGBps"  # the key figure's wire name (.status.figures.busbwGBps)


class NcclAllreducePolicy(CheckSwitch):
    min_busbw_gbps: float | None = Field(
        default=None,
        ge=0,
        alias="minBusbwGBps",
        description="Lowest acceptable all-reduce bus bandwidth, GB/s; unset: any positive figure.",
    )
    min_busbw_gbps_by_model: dict[str, float] = Field(
        default_factory=dict,
        alias="minBusbwGBpsByModel",
        description="Per GPU model: an exact NVML name, or a model class such as h100-sxm "
        "(docs/policy.md lists them); overrides minBusbwGBps for that model.",
    )
    max_message_bytes: int = Field(
        default=1 << 33,
        ge=1 << 10,
        le=1 << 34,
        description="The largest message of the sweep, the one judged (on the bandwidth plateau).",
    )
    iterations: int = Field(default=20, ge=1, le=1000, description="Timed all-reduces per size.")
    warmup_iterations: int = Field(
        default=5, ge=0, le=100, description="Untimed all-reduces before the timed ones."
    )

    def min_busbw_for(self, gpu_model: str | None) -> float | None:
        return per_model_value(self.min_busbw_gbps_by_model, gpu_model, self.min_busbw_gbps)


class NcclAllreduceObserved(ObservedModel):
    backend: str | None = None
    source: str | None = None  # "measured", or "profile" for a simulated node
    ranks: int
    bytes: int | None = None  # the largest message
    busbw_gbps: float = Field(alias="busbwGBps")
    algbw_gbps: float | None = Field(default=None, alias="algbwGBps")
    # how a size was timed: "host-batch-mean" (nccl-tests: host clock over the batch,
    # mean of the ranks); absent in older reports (CUDA events, slowest rank)
    timing: str | None = Field(default=None, max_length=32)
    sweep: list[tuple[int, float]] | None = None  # detail: [bytes, busbw GB/s] per message size


def judge(
    observed: NcclAllreduceObserved, policy: NcclAllreducePolicy, summary: HardwareSummary
) -> CheckJudgement:
    busbw = observed.busbw_gbps
    source = observed.source or "measured"
    label = " (from the simulated profile)" if source == "profile" else ""
    # The per-class figures are those of a full 8-GPU NVSwitch board; on a board without
    # NVSwitch or a slice of one only the global minimum (if any) holds.
    partial = not_a_full_board(summary)
    minimum = policy.min_busbw_gbps if partial else policy.min_busbw_for(summary.gpu_model)
    expected: JsonValue = {"minBusbwGBps": minimum} if minimum is not None else None
    figure = f"busbw {busbw:g} GB/s over {observed.ranks} GPUs{label}"
    if busbw <= 0:
        return CheckJudgement(CheckStatus.FAIL, expected, clip(f"{figure}: no bandwidth"))
    if minimum is None:
        why = f" ({partial}: the model's 8-GPU figure does not apply)" if partial else ""
        return CheckJudgement(CheckStatus.PASS, expected, clip(f"{figure}; no minimum set{why}"))
    if busbw < minimum:
        return CheckJudgement(CheckStatus.FAIL, expected, clip(f"{figure} < {minimum:g}"))
    return CheckJudgement(CheckStatus.PASS, expected, clip(f"{figure} >= {minimum:g}"))


def condense(observed: NcclAllreduceObserved) -> NcclAllreduceObserved:
    """The curve stays (the report must show the plateau), with whole GB/s; algbw
    (busbw x n / 2(n-1)) and the timing method, never judged, go."""
    update: dict[str, object] = {"algbw_gbps": None, "timing": None, "backend": None}
    if observed.sweep and observed.bytes == observed.sweep[-1][0]:
        update["bytes"] = None  # the sweep's last size says it
    if observed.sweep is not None:
        update["sweep"] = [(size, float(round(busbw))) for size, busbw in observed.sweep]
    return observed.model_copy(update=update)


class NcclAllreduceFigures(FiguresModel):
    busbw_gbps: float | None = Field(
        default=None, ge=0, alias=BUSBW_FIGURE, description="All-reduce bus bandwidth, GB/s."
    )


def key_figures(observed: NcclAllreduceObserved) -> NcclAllreduceFigures:
    busbw = observed.busbw_gbps
    return NcclAllreduceFigures(busbw_gbps=busbw if busbw >= 0 else None)


# What the time budget assumes of the probe's sweep (a test ties it to the probe's).
SWEEP_STEPS = 5  # measure/nccl_allreduce.py: message sizes, each 8x the previous
SWEEP_FACTOR = 8
# Estimates (no GPU here).
RANK_START_S = 4.0  # spawn 8 interpreters that each import torch and gpuaccept
RANK_CUDA_S = 0.5  # each rank's CUDA context, in parallel
NCCL_INIT_S = 2.0  # ncclCommInitRank over 8 GPUs
RANK_TEARDOWN_S = 1.0  # destroy_process_group, the ranks' exit, the join
FALLBACK_BUSBW_GBPS = 320.0  # no minimum in the policy: the h100-sxm/h200-sxm default


def sweep_bytes(max_bytes: int) -> list[int]:
    """The all-reduce sweep's message sizes (the probe's ``sweep_sizes``)."""
    sizes: list[int] = []
    size = max_bytes
    while len(sizes) < SWEEP_STEPS and size >= 1024:
        sizes.insert(0, size)
        size //= SWEEP_FACTOR
    return sizes


def slowest_passing_busbw(section: NcclAllreducePolicy) -> float:
    """The lowest bus bandwidth the policy accepts (the slowest sweep that passes)."""
    minimums = [v for v in section.min_busbw_gbps_by_model.values() if v > 0]
    if section.min_busbw_gbps:
        minimums.append(section.min_busbw_gbps)
    return min(minimums) if minimums else FALLBACK_BUSBW_GBPS


def budget(section: NcclAllreducePolicy, gpus: int) -> PhaseEstimate:
    """One process per GPU, NCCL init and the sweep at the slowest rate that passes."""
    gpus = max(gpus, 2)  # one GPU: the check skips; the row keeps its two-GPU figure
    busbw = slowest_passing_busbw(section)
    algbw = busbw * gpus / (2 * (gpus - 1))
    rounds = section.warmup_iterations + section.iterations
    moved = rounds * sum(sweep_bytes(section.max_message_bytes))
    sweep = moved / (algbw * 1e9)
    fixed = RANK_START_S + RANK_CUDA_S + NCCL_INIT_S + RANK_TEARDOWN_S
    return PhaseEstimate(
        "all-reduce: spawn one process per GPU, NCCL init, the sweep",
        fixed + sweep,
        f"{RANK_START_S:g} s {gpus} processes start (spawn, import torch) + "
        f"{RANK_CUDA_S:g} s CUDA contexts + {NCCL_INIT_S:g} s NCCL init + "
        f"{rounds} x {sum(sweep_bytes(section.max_message_bytes)) / 2**30:.2f} GiB swept at "
        f"algbw {algbw:.0f} GB/s (busbw {busbw:g}, the lowest that passes) = {sweep:.1f} s + "
        f"{RANK_TEARDOWN_S:g} s teardown",
        "NCCL init: nccl-tests issue 273 logs 0.66 s on 8 GPUs (NCCL_DEBUG Init timings); "
        f"the rest {NOT_ON_GPU}",
    )


def claims(o: NcclAllreduceObserved, summary: HardwareSummary) -> Claims:
    """One rank per GPU of the report; busbw within twice a GPU's link rate."""
    most = busbw_bound(summary)
    out = Claims().count("ranks", o.ranks)
    out.figure("busbwGBps", o.busbw_gbps, most).figure("algbwGBps", o.algbw_gbps, most)
    out.each("sweep", [busbw for _, busbw in o.sweep or []], most)
    return out


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = """\
| field | default | `default-h100-h200.yaml` | meaning |
|-------|---------|------|---------|
| `minBusbwGBps` | unset | unset | Lowest acceptable all-reduce bus bandwidth, GB/s, for a model without its own entry. Unset: any positive figure passes (the message says "no minimum set"). |
| `minBusbwGBpsByModel` | `{}` | `{h100-sxm: 320, h200-sxm: 320}` | Per GPU model: a key is an exact NVML name (`summary.gpuModel`) or a model class ([below](#gpu-model-classes)); an exact name wins over its class, and both over `minBusbwGBps`. |
| `maxMessageBytes` | 8 GiB | 8 GiB | The largest message of the sweep (1 KiB–16 GiB), the one judged. The sweep has up to five sizes, each 8× the previous, ending here (2 MiB, 16 MiB, 128 MiB, 1 GiB, 8 GiB). |
| `iterations` | 20 | 20 | Timed all-reduces per size (nccl-tests' default `-n 20`). |
| `warmupIterations` | 5 | 5 | Untimed all-reduces first (nccl-tests' default `-w 5`). |

The measurement follows nccl-tests
([doc/PERFORMANCE.md](https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md),
`src/common.cu`): one process per GPU (`torch.distributed`, NCCL backend);
per size and rank, a barrier, then the batch of `iterations` all-reduces
launched back to back and timed on the host until the device has completed
them, divided by `iterations`; that time is **averaged across ranks**, as
nccl-tests' `Allreduce(args, &deltaSec, average)` does (earlier probes took
the slowest rank's CUDA-event time, `timing` absent in their reports).
`algbw = bytes / time`, and for all-reduce `busbw = algbw × 2(n−1)/n`, which
makes the figure comparable across GPU counts and to the hardware's link
bandwidth. The report keeps the whole curve (`sweep`: size → busbw) and the
figure judged is the busbw of the **largest** message. One difference remains:
nccl-tests reports out-of-place and in-place runs, and the probe runs in-place
only (torch's `all_reduce`). With one GPU the bus bandwidth is undefined (the
factor is 0) and the check is `skip`: disable it for single-GPU nodes.

Why 8 GiB: busbw rises with the message size until the fabric is saturated.
A published 8× H100 table, as quoted in this project's tracker (the table itself was not
re-checked for this page), shows 1 GiB at about 95 % of the 16 GiB figure
(446 against 465 GB/s), so a threshold taken from 8–16 GiB figures and compared
with a 1 GiB measurement sits within noise of a healthy node; at 8 GiB the
curve is on its plateau (≥ 99 %). The simulated profiles model this curve
([profile-format.md](profile-format.md)).

Why 320 GB/s for H100 SXM and H200 SXM: on 8× H100 SXM, NCCL reaches about
370 GB/s busbw with the ring algorithm (NVLink 4 line rate 450 GB/s minus
≈ 20 % protocol overhead) and a peak of about 480 GB/s with NVLink SHARP
(NVLS), at large message sizes (NCCL maintainer, NVIDIA/nccl-tests
[issue #212](https://github.com/NVIDIA/nccl-tests/issues/212)); 8× H200 (the
same NVLink 4 / NVSwitch fabric) reach a peak of 475 GB/s
([issue #272](https://github.com/NVIDIA/nccl-tests/issues/272)). A healthy
node therefore measures ≈ 370–480 GB/s at 8 GiB depending on whether NVLS is
available. The earlier 360/380 GB/s limits, compared at 1 GiB (≈ 95 % of the
plateau: ≈ 352 GB/s for a ring-only node), failed healthy ring-only nodes.
320 GB/s sits ≈ 13 % below the ring figure (the run-to-run spread of
nccl-tests on one node is not measured here: no GPU was lent to this work;
record it from `scripts/device-check.sh` runs), while a node with a broken
NVLink or NVSwitch, which falls to PCIe-class figures (tens of GB/s), still
fails. The traps `h100-sxm-8gpu-ring-only.yaml` (370 GB/s plateau) and the
fault `nccl-below-sxm-minimum.yaml` (312 GB/s) sit on both sides.

#### GPU model classes

NVML's `nvmlDeviceGetName` does not say "SXM": the SXM parts report the bare
name, and the PCIe/NVL parts add a suffix. Those parts link pairs (or fours)
of GPUs with NVLink bridges, or nothing, so an 8-GPU all-reduce on them runs
largely over PCIe and must never get an SXM limit. A class key matches only
these exact names (whitespace normalized); a name not in the table (or a
`mixed: …` node) matches no class and falls back to `minBusbwGBps`
(`checks/gpuaccept/checks/gpu_models.py`):

| class | NVML name | part | default minimum |
|-------|-----------|------|-----------------|
| `h100-sxm` | `NVIDIA H100 80GB HBM3` | H100 SXM5 80 GB (HGX H100) | 320 |
| `h100-pcie` | `NVIDIA H100 PCIe` | H100 PCIe 80 GB | none |
| `h100-nvl` | `NVIDIA H100 NVL` | H100 NVL 94 GB (PCIe, NVLink bridge pairs) | none |
| `h200-sxm` | `NVIDIA H200` | H200 SXM 141 GB (HGX H200) | 320 |
| `h200-nvl` | `NVIDIA H200 NVL` | H200 NVL 141 GB (PCIe, NVLink bridges) | none |
| `gh200` | `NVIDIA GH200 …` | GH200 Grace Hopper | none |
| `b200` | `NVIDIA B200` | B200 (HGX B200) | none (no published 8-GPU figure was checked for this page; set one from your own nccl-tests runs) |

The names are those NVML prints in nccl-tests' "Using devices" lines and
`nvidia-smi` on such nodes (e.g. `… [0000:1b:00] NVIDIA H200`, `…
NVIDIA H100 80GB HBM3`, `… NVIDIA B200`, and `NVIDIA H200 NVL` with driver
570/580). The trap `h100-nvl-8gpu-healthy.yaml` (48 GB/s) must be accepted.
"""  # noqa: E501, RUF001


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
# No global minimum: PCIe/NVL parts (H100 NVL, H200 NVL, H100 PCIe) and models
# not listed here need only a positive figure. Classes match NVML's names
# (h100-sxm = "NVIDIA H100 80GB HBM3", h200-sxm = "NVIDIA H200"); docs/policy.md.
minBusbwGBpsByModel:
  h100-sxm: 320           # healthy 8x at 8 GiB: ~370 (ring) to ~480 (NVLS) GB/s
  h200-sxm: 320           # same NVLink 4 / NVSwitch fabric; peak ~475 GB/s
maxMessageBytes: 8589934592   # sweep up to 8 GiB (the plateau); judged there
iterations: 20
warmupIterations: 5
"""


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why="the node's all-reduce as a whole",
        source="nccl-tests `busbw` (docs/PERFORMANCE.md: one figure for the collective)",
    ),
    measuring=frozenset({"max_message_bytes", "iterations", "warmup_iterations"}),
    judging=frozenset({"min_busbw_gbps", "min_busbw_gbps_by_model"}),
    name="nccl_allreduce",
    title="NCCL all-reduce",
    summary="all-reduce bus bandwidth across every local GPU at or above the policy minimum",
    reason=REASON,
    policy_model=NcclAllreducePolicy,
    observed_model=NcclAllreduceObserved,
    judge=judge,
    condense=condense,
    figures_model=NcclAllreduceFigures,
    key_figures=key_figures,
    columns=(FigureColumn("BusBW", BUSBW_FIGURE, "NCCL all-reduce GB/s.", position=1),),
    claims=claims,
    shipped=SHIPPED,
    docs=DOCS,
    budget=budget,
    runbook=RunbookEntry(
        meaning="all-reduce busbw below the policy minimum",
        fix="NVLink/NVSwitch/fabric manager",
    ),
)
