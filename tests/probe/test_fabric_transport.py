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
from gpuaccept.probe.fabric_run import nccl_debug_env, nccl_transport

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


def test_an_nccl_run_whose_transport_is_unknown_does_not_pass() -> None:
    """No transport line in NCCL's output (a platform's own NCCL_DEBUG, a debug file
    not written): RDMA cannot be told from TCP sockets (issue 37, item 4)."""
    judged = judge_fabric(_observed(None), 10.0)
    assert judged.status is CheckStatus.ERROR
    assert "transport unknown" in judged.message
    assert judge_fabric(_observed(None, backend="gloo"), None).status is CheckStatus.PASS
    assert judge_fabric(_observed(None), None, require_rdma=False).status is CheckStatus.PASS


@pytest.mark.parametrize(
    ("platform", "level", "subsystems"),
    [
        ({"NCCL_DEBUG": "WARN"}, "INFO", "INIT,NET"),
        ({"NCCL_DEBUG": "VERSION", "NCCL_DEBUG_SUBSYS": "COLL"}, "INFO", "COLL,NET"),
        ({"NCCL_DEBUG": "TRACE", "NCCL_DEBUG_SUBSYS": "ALL"}, "TRACE", "ALL"),
        ({"NCCL_DEBUG": "info", "NCCL_DEBUG_SUBSYS": "init,net"}, "info", "init,net"),
        ({"NCCL_DEBUG_SUBSYS": "^NET,COLL"}, "INFO", "^COLL"),
        ({"NCCL_DEBUG_SUBSYS": "^NET"}, "INFO", "ALL"),
    ],
)
def test_the_platforms_nccl_debug_settings_still_leave_the_transport_line(
    tmp_path: Path, platform: dict[str, str], level: str, subsystems: str
) -> None:
    """NCCL_DEBUG levels VERSION < WARN < INFO < TRACE; NCCL_DEBUG_SUBSYS a comma list,
    ``^`` to exclude (NCCL user guide, Logging). The ranks' debug goes to the probe's
    own files whatever NCCL_DEBUG_FILE the platform set."""
    env = nccl_debug_env({**platform, "NCCL_DEBUG_FILE": "/var/log/nccl.log"}, tmp_path)
    assert (env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == (level, subsystems)
    assert env["NCCL_DEBUG_FILE"] == str(tmp_path / "nccl-debug.%h.%p.log")
