"""``pcie_link``: every GPU's PCIe link under load, and its copy bandwidth.

GPUs lower their link generation when idle, so the generation that counts is
the one sampled *during* a pinned-memory copy (the probe samples it while the
copies are in flight). An idle downshift is recorded (``idleGen``) but never
judged. Under the default policy (``requireMax``) a generation below the best
the link can train at in this system (``maxGen``: NVML's max, the lower of the
GPU's and the platform's) or a width below the GPU's own (``maxWidth``) under load
fails, as do H2D/D2H bandwidths below the policy minimum. ``deviceMaxGen`` (the
GPU's own generation, present where the platform caps one below it) is recorded,
not judged: ``minGeneration`` states the platform a fleet expects.

observed, as measured (one column per field, one entry per GPU, index order)::

    {"gen": [5, 5], "width": [16, 16], "maxGen": [5, 5], "maxWidth": [16, 16],
     "idleGen": [1, 5], "h2dGBps": [53.1, 52.9], "d2hGBps": [52.7, 52.8]}

condensed (when the report must shrink; the columns are dropped)::

    {"gpus": 2, "minGen": 5, "minWidth": 16, "belowMaxGen": "", "belowMaxWidth": "",
     "minH2DGBps": 52.9, "minD2HGBps": 52.7, "slowH2D": [1], "slowD2H": [0]}

(``slow*``: the GPUs with the lowest bandwidth; ``belowMax*``: the GPUs below
their maximum, as ranges, ``""`` for none; condensed reports of older probes
carry them as lists, judged the same.)

The full form also carries ``numaNode`` (per GPU, -1 where the kernel does not
say; not judged here, ``gpu_numa`` judges placement), and both forms carry
``unpinned`` (the GPUs whose copy could not run on their own NUMA node's CPUs:
``local_cpulist`` and the pod's cpuset do not meet) and, when NVML lost a GPU,
``failedGpus`` (index → what failed; that GPU's columns are 0 and the check
fails naming it, while the other GPUs are measured).
"""

from dataclasses import dataclass, replace
from typing import Literal

from pydantic import Field, JsonValue, model_validator

from gpuaccept.checks.claims import PCIE_MAX_GEN, PCIE_MAX_WIDTH, Claims, host_copy_bound
from gpuaccept.checks.gpu_ranges import format_gpus, parse_gpus
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
    gpu_list,
)
from gpuaccept.contracts.policy_fields import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REASON = "PcieLinkFailed"
SLOWEST_SHOWN = 4


class PcieLinkPolicy(CheckSwitch):
    require_max: bool = Field(
        default=True,
        description="Under load, each GPU's link generation and width must equal its maximum.",
    )
    min_generation: int | None = Field(
        default=None, ge=1, le=7, description="Lowest acceptable link generation under load."
    )
    min_width: int | None = Field(
        default=None, ge=1, le=32, description="Lowest acceptable link width under load."
    )
    min_h2d_gbps: float | None = Field(
        default=None,
        ge=0,
        alias="minH2DGBps",
        description="Lowest acceptable host-to-device pinned copy bandwidth per GPU, GB/s.",
    )
    min_d2h_gbps: float | None = Field(
        default=None,
        ge=0,
        alias="minD2HGBps",
        description="Lowest acceptable device-to-host pinned copy bandwidth per GPU, GB/s.",
    )
    cc_min_h2d_gbps: float | None = Field(
        default=None,
        ge=0,
        alias="ccMinH2DGBps",
        description="On a node in confidential computing mode (copies through encrypted "
        "bounce buffers): the H2D floor instead of minH2DGBps. Unset: not judged there.",
    )
    cc_min_d2h_gbps: float | None = Field(
        default=None,
        ge=0,
        alias="ccMinD2HGBps",
        description="The same for D2H instead of minD2HGBps.",
    )


