"""The cache keeps a NodeAcceptance's evidence (stored report, check summaries) and
the records no slim reader needs whole (figures, conditions, the in-service ledger)
as compressed JSON and parses them for a decision only (memory per node); the slim
view's readers (counts, metrics, correlation, re-verification, the fabric pass) answer
on it as on the whole status."""

from __future__ import annotations

import json
import zlib
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel
from world import BOOT, T0, make_report, spec

from gpuaccept.contracts.inservice import InServiceStatus, InServiceSuspect, InServiceVerdict
from gpuaccept.contracts.nodeacceptance import (
    CheckSummary,
    Condition,
    ConditionStatus,
    CreationIntent,
    FabricPairRecord,
    FabricStatus,
    GpuVerdict,
    KeyFigures,
    NodeAcceptanceStatus,
    OwnedPod,
    Phase,
    ProbedSection,
    Reason,
)
from gpuaccept.contracts.reverify import DriftFinding, ReverifyStatus
from gpuaccept.operator import metrics
from gpuaccept.operator.cache import (
    NAS_INDEX,
    NODES_INDEX,
    PODS_INDEX,
    POLICIES_INDEX,
    Cache,
    index_na,
)
from gpuaccept.operator.core.fabric.membership import is_member
from gpuaccept.operator.core.model import NodeView, PolicyView
from gpuaccept.operator.core.reverify_schedule import candidate, reverifiable
from gpuaccept.operator.views import (
    PARSED_PACKED,
    CachedAcceptance,
    Packing,
    PolicyEntry,
    SharedFieldSets,
    cached_acceptance,
)


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
    assert isinstance(cached.packed_json, bytes)
    assert len(cached.packed_json) < len(json.dumps(wire["report"])) // 2


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
        for n in range(2, 2 + PARSED_PACKED.size + 1)
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


# --- the records packed beside the evidence: figures, conditions, the in-service ledger


def _ledger(**fields: Any) -> InServiceStatus:
    return InServiceStatus(
        boot_id=BOOT,
        accepted_time=T0,
        reports=[f"uid-{n}/2026-01-01T00:0{n}:00Z" for n in range(5)],
        watch_serial=6,
        watch_pod="gpuaccept-probe-watch-gpu-1-6",
        watch_started=T0,
        **fields,
    )


SUSPECT = InServiceSuspect(gpu="GPU-3", xid=13, count=2, since=T0)
VERDICT = InServiceVerdict(
    reason="XidFatal",
    message="Xid 79 (fatal) on GPU GPU-3",
    signature="XidFatal:79",
    window_start=T0,
    window_end=T0 + timedelta(seconds=60),
    gpu="GPU-3",
)


def _in_service_wire(name: str = "accepted-quiet", **fields: Any) -> dict[str, Any]:
    """A decided status in service, as the in-service phase writes it: figures, a
    condition, the ledger, pods on record and creation intents beside the evidence."""
    wire = _decided_wire(("nccl_allreduce",) if fields.get("phase") == Phase.QUARANTINED else ())
    status = NodeAcceptanceStatus.model_validate(wire).model_copy(
        update={
            "figures": KeyFigures.model_validate(
                {
                    "gpuModel": "NVIDIA H100 80GB HBM3",
                    "gpuCount": 8,
                    "busbwGBps": 465.3,
                    "minPcieGeneration": 5,
                    "minPcieWidth": 16,
                    "pcie": "Gen5x16",
                }
            ),
            "conditions": [
                Condition(
                    type="Accepted",
                    status=ConditionStatus.TRUE,
                    reason=name.title().replace("-", ""),
                    message="all required checks passed",
                    last_transition_time=T0,
                )
            ],
            "in_service": _ledger(),
            "was_in_service": True,
            "owned_pods": [OwnedPod(name="gpuaccept-probe-watch-gpu-1-6", uid="u6", shape="s")],
            "creation_intents": [
                CreationIntent(kind="Pod", name="gpuaccept-probe-watch-gpu-1-7", nonce_digest="d")
            ],
            **fields,
        }
    )
    return status.to_wire()


