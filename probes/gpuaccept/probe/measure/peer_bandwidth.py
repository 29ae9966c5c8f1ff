"""Measures :mod:`gpuaccept.checks.peer_bandwidth`: peer access and a timed peer copy for
every ordered pair of GPUs, and both directions at once for every unordered pair with
peer access.

Time on 8 GPUs at the defaults (docs/probe.md has the derivation): 56 ordered pairs x
12 copies x 256 MiB at ~380 GB/s (NVLink 4) = 0.5 s, 28 bidirectional pairs the same
again; with launch and synchronisation ~1-2 s. Pairs without peer access (staged through
host memory, ~10-40 GB/s) copy ``stagedBufferBytes`` (32 MiB) one way only: 56 x 12 x
32 MiB at 10 GB/s = 2.3 s at worst.

The pcie_link measurement leaves each GPU's H2D rate in the context; it goes into the
observed value (``h2dGBps``) for the host-staged floor of pairs with peer access over
PCIe. A copy that raises for one pair (:class:`PeerCopyFailedError`: enabling peer
access can fail past 8 peers without NVSwitch) is that pair's failure.
"""

from dataclasses import dataclass, field

from gpuaccept.checks.peer_bandwidth import (
    NVML_CODES,
    Pair,
    PeerBandwidthObserved,
    PeerBandwidthPolicy,
    format_pairs,
)
from gpuaccept.probe.hardware.base import (
    GpuFailedError,
    HardwareBackend,
    NoSuchInterface,
    PeerCopyFailedError,
    Unavailable,
)
from gpuaccept.probe.measure.context import ProbeContext
from gpuaccept.probe.measure.rounding import round_figure

FAILURE_MAX = 120
PAIR_ERROR_MAX = 80
PAIR_ERRORS_KEPT = 3  # distinct errors named; the pairs of any further ones go under the last


def _failure(exc: GpuFailedError) -> str:
    return f"{exc.step}: {exc.detail}"[:FAILURE_MAX]


@dataclass
class PairRun:
    """What the matrix found so far: failed GPUs, and the pairs each copy error hit."""

    failed: dict[int, str]
    pair_errors: dict[str, set[Pair]] = field(default_factory=dict)

    def usable(self, *pair: int) -> bool:
        return not any(g in self.failed for g in pair)

    def gpu_failed(self, exc: GpuFailedError) -> None:
        self.failed[exc.gpu] = _failure(exc)

    def pair_failed(self, exc: PeerCopyFailedError, *pairs: Pair) -> None:
        what = exc.detail[:PAIR_ERROR_MAX]
        if what not in self.pair_errors and len(self.pair_errors) >= PAIR_ERRORS_KEPT:
            what = list(self.pair_errors)[-1]
        self.pair_errors.setdefault(what, set()).update(pairs)


def _access(
    hardware: HardwareBackend, ordered: list[Pair], run: PairRun, n: int
) -> tuple[list[list[str]], dict[str, set[Pair]]]:
    """(NVML's character per pair, NVML's word -> the pairs CUDA grants no peer access)."""
    paths = [["-"] * n for _ in range(n)]
    no_access: dict[str, set[Pair]] = {}
    for s, d in ordered:
        if not run.usable(s, d):
            continue
        try:
            access = hardware.peer_access(s, d)
        except GpuFailedError as exc:
            run.gpu_failed(exc)
            continue
        paths[s][d] = NVML_CODES.get(access.nvml, NVML_CODES["unknown"])
        if not access.cuda:
            no_access.setdefault(access.nvml, set()).add((s, d))
    return paths, no_access


def _one_way(
    hardware: HardwareBackend,
    policy: PeerBandwidthPolicy,
    ordered: list[Pair],
    staged: set[Pair],
    run: PairRun,
) -> dict[Pair, float]:
    out: dict[Pair, float] = {}
    for s, d in ordered:
        if not run.usable(s, d):
            continue
        nbytes = policy.staged_buffer_bytes if (s, d) in staged else policy.buffer_bytes
        try:
            copied = hardware.peer_copy(s, d, nbytes, policy.iterations, policy.warmup_iterations)
            out[(s, d)] = round_figure(copied)
        except GpuFailedError as exc:
            run.gpu_failed(exc)
        except PeerCopyFailedError as exc:
            run.pair_failed(exc, (s, d))
    return out


