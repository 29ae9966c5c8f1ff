"""Per-GPU verdicts (issue 40): whose each failure is, a GPU's or the node's.

Table tests of each fencible check's ``failing_gpus`` (both forms of its observed
value), of :func:`gpuaccept.checks.attribution.attribute` on real probe reports of the
fault profiles, and of docs/policy.md's table against the registry."""

import functools
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from judge_table import condense_json, default_policy, policy
from pydantic import JsonValue, ValidationError

from gpuaccept.checks.attribution import attribute
from gpuaccept.checks.fencing_policy import FENCIBLE_CHECKS, FencingPolicy
from gpuaccept.checks.memory_health import SPEC as MEMORY_HEALTH
from gpuaccept.checks.pcie_link import SPEC as PCIE_LINK
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS
from gpuaccept.checks.spec import AnyCheckSpec
from gpuaccept.checks.verdict import evaluate
from gpuaccept.checks.xid_errors import SPEC as XID_ERRORS
from gpuaccept.contracts.report import CheckResult, CheckStatus, HardwareSummary, ProbeReport
from gpuaccept.probe.hardware.simulated import simulated_uuid

REPO = Path(__file__).resolve().parents[2]
NODE = "gpu-0000"

FULL_PCIE: dict[str, JsonValue] = {
    "gen": [5, 5, 4, 5],
    "width": [16, 8, 16, 16],
    "maxGen": [5, 5, 5, 5],
    "maxWidth": [16, 16, 16, 16],
    "idleGen": [1, 1, 1, 1],
    "h2dGBps": [53.0, 26.0, 30.0, 52.0],
    "d2hGBps": [52.0, 25.0, 29.0, 51.0],
}


def failing(check: AnyCheckSpec, observed: JsonValue, probe: ProbePolicy) -> frozenset[int] | None:
    assert check.failing_gpus is not None
    return check.failing_gpus(check.parse(observed), probe.section(check))


@dataclass(frozen=True)
class Case:
    name: str
    check: AnyCheckSpec
    observed: JsonValue
    probe: ProbePolicy
    gpus: frozenset[int] | None  # None: the node's


