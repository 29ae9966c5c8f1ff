"""``gpuaccept probe fabric``: one node's half of a two-node all-reduce
(docs/fabric.md). The real runs (``torchdist``) start the CLI twice, as two pods
would, each bound to its own 127.0.0.x, gloo over the loopback, each node held
to its profile's ``interNode.busbwGBps``."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpuaccept.checks.fabric_allreduce import (
    FabricAllreduceObserved,
    judge_fabric,
)
from gpuaccept.contracts.api import TERMINATION_MESSAGE_MAX_BYTES
from gpuaccept.contracts.probe_invocation import ENV_FABRIC_NONCE, ProbeExit
from gpuaccept.contracts.report import (
    CheckStatus,
    HardwareMode,
    ProbeReport,
    decode_termination_message,
)
from gpuaccept.probe.compact import termination_message
from gpuaccept.probe.fabric_cli import FabricRun, main, nccl_env, observe
from gpuaccept.probe.fabric_run import FabricJob, FabricMeasurement, Rendezvous
from gpuaccept.probe.hardware.allreduce import AllreduceTiming

ROOT = Path(__file__).resolve().parents[2]
HEALTHY_PROFILE = ROOT / "profiles" / "h100-sxm-8gpu-healthy.yaml"
HEALTHY_GBPS = 390.0
SLOW_GBPS = 180.0


def fabric_profile(tmp_path: Path, name: str, busbw: float | None) -> Path:
    path = tmp_path / f"{name}.yaml"
    data = yaml.safe_load(HEALTHY_PROFILE.read_text())
    data.pop("interNode", None)
    if busbw is not None:
        data["interNode"] = {"busbwGBps": busbw}
    path.write_text(yaml.safe_dump(data))
    return path


BASE = ["--rendezvous-address", "127.0.0.2", "--node-rank", "1", "--local-ranks", "8"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            ["--rendezvous-address", "gpu-7"],
            "--rendezvous-address: not an IP address (got 'gpu-7')",
        ),
        (["--bind-address", "10.0.0.300"], "--bind-address: not an IP address"),
        (["--node-rank", "2"], "--node-rank: must be between 0 and 1 (got 2)"),
        (["--nodes", "1"], "--nodes: must be between 2 and 64 (got 1)"),
        (["--rendezvous-port", "70000"], "--rendezvous-port: must be between 1 and 65535"),
        (["--local-ranks", "0"], "--local-ranks: must be between 1 and 64 (got 0)"),
        (["--min-busbw-gbps", "nan"], "--min-busbw-gbps: must be between 0 and 1e+06 (got nan)"),
        (["--deadline-s", "0"], "--deadline-s: must be between 1 and 86400"),
        (["--node-rank", "one"], "argument --node-rank: invalid int value: 'one'"),
    ],
)
def test_a_bad_input_is_one_line_naming_the_field_and_exit_2(
    change: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    term_log = tmp_path / "termination-log"
    code = main([*BASE, *change, "--termination-log", str(term_log)])
    err = capsys.readouterr().err
    assert code == ProbeExit.USAGE
    assert len(err.strip().splitlines()) == 1
    assert f"gpuaccept probe fabric: error: {expected}" in err
    report = decode_termination_message(term_log.read_text())
    assert report.results[0].status is CheckStatus.ERROR  # the operator sees a failed run


def test_the_local_ranks_come_from_the_flag_or_the_gpus_the_pod_requests(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GPUACCEPT_EXPECTED_GPUS", raising=False)
    assert main(["--rendezvous-address", "127.0.0.2", "--node-rank", "1"]) == ProbeExit.USAGE
    assert "--local-ranks: required (or env GPUACCEPT_EXPECTED_GPUS)" in capsys.readouterr().err
    monkeypatch.setenv("GPUACCEPT_EXPECTED_GPUS", "8x")
    assert main(["--rendezvous-address", "127.0.0.2", "--node-rank", "1"]) == ProbeExit.USAGE
    assert "GPUACCEPT_EXPECTED_GPUS: not a non-negative integer" in capsys.readouterr().err


def test_a_profile_without_an_inter_node_path_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = fabric_profile(tmp_path, "no-fabric", None)
    assert main([*BASE, "--profile", str(profile)]) == ProbeExit.USAGE
    assert f"{profile}: interNode: required by the fabric probe" in capsys.readouterr().err
    bad = fabric_profile(tmp_path, "zero", 0)
    assert main([*BASE, "--profile", str(bad)]) == ProbeExit.USAGE
    assert "interNode.busbwGBps" in capsys.readouterr().err


def test_a_job_travels_to_its_rank_processes_unchanged() -> None:
    job = FabricJob(
        Rendezvous("10.0.0.7", 29500, 2, 1, 8, bind_address="10.0.0.9", timeout_s=60),
        "nccl",
        (1 << 20, 1 << 21),
        AllreduceTiming(iterations=7, warmup=2, timeout_s=90),
        hold_gbps=None,
        devices=(0, 1, 2, 3, 4, 5, 6, 7),
    )
    assert FabricJob.from_json(job.to_json()) == job


@dataclass(frozen=True)
class Judged:
    busbw: float | None
    minimum: float | None
    status: CheckStatus


@pytest.mark.parametrize(
    "row",
    [
        Judged(371.0, 300.0, CheckStatus.PASS),
        Judged(180.0, 300.0, CheckStatus.FAIL),
        Judged(0.0, None, CheckStatus.FAIL),
        Judged(12.0, None, CheckStatus.PASS),
        Judged(None, 300.0, CheckStatus.ERROR),
    ],
)
def test_the_pair_is_judged_on_the_busbw_of_its_largest_message(row: Judged) -> None:
    observed = FabricAllreduceObserved.model_validate(
        {"nodes": 2, "nodeRank": 0, "localRanks": 8, "ranks": 16, "busbwGBps": row.busbw}
    )
    assert judge_fabric(observed, row.minimum).status is row.status


def test_the_largest_report_fits_the_termination_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full real sweep (1 MiB .. 16 GiB), the longest endpoint and a dozen long
    NCCL settings."""
    for i in range(20):
        monkeypatch.setenv(f"NCCL_SETTING_{i:02d}", "x" * 500)
    rendezvous = Rendezvous("fd00:1234:5678:9abc:def0:1234:5678:9abc", 65535, 64, 63, 64)
    sizes = tuple(1 << s for s in range(20, 35))
    run = FabricRun(FabricJob(rendezvous, "nccl", sizes), 900.0, 300.0, HardwareMode.REAL)
    sweep = tuple((s, 0.123456, 123.456789, 234.567891) for s in sizes)
    observed = observe(run, FabricMeasurement("nccl", 4096, sweep), None)
    assert observed.nccl_env is not None
    assert len(observed.nccl_env) == 12
    report = ProbeReport.model_validate(
        {
            "nodeName": "n" * 253,
            "bootID": "b" * 64,
            "probeVersion": "0.1.0",
            "startedAt": "2026-11-30T00:00:00Z",
            "finishedAt": "2026-11-30T00:00:00Z",
            "hardware": "real",
            "summary": {"gpuCount": 64},
            "results": [
                {
                    "check": "fabric_allreduce",
                    "status": "pass",
                    "observed": observed.to_observed(),
                    "message": "m" * 240,
                    "durationS": 1.0,
                }
            ],
        }
    )
    text = termination_message(report)
    assert len(text.encode()) <= TERMINATION_MESSAGE_MAX_BYTES
    assert decode_termination_message(text).results[0].observed == observed.to_observed()


