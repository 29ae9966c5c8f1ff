"""``peer_bandwidth``: the GPU-to-GPU copy bandwidth matrix, and peer access between GPUs.

For every ordered pair of GPUs (src → dst) the probe times a peer copy
(``dst.copy_(src)`` in torch: a ``cudaMemcpyAsync`` on the source device's
stream; with peer access enabled the copy engines move the data over NVLink
or PCIe directly, without it the driver stages it through host memory) with
CUDA events after warm-up, and, for every unordered pair, both directions at
once on two streams (the sum: nvbandwidth's and peerBandwidthLatencyTest's
bidirectional figure). For every ordered pair it also records what NVML says
of peer-to-peer (``nvmlDeviceGetP2PStatus``, NVLink first, then PCIe read)
and whether CUDA grants this process peer access
(``cudaDeviceCanAccessPeer`` through ``torch.cuda.can_device_access_peer``).

Each pair belongs to one *path*: ``nvlink`` (NVML: NVLink P2P OK, and peer
access granted), ``pcie`` (peer access granted, not over NVLink) or ``host``
(no peer access: the copy is staged through host memory). Judged:

* peer access: a pair that should have it and has not fails (NVML reports
  NVLink P2P, or NVML reports P2P as supported, per ``peerAccessRequired``; on
  the models of ``allPairsModels``, HGX boards whose NVSwitches connect every
  pair, every pair). A PCIe node whose chipset or topology does not support
  P2P by NVML's word is *not* failed by default;
* every pair's unidirectional GB/s against ``minGBpsByModel``;
* every pair against the median pair of its path on this node
  (``maxBelowMedianPercent``, per path);
* every ``pcie`` pair against its host-staged floor, half the slower GPU's
  pinned H2D rate that ``pcie_link`` measured (``h2dGBps``): a copy with peer
  access slower than a copy staged through host memory would be is worse than
  no P2P at all (PCIe ACS redirecting P2P through the root complex: CUDA still
  grants peer access). No per-model table; healthy PCIe P2P runs near the H2D
  rate (docs/policy.md);
* a pair whose copy raised (``failedPairs``: enabling peer access can fail) fails
  by name; the matrix must cover the summary's GPUs, and carry its figures.

The bidirectional figures are reported, not judged. Pairs without peer access
are copied with ``stagedBufferBytes`` and one way only (the time budget).

observed::

    {"gpus": 8, "bytes": 268435456, "paths": ["-NNNNNNN", "N-NNNNNN", ...],
     "gbps": [[0, 380.1, ...], ...], "bidirGBps": [[0, 742.2, ...], ...],
     "noPeerAccess": {"chipset_not_supported": "*"}, "h2dGBps": [53.6, ...]}

(``paths``: per source GPU a string with one character per destination,
NVML's word on the pair: ``N`` NVLink, ``P`` P2P supported over PCIe, ``C``
chipset not supported, ``T`` IOH topology not supported, ``G`` GPU not
supported, ``R`` disabled by regkey, ``X`` not supported, ``U`` unknown, ``-``
itself; ``gbps``: [src][dst] GB/s, 0 on the diagonal; ``bidirGBps``: both
directions at once, summed, symmetric; ``noPeerAccess``: NVML's word → the
pairs CUDA grants no peer access, as pairs text: ``2>5`` one direction,
``2<>5`` both, ``3<>*`` GPU 3 with every other GPU, ``*`` every pair;
``stagedBytes``: the copy size of those pairs; ``h2dGBps``: per GPU, the H2D
rate pcie_link measured, 0 where it has none; ``failedPairs``: what a copy
raised → its pairs.) Condensed: the matrices are replaced by ``weakest``: path
→ ``[median GB/s, src, dst, GB/s]``, the median pair's figure and the weakest
pair, and ``pcieFloor``: ``[src, dst, GB/s, floor]`` of the PCIe pair lowest
against its floor. If any pair of a path fails the minimum or the median rule,
its weakest pair does, and if any PCIe pair is below its floor, the lowest
against it is, so the verdict is the same; the message then names only that
pair.
"""

import re
import statistics
from collections.abc import Sequence, Sized
from enum import StrEnum

from pydantic import Field, JsonValue, model_validator

from gpuaccept.checks.claims import Claims, host_copy_bound, peer_bound
from gpuaccept.checks.gpu_models import gpu_model_class, per_model_value, without_nvswitch
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

REASON = "PeerBandwidthFailed"
SHOWN = 3  # pairs named in a message
# A copy staged through host memory crosses PCIe twice (D2H, then H2D): at best about
# the H2D rate, at worst half of it (HGX H100 measures 37 of 53 GB/s, NVIDIA/nccl issue
# 1264). A copy with peer access over PCIe slower than half the H2D rate is worse than
# no P2P at all: the traffic detours (PCIe ACS redirecting it through the root complex).
STAGED_FRACTION = 0.5

