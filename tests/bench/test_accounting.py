"""The benchmark's per-loop accounting (issue 41): the origin each request names in
its User-Agent, as the audit log records it, summed by loop and phase per unit of
work, every loop present. No cluster (the run on the API server: test_bench_check.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench.accounting import LOOPS, above_floor, accounting, lines, problems
from bench.audit import Request, RequestCounts, read_requests

from gpuaccept.operator.kube import request_origin, user_agent


def request(
    agent: str, verb: str = "patch", resource: str = "nodeacceptances", sub: str = ""
) -> Request:
    return Request("id", "op", verb, resource, sub, "", "n1", 200, "t", user_agent=agent)


@pytest.mark.parametrize(
    ("agent", "origin"),
    [
        ("gpuaccept-operator (reconcile/Probing)", "reconcile/Probing"),
        ("gpuaccept-operator (reverify/list)", "reverify/list"),
        ("gpuaccept-operator (leader-election)", "leader-election"),
        ("kopf/1.37.2", "kopf"),
        ("kubectl/v1.37.2 (linux/amd64) kubernetes/abc", "kubectl"),
        ("gpuaccept-operator", "gpuaccept-operator"),  # an older operator: no origin
        ("", "unnamed"),
    ],
)
def test_a_request_is_the_origin_its_user_agent_names(agent: str, origin: str) -> None:
    assert request(agent).origin == origin


def test_the_operators_user_agent_names_the_context_or_its_own_origin() -> None:
    assert user_agent() == "gpuaccept-operator (other)"
    with request_origin("reconcile/Pending"):
        assert user_agent() == "gpuaccept-operator (reconcile/Pending)"
        assert user_agent("policy-status") == "gpuaccept-operator (policy-status)"
    assert user_agent() == "gpuaccept-operator (other)"


def test_the_audit_log_records_the_user_agent(tmp_path: Path) -> None:
    event = {
        "kind": "Event",
        "auditID": "a1",
        "verb": "list",
        "user": {"username": "op"},
        "userAgent": "gpuaccept-operator (reverify/list)",
        "objectRef": {"resource": "pods"},
        "responseStatus": {"code": 200},
        "requestReceivedTimestamp": "2026-12-05T17:00:00.000000Z",
    }
    log = tmp_path / "audit.log"
    log.write_text(json.dumps(event) + "\n")
    (found,), _ = read_requests(log)
    assert found.origin == "reverify/list"


def counts(*requests: Request) -> RequestCounts:
    total = RequestCounts()
    for r in requests:
        total.add(r)
    return total


def test_requests_are_summed_by_loop_and_phase_per_unit_every_loop_present() -> None:
    account = accounting(
        counts(
            request("gpuaccept-operator (reconcile/Probing)"),
            request("gpuaccept-operator (reconcile/Probing)"),
            request("gpuaccept-operator (reconcile/New)", "create"),
            request("gpuaccept-operator (reverify/list)", "list", "pods"),
            request("kopf/1.37.2", "watch", "nodes"),
        ),
        units=2,
        unit="node",
    )
    loops = account["loops"]
    assert set(LOOPS) <= set(loops)
    assert {"kopf", "reconcile", "in-service", "reverify", "fabric", "policy-status"} <= set(LOOPS)
    assert {"leader-election", "installation-lock", "relist-check", "other"} <= set(LOOPS)
    assert loops["reconcile"]["requests"] == 3
    assert loops["reconcile"]["per_unit"] == 1.5
    assert loops["reconcile"]["phases"]["Probing"]["by_call"] == {"patch nodeacceptances": 1.0}
    assert loops["reverify"]["phases"]["list"]["by_call"] == {"list pods": 0.5}
    assert loops["kopf"]["phases"]["-"]["requests"] == 1
    assert loops["fabric"] == {"requests": 0, "per_unit": 0.0, "phases": {}}
    text = "\n".join(lines(account, "join"))
    assert "reconcile/Probing" in text
    assert "no requests: in-service, fabric" in text


def test_an_account_with_a_loop_missing_or_silent_or_requests_of_no_loop_is_a_problem() -> None:
    account = accounting(
        counts(
            request("gpuaccept-operator (reconcile/New)"), request("gpuaccept-operator (other)")
        ),
        units=1,
        unit="node",
    )
    found = problems(account, required=("reconcile", "leader-election"))
    assert found == [
        "the loop leader-election made no request",
        "1 requests named no loop: {'patch nodeacceptances': 1.0}",
    ]
    del account["loops"]["policy-status"]
    assert problems(account)[0] == "no accounting for the loop policy-status"
    clean = accounting(counts(request("gpuaccept-operator (reconcile/New)")), 1, "node")
    assert problems(clean, required=("reconcile",)) == []


def test_the_calls_above_the_floor() -> None:
    account = accounting(
        counts(
            request("gpuaccept-operator (reconcile/New)", "create", "pods"),
            request("gpuaccept-operator (reconcile/Probing)", "create", "pods"),
            request("gpuaccept-operator (reconcile/Probing)", "list", "pods"),
        ),
        units=1,
        unit="node",
    )
    assert above_floor(account, {"create pods": 1.0}) == {"create pods": 1.0, "list pods": 1.0}
