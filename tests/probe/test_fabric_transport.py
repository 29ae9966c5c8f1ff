"""The fabric probe reports the network transport NCCL used, from NCCL's own debug
output, and a pair that fell back to TCP sockets fails."""

from pathlib import Path

import pytest

from gpuaccept.checks.fabric_allreduce import (
    FabricAllreduceObserved,
    judge_fabric,
    parse_nccl_transport,
)
from gpuaccept.contracts.report import CheckStatus
from gpuaccept.probe.fabric import nccl_debug_env, nccl_transport

# Lines as NCCL 2.18-2.23 prints them with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
IB_LOG = (
    "node-a:1234:1290 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; "
    "OOB eth0:10.0.0.1<0>\nnode-a:1234:1290 [0] NCCL INFO Using network IB\n"
)
SOCKET_LOG = """node-a:1234:1290 [0] NCCL INFO NET/IB : No device found.
node-a:1234:1290 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
node-a:1234:1290 [0] NCCL INFO Using network Socket
"""


@pytest.mark.parametrize(
    ("text", "transport"),
    [
        (IB_LOG, "IB"),
        (SOCKET_LOG, "Socket"),
        ("NCCL INFO NET/OFI : Using aws-ofi", "OFI"),
        ("", None),
    ],
)
def test_the_transport_is_what_nccl_names(text: str, transport: str | None) -> None:
    assert parse_nccl_transport(text) == transport


def _observed(transport: str | None, backend: str = "nccl") -> FabricAllreduceObserved:
    return FabricAllreduceObserved.model_validate(
        {"backend": backend, "nodes": 2, "nodeRank": 0, "localRanks": 8, "ranks": 16,
         "busbwGBps": 21.5, "transport": transport}
    )  # fmt: skip


def test_a_pair_over_sockets_fails_even_without_a_minimum() -> None:
    judged = judge_fabric(_observed("Socket"), None)
    assert judged.status is CheckStatus.FAIL
    assert "socket transport (TCP), not RDMA" in judged.message
    assert judge_fabric(_observed("IB"), None).status is CheckStatus.PASS
    assert judge_fabric(_observed(None), None).status is CheckStatus.PASS  # older reports
    assert judge_fabric(_observed("Socket", backend="gloo"), None).status is CheckStatus.PASS
    assert judge_fabric(_observed("Socket"), None, require_rdma=False).status is (CheckStatus.PASS)


def test_the_ranks_write_nccl_debug_files_that_are_read_back(tmp_path: Path) -> None:
    env = nccl_debug_env({"NCCL_DEBUG_SUBSYS": "ALL"}, tmp_path)
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_DEBUG_SUBSYS"] == "ALL"  # the chart's setting is kept
    assert env["NCCL_DEBUG_FILE"] == str(tmp_path / "nccl-debug.%h.%p.log")
    (tmp_path / "nccl-debug.node-a.11.log").write_text(IB_LOG)
    assert nccl_transport(tmp_path) == "IB"
    (tmp_path / "nccl-debug.node-a.12.log").write_text(SOCKET_LOG)
    assert nccl_transport(tmp_path) == "Socket"  # one rank on sockets is the pair's


def test_the_fabric_command_line_says_whether_sockets_may_pass() -> None:
    """The operator adds --allow-socket-transport under fabric.requireRdma: false."""
    from gpuaccept.probe.fabric_cli import build_parser, plan_run  # noqa: PLC0415

    base = ["--rendezvous-address", "10.0.0.1", "--node-rank", "0", "--local-ranks", "1"]
    assert plan_run(build_parser().parse_args(base)).require_rdma is True
    allowed = build_parser().parse_args([*base, "--allow-socket-transport"])
    assert plan_run(allowed).require_rdma is False