RELAXED = policy(pcieLink={"requireMax": False, "minWidth": 16, "minH2DGBps": 35})
CASES = [
    Case(
        "pcie: below max width and gen", PCIE_LINK, FULL_PCIE, default_policy(), frozenset({1, 2})
    ),
    Case(
        "pcie condensed: the GPUs below max are kept",
        PCIE_LINK,
        condense_json(PCIE_LINK, FULL_PCIE),
        policy(pcieLink={}),
        frozenset({1, 2}),
    ),
    Case(
        "pcie condensed: a copy floor keeps only the slowest GPUs: the node's",
        PCIE_LINK,
        condense_json(PCIE_LINK, FULL_PCIE),
        default_policy(),
        None,
    ),
    Case("pcie: floors, full form", PCIE_LINK, FULL_PCIE, RELAXED, frozenset({1, 2})),
    Case(
        "pcie condensed: a floor under the node's minimum names no GPU",
        PCIE_LINK,
        condense_json(PCIE_LINK, FULL_PCIE),
        RELAXED,
        None,
    ),
    Case(
        "pcie: a GPU that could not be measured",
        PCIE_LINK,
        {
            **FULL_PCIE,
            "gen": [5] * 4,
            "width": [16] * 4,
            "h2dGBps": [53.0] * 4,
            "d2hGBps": [52.0] * 4,
            "failedGpus": {"3": "lost"},
        },
        default_policy(),
        frozenset({3}),
    ),
    Case(
        "memory: remap pending",
        MEMORY_HEALTH,
        {"gpus": 8, "remapPending": "5"},
        default_policy(),
        frozenset({5}),
    ),
    Case(
        "memory: remap failed, ECC off",
        MEMORY_HEALTH,
        {"gpus": 8, "remapFailed": "2", "eccOff": "3-4"},
        default_policy(),
        frozenset({2, 3, 4}),
    ),
    Case(
        "memory: ECC off not required is no GPU's failure",
        MEMORY_HEALTH,
        {"gpus": 8, "eccOff": "3", "remapPending": "1"},
        policy(memoryHealth={"requireEcc": False}),
        frozenset({1}),
    ),
    Case(
        "memory: volatile uncorrected over the limit",
        MEMORY_HEALTH,
        {"gpus": 8, "volatileUncorrected": {"1": 2, "6": 0}},
        default_policy(),
        frozenset({1}),
    ),
    Case(
        "xid: 79 (fallen off the bus) on GPU 0",
        XID_ERRORS,
        {"watched": "0-7", "listenedS": 10.0, "xids": {"0": [79]}},
        default_policy(),
        frozenset({0}),
    ),
    Case(
        "xid: 48 on GPU 2, a GPU reset on GPU 6",
        XID_ERRORS,
        {
            "watched": "0-7",
            "listenedS": 10.0,
            "xids": {"2": [48]},
            "recoveryAction": {"gpu_reset": "6"},
        },
        default_policy(),
        frozenset({2, 6}),
    ),
    Case(
        "xid: 74 (NVLink) is the node's, whichever GPU",
        XID_ERRORS,
        {"watched": "0-7", "listenedS": 10.0, "xids": {"3": [74, 79]}},
        default_policy(),
        None,
    ),
    Case(
        "xid: a node reboot asked is the node's",
        XID_ERRORS,
        {"watched": "0-7", "listenedS": 10.0, "recoveryAction": {"node_reboot": "1"}},
        default_policy(),
        None,
    ),
    Case(
        "xid: a GPU NVML did not name",
        XID_ERRORS,
        {"watched": "0-7", "listenedS": 10.0, "xids": {"-1": [79]}},
        default_policy(),
        None,
    ),
    Case(
        "xid: a GPU lost under the listener, which one unsaid",
        XID_ERRORS,
        {
            "watched": "0-7",
            "listenedS": 10.0,
            "listenerStopped": {"atS": 5.0, "error": "GPU is lost", "gpuLost": True},
        },
        default_policy(),
        None,
    ),
    Case(
        "xid: one not in failOn is not a failure",
        XID_ERRORS,
        {"watched": "0-7", "listenedS": 10.0, "xids": {"3": [13], "5": [79]}},
        default_policy(),
        frozenset({5}),
    ),
    Case(
        "memory condensed: a merged count names no GPU",
        MEMORY_HEALTH,
        {"gpus": 8, "volatileUncorrected": {"1,6": 2}},
        default_policy(),
        None,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_failing_gpus(case: Case) -> None:
    assert failing(case.check, case.observed, case.probe) == case.gpus


@functools.cache
def probed(profile: str) -> ProbeReport:
    """The real probe's report on a profile (simulated hardware), as the operator reads it."""
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "termination-log"
        proc = subprocess.run(
            [sys.executable, "-m", "gpuaccept.cli", "probe", "--profile", str(REPO / profile),
             "--termination-log", str(log), "--node-name", NODE],
            capture_output=True, text=True, check=False, timeout=120,
            env={**os.environ, "GPUACCEPT_EXPECTED_GPUS": "8"},
        )  # fmt: skip
        assert proc.returncode in (0, 1), proc.stderr[-2000:]
        return ProbeReport.model_validate_json(log.read_text())


@pytest.mark.parametrize(
    ("profile", "check", "gpu"),
    [
        ("profiles/faults/row-remap-pending.yaml", "memory_health", 5),
        ("profiles/faults/row-remap-failed.yaml", "memory_health", 3),
        ("profiles/faults/ecc-uncorrected.yaml", "memory_health", 1),
    ],
)
def test_a_probe_report_names_the_bad_gpu_by_index_and_uuid(
    profile: str, check: str, gpu: int
) -> None:
    report = probed(profile)
    assert report.summary.gpu_uuids == [simulated_uuid(NODE, i) for i in range(8)]
    verdict = evaluate(report, default_policy())
    assert not verdict.accepted
    (bad,) = verdict.attribution.gpus
    assert (bad.index, bad.uuid, bad.checks) == (gpu, simulated_uuid(NODE, gpu), [check])
    assert verdict.attribution.per_gpu_checks == {check}
    assert verdict.node_reasons == ()


@pytest.mark.parametrize(
    "profile",
    [
        # An 8-GPU report travels condensed (4096 bytes): pcie_link keeps the GPUs below
        # their max width and the slowest copies, not which GPUs are under the shipped
        # floors (minWidth 16, minH2DGBps 40): the node's (docs/policy.md).
        "profiles/faults/pcie-x8.yaml",
        "profiles/faults/governor-powersave.yaml",
        "profiles/faults/nccl-slow.yaml",
        "profiles/faults/gpu-missing.yaml",
    ],
)
def test_a_node_level_failure_names_no_gpu(profile: str) -> None:
    verdict = evaluate(probed(profile), default_policy())
    assert not verdict.accepted
    assert verdict.attribution.gpus == ()
    assert verdict.node_reasons == verdict.reasons


def test_a_healthy_node_names_no_gpu() -> None:
    verdict = evaluate(probed("profiles/h100-sxm-8gpu-healthy.yaml"), default_policy())
    assert verdict.accepted
    assert verdict.attribution.gpus == ()


SUMMARY = HardwareSummary(gpu_count=2, gpu_uuids=["GPU-a", ""])


def result(status: CheckStatus, observed: JsonValue) -> CheckResult:
    return CheckResult(check="memory_health", status=status, observed=observed, duration_s=0)


@pytest.mark.parametrize(
    ("results", "gpus", "per_gpu"),
    [
        (
            [result(CheckStatus.FAIL, {"gpus": 2, "remapPending": "1"})],
            [(1, None)],
            {"memory_health"},
        ),
        (
            [result(CheckStatus.FAIL, {"gpus": 2, "remapPending": "0"})],
            [(0, "GPU-a")],
            {"memory_health"},
        ),
        # a GPU the report does not have: the node's, never fenced
        ([result(CheckStatus.FAIL, {"gpus": 2, "remapPending": "5"})], [], set()),
        # no observed value to ask, or one that does not parse: the node's
        ([result(CheckStatus.FAIL, None)], [], set()),
        ([result(CheckStatus.FAIL, {"gpus": 2, "remapPending": "x"})], [], set()),
        # a warning or an error is no GPU's failure
        ([result(CheckStatus.WARN, {"gpus": 2, "remapPending": "1"})], [], set()),
        ([result(CheckStatus.ERROR, {"gpus": 2, "remapPending": "1"})], [], set()),
    ],
)
def test_attribute(
    results: list[CheckResult], gpus: list[tuple[int, str | None]], per_gpu: set[str]
) -> None:
    out = attribute(results, SUMMARY, default_policy(), CHECKS)
    assert [(g.index, g.uuid) for g in out.gpus] == gpus
    assert out.per_gpu_checks == per_gpu


def test_fencing_checks_must_be_fencible() -> None:
    assert FencingPolicy(checks=["pcie_link"]).fences("pcie_link")
    assert not FencingPolicy(checks=["pcie_link"]).fences("memory_health")
    assert FencingPolicy().fences("memory_health")
    with pytest.raises(ValidationError, match="cpu_governor: not a check whose failures"):
        FencingPolicy(checks=["cpu_governor"])


def test_docs_policy_table_says_for_each_check_whose_failures_are() -> None:
    """docs/policy.md's "Per-GPU verdicts" table lists every registered check once, and
    says GPU exactly for the checks with a ``failing_gpus``."""
    text = (REPO / "docs" / "policy.md").read_text("utf-8")
    section = text.split("## Per-GPU verdicts", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \| (GPU|node) \|", section, flags=re.M)
    assert sorted(name for name, _ in rows) == sorted(c.name for c in CHECKS)
    assert {name for name, scope in rows if scope == "GPU"} == set(FENCIBLE_CHECKS)


def test_every_check_says_whose_its_failures_are_and_why() -> None:
    for check in CHECKS:
        assert check.ownership.why, check.name
        assert check.ownership.source, check.name