class PcieLinkObserved(ObservedModel):
    """Either the per-GPU columns (as measured) or the condensed summary."""

    # per GPU, index order (detail: dropped when condensed)
    gen: list[int] | None = None
    width: list[int] | None = None
    max_gen: list[int] | None = None  # the best generation in this system
    max_width: list[int] | None = None  # the GPU's own
    # the GPU's own max generation, where the platform caps one below it (a Gen5 GPU
    # in a Gen4 server): not judged, the cap is the platform's (minGeneration judges it)
    device_max_gen: list[int] | None = None
    idle_gen: list[int] | None = None
    h2d_gbps: list[float] | None = Field(default=None, alias="h2dGBps")
    d2h_gbps: list[float] | None = Field(default=None, alias="d2hGBps")
    # both forms: placement and failures
    # the confidential computing mode where it is on ("on", "devtools"); "unread" where
    # NVML could not say (then the non-CC floors apply); absent: off
    cc_mode: Literal["on", "devtools", "unread"] | None = None
    numa_node: list[int] | None = None
    unpinned: list[int] | None = None
    failed_gpus: dict[str, str] | None = None
    # the condensed summary
    gpus: int | None = None
    min_gen: int | None = None
    min_width: int | None = None
    # GPUs as ranges ("0-7"; "" none); older probes' condensed reports carry lists
    below_max_gen: list[int] | str | None = None
    below_max_width: list[int] | str | None = None
    min_h2d_gbps: float | None = Field(default=None, alias="minH2DGBps")
    min_d2h_gbps: float | None = Field(default=None, alias="minD2HGBps")
    slow_h2d: list[int] | None = Field(default=None, alias="slowH2D")
    slow_d2h: list[int] | None = Field(default=None, alias="slowD2H")

    @model_validator(mode="after")
    def _complete(self) -> "PcieLinkObserved":
        columns = (self.gen, self.width, self.max_gen, self.max_width, self.h2d_gbps, self.d2h_gbps)
        if self.gen is not None:
            n = len(self.gen)
            if n == 0 or any(col is None or len(col) != n for col in columns):
                raise ValueError("observed columns must be non-empty and of equal length")
            if self.device_max_gen is not None and len(self.device_max_gen) != n:
                raise ValueError("deviceMaxGen must have one entry per GPU")
            return self
        summary = (
            self.gpus,
            self.min_gen,
            self.min_width,
            self.below_max_gen,
            self.below_max_width,
            self.min_h2d_gbps,
            self.min_d2h_gbps,
            self.slow_h2d,
            self.slow_d2h,
        )
        if any(value is None for value in summary):
            raise ValueError("observed needs the per-GPU columns or the condensed summary")
        _gpus(self.below_max_gen)  # ranges that do not parse are refused here, not in judge
        _gpus(self.below_max_width)
        return self


@dataclass(frozen=True)
class _Facts:
    """What judging needs, from either form."""

    gpus: int
    min_gen: int
    min_width: int
    below_max_gen: list[int]
    below_max_width: list[int]
    h2d: list[tuple[int, float]]  # (gpu, GB/s), full list or just the slowest
    d2h: list[tuple[int, float]]
    failed: dict[str, str]


def _gpus(value: list[int] | str | None) -> list[int]:
    """GPUs written as ranges (the condensed form), or as a list (earlier reports)."""
    if isinstance(value, str):
        return parse_gpus(value) if value else []
    return value or []


def _facts(o: PcieLinkObserved) -> _Facts:
    # The model validator guarantees one complete form; `or []` / `or 0` only satisfy the types.
    if o.gen is not None:
        return _full_facts(o, o.gen)
    min_h2d, min_d2h = o.min_h2d_gbps or 0.0, o.min_d2h_gbps or 0.0
    return _Facts(
        gpus=o.gpus or 0,
        min_gen=o.min_gen or 0,
        min_width=o.min_width or 0,
        below_max_gen=_gpus(o.below_max_gen),
        below_max_width=_gpus(o.below_max_width),
        h2d=[(i, min_h2d) for i in o.slow_h2d or []],
        d2h=[(i, min_d2h) for i in o.slow_d2h or []],
        failed=o.failed_gpus or {},
    )


def _full_facts(o: PcieLinkObserved, gen: list[int]) -> _Facts:
    """The facts of the full form (one column entry per GPU)."""
    width = o.width or []
    max_gen, max_width = o.max_gen or [], o.max_width or []
    n = len(gen)
    return _Facts(
        gpus=n,
        min_gen=min(gen),
        min_width=min(width),
        below_max_gen=[i for i in range(n) if gen[i] < max_gen[i]],
        below_max_width=[i for i in range(n) if width[i] < max_width[i]],
        h2d=list(enumerate(o.h2d_gbps or [])),
        d2h=list(enumerate(o.d2h_gbps or [])),
        failed=o.failed_gpus or {},
    )