# NVML's word on a pair (nvmlGpuP2PStatus_t; "nvlink": the NVLink capability index is OK,
# "ok": the read capability is OK over PCIe) -> its character in ``paths``.
NVML_CODES: dict[str, str] = {
    "nvlink": "N",
    "ok": "P",
    "chipset_not_supported": "C",
    "gpu_not_supported": "G",
    "ioh_topology_not_supported": "T",
    "disabled_by_regkey": "R",
    "not_supported": "X",
    "unknown": "U",
}
Pair = tuple[int, int]
PAIR_ITEM = re.compile(r"^(\d{1,2})(<>|>)(\d{1,2}|\*)$")


class PairPath(StrEnum):
    NVLINK = "nvlink"  # NVML: NVLink P2P, and peer access granted
    PCIE = "pcie"  # peer access granted, not over NVLink
    HOST = "host"  # no peer access: staged through host memory


class PeerAccessRule(StrEnum):
    NVLINK = "nvlink"  # pairs NVML connects by NVLink
    NVML = "nvml"  # pairs NVML reports P2P for (NVLink, or PCIe read OK)
    ALL = "all"  # every pair


def _default_minimum() -> dict[str, float]:
    return {"h100-sxm": 300.0, "h200-sxm": 300.0}


def _default_below_median() -> dict[PairPath, float]:
    return {PairPath.NVLINK: 10.0}


def _default_all_pairs_models() -> list[str]:
    return ["h100-sxm", "h200-sxm", "b200"]


class PeerBandwidthPolicy(CheckSwitch):
    min_gbps_by_model: dict[str, float] = Field(
        default_factory=_default_minimum,
        alias="minGBpsByModel",
        description="Per GPU model (an exact NVML name or a model class): the lowest "
        "unidirectional GB/s of any pair; a model not listed has no minimum.",
    )
    max_below_median_percent: dict[PairPath, float] = Field(
        default_factory=_default_below_median,
        description="Per path (nvlink, pcie, host): a pair more than this many percent below "
        "the median pair of its path on the node fails; a path not listed is not compared.",
    )
    peer_access_required: PeerAccessRule = Field(
        default=PeerAccessRule.NVML,
        description="The pairs that must have peer access: nvlink (NVML reports NVLink P2P), "
        "nvml (NVML reports P2P supported, over NVLink or PCIe) or all.",
    )
    all_pairs_models: list[str] = Field(
        default_factory=_default_all_pairs_models,
        description="Models (NVML names or classes) on which every pair must have peer access "
        "whatever NVML says: HGX boards, whose NVSwitches connect every pair.",
    )
    buffer_bytes: int = Field(
        default=1 << 28,
        ge=1 << 20,
        le=1 << 32,
        description="Bytes per copy (256 MiB: the copy engines' plateau).",
    )
    staged_buffer_bytes: int = Field(
        default=32 << 20,
        ge=1 << 20,
        le=1 << 32,
        description="Bytes per copy for pairs CUDA grants no peer access (staged through "
        "host memory, ~10-40 GB/s: 32 MiB keeps the matrix within its time budget); those "
        "pairs are not timed both ways.",
    )
    iterations: int = Field(default=10, ge=1, le=1000, description="Timed copies per pair.")
    warmup_iterations: int = Field(
        default=2, ge=0, le=100, description="Untimed copies per pair before the timed ones."
    )
    bidirectional: bool = Field(
        default=True, description="Also time both directions at once (reported, not judged)."
    )

    def minimum_for(self, gpu_model: str | None) -> float | None:
        return per_model_value(self.min_gbps_by_model, gpu_model, None)

    def every_pair_required(self, gpu_model: str | None) -> bool:
        if gpu_model is None:
            return False
        return gpu_model in self.all_pairs_models or (
            gpu_model_class(gpu_model) in self.all_pairs_models
        )