def _both_ways(
    hardware: HardwareBackend,
    policy: PeerBandwidthPolicy,
    ordered: list[Pair],
    staged: set[Pair],
    run: PairRun,
) -> dict[Pair, float]:
    """Both directions at once for every unordered pair with peer access both ways
    (pairs staged through host memory are timed one way only: the time budget)."""
    args = (policy.buffer_bytes, policy.iterations, policy.warmup_iterations)
    out: dict[Pair, float] = {}
    for s, d in ordered:
        if s > d or not run.usable(s, d) or {(s, d), (d, s)} & staged:
            continue
        try:
            out[(s, d)] = round_figure(hardware.peer_copy_bidirectional(s, d, *args))
        except GpuFailedError as exc:
            run.gpu_failed(exc)
        except PeerCopyFailedError as exc:
            run.pair_failed(exc, (s, d), (d, s))
    return out


def _copies(
    hardware: HardwareBackend,
    policy: PeerBandwidthPolicy,
    ordered: list[Pair],
    staged: set[Pair],
    run: PairRun,
) -> tuple[dict[Pair, float], dict[Pair, float]]:
    """GB/s of every pair copied one way, and both ways when the policy asks for it."""
    one_way = _one_way(hardware, policy, ordered, staged, run)
    if not policy.bidirectional:
        return one_way, {}
    return one_way, _both_ways(hardware, policy, ordered, staged, run)


def _matrix(figures: dict[Pair, float], n: int, symmetric: bool = False) -> list[list[float]]:
    """The figures as a matrix (source row, destination column), 0 where none."""
    matrix = [[0.0] * n for _ in range(n)]
    for (s, d), value in figures.items():
        matrix[s][d] = value
        if symmetric:
            matrix[d][s] = value
    return matrix


def _failures(run: PairRun, n: int) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """The GPUs that failed (why), and the pairs whose copy failed (by error)."""
    return (
        {str(g): what for g, what in sorted(run.failed.items())} or None,
        {what: format_pairs(p, n) for what, p in run.pair_errors.items()} or None,
    )


def _at_least_two(gpus: int) -> None:
    """One GPU: nothing to measure (a node shape, NoSuchInterface); none: unavailable."""
    if gpus < 2:
        raise (NoSuchInterface if gpus == 1 else Unavailable)(
            f"GPU-to-GPU bandwidth needs at least 2 GPUs ({gpus} visible: no pair to copy between)"
        )


def measure(
    hardware: HardwareBackend, policy: PeerBandwidthPolicy, context: ProbeContext
) -> PeerBandwidthObserved:
    gpus = hardware.gpus()
    _at_least_two(len(gpus))
    n = len(gpus)
    run = PairRun({g.index: f"enumeration: {g.problem}"[:FAILURE_MAX] for g in gpus if g.problem})
    ordered = [(s.index, d.index) for s in gpus for d in gpus if s.index != d.index]
    paths, no_access = _access(hardware, ordered, run, n)
    context.progress(f"{len(ordered)} ordered pairs, {policy.buffer_bytes >> 20} MiB copies")
    staged = {pair for pairs in no_access.values() for pair in pairs}
    one_way, both_ways = _copies(hardware, policy, ordered, staged, run)
    failed_gpus, failed_pairs = _failures(run, n)
    h2d = context.h2d_gbps
    return PeerBandwidthObserved(
        gpus=n,
        bytes=policy.buffer_bytes,
        paths=["".join(row) for row in paths],
        gbps=_matrix(one_way, n),
        bidir_gbps=_matrix(both_ways, n, symmetric=True) if policy.bidirectional else None,
        staged_bytes=policy.staged_buffer_bytes if staged else None,
        h2d_gbps=[h2d.get(g.index, 0.0) for g in gpus] if h2d else None,
        no_peer_access={w: format_pairs(p, n) for w, p in sorted(no_access.items())} or None,
        failed_gpus=failed_gpus,
        failed_pairs=failed_pairs,
    )
