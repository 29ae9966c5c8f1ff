"""``fabric_allreduce``: all-reduce bus bandwidth across two nodes (docs/fabric.md).

Not a single-node check, so not in the registry: the operator runs it in its own
fabric phase, one probe pod on each node of a pair (``gpuaccept probe fabric``),
and judges the *pair*. Its result travels in the same :class:`ProbeReport` as
the single-node checks, as the report's one result, ``check: fabric_allreduce``.

observed::

    {"backend": "nccl", "source": "measured", "nodes": 2, "nodeRank": 1,
     "localRanks": 8, "ranks": 16, "rendezvous": "10.0.3.7:29500",
     "bytes": 8589934592, "busbwGBps": 371.2, "algbwGBps": 198.0,
     "timing": "host-batch-mean", "sweep": [[1048576, 21.0], ..., [8589934592, 371.0]],
     "ncclEnv": {"NCCL_IB_HCA": "=mlx5_0,mlx5_1"}}

Timed as ``nccl_allreduce`` and nccl-tests' ``all_reduce_perf`` across nodes:
per rank the host clock over a batch of back-to-back all-reduces, divided by the
iterations, then averaged over every rank of both nodes (an all-reduce of the
times), so both pods report the same figure. ``busbw = algbw x 2(n-1)/n`` with
``n`` the ranks of both nodes. ``source: "loopback"``: a simulated node's pair
measured for real with gloo over the loopback, each node throttled to its
profile's ``interNode.busbwGBps`` (docs/profile-format.md) and reported in the
profile's units. On an error, ``phase`` says how far it got: ``rendezvous`` (the
pods never met: evidence against neither node) or ``allreduce`` (they met and
the collective broke).
"""

from typing import Literal

from pydantic import Field, JsonValue

from gpuaccept.checks.spec import CheckJudgement, ObservedModel, clip
from gpuaccept.contracts.report import CheckStatus

CHECK = "fabric_allreduce"
REASON = "FabricAllreduceFailed"
Phase = Literal["rendezvous", "allreduce"]
MAX_NCCL_ENV = 12
"""NCCL_* variables recorded at most (the report must fit the termination message)."""


class FabricAllreduceObserved(ObservedModel):
    backend: str | None = None
    source: str | None = None  # "measured", or "loopback" for a simulated node
    nodes: int = Field(ge=2)
    node_rank: int = Field(ge=0, alias="nodeRank")
    local_ranks: int = Field(ge=1, alias="localRanks")
    ranks: int = Field(ge=2)
    rendezvous: str | None = Field(default=None, max_length=64)
    bytes: int | None = None  # the largest message
    busbw_gbps: float | None = Field(default=None, alias="busbwGBps")
    algbw_gbps: float | None = Field(default=None, alias="algbwGBps")
    timing: str | None = Field(default=None, max_length=32)
    sweep: list[tuple[int, float]] | None = None  # [bytes, busbw GB/s] per message size
    phase: Phase | None = None  # how far a run that failed got
    nccl_env: dict[str, str] | None = Field(default=None, alias="ncclEnv")


def judge_fabric(observed: FabricAllreduceObserved, minimum: float | None) -> CheckJudgement:
    """The pair's busbw at the largest message against ``minimum`` (GB/s)."""
    expected: JsonValue = {"minBusbwGBps": minimum} if minimum is not None else None
    busbw = observed.busbw_gbps
    if busbw is None:
        return CheckJudgement(CheckStatus.ERROR, expected, "no fabric busbw measured")
    label = " (loopback, simulated)" if observed.source == "loopback" else ""
    figure = f"fabric busbw {busbw:g} GB/s over {observed.ranks} ranks on {observed.nodes} nodes"
    figure += label
    if busbw <= 0:
        return CheckJudgement(CheckStatus.FAIL, expected, clip(f"{figure}: no bandwidth"))
    if minimum is None:
        return CheckJudgement(CheckStatus.PASS, expected, clip(f"{figure}; no minimum set"))
    if busbw < minimum:
        return CheckJudgement(CheckStatus.FAIL, expected, clip(f"{figure} < {minimum:g}"))
    return CheckJudgement(CheckStatus.PASS, expected, clip(f"{figure} >= {minimum:g}"))
