"""What one check's result claims about the node, so that it can be held to the node.

Every check declares ``claims(observed, summary) -> Claims`` in its ``SPEC`` (a
required field of :class:`~gpuaccept.checks.spec.CheckSpec`): the GPU counts its
result carries, every GPU it names (an index, a range text ``"0-3,5"``, a key of a
per-GPU map), the length of every per-GPU list, and every figure with the most
any hardware of the node's model can give. :func:`claims_problem` holds them to
the report's GPU count (which the operator holds to the node's): one rule set for
a fresh report, a stored one judged again and a fabric result. A result that
breaks one is not evidence about this node: the operator refuses the report
(``ReportMismatch``), it never judges it.

The physical limits and their sources are in docs/report-format.md ("Plausible
figures"); the margins are generous on purpose: a figure past them is one no
hardware produced, never a fast healthy GPU.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuaccept.checks.gpu_models import gpu_model_class
from gpuaccept.checks.gpu_ranges import parse_gpus
from gpuaccept.contracts.report import HardwareSummary

# The margin over a peak figure (a datasheet's or a link's theoretical rate): no
# measurement reaches its peak, so 1.5 x is far beyond any healthy GPU.
MARGIN = 1.5

# PCIe: GB/s per lane and direction after line encoding (8b/10b to Gen2,
# 128b/130b Gen3-5, FLIT Gen6-7); PCI-SIG base specifications.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563, 7: 15.125}
PCIE_MAX_GEN = 7
PCIE_MAX_WIDTH = 32
# The classes whose host copies run over PCIe (GH200 copies over NVLink-C2C).
PCIE_COPY_CLASSES = frozenset({"h100-sxm", "h100-pcie", "h100-nvl", "h200-sxm", "h200-nvl", "b200"})
# Any host copy: NVLink-C2C's 900 GB/s (both directions) of GH200, for a class not known
# to copy over PCIe.
HOST_COPY_PEAK_GBPS = 900.0

# HBM peak per GPU, GB/s (NVIDIA datasheets); None: the fastest known.
HBM_PEAK_GBPS = {
    "h100-sxm": 3350.0,
    "h100-pcie": 2000.0,
    "h100-nvl": 3900.0,
    "h200-sxm": 4800.0,
    "h200-nvl": 4800.0,
    "gh200": 4900.0,
    "b200": 8000.0,
}
# NVLink per GPU and direction, GB/s (NVIDIA datasheets: 900 GB/s total on H100/H200
# SXM; 600 on the NVLink bridge of H100 PCIe and H100 NVL, 900 on H200 NVL's; 1.8 TB/s
# on B200). Without a bridge an H100 PCIe moves peer data over PCIe, well below this.
GPU_LINK_PEAK_GBPS = {
    "h100-sxm": 450.0,
    "h100-pcie": 300.0,
    "h100-nvl": 300.0,
    "h200-sxm": 450.0,
    "h200-nvl": 450.0,
    "gh200": 450.0,
    "b200": 900.0,
}
# Dense bf16 TFLOPS per GPU (NVIDIA datasheets, without sparsity); fp8 is twice that.
BF16_PEAK_TFLOPS = {
    "h100-sxm": 989.0,
    "h100-pcie": 756.0,
    "h100-nvl": 835.0,
    "h200-sxm": 989.0,
    "h200-nvl": 835.0,
    "gh200": 989.0,
    "b200": 2250.0,
}
SM_CLOCK_MAX_MHZ = 4000.0  # no datacenter GPU boosts past ~2.1 GHz
POWER_LIMIT_MAX_W = 2000.0  # B200: 1000 W, GB200: 1200 W
IB_RATE_MAX_GBITS = 1600.0  # XDR 4X: 800 Gb/s
NVLINK_MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS


def _peak(table: Mapping[str, float], summary: HardwareSummary) -> float:
    model_class = gpu_model_class(summary.gpu_model)
    if model_class is not None and model_class in table:
        return table[model_class]
    return max(table.values())


def hbm_bound(summary: HardwareSummary) -> float:
    return MARGIN * _peak(HBM_PEAK_GBPS, summary)


def peer_bound(summary: HardwareSummary) -> float:
    """One direction of a GPU pair's copy."""
    return MARGIN * _peak(GPU_LINK_PEAK_GBPS, summary)


def busbw_bound(summary: HardwareSummary) -> float:
    """An all-reduce's busbw: at most twice a GPU's link per direction (NVLink SHARP
    reduces in the switch; busbw counts 2(n-1)/n of the data), with the margin."""
    return 2 * MARGIN * _peak(GPU_LINK_PEAK_GBPS, summary)


def bf16_bound(summary: HardwareSummary) -> float:
    return MARGIN * _peak(BF16_PEAK_TFLOPS, summary)


def pcie_rate(gen: int, width: int) -> float:
    """A link's theoretical GB/s per direction; 0 for a link not known (gen or width 0)."""
    return PCIE_LANE_GBPS.get(gen, 0.0) * max(width, 0)