def _expected(p: PcieLinkPolicy) -> dict[str, JsonValue]:
    expected: dict[str, JsonValue] = {"requireMax": p.require_max}
    for key, value in (
        ("minGen", p.min_generation),
        ("minWidth", p.min_width),
        ("minH2DGBps", p.min_h2d_gbps),
        ("minD2HGBps", p.min_d2h_gbps),
        ("ccMinH2DGBps", p.cc_min_h2d_gbps),
        ("ccMinD2HGBps", p.cc_min_d2h_gbps),
    ):
        if value is not None:
            expected[key] = value
    return expected


def _copy_floors(cc_mode: str | None, p: PcieLinkPolicy) -> tuple[float | None, float | None]:
    """The H2D and D2H floors for this node: a CC node's own (its copies are encrypted
    and staged through bounce buffers), else the policy's."""
    if cc_mode in ("on", "devtools"):
        return p.cc_min_h2d_gbps, p.cc_min_d2h_gbps
    return p.min_h2d_gbps, p.min_d2h_gbps


def _failures(facts: _Facts, p: PcieLinkPolicy, cc_mode: str | None = None) -> list[str]:
    failures = [f"GPU {g} failed: {what}" for g, what in facts.failed.items()]
    if p.require_max and facts.below_max_width:
        failures.append(f"{gpu_list(facts.below_max_width)} below max width")
    if p.require_max and facts.below_max_gen:
        failures.append(f"{gpu_list(facts.below_max_gen)} below max generation under load")
    if p.min_generation is not None and facts.min_gen < p.min_generation:
        failures.append(f"Gen{facts.min_gen} < Gen{p.min_generation}")
    if p.min_width is not None and facts.min_width < p.min_width:
        failures.append(f"x{facts.min_width} < x{p.min_width}")
    return failures + _copy_failures(facts, p, cc_mode)


def _copy_failures(facts: _Facts, p: PcieLinkPolicy, cc_mode: str | None) -> list[str]:
    """The GPUs whose H2D or D2H copies were below the node's floor, with the worst."""
    failures = []
    h2d_floor, d2h_floor = _copy_floors(cc_mode, p)
    for label, values, minimum in (
        ("H2D", facts.h2d, h2d_floor),
        ("D2H", facts.d2h, d2h_floor),
    ):
        if minimum is None:
            continue
        slow = [(i, v) for i, v in values if v < minimum]
        if slow:
            worst = min(v for _, v in slow)
            failures.append(
                f"{label} {worst:g} GB/s < {minimum:g} on {gpu_list([i for i, _ in slow])}"
            )
    return failures


def judge(
    observed: PcieLinkObserved, policy: PcieLinkPolicy, summary: HardwareSummary
) -> CheckJudgement:
    facts = _facts(observed)
    expected = _expected(policy)
    failures = _failures(facts, policy, observed.cc_mode)
    if failures:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(failures)))
    link = f"Gen{facts.min_gen}x{facts.min_width}{_capped(observed)}"
    h2d = min(v for _, v in facts.h2d) if facts.h2d else None
    d2h = min(v for _, v in facts.d2h) if facts.d2h else None
    return CheckJudgement(
        CheckStatus.PASS,
        expected,
        clip(
            f"{facts.gpus} GPUs at {link} under load; min H2D {h2d:g}, D2H {d2h:g} GB/s"
            f"{_copy_notes(observed, policy)}"
        ),
    )


def _capped(observed: PcieLinkObserved) -> str:
    """The GPUs whose link the platform caps below their own maximum generation."""
    capped = [
        i
        for i, (own, best) in enumerate(
            zip(observed.device_max_gen or [], observed.max_gen or [], strict=False)
        )
        if own > best
    ]
    if not capped:
        return ""
    return (
        f" ({gpu_list(capped)} capped by the platform at Gen{min(observed.max_gen or [0])}, "
        f"their own Gen{max(observed.device_max_gen or [0])})"
    )