STATUSES = {
    "accepted-quiet": _in_service_wire(),
    "a-suspect": _in_service_wire(in_service=_ledger(suspects=[SUSPECT])),
    "a-pending-verdict": _in_service_wire(
        in_service=_ledger(verdict=VERDICT.model_copy(update={"pending": True}))
    ),
    "quarantined-in-service": _in_service_wire(
        phase=Phase.QUARANTINED,
        reason="XidFatal",
        taken_out_time=T0,
        in_service=_ledger(suspects=[SUSPECT], verdict=VERDICT),
    ),
    "held-by-the-limit": _in_service_wire(
        phase=Phase.HELD, reason="BreakerOpen", held_action="Quarantine"
    ),
    "fenced": _in_service_wire(
        fenced="1/8",
        taken_out_time=T0,
        taken_out_gpus=1,
        gpu_verdicts=[GpuVerdict(index=5, uuid="GPU-5", checks=["memory_health"], fenced=True)],
    ),
    "a-fabric-partner": _in_service_wire(
        fabric=FabricStatus(
            pairs=[
                FabricPairRecord(
                    pair="p1", partner="gpu-2", node_rank=0, outcome="passed", finished_at=T0
                )
            ],
            verdict="Passed",
        )
    ),
    "drifting": _in_service_wire(
        reverify=ReverifyStatus(
            sampled_time=T0,
            drift=[
                DriftFinding(
                    check="nccl_allreduce",
                    figure="busbwGBps",
                    baseline=480.0,
                    value=440.0,
                    percent=8.3,
                    level="warn",
                )
            ],
        )
    ),
    "no-figures-no-ledger": {
        **{k: v for k, v in _in_service_wire().items() if k not in ("figures", "inService")},
        "conditions": [],
    },
    "figures-not-numbers": _in_service_wire(
        figures=KeyFigures.model_validate({"busbwGBps": "fast", "pcie": "Gen5x16"})
    ),
}


def _bodies() -> dict[str, dict[str, Any]]:
    return {
        name: {**_body(wire), "metadata": {"name": name, "resourceVersion": "5", "uid": name}}
        for name, wire in STATUSES.items()
    }


def _cache(entries: dict[str, CachedAcceptance]) -> Cache:
    labels = {"gpu": "true"}
    cache = Cache()
    cache.attach(
        {
            NODES_INDEX: {n: [(5, NodeView(name=n, labels=labels, gpus=8))] for n in entries},
            NAS_INDEX: {n: [(6, entry)] for n, entry in entries.items()},
            POLICIES_INDEX: {
                "default": [(8, PolicyEntry(PolicyView(name="default", spec=SPEC)))],
            },
            PODS_INDEX: {},
        }
    )
    cache.refresh_policies()
    for name in entries:
        cache.refresh("node", name)
        cache.refresh("na", name)
    return cache


SPEC = spec(
    nodeSelector={"gpu": "true"},
    inService={"enabled": True},
    reverify={"enabled": True},
    fabric={"enabled": True},
)


def test_the_slim_views_readers_answer_as_on_the_whole_status() -> None:
    """Every reader of the slim view (the fleet's counts, correlation, the fabric
    candidates and members, re-verification's schedule, the per-node metrics) gives
    the same answer on the cache's slim entries as on the statuses parsed whole."""
    bodies = _bodies()
    slim = _cache({n: cached_acceptance(b) for n, b in bodies.items()})
    whole = _cache(
        {n: CachedAcceptance(cached_acceptance(b).with_evidence()) for n, b in bodies.items()}
    )
    assert slim.count.tally() == whole.count.tally()
    assert slim.fabric_names("default") == whole.fabric_names("default")
    for name in bodies:
        slim_na, whole_na = slim.na(name), whole.na(name)
        assert slim_na is not None
        assert whole_na is not None
        assert slim_na.packed is not None, name
        assert whole_na.packed is None, name
        assert slim.in_service_signatures("default", "") == whole.in_service_signatures(
            "default", ""
        )
        assert metrics.node_samples(slim_na) == metrics.node_samples(whole_na), name
        labels = {"gpu": "true"}
        assert is_member(slim_na.status, "default", SPEC, labels) == is_member(
            whole_na.status, "default", SPEC, labels
        )
        assert reverifiable(slim_na.status, SPEC) == reverifiable(whole_na.status, SPEC)
        assert candidate(name, slim_na.status, SPEC.reverify) == candidate(
            name, whole_na.status, SPEC.reverify
        )
    # the table covers what the readers tell apart
    assert {s.node for s in slim.in_service_signatures("default", "")} == {
        "a-suspect",
        "a-pending-verdict",
        "quarantined-in-service",
    }
    samples = {n: metrics.node_samples(na) for n in bodies if (na := slim.na(n)) is not None}
    assert samples["accepted-quiet"].busbw_bytes_per_second == 465.3e9
    assert samples["figures-not-numbers"].busbw_bytes_per_second is None
    assert samples["drifting"].drift


def test_the_slim_entry_keeps_no_parsed_figures_conditions_or_ledger() -> None:
    for name, body in _bodies().items():
        cached = cached_acceptance(body)
        slim = cached.view.status
        assert (slim.figures, slim.conditions, slim.in_service) == (None, [], None), name
        # what the fabric pass reads and changes stays parsed
        assert slim.owned_pods == NodeAcceptanceStatus.model_validate(STATUSES[name]).owned_pods