def host_copy_bound(summary: HardwareSummary, gen: int = 0, width: int = 0) -> float:
    """A pinned host copy: the link's rate (the widest the GPU reports) for a class that
    copies over PCIe, else the fastest host link known."""
    if gpu_model_class(summary.gpu_model) in PCIE_COPY_CLASSES:
        link = pcie_rate(gen, width) or pcie_rate(PCIE_MAX_GEN, 16)
        return MARGIN * link
    return MARGIN * HOST_COPY_PEAK_GBPS


@dataclass(frozen=True)
class Figure:
    name: str  # the observed field, e.g. "busbwGBps"
    value: float
    most: float  # the most any hardware of the node's model gives


@dataclass
class Claims:
    """A result's GPU counts, the GPUs it names, and its figures (wire field names)."""

    counts: list[tuple[str, int]] = field(default_factory=list)
    gpus: list[tuple[str, int]] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    # a GPU text that does not parse: the result names GPUs no node has
    unreadable: list[str] = field(default_factory=list)
    # a list of GPUs that names one GPU twice: no probe writes that
    repeated: list[str] = field(default_factory=list)

    def count(self, name: str, gpus: int | None) -> "Claims":
        """``gpus``: how many GPUs the field covers (the node's count, exactly)."""
        if gpus is not None:
            self.counts.append((name, gpus))
        return self

    def per_gpu(self, name: str, values: Iterable[object] | None) -> "Claims":
        """A list with one entry per GPU, index order."""
        if values is not None:
            self.counts.append((name, len(list(values))))
        return self

    def gpu(self, name: str, index: int | None) -> "Claims":
        if index is not None:
            self.gpus.append((name, index))
        return self

    def indices(self, name: str, indices: Iterable[int] | None) -> "Claims":
        for index in indices or ():
            self.gpus.append((name, index))
        return self

    def gpu_set(self, name: str, indices: Iterable[int] | None) -> "Claims":
        """A set of GPUs (each named once, e.g. the GPUs whose copies were unpinned);
        unlike a list of events, which may name one GPU twice."""
        listed = list(indices or ())
        if len(set(listed)) != len(listed):
            self.repeated.append(name)
        return self.indices(name, listed)

    def ranges(self, name: str, text: str | list[int] | None) -> "Claims":
        """GPUs as range text (``"0-3,5"``, ``""`` none) or, in older reports, a list."""
        if isinstance(text, list):
            return self.indices(name, text)
        if text:
            try:
                self.indices(name, parse_gpus(text))
            except ValueError:
                self.unreadable.append(name)
        return self

    def keys(self, name: str, mapping: Mapping[str, object] | None) -> "Claims":
        """A map keyed by GPUs (range text)."""
        for key in mapping or {}:
            self.ranges(name, key)
        return self

    def values(self, name: str, mapping: Mapping[str, str] | None) -> "Claims":
        """A map whose values are GPUs (range text)."""
        for text in (mapping or {}).values():
            self.ranges(name, text)
        return self

    def figure(self, name: str, value: float | None, most: float) -> "Claims":
        if value is not None:
            self.figures.append(Figure(name, value, most))
        return self

    def spread(
        self, name: str, condensed: tuple[float, ...] | None, most: float, gpus: int
    ) -> "Claims":
        """A condensed per-GPU figure (per_gpu_figures.Spread): lowest, median, the
        lowest GPU, how many GPUs were measured, and (newer probes) the faster half's
        median."""
        if condensed is None:
            return self
        lowest, median, gpu, measured = condensed[:4]
        self.figure(name, lowest, most).figure(name, median, most).gpu(name, int(gpu))
        self.figure(f"{name} GPUs measured", measured, gpus)
        for faster_half in condensed[4:]:
            self.figure(name, faster_half, most)
        return self

    def each(self, name: str, values: Iterable[float] | None, most: float) -> "Claims":
        for value in values or ():
            self.figures.append(Figure(name, value, most))
        return self


def claims_problem(check: str, claims: Claims, gpus: int) -> str | None:
    """Why ``check``'s claims do not hold on a report of ``gpus`` GPUs, or None."""
    for name in claims.unreadable:
        return f"{check}.{name}: GPUs that are not a GPU range"
    for name in claims.repeated:
        return f"{check}.{name}: names a GPU twice"
    for name, count in claims.counts:
        if count != gpus:
            return f"{check}.{name} covers {count} GPUs; the report has {gpus}"
    for name, index in claims.gpus:
        if not 0 <= index < gpus:
            return f"{check}.{name} names GPU {index}; the report has {gpus} (0-{gpus - 1})"
    for figure in claims.figures:
        if not 0 <= figure.value <= figure.most:
            return (
                f"{check}.{figure.name} = {figure.value:g} is beyond what the hardware can "
                f"give (0 to {figure.most:g})"
            )
    return None