class PeerBandwidthObserved(ObservedModel):
    gpus: int
    # detail (dropped when condensed)
    bytes: int | None = None
    paths: list[str] | None = None
    gbps: list[list[float]] | None = None
    bidir_gbps: list[list[float]] | None = Field(default=None, alias="bidirGBps")
    staged_bytes: int | None = None  # bytes per copy of the pairs without peer access
    # per GPU: pinned host-to-device GB/s that pcie_link measured (0: none)
    h2d_gbps: list[float] | None = Field(default=None, alias="h2dGBps")
    # both forms
    no_peer_access: dict[str, str] | None = None  # NVML's word -> pairs text
    failed_gpus: dict[str, str] | None = None
    failed_pairs: dict[str, str] | None = None  # what the copy raised -> pairs text
    # condensed
    # path -> [the median pair's GB/s, src, dst, GB/s of the weakest pair]
    weakest: dict[str, tuple[float, int, int, float]] | None = None
    # the PCIe peer pair lowest against its host-staged floor: [src, dst, GB/s, floor]
    pcie_floor: tuple[int, int, float, float] | None = None

    @model_validator(mode="after")
    def _well_formed(self) -> "PeerBandwidthObserved":
        for matrix in (self.gbps, self.bidir_gbps):
            if matrix is not None and not _square(matrix, self.gpus):
                raise ValueError("gbps and bidirGBps must be gpus x gpus")
        if self.paths is not None and not _square(self.paths, self.gpus):
            raise ValueError("paths must be gpus strings of gpus characters")
        if self.h2d_gbps is not None and len(self.h2d_gbps) != self.gpus:
            raise ValueError("h2dGBps must have one figure per GPU")
        for text in [*(self.no_peer_access or {}).values(), *(self.failed_pairs or {}).values()]:
            if any(g >= self.gpus for pair in parse_pairs(text, self.gpus) for g in pair):
                raise ValueError(f"noPeerAccess names a GPU beyond {self.gpus}: {text[:20]!r}")
        return self


def _square(rows: Sequence[Sized], n: int) -> bool:
    """Whether ``rows`` are ``n`` rows of ``n`` entries each."""
    return len(rows) == n and all(len(row) == n for row in rows)


# --- pairs text -------------------------------------------------------------------------
def every_pair(gpus: int) -> set[Pair]:
    return {(s, d) for s in range(gpus) for d in range(gpus) if s != d}


def format_pairs(pairs: set[Pair], gpus: int) -> str:
    """Ordered pairs as text: ``*`` every pair, ``3<>*`` GPU 3 with every other GPU both
    ways, ``2<>5`` both directions, ``2>5`` one."""
    if gpus > 1 and pairs == every_pair(gpus):
        return "*"
    left = set(pairs)
    items: list[str] = []
    for g in range(gpus):
        around = {(g, o) for o in range(gpus) if o != g} | {(o, g) for o in range(gpus) if o != g}
        if gpus > 2 and around <= left:
            items.append(f"{g}<>*")
            left -= around
    for s, d in sorted(left):
        if (s, d) not in left:
            continue
        if (d, s) in left:
            items.append(f"{min(s, d)}<>{max(s, d)}")
            left -= {(s, d), (d, s)}
        else:
            items.append(f"{s}>{d}")
            left.discard((s, d))
    return ",".join(items)


def parse_pairs(text: str, gpus: int) -> set[Pair]:
    """The inverse of :func:`format_pairs`; raises ValueError."""
    if text == "*":
        return every_pair(gpus)
    out: set[Pair] = set()
    for item in text.split(","):
        match = PAIR_ITEM.match(item)
        if match is None:
            raise ValueError(f"not a GPU pair: {item[:20]!r}")
        first, arrow, second = match.groups()
        s = int(first)
        if second == "*":
            out |= {(s, o) for o in range(gpus) if o != s} | {(o, s) for o in range(gpus) if o != s}
            continue
        d = int(second)
        out.add((s, d))
        if arrow == "<>":
            out.add((d, s))
    return out


# --- the pairs of either form -------------------------------------------------------------
def _no_access(o: PeerBandwidthObserved) -> dict[Pair, str]:
    """Pair → NVML's word, for every pair CUDA grants no peer access."""
    out: dict[Pair, str] = {}
    for word, text in (o.no_peer_access or {}).items():
        for pair in parse_pairs(text, o.gpus):
            out[pair] = word
    return out


def failed_pairs(o: PeerBandwidthObserved) -> set[Pair]:
    """The pairs whose copy raised an error (not a lost GPU: enabling peer access, ...)."""
    return {pair for text in (o.failed_pairs or {}).values() for pair in parse_pairs(text, o.gpus)}


def staged_floors(o: PeerBandwidthObserved) -> list[tuple[float, int, int, float, float]]:
    """For every pair with peer access over PCIe, both GPUs with an H2D figure: (GB/s
    over the floor, src, dst, GB/s, floor), lowest first; the floor is the host-staged
    rate, half the slower GPU's H2D. From the full form only."""
    if o.gbps is None or not o.h2d_gbps:
        return []
    no_access = _no_access(o)
    skipped = {int(g) for g in (o.failed_gpus or {})}
    lost = failed_pairs(o)
    out = []
    for s, d in sorted(every_pair(o.gpus) - lost):
        if s in skipped or d in skipped or path_of(o, (s, d), no_access) is not PairPath.PCIE:
            continue
        h2d = min(o.h2d_gbps[s], o.h2d_gbps[d])
        if h2d > 0:
            floor = round(h2d * STAGED_FRACTION, 2)
            out.append((o.gbps[s][d] / floor, s, d, o.gbps[s][d], floor))
    return sorted(out)