def _copy_notes(observed: PcieLinkObserved, policy: PcieLinkPolicy) -> str:
    """Copies not on their GPU's NUMA node, and how confidential computing was judged."""
    unpinned = (
        f"; copies of {gpu_list(observed.unpinned)} not on their NUMA node's CPUs"
        if observed.unpinned
        else ""
    )
    if observed.cc_mode not in ("on", "devtools"):
        return unpinned
    judged = _copy_floors(observed.cc_mode, policy) != (None, None)
    return (
        f"; confidential computing {observed.cc_mode}: "
        + ("copies judged by the CC floors" if judged else "H2D/D2H not judged (no CC floor)")
        + unpinned
    )


def condense(observed: PcieLinkObserved) -> PcieLinkObserved:
    if observed.gen is None:
        return observed
    facts = _facts(observed)
    h2d = observed.h2d_gbps or []
    d2h = observed.d2h_gbps or []
    return PcieLinkObserved(  # numaNode stays in the full form (gpu_numa judges placement)
        cc_mode=observed.cc_mode,
        unpinned=observed.unpinned,
        failed_gpus=observed.failed_gpus,
        gpus=facts.gpus,
        min_gen=facts.min_gen,
        min_width=facts.min_width,
        below_max_gen=format_gpus(facts.below_max_gen),
        below_max_width=format_gpus(facts.below_max_width),
        min_h2d_gbps=min(h2d),
        min_d2h_gbps=min(d2h),
        slow_h2d=[i for i, v in enumerate(h2d) if v == min(h2d)][:SLOWEST_SHOWN],
        slow_d2h=[i for i, v in enumerate(d2h) if v == min(d2h)][:SLOWEST_SHOWN],
    )


class PcieLinkFigures(FiguresModel):
    min_pcie_generation: int | None = Field(default=None, ge=0)
    min_pcie_width: int | None = Field(default=None, ge=0)
    pcie: str | None = Field(default=None, max_length=16, description="e.g. Gen5x16")


def key_figures(observed: PcieLinkObserved) -> PcieLinkFigures | None:
    """The weakest link under load. Only plausible figures: they are for display,
    and a bad observed value is the judge's to reject, not the verdict's."""
    facts = _facts(observed)
    gen, width = facts.min_gen, facts.min_width
    if not all(0 <= v < 100 for v in (gen, width)):
        return None
    return PcieLinkFigures(min_pcie_generation=gen, min_pcie_width=width, pcie=f"Gen{gen}x{width}")


# What the time budget assumes of the probe's copies (a test ties each to the probe's).
COPY_BYTES = 256 << 20  # measure/pcie_link.py: one pinned copy
COPY_WARMUP = 2  # real backend: untimed copies
COPY_REPETITIONS = 20  # real backend: timed copies per direction
# Estimates (no GPU here).
CUDA_CONTEXT_S = 0.4  # cuInit share and one primary context per GPU (lazy loading)
COPY_SETUP_S = 0.1  # per GPU: 256 MiB pinned host buffer, device buffer, copy thread
COPY_GBPS = 50.0  # pinned copy at Gen5 x16 (the default policy's minimum is 40 GB/s)


def budget(_section: PcieLinkPolicy, gpus: int) -> PhaseEstimate:
    """CUDA initialisation (the first CUDA use) and the copies, one GPU at a time."""
    copies = COPY_WARMUP + 2 * COPY_REPETITIONS
    per_gpu = copies * COPY_BYTES / (COPY_GBPS * 1e9) + COPY_SETUP_S
    return PhaseEstimate(
        "CUDA initialisation; pinned H2D/D2H copies, one GPU at a time",
        gpus * (CUDA_CONTEXT_S + per_gpu),
        f"{gpus} GPUs x ({CUDA_CONTEXT_S:g} s CUDA context (the first CUDA use) + "
        f"{copies} copies of {COPY_BYTES >> 20} MiB at {COPY_GBPS:g} GB/s + "
        f"{COPY_SETUP_S:g} s buffers and thread)",
        f"copy rate: Gen5 x16 (63 GB/s raw); context time: {NOT_ON_GPU}",
    )


