"""A stored report is judged again only where the probe measured what the policy now
asks for; otherwise it is measured again (``remeasure_reason``), never convicted."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.remeasure import probed_sections, remeasure_reason
from gpuaccept.contracts.report import ProbeReport

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))
from world import make_report


def policy(**sections: Any) -> ProbePolicy:
    return ProbePolicy.model_validate(sections)


def compacted(report: ProbeReport, check: str) -> ProbeReport:
    results = [
        r.model_copy(update={"observed": None}) if r.check == check else r for r in report.results
    ]
    return report.model_copy(update={"results": results})


def without(report: ProbeReport, check: str) -> ProbeReport:
    return report.model_copy(update={"results": [r for r in report.results if r.check != check]})


@dataclass(frozen=True)
class Row:
    measured_under: ProbePolicy | None  # None: stored before digests were
    now: ProbePolicy
    report: str = "full"  # full | compacted nccl | without cpu_governor
    remeasure: str | None = None  # a fragment of the reason, None: judge again


OFF = {"cpuGovernor": {"enabled": False}}
ROWS = {
    "nothing changed": Row(policy(), policy()),
    "a judging threshold changed": Row(policy(), policy(ncclAllreduce={"minBusbwGBps": 900})),
    "a check turned off": Row(policy(), policy(**OFF)),
    "a check turned on since": Row(policy(**OFF), policy(), "without", "enabled since"),
    "a check turned on, stored before digests": Row(None, policy(), "without", "no result"),
    "a check turned on whose result the report has": Row(policy(**OFF), policy(), "full",
                                                         "enabled since"),
    "a measuring setting changed": Row(
        policy(), policy(ncclAllreduce={"maxMessageBytes": 1 << 20}), "full", "measures"
    ),
    "a compacted result under a changed section": Row(
        policy(), policy(ncclAllreduce={"minBusbwGBps": 100000}), "compacted", "compacted"
    ),
    "a compacted result under an unchanged section": Row(
        policy(), policy(pcieLink={"minWidth": 8}), "compacted"
    ),
    "a compacted result stored before digests": Row(None, policy(), "compacted", "compacted"),
    "a threshold of a check the report has, stored before digests": Row(
        None, policy(pcieLink={"minWidth": 8})
    ),
}  # fmt: skip


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_remeasure_or_judge_again(row: Row) -> None:
    report = make_report()
    if row.report == "compacted":
        report = compacted(report, "nccl_allreduce")
    elif row.report == "without":
        report = without(report, "cpu_governor")
    probed = probed_sections(row.measured_under) if row.measured_under is not None else None
    reason = remeasure_reason(report, probed, row.now)
    if row.remeasure is None:
        assert reason is None
    else:
        assert reason is not None
        assert row.remeasure in reason, reason


def test_a_disabled_check_is_not_stored_as_measured() -> None:
    assert "cpu_governor" not in probed_sections(policy(**OFF))
    assert "cpu_governor" in probed_sections(policy())


def test_a_policys_digests_are_its_contents_whatever_was_asked_before() -> None:
    """The digests are kept per policy object (every verdict stores them): each policy
    still gets its own, equal ones for equal policies built apart, different ones where
    a measuring setting differs, also once more policies were asked than are kept."""
    sizes = [1 << n for n in range(10, 22)]  # more policies than the memo keeps
    policies = [policy(ncclAllreduce={"maxMessageBytes": size}) for size in sizes]
    first = [probed_sections(p) for p in policies]
    again = [probed_sections(policy(ncclAllreduce={"maxMessageBytes": s})) for s in sizes]
    assert first == again
    assert [probed_sections(p) for p in policies] == first
    nccl = [digests["nccl_allreduce"] for digests in first]
    assert len({d.measured for d in nccl}) == len(sizes)
    others = {d["pcie_link"] for d in first}
    assert len(others) == 1  # a section that did not change keeps its digest
