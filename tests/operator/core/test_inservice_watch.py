"""Watch pods of health in service on the in-memory world: one token-less pod per
accepted node and window, no GPU requested, its UID on record; its report read only
from that pod, bound to the node by the pod and to the boot by the ledger; a fatal Xid
quarantines, an unreadable report or another node's is no evidence, a report seen
again is counted once, an application Xid in two windows makes a suspect."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from itertools import pairwise
from typing import Any

from world import World, spec

from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.contracts.watch_report import WatchReport, encode_watch_message
from gpuaccept.operator.core import PolicyView
from gpuaccept.operator.core.model import PodView
from gpuaccept.operator.core.podspec import WATCH_LABEL

WINDOW = 60
SETTLE = 15  # correlation.settleSeconds: a verdict waits this long after its onset


def accepted(*, operator_watch_pods: bool = True, **section: Any) -> World:
    policy = spec(inService={"enabled": True, "windowSeconds": WINDOW, **section})
    world = World(policies=[PolicyView(name="default", generation=1, spec=policy)])
    world.config = dataclasses.replace(world.config, watch_pods=operator_watch_pods)
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    return world


def watch_pods(world: World) -> list[PodView]:
    return [p for p in world.pods.values() if p.watch is not None]


def report(world: World, *xids: tuple[int, float], **fields: Any) -> str:
    start = world.now - timedelta(seconds=WINDOW)
    body: dict[str, Any] = {
        "node_name": "gpu-1",
        "boot_id": "boot-1",
        "probe_version": "0.1.0",
        "simulated": True,
        "started_at": start,
        "ended_at": world.now,
        "window_s": float(WINDOW),
        "watched_s": float(WINDOW),
        "end_reason": "window",
        "ended_early": False,
        "gpus_expected": 8,
        "gpus_seen": 8,
        "xids": [
            {"gpu": 3, "uuid": "GPU-3", "xid": xid, "firstS": at, "lastS": at} for xid, at in xids
        ],
        **fields,
    }
    return encode_watch_message(WatchReport.model_validate(body))


def end_watch(world: World, message: str | None) -> None:
    (pod,) = [p for p in watch_pods(world) if not p.ended]
    world.pods[pod.name] = dataclasses.replace(
        pod, phase="Succeeded", terminated=True, exit_code=0, message=message, finished=world.now
    )


def test_one_token_less_watch_pod_without_a_gpu() -> None:
    world = accepted()
    (pod,) = watch_pods(world)
    body = world.bodies[pod.name]
    assert pod.name == "gpuaccept-probe-watch-gpu-1-1"
    assert body["metadata"]["labels"][WATCH_LABEL] == "1"
    assert body["spec"]["automountServiceAccountToken"] is False
    assert body["spec"]["nodeName"] == "gpu-1"
    container = body["spec"]["containers"][0]
    assert container["command"][2:5] == ["watch", "--termination-log", "/dev/termination-log"]
    assert str(WINDOW) in container["command"]
    assert "nvidia.com/gpu" not in str(container["resources"])
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in container["env"]
    assert not any("pending" in str(t) for t in body["spec"]["tolerations"])
    assert [p.name for p in world.status.owned_pods][-1] == pod.name
    assert world.status.in_service is not None
    assert world.status.in_service.watch_pod == pod.name


def test_a_fatal_xid_quarantines_and_the_watch_stops() -> None:
    world = accepted()
    world.advance(30)
    end_watch(world, report(world, (79, 55.0), end_reason="fatalXid", ended_early=True))
    world.settle()
    assert world.status.phase == Phase.ACCEPTED  # pending: the onset is 5 s old
    world.advance(SETTLE)
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "XidFatal")
    assert "Xid 79 (fatal) on GPU GPU-3" in (st.message or "")
    assert not watch_pods(world)


def test_a_quiet_window_then_the_next_pod_at_the_next_window() -> None:
    world = accepted()
    world.advance(WINDOW)
    end_watch(world, report(world))
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    (pod,) = watch_pods(world)
    assert pod.watch == 2  # a new serial each window
    assert world.status.in_service is not None
    assert len(world.status.in_service.reports) == 1


def test_an_unreadable_report_is_no_evidence_and_waits_for_the_window() -> None:
    world = accepted()
    world.advance(5)
    end_watch(world, "not json")
    plan = world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.status.reason is None
    assert not watch_pods(world)  # deleted; the next one waits for the window
    assert plan.requeue_after is not None
    assert plan.requeue_after <= WINDOW - 5
    assert "WatchReportUnreadable" in [e.reason for e in world.events]
    world.advance(WINDOW)
    world.settle()
    assert [p.watch for p in watch_pods(world)] == [2]


def test_another_nodes_report_is_no_evidence() -> None:
    world = accepted()
    world.advance(WINDOW)
    end_watch(world, report(world, (79, 1.0), node_name="gpu-2"))
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.status.in_service is not None
    assert world.status.in_service.reports == []


def test_a_report_of_an_earlier_boot_is_not_counted() -> None:
    world = accepted()
    world.advance(WINDOW)
    end_watch(world, report(world, (79, 1.0), boot_id="boot-0"))
    world.settle()
    assert world.status.phase == Phase.ACCEPTED


def test_a_report_seen_again_is_counted_once() -> None:
    world = accepted(xid={"applicationSuspectCount": 2})
    world.advance(WINDOW)
    message = report(world, (13, 5.0))
    end_watch(world, message)
    (ended,) = [p for p in watch_pods(world) if p.ended]
    world.settle()
    world.pods[ended.name] = ended  # the same ended pod seen again (a stale cache)
    world.settle()
    st = world.status
    assert st.in_service is not None
    assert st.in_service.suspects == []
    assert [e.xid for e in st.in_service.events] == [13]


def test_an_application_xid_in_two_windows_makes_a_suspect() -> None:
    world = accepted()
    for _ in range(2):
        world.advance(WINDOW)
        end_watch(world, report(world, (13, 5.0)))
        world.settle()
    st = world.status
    assert st.phase == Phase.ACCEPTED
    assert st.in_service is not None
    assert [(s.gpu, s.xid, s.count) for s in st.in_service.suspects] == [("GPU-3", 13, 2)]


def test_remap_failure_in_the_state_quarantines() -> None:
    world = accepted()
    world.advance(WINDOW)
    end_watch(world, report(world, gpus=[{"index": 2, "uuid": "GPU-2", "remapFailed": True}]))
    world.settle()
    assert world.status.phase == Phase.ACCEPTED  # pending until it settles
    world.advance(SETTLE)
    world.settle()
    assert (world.status.phase, world.status.reason) == (Phase.QUARANTINED, "RowRemapFailure")


def test_watch_pods_off() -> None:
    world = accepted(watchPods=False)
    assert not watch_pods(world)


def test_an_operator_without_watch_pods_runs_none_whatever_the_policy_says() -> None:
    """Issue 42 item 10: a watch pod sees the GPUs through NVIDIA_VISIBLE_DEVICES=all,
    which a hardened container runtime refuses to unprivileged pods (the setting that
    keeps every tenant pod from every GPU). --no-watch-pods (chart operator.watchPods:
    false) runs every policy as with inService.watchPods false; the Node's own signals
    are still judged."""
    world = accepted(operator_watch_pods=False)
    assert not watch_pods(world)
    assert world.status.in_service is not None
    assert world.status.in_service.watch_pod is None
    assert watch_pods(accepted(operator_watch_pods=True))


def test_leaving_service_deletes_the_watch_pod() -> None:
    world = accepted()
    assert world.node is not None
    world.node = dataclasses.replace(world.node, boot_id="boot-2")
    world.settle()
    assert not watch_pods(world)


def test_a_watch_that_saw_no_gpu_is_no_evidence() -> None:
    """A runtime that hides the GPUs from a pod without a GPU request: not a lost GPU."""
    world = accepted()
    world.advance(WINDOW)
    hidden = report(world, end_reason="noDeviceAccess", ended_early=True, gpus_seen=0)
    end_watch(world, hidden)
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.status.in_service is not None
    assert world.status.in_service.reports == []
    assert "WatchReportUnreadable" in [e.reason for e in world.events]


def test_a_simulated_report_is_refused_where_the_operator_takes_none() -> None:
    world = accepted()
    world.config = dataclasses.replace(world.config, accept_simulated_reports=False)
    world.advance(WINDOW)
    end_watch(world, report(world, (79, 1.0)))
    world.settle()
    assert world.status.phase == Phase.ACCEPTED


def test_the_report_is_counted_before_its_pod_goes_and_the_next_pod_is_reserved() -> None:
    """A refused status write must not lose a report (its pod deleted first) nor
    create a pod under a serial the status did not reserve (its intent on record)."""
    from gpuaccept.operator.core.model import (  # noqa: PLC0415
        CreateProbePod,
        DeleteProbePod,
        PatchNAStatus,
    )

    world = accepted()
    world.advance(WINDOW)
    end_watch(world, report(world, (13, 5.0)))
    first = world.plan()
    (create,) = [a for a in first.actions if isinstance(a, CreateProbePod)]
    assert not [a for a in first.actions if isinstance(a, PatchNAStatus | DeleteProbePod)]
    assert create.name in {e.name for e in world.status.creation_intents}
    world.apply(first)
    kinds = [type(a) for a in world.plan().actions]
    assert kinds.index(PatchNAStatus) < kinds.index(DeleteProbePod)
    world.settle()
    world.advance(WINDOW)
    end_watch(world, report(world, (79, 5.0)))
    kinds = [type(a) for a in world.plan().actions]
    assert kinds.index(PatchNAStatus) < kinds.index(DeleteProbePod)


def test_an_early_end_starts_the_next_window_soon_then_backs_off() -> None:
    """A pod that ends before its window (evicted, a failed listener) leaves the node
    unwatched, and NVML delivers no event from before registration: the next starts
    earlyRestartSeconds after it started, the wait doubling for each early end in a
    row, never more than a window."""
    world = accepted(windowSeconds=600, earlyRestartSeconds=20)
    starts = []
    for _ in range(4):
        (live,) = [p for p in watch_pods(world) if not p.ended]
        starts.append(world.now)
        world.advance(5)
        end_watch(world, report(world, end_reason="terminated", ended_early=True))
        world.settle()
        while not [p for p in watch_pods(world) if not p.ended and p.watch != live.watch]:
            world.advance(5)
            world.settle()
    waits = [(b - a).total_seconds() for a, b in pairwise(starts)]
    assert waits == [20, 40, 80]
    world.advance(600)
    end_watch(world, report(world))  # ... then a window that ran out
    world.settle()
    assert world.status.in_service is not None
    assert world.status.in_service.early_starts == 0  # the next starts at once, not early


def test_a_pod_seen_ended_at_its_window_waits_for_nothing_more() -> None:
    world = accepted(windowSeconds=600, earlyRestartSeconds=20)
    world.advance(600)
    end_watch(world, report(world))
    world.settle()
    assert [p.watch for p in watch_pods(world) if not p.ended] == [2]
    assert world.status.in_service is not None
    assert world.status.in_service.early_starts == 0


def test_a_blind_window_is_visible_never_a_quiet_pass() -> None:
    """A window that could not read part of what it watches (on a MIG GPU an
    unprivileged caller gets no instance-level Xids): a Warning Event, and the ledger
    keeps what was not read until a window reads it."""
    world = accepted()
    world.advance(WINDOW)
    why = "GPU 2: MIG mode: no instance-level Xid events without privilege"
    end_watch(world, report(world, not_read={"xid": why}))
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.status.in_service is not None
    assert world.status.in_service.not_read == {"xid": why}
    (event,) = [e for e in world.events if e.reason == "WatchBlind"]
    assert event.type == "Warning"
    assert why in event.message
    world.advance(WINDOW)
    end_watch(world, report(world))
    world.settle()
    assert world.status.in_service.not_read == {}