def path_of(o: PeerBandwidthObserved, pair: Pair, no_access: dict[Pair, str]) -> PairPath:
    if pair in no_access:
        return PairPath.HOST
    s, d = pair
    paths = o.paths or []
    if s < len(paths) and d < len(paths[s]) and paths[s][d] == NVML_CODES["nvlink"]:
        return PairPath.NVLINK
    return PairPath.PCIE


def pairs_by_path(
    o: PeerBandwidthObserved,
) -> tuple[dict[str, list[tuple[float, int, int]]], dict[str, float]]:
    """(path → its pairs as (GB/s, src, dst), weakest first; path → the median pair), from
    the full form (every measured pair) or the condensed one (the weakest kept)."""
    if o.gbps is not None:
        by_path = _full_pairs_by_path(o, o.gbps)
        medians = {p: statistics.median(g for g, _s, _d in v) for p, v in by_path.items()}
        return {p: sorted(v) for p, v in by_path.items()}, medians
    weakest = {p: [(gbps, s, d)] for p, (_m, s, d, gbps) in (o.weakest or {}).items()}
    return weakest, {p: median for p, (median, _s, _d, _g) in (o.weakest or {}).items()}


def _full_pairs_by_path(
    o: PeerBandwidthObserved, gbps_matrix: list[list[float]]
) -> dict[str, list[tuple[float, int, int]]]:
    """Path -> its measured pairs as (GB/s, src, dst), the pairs of a failed GPU and the
    pairs whose copy failed left out."""
    no_access = _no_access(o)
    failed = {int(g) for g in (o.failed_gpus or {})}
    lost = failed_pairs(o)
    by_path: dict[str, list[tuple[float, int, int]]] = {}
    for s, row in enumerate(gbps_matrix):
        for d, gbps in enumerate(row):
            if s == d or s in failed or d in failed or (s, d) in lost:
                continue
            path = path_of(o, (s, d), no_access)
            by_path.setdefault(path.value, []).append((gbps, s, d))
    return by_path


# --- judging ------------------------------------------------------------------------------
def _minimum(policy: PeerBandwidthPolicy, summary: HardwareSummary) -> float | None:
    """The per-model minimum, where it holds: an NVSwitch class's figure is that of a pair
    through the NVSwitches (~380 GB/s); a board without them (HGX 4-GPU: 6 NVLinks per
    pair, 150 GB/s a direction at line rate) is judged by the sibling rule only."""
    if without_nvswitch(summary) is not None:
        return None
    return policy.minimum_for(summary.gpu_model)


def _required(policy: PeerBandwidthPolicy, summary: HardwareSummary) -> str:
    if policy.every_pair_required(summary.gpu_model):
        return "all"
    return policy.peer_access_required.value


def _access_findings(
    o: PeerBandwidthObserved, policy: PeerBandwidthPolicy, summary: HardwareSummary
) -> list[str]:
    required = _required(policy, summary)
    findings = []
    for word, text in sorted((o.no_peer_access or {}).items()):
        must = (
            required == "all"
            or word == "nvlink"
            or (required == PeerAccessRule.NVML.value and word == "ok")
        )
        if must:
            said = {"nvlink": "NVLink P2P", "ok": "P2P supported"}.get(word, word)
            findings.append(f"no peer access on {text} (NVML: {said}; copies staged through host)")
    return findings


def _arrow(s: int, d: int) -> str:
    return f"GPU {s}\u2192{d}"


def _bandwidth_findings(
    o: PeerBandwidthObserved, policy: PeerBandwidthPolicy, summary: HardwareSummary
) -> list[str]:
    by_path, medians = pairs_by_path(o)
    minimum = _minimum(policy, summary)
    weak: dict[Pair, tuple[float, str]] = {}
    for path, pairs in by_path.items():
        median = medians.get(path)
        percent = policy.max_below_median_percent.get(PairPath(path))
        for gbps, s, d in pairs:
            if percent is not None and median and gbps < median * (1 - percent / 100):
                below = round((1 - gbps / median) * 100)
                weak[(s, d)] = (
                    gbps,
                    f"{gbps:.0f} GB/s, {below} % below the node median {median:.0f}",
                )
            elif minimum is not None and gbps < minimum:
                weak[(s, d)] = (gbps, f"{gbps:.0f} GB/s < {minimum:g}")
    ordered = sorted(weak.items(), key=lambda item: item[1][0])
    shown = [f"{_arrow(s, d)}: {what}" for (s, d), (_g, what) in ordered[:SHOWN]]
    more = f" (+{len(ordered) - SHOWN} pairs)" if len(ordered) > SHOWN else ""
    return ["; ".join(shown) + more] if shown else []


