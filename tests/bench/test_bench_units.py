"""Pure parts of the benchmark: audit-log counting, the summary line, percentiles,
the per-node timeline and the profile summary. No cluster needed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bench.audit import AuditTail, Request, RequestCounts, count_by_user
from bench.fleet_bench import (
    ArmResult,
    dra_requests,
    latency_summary,
    percentile,
    summary_line,
)
from bench.floor import judge
from bench.phases import timeline
from bench.profile_summary import summarise
from bench.reports import default_profiles

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.contracts.report import (
    CheckResult,
    CheckStatus,
    HardwareMode,
    HardwareSummary,
    ProbeReport,
)

ARM = "system:serviceaccount:gpuaccept-bench:operator-n2"
STANDIN = "system:serviceaccount:gpuaccept-bench:standin-operator-n2"


@dataclass(frozen=True)
class AuditEvent:
    """One kube-apiserver audit event, as the audit log writes it (one JSON line)."""

    audit_id: str
    user: str
    verb: str
    resource: str
    name: str = ""
    sub: str = ""
    stage: str = "ResponseComplete"
    code: int = 200
    at: str = "2026-11-29T16:00:00.000000Z"

    def line(self) -> str:
        ref = {
            "resource": self.resource,
            "name": self.name,
            **({"subresource": self.sub} if self.sub else {}),
        }
        return json.dumps(
            {
                "kind": "Event",
                "auditID": self.audit_id,
                "stage": self.stage,
                "verb": self.verb,
                "user": {"username": self.user},
                "objectRef": ref,
                "responseStatus": {"code": self.code},
                "requestReceivedTimestamp": self.at,
                "stageTimestamp": self.at,
            }
        )


def test_audit_counts_each_request_once_per_user(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    events = [
        AuditEvent("w1", ARM, "watch", "nodes", stage="ResponseStarted"),
        AuditEvent("w1", ARM, "watch", "nodes"),  # the same watch, later stage
        AuditEvent("c1", ARM, "create", "nodeacceptances", "n-1", code=201),
        AuditEvent("p1", ARM, "patch", "nodeacceptances", "n-1", sub="status"),
        AuditEvent("x1", ARM, "create", "pods", "p", code=409),
        AuditEvent("s1", STANDIN, "create", "nodes", "n-1", code=201),
    ]
    lines = [e.line() for e in events]
    log.write_text("\n".join(lines) + "\n" + '{"kind": "Event", "auditID": "partial')
    tail = AuditTail(log)
    assert len(tail.poll()) == 5  # the partial last line waits for the next poll
    counts = count_by_user(tail.requests)
    arm = counts[ARM]
    assert arm.total == 4
    assert arm.errors == 1
    assert arm.by_verb == {"watch": 1, "create": 2, "patch": 1}
    assert arm.by_call["patch nodeacceptances/status"] == 1
    assert arm.to_json(2)["per_node"] == 2.0
    assert counts[STANDIN].total == 1
    assert tail.poll() == []


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 95) == 95.0
    assert percentile([3.0], 95) == 3.0
    summary = latency_summary([1.0, 2.0, 3.0])
    assert summary["max_s"] == 3.0


def test_summary_line_names_the_largest_n() -> None:
    def arm(name: str, nodes: int, per_node: float, wall: float) -> ArmResult:
        result = ArmResult(arm=name, nodes=nodes, decided=nodes, correct=nodes)
        result.requests = {"per_node": per_node}
        result.wall_s = wall
        result.latency = {"p95_s": 1.5}
        result.peak_rss_mb = 123.4
        result.cpu_s = 9.87
        return result

    line = summary_line(
        "bench-quick",
        [
            arm("floor", 10, 7.0, 1.0),
            arm("operator", 10, 9.0, 2.0),
            arm("floor", 100, 7.2, 2.0),
            arm("operator", 100, 8.1, 3.0),
        ],
    )
    assert line == (
        "bench-quick: nodes=100 decided=100 correct=100 lost=0 duplicated=0 "
        "req_per_node=8.10 floor_req_per_node=7.20 req_ratio=1.12 wall_s=3.00 "
        "floor_wall_s=2.00 wall_ratio=1.50 p95_s=1.50 rss_mb=123 cpu_s=9.9"
    )


def test_timeline_orders_the_steps_per_node() -> None:
    def req(audit_id: str, user: str, call: str, name: str, at: str) -> Request:
        verb, _, kind = call.partition(" ")
        resource, _, sub = kind.partition("/")
        stamp = f"2026-11-29T16:00:{at}Z"
        return Request(audit_id, user, verb, resource, sub, "", name, 201, stamp, stamp)

    node = "operator-2-00001"
    moments = timeline(
        [
            req("1", STANDIN, "create nodes", node, "00.0"),
            req("2", ARM, "create nodeacceptances", node, "01.0"),
            req("3", ARM, "create pods", f"gpuaccept-probe-{node}-1", "01.5"),
            req("4", STANDIN, "patch pods/status", f"gpuaccept-probe-{node}-1", "02.0"),
            req("5", ARM, "patch nodeacceptances/status", node, "02.5"),
            req("6", ARM, "patch nodeacceptances/status", node, "03.0"),
        ],
        ARM,
        STANDIN,
    )
    steps = moments[node]
    assert steps["na"] - steps["registered"] == 1.0
    assert steps["verdict"] - steps["done"] == 1.0  # the last status write counts


def test_profile_summary_inclusive_and_self() -> None:
    text = (
        "main (cli.py:1);work (op.py:5);parse (json/decoder.py:9) 3\n"
        "main (cli.py:1);idle (x.py:2) 1\n"
    )
    total, inclusive, leaf = summarise(text)
    assert total == 4
    assert inclusive["main (cli.py)"] == 4
    assert leaf["parse (json/decoder.py)"] == 3


def test_floor_judges_like_the_policy_says() -> None:
    def report(status: CheckStatus) -> ProbeReport:
        return ProbeReport(
            node_name="n",
            boot_id="b",
            probe_version="t",
            started_at="2026-11-29T16:00:00Z",
            finished_at="2026-11-29T16:00:01Z",
            hardware=HardwareMode.SIMULATED,
            summary=HardwareSummary(gpu_count=8),
            results=[CheckResult(check="pcie_link", status=status, duration_s=0.1)],
        )

    policy = ProbePolicy()
    assert judge(report(CheckStatus.PASS), policy) == []
    assert judge(report(CheckStatus.WARN), policy) == []
    assert [r.reason for r in judge(report(CheckStatus.FAIL), policy)] == ["CheckFailed"]
    assert [r.reason for r in judge(report(CheckStatus.SKIP), policy)] == ["CheckSkipped"]


def test_the_benchmark_reports_come_from_the_healthy_h100_and_a_pcie_fault() -> None:
    healthy, fault = default_profiles()
    assert healthy.name == "h100-sxm-8gpu-healthy.yaml"
    assert fault.parent.name == "faults"


def test_dra_requests_are_the_claim_and_slice_calls_per_dra_node() -> None:
    counts = RequestCounts()
    calls = [
        ("create", "resourceclaims"),
        ("create", "resourceclaims"),
        ("delete", "resourceclaims"),
        ("delete", "resourceclaims"),
        ("list", "resourceslices"),
        ("create", "pods"),
        ("get", ""),
    ]
    for i, (verb, resource) in enumerate(calls):
        counts.add(Request(str(i), "op", verb, resource, "", "ns", "x", 200, ""))
    assert dra_requests(counts, 2) == {
        "nodes": 2,
        "requests": 5,
        "per_dra_node": 2.5,
        "by_call_per_dra_node": {
            "create resourceclaims": 1.0,
            "delete resourceclaims": 1.0,
            "list resourceslices": 0.5,
        },
    }
    assert dra_requests(RequestCounts(), 0)["per_dra_node"] == 0.0
