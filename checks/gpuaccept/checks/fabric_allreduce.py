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

import json
import re
from enum import StrEnum
from typing import Literal

from pydantic import Field, JsonValue

from gpuaccept.checks.claims import Claims, busbw_bound
from gpuaccept.checks.spec import CheckJudgement, ObservedModel, clip
from gpuaccept.contracts.contract_model import ContractModel
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

CHECK = "fabric_allreduce"
REASON = "FabricAllreduceFailed"
FabricRunStep = Literal["rendezvous", "allreduce"]
MAX_NCCL_ENV = 12
"""NCCL_* variables recorded at most (the report must fit the termination message)."""


DEFAULT_MAX_MESSAGE_BYTES = 1 << 33
"""As ``nccl_allreduce``: 8 GiB, on the plateau."""


class NoPartnerAction(StrEnum):
    """What a node without a fabric verdict by the deadline gets."""

    HOLD = "hold"
    ACCEPT = "accept"


class FabricPolicy(ContractModel):
    """The policy's ``fabric`` section: the two-node all-reduce after the single-node
    checks (docs/fabric.md). RDMA resources, annotations, capabilities and NCCL
    settings are the chart's (the platform team's), not the policy's."""

    enabled: bool = Field(
        default=False,
        description="Test each node that passed the single-node checks in a pair with "
        "another node (phase Fabric) before accepting it.",
    )
    min_busbw_gbps: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        alias="minBusbwGBps",
        description="Lowest passing busbw of a pair at the largest message, GB/s. Unset: "
        "a pair fails only when it moves nothing or breaks (the right figure depends on "
        "the cluster's NICs; docs/policy.md).",
    )
    require_rdma: bool = Field(
        default=True,
        alias="requireRdma",
        description="A pair NCCL ran over its socket transport (TCP: no /dev/infiniband in "
        "the pod) fails. false: for fleets that run the fabric test over TCP on purpose.",
    )
    deadline_seconds: int = Field(
        default=1800,
        ge=60,
        le=604800,
        description="Seconds a node may wait in phase Fabric for a verdict, from the moment "
        "it began waiting; then onNoPartner applies.",
    )
    on_no_partner: NoPartnerAction = Field(
        default=NoPartnerAction.HOLD,
        description="hold (default): a node without a verdict by the deadline keeps the "
        "pending taint and is still paired when a partner comes; accept: it is accepted, "
        "its status saying the fabric was not judged.",
    )
    idle_accepted_partners: bool = Field(
        default=False,
        description="Accepted nodes that never passed a pair may be partners while idle "
        "(no pod requests their GPUs). Nodes that passed a pair are partners either way.",
    )
    witness_window_seconds: int = Field(
        default=86400,
        ge=60,
        le=90 * 86400,
        description="How long a partner's passing pair counts as evidence that it is good "
        "(a witness in a conviction, a cleared reference); older, or from before the "
        "partner's last reboot, it is tested again.",
    )
    max_message_bytes: int = Field(
        default=DEFAULT_MAX_MESSAGE_BYTES,
        ge=1 << 20,
        le=1 << 34,
        description="The largest message of the sweep (from 1 MiB, doubling): the one judged.",
    )


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
    phase: FabricRunStep | None = None  # how far a run that failed got
    nccl_env: dict[str, str] | None = Field(default=None, alias="ncclEnv")
    # The network transport NCCL used, as its own debug output names it (NCCL_DEBUG=INFO,
    # subsystem NET: "NET/IB : Using ...", "Using network Socket"): IB, Socket, or a
    # plugin's name (IBext, OFI...). None: not NCCL, or not found in its output.
    transport: str | None = Field(default=None, max_length=32)


SOCKET_TRANSPORT = "Socket"  # NCCL's TCP transport: no RDMA
_TRANSPORT_RES = (
    re.compile(r"NCCL INFO Using network (\S+)"),
    re.compile(r"NCCL INFO NET/(\S+?)\s*: Using"),
)


def parse(observed: JsonValue) -> FabricAllreduceObserved:
    """A fabric result's ``observed``, strictly (as the single-node checks': a figure a
    JSON number, a count a JSON integer); raises ValueError."""
    return FabricAllreduceObserved.model_validate_json(json.dumps(observed), strict=True)


def claims(o: FabricAllreduceObserved, summary: HardwareSummary) -> Claims:
    """Its node's rank among the pair's nodes, its local ranks among all ranks (one per
    GPU of the report when it names GPUs; a loopback pair names none) and busbw within
    twice a GPU's link rate (no network beats the node's own NVLink)."""
    most = busbw_bound(summary)
    out = Claims().figure("nodeRank", o.node_rank, o.nodes - 1)
    out.figure("localRanks", o.local_ranks, o.ranks)
    if summary.gpu_count:
        out.count("localRanks", o.local_ranks)
    out.figure("busbwGBps", o.busbw_gbps, most).figure("algbwGBps", o.algbw_gbps, most)
    return out.each("sweep", [busbw for _, busbw in o.sweep or []], most)


def parse_nccl_transport(text: str) -> str | None:
    """The network transport NCCL's debug output names (the first it reports)."""
    for pattern in _TRANSPORT_RES:
        match = pattern.search(text)
        if match is not None:
            return match.group(1)[:32]
    return None


def judge_fabric(
    observed: FabricAllreduceObserved, minimum: float | None, *, require_rdma: bool = True
) -> CheckJudgement:
    """The pair's busbw at the largest message against ``minimum`` (GB/s); with
    ``require_rdma``, a pair NCCL ran over its socket transport fails (without
    /dev/infiniband in the pod NCCL silently falls back to TCP sockets), and an NCCL
    run whose transport is unknown is an error, never a pass."""
    expected: JsonValue = {"minBusbwGBps": minimum} if minimum is not None else None
    busbw = observed.busbw_gbps
    if busbw is None:
        return CheckJudgement(CheckStatus.ERROR, expected, "no fabric busbw measured")
    if require_rdma and observed.backend == "nccl" and observed.transport == SOCKET_TRANSPORT:
        return CheckJudgement(
            CheckStatus.FAIL,
            expected,
            clip(
                f"fabric busbw {busbw:g} GB/s over NCCL's socket transport (TCP), not RDMA: "
                "the pods have no /dev/infiniband (the chart's RDMA resource) or no IPC_LOCK"
            ),
        )
    if require_rdma and observed.backend == "nccl" and observed.transport is None:
        # no transport line in NCCL's debug output: RDMA cannot be told from TCP sockets,
        # and busbw alone does not (a pair over sockets can pass a low minimum)
        return CheckJudgement(
            CheckStatus.ERROR,
            expected,
            clip(
                f"fabric busbw {busbw:g} GB/s, transport unknown: NCCL's debug output "
                "names none, so RDMA cannot be told from TCP sockets"
            ),
        )
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