def _floor_findings(o: PeerBandwidthObserved) -> list[str]:
    if o.gbps is not None:
        below = [(s, d, g, f) for _r, s, d, g, f in staged_floors(o) if g < f]
    else:
        below = (
            [o.pcie_floor] if o.pcie_floor is not None and o.pcie_floor[2] < o.pcie_floor[3] else []
        )
    if not below:
        return []
    shown = [f"{_arrow(s, d)}: {g:.1f} GB/s" for s, d, g, _f in below[:SHOWN]]
    more = f" (+{len(below) - SHOWN} pairs)" if len(below) > SHOWN else ""
    floor = below[0][3]
    return [
        f"{'; '.join(shown)}{more} with peer access over PCIe, below the host-staged rate "
        f"{floor:.1f} GB/s (half the slower GPU's H2D): P2P detours (PCIe ACS, IOMMU)"
    ]


def _failed_pair_findings(o: PeerBandwidthObserved) -> list[str]:
    return [f"peer copy failed on {text}: {what}" for what, text in (o.failed_pairs or {}).items()]


def _form_findings(o: PeerBandwidthObserved, summary: HardwareSummary) -> list[str]:
    out = []
    if o.gpus != summary.gpu_count:
        out.append(f"the matrix covers {o.gpus} GPUs, the node has {summary.gpu_count}")
    if o.gpus >= 2 and o.gbps is None and o.weakest is None:
        out.append("no pair's bandwidth in the report (neither gbps nor weakest)")
    return out


def _expected(policy: PeerBandwidthPolicy, summary: HardwareSummary, required: str) -> JsonValue:
    return {
        "minGBps": _minimum(policy, summary),
        "maxBelowMedianPercent": {str(k): v for k, v in policy.max_below_median_percent.items()},
        "peerAccess": required,
    }


def judge(
    observed: PeerBandwidthObserved, policy: PeerBandwidthPolicy, summary: HardwareSummary
) -> CheckJudgement:
    required = _required(policy, summary)
    expected = _expected(policy, summary, required)
    lost = [f"GPU {g} failed: {what}" for g, what in (observed.failed_gpus or {}).items()]
    failing = _form_findings(observed, summary) + lost + _failed_pair_findings(observed)
    failing += _access_findings(observed, policy, summary)
    failing += _bandwidth_findings(observed, policy, summary)
    failing += _floor_findings(observed)
    if failing:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(failing)))
    by_path, medians = pairs_by_path(observed)
    parts = []
    for path, pairs in sorted(by_path.items()):
        low = pairs[0][0] if pairs else 0.0
        parts.append(f"{path}: median {medians.get(path, 0):.0f}, min {low:.0f} GB/s")
    unjudged = [
        f"no peer access on {text} ({word}: not required)"
        for word, text in sorted((observed.no_peer_access or {}).items())
    ]
    counted = f"{observed.gpus} GPUs" + (f", {'; '.join(parts)}" if parts else "")
    return CheckJudgement(
        CheckStatus.PASS, expected, clip("; ".join([counted, *_floor_note(observed), *unjudged]))
    )


def _floor_note(o: PeerBandwidthObserved) -> list[str]:
    lowest = staged_floors(o)[:1] if o.gbps is not None else []
    pair = (lowest[0][1], lowest[0][2], lowest[0][3], lowest[0][4]) if lowest else o.pcie_floor
    if pair is None:
        return []
    s, d, gbps, floor = pair
    return [
        f"PCIe peer pairs above the host-staged floor (lowest {_arrow(s, d)} "
        f"{gbps:.1f} >= {floor:.1f})"
    ]


def condense(observed: PeerBandwidthObserved) -> PeerBandwidthObserved:
    if observed.gbps is None:
        return observed
    by_path, medians = pairs_by_path(observed)
    floors = staged_floors(observed)
    return observed.model_copy(
        update={
            "bytes": None,
            "paths": None,
            "gbps": None,
            "bidir_gbps": None,
            "staged_bytes": None,
            "h2d_gbps": None,
            "pcie_floor": (floors[0][1], floors[0][2], floors[0][3], floors[0][4])
            if floors
            else None,
            "weakest": {
                # a median of figures in tenths is exact in hundredths
                p: (round(medians[p], 2), pairs[0][1], pairs[0][2], pairs[0][0])
                for p, pairs in by_path.items()
                if pairs
            },
        }
    )