def test_only_the_nccl_settings_are_recorded() -> None:
    env = {"NCCL_IB_HCA": "=mlx5_0,mlx5_1", "PATH": "/bin", "NCCL_DEBUG": "WARN"}
    assert nccl_env(env) == {"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "=mlx5_0,mlx5_1"}
    assert nccl_env({"PATH": "/bin"}) is None


def free_port(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        port: int = sock.getsockname()[1]
        return port


def start_node(
    rank: int, profile: Path, port: int, tmp_path: Path, *extra: str, nonce: str = ""
) -> tuple[subprocess.Popen[str], Path]:
    """One pod: node ``rank`` at 127.0.0.(10 + rank), rank 0's address the rendezvous;
    ``nonce``: the pair's secret, as the operator puts it in the pod's environment."""
    term_log = tmp_path / f"termination-log-{rank}"
    command = [
        sys.executable,
        "-m",
        "gpuaccept.cli",
        "probe",
        "fabric",
        "--rendezvous-address",
        "127.0.0.10",
        "--rendezvous-port",
        str(port),
        "--node-rank",
        str(rank),
        "--bind-address",
        f"127.0.0.{10 + rank}",
        "--profile",
        str(profile),
        "--min-busbw-gbps",
        "300",
        "--node-name",
        f"node-{rank}",
        "--termination-log",
        str(term_log),
        *extra,
    ]
    env = {k: v for k, v in os.environ.items() if k != ENV_FABRIC_NONCE}
    env |= {ENV_FABRIC_NONCE: nonce} if nonce else {}
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    return process, term_log


def run_pair(tmp_path: Path, first: float, second: float) -> list[tuple[int, ProbeReport]]:
    tmp_path.mkdir()
    port = free_port("127.0.0.10")
    nodes = [
        start_node(rank, fabric_profile(tmp_path, f"node-{rank}", busbw), port, tmp_path)
        for rank, busbw in enumerate((first, second))
    ]
    out = []
    for process, term_log in nodes:
        output, _ = process.communicate(timeout=240)
        assert term_log.exists(), output
        out.append((process.returncode, decode_termination_message(term_log.read_text())))
    return out


def busbw_of(report: ProbeReport) -> float:
    observed = FabricAllreduceObserved.model_validate(report.results[0].observed)
    assert observed.source == "loopback"
    assert observed.backend == "gloo"
    assert observed.busbw_gbps is not None
    return observed.busbw_gbps


@pytest.mark.torchdist
def test_a_node_with_a_slow_fabric_slows_the_pair_and_both_pods_measure_it(
    tmp_path: Path,
) -> None:
    healthy = run_pair(tmp_path / "healthy", HEALTHY_GBPS, HEALTHY_GBPS)
    slow = run_pair(tmp_path / "slow", HEALTHY_GBPS, SLOW_GBPS)
    for code, report in healthy:
        assert report.hardware.value == "simulated"
        assert code == ProbeExit.ACCEPTED, report.results[0].message
        # the hold sets the pace; the loopback only ever adds a little
        assert 0.6 * HEALTHY_GBPS <= busbw_of(report) <= 1.05 * HEALTHY_GBPS
    for code, report in slow:
        assert code == ProbeExit.QUARANTINED
        assert report.results[0].status is CheckStatus.FAIL
        assert busbw_of(report) <= 1.05 * SLOW_GBPS  # the healthy node measures it too
    (_, a), (_, b) = slow
    assert busbw_of(a) == busbw_of(b)  # one figure: the times averaged over both nodes
    sizes = [size for size, _ in json.loads(json.dumps(a.results[0].observed))["sweep"]]
    assert sizes == sorted(sizes)
    assert len(sizes) == 5


@pytest.mark.torchdist
def test_a_partner_that_never_comes_is_an_error_at_the_rendezvous_not_a_hang(
    tmp_path: Path,
) -> None:
    profile = fabric_profile(tmp_path, "alone", HEALTHY_GBPS)
    process, term_log = start_node(
        1, profile, free_port("127.0.0.10"), tmp_path, "--rendezvous-timeout-s", "3"
    )
    output, _ = process.communicate(timeout=120)
    assert process.returncode == ProbeExit.QUARANTINED, output
    result = decode_termination_message(term_log.read_text()).results[0]
    assert result.status is CheckStatus.ERROR
    observed = FabricAllreduceObserved.model_validate(result.observed)
    assert observed.phase == "rendezvous"  # evidence against neither node
    assert observed.busbw_gbps is None
    assert "failed in meeting the partner" in result.message


def _ended(process: subprocess.Popen[str], term_log: Path) -> tuple[int, ProbeReport]:
    output, _ = process.communicate(timeout=240)
    assert term_log.exists(), output
    return process.returncode, decode_termination_message(term_log.read_text())


@pytest.mark.torchdist
@pytest.mark.long
def test_a_peer_without_the_pairs_nonce_never_joins_the_pair(tmp_path: Path) -> None:
    """Issue 42 item 10: the rendezvous port takes any peer. A real peer process
    reaches rank 0's port as rank 1, without the pair's nonce (and one with another
    nonce): before, it took the partner's place and the pair measured with it (rank 0
    Accepted); now neither side meets the other, and both end at the rendezvous, which
    is evidence against neither node. The two pods with the same nonce pass."""
    nonce = secrets.token_hex(16)
    # both intruders at once, each at its own rendezvous: the pairs wait it out together
    pairs: dict[str, list[tuple[subprocess.Popen[str], Path]]] = {}
    ports: set[int] = set()
    for name, intruder in (("none", ""), ("another", secrets.token_hex(16))):
        case = tmp_path / name
        case.mkdir()
        port = free_port("127.0.0.10")
        while port in ports:  # the first pair's rank 0 may not listen on its port yet
            port = free_port("127.0.0.10")
        ports.add(port)
        profiles = [fabric_profile(case, f"node-{r}", HEALTHY_GBPS) for r in (0, 1)]
        wait = ("--rendezvous-timeout-s", "8")
        pairs[name] = [
            start_node(0, profiles[0], port, case, *wait, nonce=nonce),
            start_node(1, profiles[1], port, case, *wait, nonce=intruder),
        ]
    for name, pair in pairs.items():
        for code, report in (_ended(*pod) for pod in pair):
            result = report.results[0]
            assert (code, result.status) == (ProbeExit.QUARANTINED, CheckStatus.ERROR), name
            observed = FabricAllreduceObserved.model_validate(result.observed)
            assert (observed.phase, observed.busbw_gbps) == ("rendezvous", None), name
    case = tmp_path / "same"
    case.mkdir()
    port = free_port("127.0.0.10")
    pair = [
        start_node(r, fabric_profile(case, f"node-{r}", HEALTHY_GBPS), port, case, nonce=nonce)
        for r in (0, 1)
    ]
    for code, report in (_ended(*pod) for pod in pair):
        assert code == ProbeExit.ACCEPTED, report.results[0].message


def test_a_malformed_nonce_is_one_line_naming_the_variable_and_exit_2(tmp_path: Path) -> None:
    process, _ = start_node(
        0, fabric_profile(tmp_path, "node-0", HEALTHY_GBPS), 1, tmp_path, nonce="not-hex"
    )
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 2, output
    assert output.strip().splitlines() == [
        f"gpuaccept probe fabric: error: {ENV_FABRIC_NONCE}: 32 to 128 lowercase hex digits "
        "(got 7 characters)"
    ]


def test_the_probe_process_never_imports_torch_only_its_ranks_do() -> None:
    code = "import sys, gpuaccept.probe.cli; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert out == "False"