def test_a_decision_reads_an_in_service_status_as_stored_and_writes_it_back() -> None:
    for name, wire in STATUSES.items():
        whole = cached_acceptance(_body(wire)).with_evidence()
        assert whole.packed is None
        assert whole.status == NodeAcceptanceStatus.model_validate(wire), name
        assert whole.status.to_wire() == wire, name


def test_an_unreadable_ledger_starts_over_as_an_unreadable_status_does() -> None:
    wire = _in_service_wire()
    broken = {**wire, "inService": {**wire["inService"], "watchSerial": "six"}}
    cached = cached_acceptance(_body(broken))
    assert cached.with_evidence().status.phase == Phase.PENDING
    assert cached.with_evidence().status.report is None
    # the salvaged fields stay (the pods on record: a running pod is never stranded)
    assert cached.with_evidence().status.owned_pods == (
        NodeAcceptanceStatus.model_validate(wire).owned_pods
    )
    suspect = {**wire, "inService": {**wire["inService"], "suspects": [{"xid": "x"}]}}
    unread = cached_acceptance(_body(suspect))
    assert unread.view.packed is not None
    assert unread.view.packed.signatures == ()  # offered to no other node's correlation
    assert unread.with_evidence().status.phase == Phase.PENDING


# --- the fields-set of the cache's models, shared


def test_entries_with_the_same_fields_share_one_fields_set() -> None:
    one, two = (cached_acceptance(body).view.status for body in list(_bodies().values())[:2])
    assert one.model_fields_set is two.model_fields_set
    assert one.owned_pods[0].model_fields_set is two.owned_pods[0].model_fields_set


def test_a_copy_of_a_shared_entry_changes_no_other_entry() -> None:
    """What the fabric pass and a decision do to a status (a copy with fields updated)
    leaves every other entry's fields, and what it writes, as they were."""
    bodies = list(_bodies().values())[:2]
    one, two = (cached_acceptance(body) for body in bodies)
    fields = set(two.view.status.model_fields_set)
    wire = two.with_evidence().status.to_wire()
    changed = one.view.status.model_copy(update={"pod_serial": 9, "release": None})
    assert "release" in changed.model_fields_set
    assert one.with_evidence().status.model_copy(update={"taken_out_gpus": 2}).taken_out_gpus == 2
    assert two.view.status.model_fields_set == fields
    assert "release" not in one.view.status.model_fields_set
    assert two.with_evidence().status.to_wire() == wire


def test_field_sets_are_shared_up_to_a_bound_and_only_for_frozen_models() -> None:
    shared = SharedFieldSets(1)
    first, second = Reason(check="a", reason="A"), Reason(check="b", reason="B")
    other = Reason(check="c", reason="C", message="m")  # another set of fields
    own = other.model_fields_set
    for model in (first, second, other):
        shared.share(model)
    assert first.model_fields_set is second.model_fields_set
    assert other.model_fields_set is own  # past the bound: its own
    assert len(shared) == 1
    thawed, again = Thawed(check="a"), Thawed(check="b")  # a model that can change
    shared = SharedFieldSets(8)
    shared.share(thawed)
    shared.share(again)
    assert thawed.model_fields_set is not again.model_fields_set
    assert len(shared) == 0


class Thawed(BaseModel):
    check: str


# --- packing against a preset dictionary


def test_packed_json_reads_back_whole_before_and_after_the_dictionary_is_chosen() -> None:
    packing = Packing()
    pending = json.dumps({"phase": "Pending"}).encode()
    first, second = (
        json.dumps({"report": _decided_wire(failing)["report"]}).encode()
        for failing in ((), ("pcie_link",))
    )
    alone = packing.pack(pending, has_report=False)  # no report seen yet: packed alone
    against = [packing.pack(text, has_report=True) for text in (first, second)]
    assert alone[:1] == Packing.ALONE
    assert [blob[:1] for blob in against] == [Packing.AGAINST] * 2
    assert [packing.unpack(b) for b in (alone, *against)] == [pending, first, second]
    # against the first report, the second packs into far less than alone
    assert len(against[1]) < len(zlib.compress(second, 1)) // 3


def test_a_packed_blob_cut_short_or_of_no_known_kind_does_not_read() -> None:
    packing = Packing()
    blob = packing.pack(json.dumps(_decided_wire()).encode(), has_report=True)
    for broken in (blob[:-8], b"\x07" + blob[1:], Packing.ALONE + b"not zlib"):
        with pytest.raises(zlib.error):
            packing.unpack(broken)
    wire = _decided_wire()
    cached = cached_acceptance(_body(wire))
    assert cached.packed_json is not None
    cut = CachedAcceptance(cached.view, cached.packed_json[:-8])
    assert cut.with_evidence().status == NodeAcceptanceStatus()  # starts over
