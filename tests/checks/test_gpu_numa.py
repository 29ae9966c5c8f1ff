"""gpu_numa: its judge table (a row per branch,
with the policy section that decides it) and
its judge's other tests."""

import json

import pytest
from judge_table import Case, assert_row, condense_json, ids, judge_json
from pydantic import JsonValue

from gpuaccept.checks.gpu_numa import SPEC as GPU_NUMA
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


def policy(**sections: dict[str, object]) -> ProbePolicy:
    return ProbePolicy.model_validate(sections)


def numa_observed(
    sockets: int, numa: list[int], socket: list[int], nodes: int | None = 2, **extra: JsonValue
) -> JsonValue:
    observed: dict[str, JsonValue] = {
        "sockets": sockets,
        "numaNode": list[JsonValue](numa),
        "socket": list[JsonValue](socket),
        **extra,
    }
    if nodes is not None:
        observed["numaNodes"] = nodes
    return observed


EVEN = policy(gpuNuma={"socketSpread": "even"})
FOUR_FOUR = policy(gpuNuma={"gpusPerSocket": [4, 4]})


@pytest.mark.parametrize(
    ("observed", "probe_policy", "status", "needle"),
    [
        # single socket, one node: -1 is normal
        (numa_observed(1, [-1] * 8, [0] * 8, 1), EVEN, CheckStatus.PASS, "8 over 1 socket"),
        # NUMA off on two sockets: the reason names the BIOS
        (numa_observed(2, [-1] * 8, [-1] * 8, 1), EVEN, CheckStatus.FAIL, "NUMA off in the BIOS"),
        # AMD NPS0: one NUMA node (0) over two sockets, every GPU local to every CPU
        (
            numa_observed(2, [0] * 8, [-1] * 8, 1),
            EVEN,
            CheckStatus.PASS,
            "one node over 2 sockets (memory interleaved, as AMD NPS0)",
        ),
        # two nodes, one GPU without proximity data
        (
            numa_observed(2, [0, 0, 0, 0, 1, 1, 1, -1], [0, 0, 0, 0, 1, 1, 1, -1]),
            EVEN,
            CheckStatus.FAIL,
            "GPU 7: no NUMA node",
        ),
        # ... which requireNumaNode: false lets through on the NUMA rule, but not the spread
        (
            numa_observed(2, [0, 0, 0, 0, 1, 1, 1, -1], [0, 0, 0, 0, 1, 1, 1, -1]),
            policy(gpuNuma={"requireNumaNode": False, "socketSpread": "even"}),
            CheckStatus.FAIL,
            "GPU 7: on no single socket",
        ),
        (
            numa_observed(2, [0, 0, 0, 0, 1, 1, 1, -1], [0, 0, 0, 0, 1, 1, 1, -1]),
            policy(gpuNuma={"requireNumaNode": False}),
            CheckStatus.PASS,
            "8 GPUs on NUMA nodes 0,1",
        ),
        (
            numa_observed(2, [0] * 4 + [1] * 4, [0] * 4 + [1] * 4),
            EVEN,
            CheckStatus.PASS,
            "4+4 over 2 sockets",
        ),
        (
            numa_observed(2, [0] * 8, [0] * 8),
            EVEN,
            CheckStatus.FAIL,
            "GPUs per socket 8+0 over 2 sockets",
        ),
        (numa_observed(2, [0] * 8, [0] * 8), policy(), CheckStatus.PASS, "8+0"),
        (
            numa_observed(2, [0] * 5 + [1] * 3, [0] * 5 + [1] * 3),
            FOUR_FOUR,
            CheckStatus.FAIL,
            "GPUs per socket 5+3, expected 4+4",
        ),
        (
            numa_observed(1, [-1] * 8, [0] * 8, 1),
            FOUR_FOUR,
            CheckStatus.FAIL,
            "GPUs per socket 8, expected 4+4",
        ),
        (numa_observed(2, [0] * 3 + [1] * 4, [0] * 3 + [1] * 4), EVEN, CheckStatus.PASS, "4+3"),
        (
            numa_observed(2, [0, -1], [0, -1], failedGpus={"1": "NUMA placement: no PCI bus id"}),
            EVEN,
            CheckStatus.FAIL,
            "GPU 1 failed: NUMA placement",
        ),
    ],
)
def test_gpu_numa_judge(
    observed: JsonValue, probe_policy: ProbePolicy, status: CheckStatus, needle: str
) -> None:
    judged = judge_json(GPU_NUMA, observed, probe_policy, SUMMARY)
    assert judged.status is status, judged.message
    assert needle in judged.message
    condensed = judge_json(GPU_NUMA, condense_json(GPU_NUMA, observed), probe_policy, SUMMARY)
    assert (condensed.status, condensed.message) == (judged.status, judged.message)


def test_gpu_numa_rejects_ragged_columns() -> None:
    with pytest.raises(ValueError, match="equal length"):
        GPU_NUMA.parse(numa_observed(2, [0, 1], [0]))


def test_gpu_numa_condensed_drops_cpulists_and_stays_small() -> None:
    full = numa_observed(2, [-1] * 16, [-1] * 16, 1, localCpulist={"0-223": list(range(16))})
    condensed = condense_json(GPU_NUMA, full)
    assert isinstance(condensed, dict)
    assert "localCpulist" not in condensed
    assert len(json.dumps(condensed, separators=(",", ":"))) <= 250


TWO_SOCKETS_EVEN = numa_observed(2, [0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1])
CASES = [
    Case("single-socket", numa_observed(1, [-1] * 8, [0] * 8, 1), CheckStatus.PASS,
         "8 over 1 socket", section={"socketSpread": "even"}),
    Case("four-and-four", TWO_SOCKETS_EVEN, CheckStatus.PASS, section={"socketSpread": "even"}),
    Case("numa-off", numa_observed(2, [-1] * 8, [-1] * 8, 1), CheckStatus.FAIL,
         "NUMA off in the BIOS", section={"socketSpread": "even"}),
    Case("uneven", numa_observed(2, [0] * 6 + [1] * 2, [0] * 6 + [1] * 2), CheckStatus.FAIL,
         section={"socketSpread": "even"}),
    Case("uneven-not-judged", numa_observed(2, [0] * 6 + [1] * 2, [0] * 6 + [1] * 2),
         CheckStatus.PASS, section={"socketSpread": "any"}),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(GPU_NUMA, case)