PEER_SETUP_S = 0.02  # per ordered pair: buffers and CUDA events (an estimate)
FALLBACK_PEER_GBPS = 300.0  # no minimum in the policy: the h100-sxm/h200-sxm default
STAGED_PEER_GBPS = 10.0  # a copy staged through host memory, at worst: Gen4 nodes stage at
# 20-22 GB/s (NVIDIA/nccl issue 814), HGX H100 at 37 (issue 1264); half of Gen4's rate


def budget(section: PeerBandwidthPolicy, gpus: int) -> PhaseEstimate:
    """The slower of the two nodes the matrix meets: every pair with peer access (the
    policy's buffer, both ways too) or none (staged through host memory: the smaller
    ``stagedBufferBytes``, one way only)."""
    minimums = [v for v in section.min_gbps_by_model.values() if v > 0]
    rate = min(minimums) if minimums else FALLBACK_PEER_GBPS
    ordered = gpus * (gpus - 1)
    copies = section.warmup_iterations + section.iterations
    one_way = ordered * copies * section.buffer_bytes / (rate * 1e9)
    both = one_way if section.bidirectional else 0.0  # half the pairs, twice the bytes each
    staged = ordered * copies * section.staged_buffer_bytes / (STAGED_PEER_GBPS * 1e9)
    setup = ordered * PEER_SETUP_S
    return PhaseEstimate(
        "GPU-pair peer copy matrix (and both directions at once)",
        max(one_way + both, staged) + setup,
        f"the slower of: with peer access, {ordered} ordered pairs x {copies} copies of "
        f"{section.buffer_bytes >> 20} MiB at {rate:g} GB/s (the lowest that passes) = "
        f"{one_way:.1f} s, the same again both ways = {one_way + both:.1f} s; without peer "
        f"access, {ordered} x {copies} copies of {section.staged_buffer_bytes >> 20} MiB "
        f"(`stagedBufferBytes`) staged through host memory at {STAGED_PEER_GBPS:g} GB/s, "
        f"one way only = {staged:.1f} s; + {ordered} x {PEER_SETUP_S:g} s buffers and streams",
        f"the policy; staged rate: 20-22 GB/s on PCIe Gen4 (NVIDIA/nccl issue 814), halved; "
        f"{NOT_ON_GPU}",
    )


