"""The watch event of the operator's own NodeAcceptance write: kopf's index keeps the
entry the executor made of the write's answer (the same resourceVersion is the same
object), not a second parse of the same body; any other version is parsed as it is."""

from __future__ import annotations

import json
from typing import Any

from world import BOOT, T0, make_report

from gpuaccept.contracts.nodeacceptance import CheckSummary, NodeAcceptanceStatus, Phase
from gpuaccept.operator.cache import (
    NAS_INDEX,
    NODES_INDEX,
    PODS_INDEX,
    POLICIES_INDEX,
    Cache,
    index_na,
)
from gpuaccept.operator.views import cached_acceptance


def _body(rv: int, *, attempts: int = 1, name: str = "gpu-1") -> dict[str, Any]:
    report = make_report(name, BOOT)
    status = NodeAcceptanceStatus(
        phase=Phase.ACCEPTED,
        checks=[CheckSummary(check=r.check, status=r.status) for r in report.results],
        policy="default",
        attempts=attempts,
        last_probe_time=T0,
        probed_boot_id=BOOT,
        report=report,
    )
    wire = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    # a fresh decoded body, as a watch event's or an API answer's
    return json.loads(
        json.dumps({"metadata": {"name": name, "resourceVersion": str(rv)}, "status": wire})
    )


def _cache() -> Cache:
    cache = Cache()
    cache.attach({NODES_INDEX: {}, NAS_INDEX: {}, POLICIES_INDEX: {}, PODS_INDEX: {}})
    return cache


def _entry(body: dict[str, Any], cache: Cache | None = None) -> Any:
    ((rv, entry),) = index_na(body, cache).values()
    assert rv == int(body["metadata"]["resourceVersion"])
    return entry


def test_the_echo_of_our_own_write_is_indexed_as_the_entry_made_of_its_answer() -> None:
    cache = _cache()
    answer = cached_acceptance(_body(6))  # the executor's entry of the PATCH answer
    cache.write("na", "gpu-1", 6, answer)
    echoed = _entry(_body(6), cache)  # the watch event of that write
    assert echoed is answer
    assert echoed.with_evidence().status == cached_acceptance(_body(6)).with_evidence().status


def test_any_other_version_or_name_is_parsed_from_its_own_body() -> None:
    cache = _cache()
    cache.write("na", "gpu-1", 6, cached_acceptance(_body(6)))
    newer = _entry(_body(7, attempts=2), cache)  # someone else's write after ours
    assert newer.view.status.attempts == 2
    assert newer.view.resource_version == "7"
    other = _entry(_body(6, name="gpu-2"), cache)  # another object at the same number
    assert other.view.name == "gpu-2"
    assert other.with_evidence().status.report is not None
    assert other.with_evidence().status.report.node_name == "gpu-2"


def test_a_deletion_mark_or_no_cache_parses_the_body() -> None:
    cache = _cache()
    cache.write("na", "gpu-1", 6, None)  # deleted by us: nothing to share
    assert _entry(_body(6), cache).view.status.phase == Phase.ACCEPTED
    assert _entry(_body(6)).view.status.phase == Phase.ACCEPTED
    cache.write("na", "gpu-1", 6, cached_acceptance(_body(6)))
    unversioned = _body(6)
    del unversioned["metadata"]["resourceVersion"]
    ((rv, entry),) = index_na(unversioned, cache).values()
    assert rv == 0
    assert entry.view.resource_version == ""
