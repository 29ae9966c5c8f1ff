"""cpu_governor: its judge table."""

import pytest
from judge_table import Case, assert_row, ids
from pydantic import JsonValue

from gpuaccept.checks.cpu_governor import SPEC as CPU_GOVERNOR
from gpuaccept.contracts.report import CheckStatus

ALL_PERFORMANCE: JsonValue = {"cpus": 224, "count": {"performance": 224}}
EIGHT_POWERSAVE: JsonValue = {
    "cpus": 224,
    "count": {"performance": 216, "powersave": 8},
    "list": {"performance": "4-111,116-223", "powersave": "0-3,112-115"},
}

NO_CPUFREQ: JsonValue = {"cpus": 224, "count": {}, "noCpufreq": "no CPU has a cpufreq directory"}

CASES = [
    Case("all-on-performance", ALL_PERFORMANCE, CheckStatus.PASS, "all 224 CPUs on performance"),
    Case(
        "some-on-powersave",
        EIGHT_POWERSAVE,
        CheckStatus.FAIL,
        "8 of 224 CPUs not on performance: powersave on CPU 0-3,112-115",
    ),
    # condensed (no cpulists): the count still names the governor
    Case(
        "condensed-names-the-count",
        {"cpus": 224, "count": {"performance": 216, "powersave": 8}},
        CheckStatus.FAIL,
        "powersave on 8 CPUs",
    ),
    # the governor is the policy's
    Case(
        "policy-wants-schedutil",
        ALL_PERFORMANCE,
        CheckStatus.FAIL,
        "224 of 224 CPUs not on schedutil",
        section={"requiredGovernor": "schedutil"},
    ),
    # no cpufreq driver (BIOS-owned P-states): the policy's withoutCpufreq decides
    Case("no-cpufreq-passes", NO_CPUFREQ, CheckStatus.PASS, "no cpufreq driver"),
    Case(
        "no-cpufreq-warns",
        NO_CPUFREQ,
        CheckStatus.WARN,
        "the firmware owns the P-states",
        section={"withoutCpufreq": "warn"},
    ),
    Case(
        "no-cpufreq-fails",
        NO_CPUFREQ,
        CheckStatus.FAIL,
        "no cpufreq driver",
        section={"withoutCpufreq": "fail"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(CPU_GOVERNOR, case)