def claims(o: PeerBandwidthObserved, summary: HardwareSummary) -> Claims:
    """The matrix is the report's GPUs (its shape is the model's own rule); each pair's
    copy within its link's rate, both directions within twice it."""
    one_way, both = peer_bound(summary), 2 * peer_bound(summary)
    out = Claims().count("gpus", o.gpus).per_gpu("h2dGBps", o.h2d_gbps)
    out.keys("failedGpus", o.failed_gpus)
    for row in o.gbps or []:
        out.each("gbps", row, one_way)
    for row in o.bidir_gbps or []:
        out.each("bidirGBps", row, both)
    out.each("h2dGBps", o.h2d_gbps, host_copy_bound(summary))
    for path, (median, src, dst, weakest) in (o.weakest or {}).items():
        name = f"weakest.{path[:16]}"
        out.gpu(name, src).gpu(name, dst).figure(name, median, one_way)
        out.figure(name, weakest, one_way)
    if o.pcie_floor is not None:
        src, dst, rate, floor = o.pcie_floor
        out.gpu("pcieFloor", src).gpu("pcieFloor", dst)
        out.figure("pcieFloor", rate, one_way).figure("pcieFloor", floor, one_way)
    return out


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = """\
| field | default | meaning |
|-------|---------|---------|
| `minGBpsByModel` | `{h100-sxm: 300, h200-sxm: 300}` | Per GPU model (exact NVML name or class): every ordered pair's unidirectional copy must reach this many GB/s. A model not listed has no minimum. |
| `maxBelowMedianPercent` | `{nvlink: 10}` | Per path: a pair more than this many percent below the median pair of the same path on the node fails. A path not listed (`pcie`, `host`) is not compared. |
| `peerAccessRequired` | `nvml` | Which pairs must have CUDA peer access: `nvlink` (NVML reports NVLink P2P), `nvml` (NVML reports P2P supported, over NVLink or PCIe), `all` (every pair). |
| `allPairsModels` | `[h100-sxm, h200-sxm, b200]` | Models on which every pair must have peer access, whatever NVML says. |
| `bufferBytes` | 268435456 (256 MiB) | Bytes per copy. |
| `stagedBufferBytes` | 33554432 (32 MiB) | Bytes per copy for pairs CUDA grants no peer access; those pairs are copied one way only. |
| `iterations` / `warmupIterations` | 10 / 2 | Timed and untimed copies per pair. |
| `bidirectional` | `true` | Also time both directions of every pair at once (reported, not judged). |

What it measures: for every ordered pair src → dst, `dst.copy_(src)` in torch,
which is a `cudaMemcpyAsync` on the source device's stream (torch's
`aten/src/ATen/native/cuda/Copy.cu`: it enables peer access first when CUDA
allows it; without peer access the driver stages the copy through host
memory). It is timed with CUDA events after the warm-up, as nvbandwidth's
copy-engine tests and CUDA's `peerBandwidthLatencyTest` do. Peer access is what
`cudaDeviceCanAccessPeer` (`torch.cuda.can_device_access_peer`) grants; what
the node *should* have comes from `nvmlDeviceGetP2PStatus` (the NVLink
capability first, then the read capability: `OK`, `CHIPSET_NOT_SUPPORTED`,
`GPU_NOT_SUPPORTED`, `IOH_TOPOLOGY_NOT_SUPPORTED`, `DISABLED_BY_REGKEY`,
`NOT_SUPPORTED`, `UNKNOWN`; what `nvidia-smi topo -p2p r` prints as OK, CNS,
GNS, TNS, …).

Why these defaults:

* **300 GB/s on H100/H200 SXM.** On HGX H100 the copy engines move 376–380 GB/s
  one way between any two GPUs and 740–773 GB/s both ways (NVIDIA/nccl issue
  1264: `peerBandwidthLatencyTest`, all 56 pairs within a few percent of each
  other; NVLink 4 is 450 GB/s per direction on paper). H200 SXM has the same
  NVLink 4 fabric. 300 is about 80 % of the measured figure: it catches a pair
  that lost a quarter of its bandwidth, and leaves room for a probe that times
  fewer, smaller copies than the benchmark. It is not measured by this probe
  on a GPU yet (no GPU was lent to this work): record the figure from
  `scripts/device-check.sh` runs on a multi-GPU host and adjust. B200 and the
  PCIe parts have no minimum: no figure was found.
* **10 % below the NVLink median.** On an NVSwitch board every pair crosses the
  same switches, and the matrix above is flat to within ~4 %; one NVLink of
  18 down costs 1/18 (5.6 %), which `nvlink` reports by name, two or more
  (11 %+) show here. PCIe pairs are not compared by default: their bandwidth
  depends on the path (one PCIe switch, one root complex, across sockets),
  and NVIDIA/nvbandwidth issue 50 shows a healthy 6-GPU PCIe node whose pairs
  differ by 17 % (26.3 vs 21.8 GB/s) by path alone.
* **Peer access.** On an HGX board (`allPairsModels`) the NVSwitches connect
  every pair, so every pair must have peer access: without it every copy and
  NCCL's traffic go through host memory. Elsewhere a pair must have it where
  NVML says P2P works (`nvml`). Where NVML itself says the chipset or the
  topology does not support P2P (CNS/TNS: many PCIe platforms, across
  sockets, or with the IOMMU in translation mode), that is what the platform
  does: not a failure by default (the trap `h100-pcie-8gpu-no-p2p.yaml`). A
  fleet that knows its nodes support P2P sets `peerAccessRequired: all`.
* **The host-staged floor** (no setting: it needs no per-model table). PCIe
  ACS on a PCIe switch or root port sends P2P traffic up through the root
  complex (NCCL's troubleshooting guide: "a significant performance reduction
  or even a hang"). CUDA cannot see it: NVML still says P2P works and
  `cudaDeviceCanAccessPeer` still grants peer access, so the peer-access rule
  passes the node. What it shows is a peer copy *slower than no P2P at all*:
  NVIDIA/nccl issue 814 (6 PCIe Gen4 GPUs, `peerBandwidthLatencyTest`) reads
  10–12 GB/s with P2P enabled and 20–22 GB/s with it disabled (staged through
  host memory). So every pair with peer access over PCIe (path `pcie`) must
  copy at least as fast as a staged copy would, bounded below by half the
  slower GPU's pinned H2D rate, which `pcie_link` measured on this node
  (`h2dGBps` in the observed value; a staged copy crosses PCIe twice, and is at
  best about the H2D rate: 20–22 of ~25 GB/s on Gen4 in NVIDIA/nccl issue 814, 37 of 53 on
  HGX H100 in NVIDIA/nccl issue 1264). Below it fails, naming the pair: `GPU 0→1: 21.0 GB/s
  with peer access over PCIe, below the host-staged rate 26.8 GB/s`. Why it
  cannot fail healthy hardware: healthy PCIe P2P runs near the H2D rate
  (NVIDIA/nvbandwidth issue 50: six A6000s on Gen4, 21.8–26.4 GB/s one way between
  every pair, the slowest across the CPU, "almost 80 % of full PCIe Gen 4
  speeds" per a reply there, where a Gen4 x16 H2D copy reaches 24–26 GB/s,
  nvbandwidth issue 15; nccl-tests issue 74: eight A40s on AMD EPYC, 40–50 GB/s
  both ways at once between PCIe pairs), at least 1.6 times the floor. Pairs without peer access (`host`) are staged copies: the floor is
  their own rate, and they are not held to it; NVLink pairs are not either.
  Where `pcie_link` is disabled or gave no H2D figure for a GPU, its pairs have
  no floor (the pass message says which pair was lowest against its floor when
  there is one). The fault profile `p2p-disabled-acs.yaml` models NVIDIA/nccl issue 814's
  ratio (peer copies at 0.4 of H2D); the traps `h100-nvl-8gpu-healthy.yaml`
  (P2P at the H2D rate) and `h100-pcie-8gpu-no-p2p.yaml` (no peer access,
  staged at half H2D) must pass.
* **Failures per pair, and the form.** A copy that raises for one pair
  (torch enables peer access on the first copy through
  `cudaDeviceEnablePeerAccess` under `C10_CUDA_CHECK`: `cudaErrorTooManyPeers`
  past 8 peers without NVSwitch raises `RuntimeError`) fails that pair by name
  (`peer copy failed on 0<>9: RuntimeError: ...`); the other pairs are still
  measured and judged. The matrix must cover the report's GPU count, and with
  2 GPUs or more carry its figures (`gbps`, or `weakest` when condensed).

The message names the pairs: `GPU 2→5: 180 GB/s, 53 % below the node median
380` or `no peer access on 3<>* (NVML: NVLink P2P; copies staged through
host)`. Pairs are written `2>5` (one direction), `2<>5` (both), `3<>*` (GPU 3
with every other GPU) and `*` (every pair). One GPU: `skip`.
"""  # noqa: E501, RUF001


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
# every ordered GPU pair's peer copy (256 MiB, CUDA events); HGX H100 moves 376-380 GB/s
# one way per pair (NVIDIA/nccl issue 1264): ~80 % of that. PCIe/NVL parts: no minimum.
minGBpsByModel: {h100-sxm: 300, h200-sxm: 300}
maxBelowMedianPercent: {nvlink: 10}   # NVSwitch pairs are within ~4 % of each other
peerAccessRequired: nvml              # where NVML says P2P works; CNS/TNS PCIe nodes pass
allPairsModels: [h100-sxm, h200-sxm, b200]   # HGX: every pair must have peer access
"""


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why=(
            "a pair has two ends and the switch or PCIe fabric between them; one slow pair "
            "does not say which end is bad"
        ),
        source="NCCL uses every pair of the node (NCCL `NCCL_P2P_LEVEL`, topology detection)",
    ),
    measuring=frozenset(
        {"buffer_bytes", "staged_buffer_bytes", "iterations", "warmup_iterations", "bidirectional"}
    ),
    judging=frozenset(
        {
            "min_gbps_by_model",
            "max_below_median_percent",
            "peer_access_required",
            "all_pairs_models",
        }
    ),
    name="peer_bandwidth",
    title="GPU-to-GPU bandwidth",
    summary="every ordered GPU pair's peer copy bandwidth at or above the per-model minimum "
    "and within a percentage of the node's median pair; peer access wherever NVML says P2P "
    "works (every pair on HGX boards)",
    reason=REASON,
    policy_model=PeerBandwidthPolicy,
    observed_model=PeerBandwidthObserved,
    judge=judge,
    condense=condense,
    claims=claims,
    shipped=SHIPPED,
    docs=DOCS,
    needs=frozenset({"h2d_gbps"}),  # pcie_link's H2D rates
    budget=budget,
    runbook=RunbookEntry(
        meaning=(
            "one GPU pair copies slower than its siblings or the model's minimum (message: "
            '"GPU 2→5: 180 GB/s, 52 % below the node median 378"), or a pair that should have '
            "peer access has none (copies staged through host memory)"
        ),
        fix=(
            "a weak NVLink pair: check `nvidia-smi nvlink -s` and `nvidia-smi topo -m`, reset "
            "the GPUs and re-probe, then reseat/RMA the baseboard; no peer access: "
            "`nvidia-smi topo -p2p r`, the IOMMU (`iommu=pt` or off) and PCIe ACS "
            "(`lspci -vvv | grep ACSCtl`: SrcValid+ redirects P2P through the root complex)"
        ),
    ),
)
