"""The in-service benchmark's pure parts: the watch reports the stand-in completes
watch pods with, read as the operator reads them, and which pod gets the fatal one."""

from __future__ import annotations

from typing import Any

from bench.inservice_fleet import FATAL_XID, FatalPlan, is_watch_pod, watch_behaviour

from gpuaccept.contracts.probe_invocation import WatchExit
from gpuaccept.contracts.watch_report import WatchEnd, decode_watch_message
from gpuaccept.operator.core.inservice.watchreport import watch_evidence
from gpuaccept.operator.core.model import NodeView, PodView, WatchEvidence
from gpuaccept.testsupport.kubelet_standin import Complete, PodInfo

PROBE = Complete(exit_code=0, message="probe report", delay_s=0.0)


def pod(node: str, args: list[str], name: str = "p") -> PodInfo:
    spec: dict[str, Any] = {"containers": [{"name": "c", "command": ["gpuaccept"], "args": args}]}
    return PodInfo("ns", name, f"uid-{name}", node, f"boot-{node}", None, {"spec": spec})


def watch_pod(node: str, name: str = "w") -> PodInfo:
    return pod(node, ["probe", "watch", "--window-s", "60"], name)


def evidence(info: PodInfo, done: Complete) -> WatchEvidence:
    view = PodView(name=info.name, uid=info.uid, node_name=info.node_name, message=done.message)
    found = watch_evidence(view, NodeView(name=info.node_name), accept_simulated=True)
    assert isinstance(found, WatchEvidence), found
    return found


def test_only_a_watch_pod_is_a_watch_pod() -> None:
    assert is_watch_pod(watch_pod("n1"))
    assert not is_watch_pod(pod("n1", ["probe", "--checks", "all"]))


def test_a_quiet_window_is_read_as_evidence_of_nothing_bound_to_node_and_boot() -> None:
    behaviour = watch_behaviour(PROBE, 60.0, FatalPlan(after_s=2.0))
    info = watch_pod("n1")
    done = behaviour(info)
    assert isinstance(done, Complete)
    assert (done.exit_code, done.delay_s) == (WatchExit.QUIET, 60.0)
    report = decode_watch_message(done.message)
    assert (report.node_name, report.boot_id) == ("n1", "boot-n1")
    assert report.end_reason is WatchEnd.WINDOW
    found = evidence(info, done)
    assert found.boot_id == "boot-n1"
    assert (found.xids, found.state) == ((), ())


def test_an_armed_node_gets_one_early_xid_79_then_quiet_windows() -> None:
    plan = FatalPlan(after_s=2.0)
    plan.armed.add("n2")
    behaviour = watch_behaviour(PROBE, 60.0, plan)
    first, second = behaviour(watch_pod("n2", "w1")), behaviour(watch_pod("n2", "w2"))
    other = behaviour(watch_pod("n3"))
    assert isinstance(first, Complete)
    assert isinstance(second, Complete)
    assert isinstance(other, Complete)
    assert (first.exit_code, first.delay_s) == (WatchExit.EARLY, 2.0)
    report = decode_watch_message(first.message)
    assert report.end_reason is WatchEnd.FATAL_XID
    assert report.ended_early
    xids = evidence(watch_pod("n2", "w1"), first).xids
    assert [(x.xid, x.kind) for x in xids] == [(FATAL_XID, "fatal")]
    assert second.exit_code == WatchExit.QUIET
    assert other.exit_code == WatchExit.QUIET
    assert set(plan.event_at) == {"n2"}


def test_other_pods_keep_the_previous_behaviour() -> None:
    behaviour = watch_behaviour(PROBE, 60.0, FatalPlan(after_s=2.0))
    assert behaviour(pod("n1", ["probe"])) is PROBE