def claims(o: PcieLinkObserved, summary: HardwareSummary) -> Claims:
    """One column entry per GPU (or the condensed count); copies within the link's rate."""
    out = Claims()
    for name, column in (
        ("gen", o.gen),
        ("width", o.width),
        ("maxGen", o.max_gen),
        ("maxWidth", o.max_width),
        ("deviceMaxGen", o.device_max_gen),
        ("idleGen", o.idle_gen),
        ("h2dGBps", o.h2d_gbps),
        ("d2hGBps", o.d2h_gbps),
        ("numaNode", o.numa_node),
    ):
        out.per_gpu(name, column)
    out.count("gpus", o.gpus)
    out.gpu_set("unpinned", o.unpinned).keys("failedGpus", o.failed_gpus)
    out.ranges("belowMaxGen", o.below_max_gen).ranges("belowMaxWidth", o.below_max_width)
    out.gpu_set("slowH2D", o.slow_h2d).gpu_set("slowD2H", o.slow_d2h)
    for name, gens in (
        ("gen", o.gen),
        ("maxGen", o.max_gen),
        ("deviceMaxGen", o.device_max_gen),
        ("idleGen", o.idle_gen),
    ):
        out.each(name, gens, PCIE_MAX_GEN)
    out.each("width", o.width, PCIE_MAX_WIDTH).each("maxWidth", o.max_width, PCIE_MAX_WIDTH)
    out.figure("minGen", o.min_gen, PCIE_MAX_GEN).figure("minWidth", o.min_width, PCIE_MAX_WIDTH)
    widest = list(zip(o.max_gen or [], o.max_width or [], strict=False))
    for name, rates in (("h2dGBps", o.h2d_gbps), ("d2hGBps", o.d2h_gbps)):
        for i, rate in enumerate(rates or []):
            gen, width = widest[i] if i < len(widest) else (0, 0)
            out.figure(name, rate, host_copy_bound(summary, gen, width))
    out.figure("minH2DGBps", o.min_h2d_gbps, host_copy_bound(summary))
    out.figure("minD2HGBps", o.min_d2h_gbps, host_copy_bound(summary))
    return out


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = """\
| field | default | `default-h100-h200.yaml` | meaning |
|-------|---------|------|---------|
| `requireMax` | `true` | `true` | Under load, every GPU's link generation and width must equal its maximum. |
| `minGeneration` | unset | `5` | Lowest acceptable generation under load (1–7). |
| `minWidth` | unset | `16` | Lowest acceptable width (1–32). |
| `minH2DGBps` | unset | `40` | Lowest acceptable host→device pinned copy bandwidth per GPU, GB/s (10⁹ B/s). |
| `minD2HGBps` | unset | `40` | Same, device→host. |
| `ccMinH2DGBps` / `ccMinD2HGBps` | unset | unset | On a node in confidential computing mode: the copy floors instead of `minH2DGBps`/`minD2HGBps`. Unset: not judged there (the message says so). |

The generation is read **while the GPU copies data**: GPUs lower their link
generation when idle to save power, and an idle downshift must never fail a
node (it is recorded as `idleGen` and not judged). On real hardware the
current link comes from NVML (`nvmlDeviceGetCurrPcieLinkGeneration/Width`)
sampled while the copies are in flight (the GPU's sysfs `current_link_speed`
and `current_link_width` are the fallback). What the link is held to
differs for width and generation, because NVML's
`nvmlDeviceGetMaxPcieLinkGeneration/Width` is the max "possible with this
device and system" ([NVML API reference, device
queries](https://docs.nvidia.com/deploy/nvml-api/api/group__nvmlDeviceQueries.html);
nvml.h: "a generation 2 PCIe device attached to a generation 1 PCIe bus"
reports 1), while `nvmlDeviceGetGpuMaxPcieLinkGeneration` is "the maximum
PCIe link generation supported by this device", and the GPU's sysfs
`max_link_speed`/`max_link_width` is its own link capability (LNKCAP,
`Documentation/ABI/testing/sysfs-bus-pci`):

* **Width: the GPU's own** (the larger of NVML's max width and sysfs
  `max_link_width`). A x16 GPU behind a slot or riser wired x8 reports 8 in
  NVML and would look "at max" at x8; a node built so is not healthy
  (fault: `pcie-x8.yaml`).
* **Generation: the best in this system** (`maxGen`: NVML's max, the lower
  of the GPU's and the platform's). A Gen5 H100 PCIe, H100 NVL or H200 NVL
  in a Gen4 server (Ice Lake, Milan root ports) reports 4: its Gen4 link is
  at its best. Earlier probes took the larger of NVML's and the GPU's own
  (5), and every such node failed `requireMax` (a fleet-wide false quarantine). The
  GPU's own generation is recorded as `deviceMaxGen` where the platform caps
  it, and the pass message says so; it is not judged. Whether a Gen4
  platform is acceptable is the fleet's call, stated by `minGeneration` and
  the copy floors: the default policy's are a Gen5 platform's (5 and
  40 GB/s), so it still quarantines the Gen4 host, by those floors and not
  by `requireMax` (`platform/h100-pcie-8gpu-gen4-host.yaml`); a Gen4 fleet sets
  `minGeneration: 4` and copy floors near 20 GB/s
  (`tests/probe/test_pcie_system_max.py`). A link that trains at Gen4 in a
  Gen5 server still fails `requireMax`. Where NVML cannot answer, the GPU's
  own generation is the bar.

**Confidential computing.** The probe reads the system's CC mode
(`nvmlSystemGetConfComputeState`, R535+: `ccFeature`, `devToolsMode`; nvml.h
`NVML_CC_SYSTEM_FEATURE_ENABLED`, `NVML_CC_SYSTEM_DEVTOOLS_MODE_ON`; in the
pinned nvidia-ml-py's `pynvml.py`). In CC mode the GPU cannot reach the
confidential VM's private memory: a pinned host copy is encrypted by the driver
into a bounce buffer in shared memory, and the GPU decrypts it ("CUDA UMD will
encrypt and stage into a bounce buffer and have the GPU decrypt and pull into the
TCB", [NVIDIA developer forum, memory allocation and data copy in CC
mode](https://forums.developer.nvidia.com/t/memory-allocation-and-data-copy-in-cc-mode/261009);
the H100 CC benchmark study finds the CPU–GPU transfer the main overhead,
[arXiv 2409.03992](https://arxiv.org/html/2409.03992v4)). So a CC node's H2D/D2H
run far below a non-CC node's on the same healthy Gen5 x16 link, and every CC
node failed the 40 GB/s floor (a fleet-wide false quarantine). On a CC node (`ccMode: on` or
`devtools` in the observed value) the copies are judged by `ccMinH2DGBps` /
`ccMinD2HGBps` instead. No published per-GPU copy figure under CC was found for
this page, so both are unset by default: the copies are recorded and not judged,
and the pass message says "H2D/D2H not judged (no CC floor)"; set them from your
own CC nodes. The link's generation and width are judged as on any node. NVML
answering NotSupported (or a driver without the function) means no CC; another
error leaves the mode `unread`, and the non-CC floors apply. Trap:
`h100-sxm-8gpu-confidential-computing.yaml` (its copy rates illustrative);
tests: `tests/probe/test_confidential_computing.py`.

Why 40 GB/s: PCIe Gen5 x16 carries 32 GT/s × 16 lanes × 128/130 ÷ 8 ≈ 63 GB/s
per direction on the wire, and pinned-memory copies get most of that: on an
8× H100 system, NVIDIA's `nvbandwidth` measured 52.8 GB/s per GPU for
`device_to_host_memcpy_sm` ([NVIDIA/nvbandwidth issue #24](https://github.com/NVIDIA/nvbandwidth/issues/24),
2024-09-11; the same report shows 35 GB/s for `host_to_device_memcpy_sm`, the
copy-kernel path, which the maintainers had not explained). The probe copies
with the copy engines (`cudaMemcpyAsync` from pinned memory, as torch does),
and no published H100/H200 figure for that path in both directions was found
for this page; the 40 GB/s default is to be checked against the probe's own
output on a real node (`scripts/device-check.sh`, see [probe.md](probe.md)).
A link that trained at Gen4 or at x8 halves the wire rate (≈ 32 GB/s per
direction), so 40 GB/s is meant to separate the two.
"""  # noqa: E501, RUF001


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
requireMax: true          # under load every GPU's link at its max generation and width
minGeneration: 5          # H100/H200 SXM are PCIe Gen5 x16
minWidth: 16
minH2DGBps: 40            # Gen5 x16 measures ~50-55 GB/s pinned; Gen4 or x8 gives ~25
minD2HGBps: 40
"""


def failing_gpus(observed: PcieLinkObserved, policy: PcieLinkPolicy) -> frozenset[int] | None:
    """The GPUs a failure names: a PCIe link is one GPU's own (its slot, riser, retimer;
    docs/policy.md, "Per-GPU verdicts"). None where the condensed form keeps only the
    node's minimum (a floor under it cannot say which GPUs are below)."""
    facts = _facts(observed)
    out = {int(gpu) for gpu in facts.failed}
    if policy.require_max:
        out |= set(facts.below_max_width) | set(facts.below_max_gen)
    if observed.gen is None:  # condensed
        if _failures(_facts_without_gpus(facts), policy, observed.cc_mode):
            return None  # a floor the condensed minimum fails: which GPUs is not kept
        return frozenset(out)
    return frozenset(out | _under_floors(observed, facts, policy))


