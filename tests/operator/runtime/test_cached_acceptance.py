"""The cache keeps a NodeAcceptance's evidence (stored report, check summaries)
as compressed JSON and parses it for a decision only (issue 15: memory per node)."""

from __future__ import annotations

import json
from typing import Any

from world import BOOT, T0, make_report

from gpuaccept.contracts.nodeacceptance import (
    CheckSummary,
    NodeAcceptanceStatus,
    Phase,
    ProbedSection,
    Reason,
)
from gpuaccept.operator.cache import NAS_INDEX, Cache, index_na
from gpuaccept.operator.views import PARSED_EVIDENCE, cached_acceptance


def _decided_wire(failing: tuple[str, ...] = ()) -> dict[str, Any]:
    report = make_report("gpu-1", BOOT, failing)
    status = NodeAcceptanceStatus(
        phase=Phase.QUARANTINED if failing else Phase.ACCEPTED,
        reason="Failed" if failing else None,
        reasons=[Reason(check=failing[0], reason="Failed")] if failing else [],
        checks=[CheckSummary(check=r.check, status=r.status) for r in report.results],
        policy="default",
        policy_generation=1,
        last_probe_time=T0,
        probed_boot_id=BOOT,
        report=report,
        # the policy sections the report was measured under, read only with the report
        probed_sections={
            r.check: ProbedSection(measured=f"{i:016x}", section=f"{i + 1:016x}")
            for i, r in enumerate(report.results)
        },
    )
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


def _body(status: dict[str, Any], rv: int = 5) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu-1", "resourceVersion": str(rv), "uid": "u1"},
        "spec": {"nodeName": "gpu-1"},
        # a fresh decoded body, as a watch event's: nothing shared with the test's copy
        "status": json.loads(json.dumps(status)),
    }


def test_decisions_read_the_status_as_parsed_at_once() -> None:
    for failing in ((), ("nccl_allreduce",)):
        wire = _decided_wire(failing)
        cached = cached_acceptance(_body(wire))
        assert cached.with_evidence().status == NodeAcceptanceStatus.model_validate(wire)
        # what a decision writes back (a status write replaces it whole) is what was stored
        assert cached.with_evidence().status.to_wire() == wire


def test_the_cache_entry_keeps_no_parsed_evidence() -> None:
    wire = _decided_wire()
    ((_, cached),) = index_na(_body(wire)).values()
    slim = cached.view.status
    assert (slim.report, slim.checks, slim.probed_sections) == (None, [], None)
    assert (slim.phase, slim.policy, slim.probed_boot_id) == (Phase.ACCEPTED, "default", BOOT)
    assert isinstance(cached.evidence_json, bytes)
    assert len(cached.evidence_json) < len(json.dumps(wire["report"])) // 2


def test_the_cache_answers_slim_for_counts_and_whole_for_decisions() -> None:
    wire = _decided_wire()
    cache = Cache()
    cache.attach(
        {
            "gpuaccept_nodes": {},
            NAS_INDEX: {"gpu-1": list(index_na(_body(wire)).values())},
            "gpuaccept_policies": {},
            "gpuaccept_probe_pods": {},
        }
    )
    slim, whole = cache.na("gpu-1"), cache.na_with_evidence("gpu-1")
    assert slim is not None
    assert whole is not None
    assert slim.status.report is None
    assert whole.status == NodeAcceptanceStatus.model_validate(wire)
    assert (whole.name, whole.resource_version, whole.uid) == ("gpu-1", "5", "u1")
    # our own write (the PATCH response) is kept the same way
    newer = {**wire, "rejudged": True}
    cache.write("na", "gpu-1", 6, cached_acceptance(_body(newer, rv=6)))
    written = cache.na_with_evidence("gpu-1")
    assert written is not None
    assert written.status == NodeAcceptanceStatus.model_validate(newer)


def test_unreadable_evidence_starts_over_as_an_unreadable_status_does() -> None:
    wire = _decided_wire()
    broken = {**wire, "report": {**wire["report"], "results": "not a list"}}
    assert cached_acceptance(_body(broken)).with_evidence().status == NodeAcceptanceStatus()
    bad_checks = {**wire, "checks": [{"check": "x", "status": "Bogus"}]}
    assert cached_acceptance(_body(bad_checks)).with_evidence().status == NodeAcceptanceStatus()


def _with_report_field(wire: dict[str, Any], name: str, value: object) -> dict[str, Any]:
    return {**wire, "report": {**wire["report"], name: value}}


def test_evidence_read_again_is_each_nodes_own_as_parsed_at_once() -> None:
    """A node's passes read its evidence again and again (kept parsed a while): each
    read is the status as parsed at once, whichever nodes were read in between and
    however many (more than are kept), and a read never hands out another's."""
    wires = [_decided_wire(failing) for failing in ((), ("nccl_allreduce",), ("pcie_link",))]
    nodes = [cached_acceptance(_body(wire)) for wire in wires]
    others = [
        cached_acceptance(_body(_with_report_field(wires[0], "nodeName", f"gpu-{n}")))
        for n in range(2, 2 + PARSED_EVIDENCE.size + 1)
    ]
    for _ in range(3):
        for cached, wire in zip(nodes, wires, strict=True):
            assert cached.with_evidence().status == NodeAcceptanceStatus.model_validate(wire)
        for cached in others:
            assert cached.with_evidence().status.report is not None
    reports = {id(c.with_evidence().status.report) for c in nodes}
    assert len(reports) == len(nodes)


def test_unreadable_evidence_read_again_starts_over_again() -> None:
    wire = _decided_wire()
    broken = cached_acceptance(_body({**wire, "report": {**wire["report"], "results": 1}}))
    for _ in range(2):
        assert broken.with_evidence().status == NodeAcceptanceStatus()
