"""Measures :mod:`gpuaccept.checks.peer_bandwidth`: peer access and a timed peer copy for
every ordered pair of GPUs, and both directions at once for every unordered pair.

Time on 8 GPUs at the defaults (256 MiB, 2 + 10 copies per pair; docs/probe.md has the
derivation): 56 ordered pairs x 12 copies x 256 MiB at ~380 GB/s (NVLink 4) = 0.5 s,
28 bidirectional pairs the same again; with launch and synchronisation ~1-2 s. Pairs
without peer access (staged through host memory, ~10-25 GB/s) take ~0.15-0.3 s each.
"""

from gpuaccept.checks.peer_bandwidth import (
    NVML_CODES,
    Pair,
    PeerBandwidthObserved,
    PeerBandwidthPolicy,
    format_pairs,
)
from gpuaccept.probe.hardware.base import GpuFailedError, HardwareBackend, Unavailable
from gpuaccept.probe.measure.context import ProbeContext
from gpuaccept.probe.measure.rounding import round_figure

FAILURE_MAX = 120


def _failure(exc: GpuFailedError) -> str:
    return f"{exc.step}: {exc.detail}"[:FAILURE_MAX]


def measure(
    hardware: HardwareBackend, policy: PeerBandwidthPolicy, context: ProbeContext
) -> PeerBandwidthObserved:
    gpus = hardware.gpus()
    if len(gpus) < 2:
        raise Unavailable(
            f"GPU-to-GPU bandwidth needs at least 2 GPUs ({len(gpus)} visible: no pair to copy "
            "between)"
        )
    n = len(gpus)
    failed: dict[int, str] = {
        g.index: f"enumeration: {g.problem}"[:FAILURE_MAX] for g in gpus if g.problem
    }
    paths = [["-"] * n for _ in range(n)]
    no_access: dict[str, set[Pair]] = {}
    gbps = [[0.0] * n for _ in range(n)]
    bidir = [[0.0] * n for _ in range(n)]

    def usable(*pair: int) -> bool:
        return not any(g in failed for g in pair)

    ordered = [(s.index, d.index) for s in gpus for d in gpus if s.index != d.index]
    for s, d in ordered:
        if not usable(s, d):
            continue
        try:
            access = hardware.peer_access(s, d)
        except GpuFailedError as exc:
            failed[exc.gpu] = _failure(exc)
            continue
        paths[s][d] = NVML_CODES.get(access.nvml, NVML_CODES["unknown"])
        if not access.cuda:
            no_access.setdefault(access.nvml, set()).add((s, d))
    context.progress(f"{len(ordered)} ordered pairs, {policy.buffer_bytes >> 20} MiB copies")
    args = (policy.buffer_bytes, policy.iterations, policy.warmup_iterations)
    for s, d in ordered:
        if not usable(s, d):
            continue
        try:
            gbps[s][d] = round_figure(hardware.peer_copy(s, d, *args))
        except GpuFailedError as exc:
            failed[exc.gpu] = _failure(exc)
    if policy.bidirectional:
        for s, d in ordered:
            if s > d or not usable(s, d):
                continue
            try:
                both = round_figure(hardware.peer_copy_bidirectional(s, d, *args))
            except GpuFailedError as exc:
                failed[exc.gpu] = _failure(exc)
                continue
            bidir[s][d] = bidir[d][s] = both
    return PeerBandwidthObserved(
        gpus=n,
        bytes=policy.buffer_bytes,
        paths=["".join(row) for row in paths],
        gbps=gbps,
        bidir_gbps=bidir if policy.bidirectional else None,
        no_peer_access={w: format_pairs(p, n) for w, p in sorted(no_access.items())} or None,
        failed_gpus={str(g): what for g, what in sorted(failed.items())} or None,
    )