def _under_floors(observed: PcieLinkObserved, facts: _Facts, policy: PcieLinkPolicy) -> set[int]:
    """The GPUs of a full (not condensed) report under a policy floor."""
    out: set[int] = set()
    for floor, values in (
        (policy.min_generation, observed.gen or []),
        (policy.min_width, observed.width or []),
    ):
        if floor is not None:
            out |= {i for i, v in enumerate(values) if v < floor}
    h2d_floor, d2h_floor = _copy_floors(observed.cc_mode, policy)
    for minimum, rates in ((h2d_floor, facts.h2d), (d2h_floor, facts.d2h)):
        if minimum is not None:
            out |= {i for i, v in rates if v < minimum}
    return out


def _facts_without_gpus(facts: _Facts) -> _Facts:
    """``facts`` without what names GPUs: the failures left are the node-wide minima's."""
    return replace(facts, below_max_gen=[], below_max_width=[], failed={})


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why=(
            "each GPU trains its own link (its slot, riser, retimer); a GPU not measured is "
            "that GPU's. In the condensed form (an 8-GPU report travels condensed to fit the "
            "4096-byte termination message) a failure of a policy floor (`minWidth`, "
            "`minH2DGBps`...) keeps only the node's minimum and the slowest GPUs, so it is "
            "the node's; `belowMaxWidth`/`belowMaxGen` still name their GPUs"
        ),
        source=(
            "kernel `Documentation/ABI/testing/sysfs-bus-pci` (`current_link_width`, "
            "`max_link_width` per PCI device); NVML `nvmlDeviceGetCurrPcieLinkWidth` (per "
            "device)"
        ),
    ),
    measuring=frozenset(),
    judging=frozenset(
        {
            "require_max",
            "min_generation",
            "min_width",
            "min_h2d_gbps",
            "min_d2h_gbps",
            "cc_min_h2d_gbps",
            "cc_min_d2h_gbps",
        }
    ),
    name="pcie_link",
    title="PCIe link",
    summary="every GPU's link at its max generation and width under load; H2D/D2H "
    "copy bandwidth at or above the minimum",
    reason=REASON,
    policy_model=PcieLinkPolicy,
    observed_model=PcieLinkObserved,
    judge=judge,
    condense=condense,
    failing_gpus=failing_gpus,
    figures_model=PcieLinkFigures,
    key_figures=key_figures,
    columns=(FigureColumn("PCIe", "pcie", "Weakest PCIe link under load.", position=2),),
    claims=claims,
    shipped=SHIPPED,
    docs=DOCS,
    # each GPU's pinned H2D rate (peer_bandwidth's host-staged floor)
    provides=frozenset({"h2d_gbps"}),
    budget=budget,
    runbook=RunbookEntry(
        meaning=(
            "a GPU's PCIe link under load is below its maximum (e.g. x8), or copy bandwidth is low"
        ),
        fix="reseat the GPU / riser, check the slot",
    ),
)
