"""Health in service end to end (issue 23): the real kube-apiserver, the kubelet
stand-in running the real probe on simulated profiles, the operator as a
subprocess under the chart's RBAC. An accepted node under a policy with
``inService`` is judged from its own Node, as the device plugin and other tools
write it (the test writes what they would):

* a device plugin that restarts (allocatable 0 for ~2 s) under a short grace: the
  node stays Accepted; one that lost a GPU for good: Quarantined, GPUsUnallocatable;
* a node-problem-detector condition held past its duration: Quarantined,
  UnhealthyCondition; one that flaps faster than its duration: stays Accepted;
* dryRun: Held, the quarantine it would apply recorded, the Node untouched;
* the quarantine limit: held in service (BreakerOpen), the Node untouched;
* watch pods (``gpuaccept probe watch``, token-less, no GPU) on the in-service
  profiles: Xid 79 after acceptance is quarantined (XidFatal); a row remap pending, under
  a policy that judges it (gpuState.remapPending), is quarantined from the state, not
  from its Xid 63 (RowRemapPending); an NVLink that goes down is quarantined
  (NVLinkDown); Xid 13 twice on one GPU
  makes a suspect that stays Accepted; an Xid 45 burst on several nodes at once is a
  common cause: suspects marked so, none quarantined; Xid 79 on three nodes at once is
  held as a common cause once the settle delay has passed, none quarantined.

Graces and durations are seconds here (the defaults are minutes).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuaccept.contracts.api import CREATION_NONCE_ANNOTATION
from gpuaccept.testsupport.kubelet_standin import Behaviour, BehaviourHook
from gpuaccept.testsupport.operator_env import (
    HEALTHY,
    NAMESPACE,
    ROOT,
    Env,
    Operator,
    operator_ports,
    suite_id,
    wait_for,
    wait_node_side,
)
from gpuaccept.testsupport.standin_behaviours import PodInfo, RunProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

QUARANTINE_TAINT = "gpuaccept.io/quarantined"
GRACE = 8
INSERVICE = ROOT / "profiles" / "inservice"
XID79 = str(INSERVICE / "xid79-after-acceptance.yaml")
XID13 = str(INSERVICE / "xid13-twice-one-gpu.yaml")
XID45 = str(INSERVICE / "xid45-burst.yaml")
REMAP = str(INSERVICE / "remap-pending.yaml")
NVLINK_DOWN = str(INSERVICE / "nvlink-down.yaml")
# Watch windows of 60 s (the default is 30 minutes): the in-service profiles' events
# fall within a window's first minute, and the stand-in's simulated watch reports the
# window at once (the first pod starts at acceptance; the next one a window later).
WATCH = {"enabled": True, "windowSeconds": 60}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _allocatable(env: Env, name: str, gpus: int) -> None:
    """What the device plugin does: nvidia.com/gpu allocatable (capacity stays)."""
    env.core.patch_node_status(name, {"status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}})


def _condition(env: Env, name: str, status: str) -> None:
    """What node-problem-detector does: its condition, with its last transition now."""
    condition = {
        "type": "KernelDeadlock",
        "status": status,
        "reason": "DockerHung" if status == "True" else "KernelHasNoDeadlock",
        "message": "task docker blocked for more than 120 seconds" if status == "True" else "",
        "lastHeartbeatTime": _now(),
        "lastTransitionTime": _now(),
    }
    env.core.patch_node_status(name, {"status": {"conditions": [condition]}})


def _gpus(env: Env, name: str) -> int:
    return int(env.node(name)["status"]["capacity"]["nvidia.com/gpu"])


def _taints(env: Env, name: str) -> list[str]:
    return [t["key"] for t in env.node(name)["spec"].get("taints") or []]


def _in_service(env: Env, name: str) -> dict[str, Any]:
    return dict(env.status(name).get("inService") or {})


def _watch_pods(env: Env, name: str) -> list[dict[str, Any]]:
    return [
        p for p in env.pods(name) if "gpuaccept.io/watch" in (p["metadata"].get("labels") or {})
    ]


def test_a_fatal_xid_after_acceptance_is_quarantined(env: Env) -> None:
    suite = suite_id("xid79")
    env.policy(suite, inService=WATCH)
    (name,) = env.nodes(suite, {"x": XID79})
    env.wait_phase([name], "Accepted")
    wait_for(
        f"{name} quarantined in service",
        lambda: env.status(name).get("reason") == "XidFatal",
        120,
    )
    wait_node_side(env, name, "Quarantined", reason="XidFatal")
    status = env.status(name)
    assert status["reasons"][0]["check"] == "in_service"
    assert "Xid 79 (fatal)" in status["message"]
    ledger = status["inService"]
    assert ledger["verdict"]["reason"] == "XidFatal"
    assert any(e.get("xid") == 79 for e in ledger["events"])
    assert ledger["watchSerial"] >= 1
    wait_for(f"{name}'s watch pods gone", lambda: not _watch_pods(env, name), 60)


def test_remap_pending_in_service_is_quarantined_from_the_state(env: Env) -> None:
    """Xid 63 (memory state) is never judged on the event; the pending flag at the
    window's end is, under a policy that judges it (off by default, as DCGM)."""
    suite = suite_id("remap")
    env.policy(suite, inService={**WATCH, "gpuState": {"remapPending": True}})
    (name,) = env.nodes(suite, {"r": REMAP})
    env.wait_phase([name], "Accepted")
    wait_for(
        f"{name} quarantined in service",
        lambda: env.status(name).get("reason") == "RowRemapPending",
        120,
    )
    wait_node_side(env, name, "Quarantined", reason="RowRemapPending")
    events = env.status(name)["inService"]["events"]
    assert any(e.get("xid") == 63 and e["kind"] == "memory" for e in events)
    assert any(e["kind"] == "state" and e["what"].startswith("RowRemapPending") for e in events)


def test_an_nvlink_down_in_service_is_quarantined(env: Env) -> None:
    """The watch reports nvlinkDown [7] on GPU 3; the operator judges it (issue 37)."""
    suite = suite_id("nvl")
    env.policy(suite, inService=WATCH)
    (name,) = env.nodes(suite, {"n": NVLINK_DOWN})
    env.wait_phase([name], "Accepted")
    wait_for(
        f"{name} quarantined in service",
        lambda: env.status(name).get("reason") == "NVLinkDown",
        120,
    )
    wait_node_side(env, name, "Quarantined", reason="NVLinkDown")
    events = env.status(name)["inService"]["events"]
    assert any(e["kind"] == "state" and e["what"] == "NVLinkDown (7)" for e in events)


def test_an_application_xid_twice_makes_a_suspect_that_stays_accepted(env: Env) -> None:
    suite = suite_id("xid13")
    env.policy(suite, inService=WATCH, reverify={"enabled": True})
    (name,) = env.nodes(suite, {"x": XID13})
    env.wait_phase([name], "Accepted")
    wait_for(
        f"{name} a suspect",
        lambda: (env.status(name).get("inService") or {}).get("suspects"),
        120,
    )
    status = env.status(name)
    assert status["phase"] == "Accepted"
    assert "reason" not in status
    (suspect,) = status["inService"]["suspects"]
    assert suspect["xid"] == 13
    assert suspect["count"] >= 2
    assert not suspect.get("commonCause")
    suspicions = status["reverify"]["suspicions"]
    assert [s["checks"] for s in suspicions] == [["xid_errors", "gpu_compute"]]
    assert "Xid 13" in suspicions[0]["cause"]
    # the Event follows the status write that records the suspect (one action after it)
    wait_for(
        f"{name} an InServiceSuspect event",
        lambda: any(e["reason"] == "InServiceSuspect" for e in env.events(name, "NodeAcceptance")),
        30,
    )
    wait_node_side(env, name, "Accepted")


def test_an_xid_45_burst_on_several_nodes_is_a_common_cause(env: Env) -> None:
    suite = suite_id("xid45")
    env.policy(suite, inService=WATCH)
    names = env.nodes(suite, {"a": XID45, "b": XID45, "c": XID45})
    env.wait_phase(names, "Accepted")

    def common() -> bool:
        for name in names:
            suspects = (env.status(name).get("inService") or {}).get("suspects") or []
            if not suspects or not all(s.get("commonCause") for s in suspects):
                return False
        return True

    # each node is judged again at its next window: all of them see the others by then
    wait_for("every node's suspects marked a common cause", common, 240)
    for name in names:
        status = env.status(name)
        assert status["phase"] == "Accepted"
        assert {s["xid"] for s in status["inService"]["suspects"]} == {45}
        assert "verdict" not in status["inService"]
        assert QUARANTINE_TAINT not in _taints(env, name)


def test_a_fatal_xid_on_three_nodes_at_once_is_a_common_cause_none_quarantined(env: Env) -> None:
    """A fleet-wide event (a driver bug raising Xid 79 on many nodes): each node's
    verdict waits correlation.settleSeconds, recorded as pending; by the time the
    first settles, the others have reported, and all are held (CommonCause). The
    delay is 60 s here (15 s by default) so that the three nodes' acceptances, and so
    their first watch windows, fall within it on a loaded test machine."""
    suite = suite_id("xid79x3")
    env.policy(suite, inService={**WATCH, "correlation": {"settleSeconds": 60}})
    names = env.nodes(suite, {"a": XID79, "b": XID79, "c": XID79})

    def held() -> bool:
        statuses = [env.status(name) for name in names]
        assert not any(s.get("phase") == "Quarantined" for s in statuses), statuses
        return all(s.get("reason") == "CommonCause" for s in statuses)

    env.wait_phase(names, "Accepted")
    wait_for("every node held as a common cause, none quarantined", held, 180)
    for name in names:
        status = env.status(name)
        assert status["phase"] == "Accepted"
        verdict = status["inService"]["verdict"]
        assert (verdict["reason"], verdict["commonCause"]) == ("XidFatal", True)
        assert not verdict.get("pending")
        assert "common cause: XidFatal:79 on 3 nodes" in verdict["message"]
        assert QUARANTINE_TAINT not in _taints(env, name)
        assert any(e["reason"] == "CommonCause" for e in env.events(name, "Node"))


def test_a_device_plugin_restart_stays_accepted_a_lost_gpu_is_quarantined(env: Env) -> None:
    suite = suite_id("alloc")
    section = {"enabled": True, "allocatableGraceSeconds": GRACE, "watchPods": False}
    env.policy(suite, inService=section)
    restart, lost = env.nodes(suite, {"restart": HEALTHY, "lost": HEALTHY})
    env.wait_phase([restart, lost], "Accepted")
    wait_for("the ledgers", lambda: _in_service(env, restart) and _in_service(env, lost), 30)
    gpus = _gpus(env, restart)
    _allocatable(env, restart, 0)  # the device plugin restarts: nothing allocatable
    _allocatable(env, lost, gpus - 1)  # a GPU marked unhealthy, for good
    wait_for(
        f"{restart}'s drop recorded",
        lambda: _in_service(env, restart).get("unallocatableSince"),
        30,
    )
    time.sleep(2)
    _allocatable(env, restart, gpus)  # registered again
    wait_for(
        f"{lost} quarantined in service",
        lambda: env.status(lost).get("reason") == "GPUsUnallocatable",
        60,
    )
    wait_node_side(env, lost, "Quarantined", reason="GPUsUnallocatable")
    status = env.status(lost)
    assert status["phase"] == "Quarantined"
    assert status["reasons"][0]["check"] == "in_service"
    assert f"{gpus - 1} of {gpus} GPUs allocatable" in status["message"]
    verdict = status["inService"]["verdict"]
    assert verdict["reason"] == "GPUsUnallocatable"
    assert verdict["windowStart"] <= verdict["windowEnd"]
    # the restart's drop began with the lost GPU's: its grace is over too, and it stayed
    kept = env.status(restart)
    assert kept["phase"] == "Accepted"
    assert "reason" not in kept
    assert "unallocatableSince" not in kept["inService"]
    assert [e["what"] for e in kept["inService"]["events"]] == ["GPUsUnallocatable"]
    wait_node_side(env, restart, "Accepted")
    assert QUARANTINE_TAINT not in _taints(env, restart)


def test_a_condition_held_is_quarantined_a_flapping_one_is_not(env: Env) -> None:
    suite = suite_id("npd")
    rule = {"type": "KernelDeadlock", "status": "True", "durationSeconds": 10}
    env.policy(
        suite, inService={"enabled": True, "unhealthyConditions": [rule], "watchPods": False}
    )
    held, flapping = env.nodes(suite, {"held": HEALTHY, "flap": HEALTHY})
    env.wait_phase([held, flapping], "Accepted")
    _condition(env, held, "True")
    for _ in range(6):  # True for about 2 s, then False: never 10 s in a row
        _condition(env, flapping, "True")
        time.sleep(2)
        _condition(env, flapping, "False")
        time.sleep(1)
    wait_for(
        f"{held} quarantined in service",
        lambda: env.status(held).get("reason") == "UnhealthyCondition",
        60,
    )
    wait_node_side(env, held, "Quarantined", reason="UnhealthyCondition")
    assert "KernelDeadlock=True" in env.status(held)["message"]
    kept = env.status(flapping)
    assert kept["phase"] == "Accepted"
    assert "reason" not in kept
    events = [e["what"] for e in kept["inService"]["events"]]
    assert events.count("condition KernelDeadlock=True") >= 2
    assert not kept["inService"].get("conditions")  # False now: no timer runs
    assert QUARANTINE_TAINT not in _taints(env, flapping)


def test_dry_run_holds_an_in_service_verdict(env: Env) -> None:
    suite = suite_id("dry")
    section = {"enabled": True, "allocatableGraceSeconds": 2, "watchPods": False}
    env.policy(suite, dryRun=True, inService=section)
    (name,) = env.nodes(suite, {"d": HEALTHY})
    wait_for(
        f"{name} held, would accept",
        lambda: env.status(name).get("heldAction") == "Accept",
        120,
    )
    _allocatable(env, name, _gpus(env, name) - 1)
    wait_for(
        f"{name} held, would quarantine",
        lambda: env.status(name).get("heldAction") == "Quarantine",
        60,
    )
    status = env.status(name)
    assert (status["phase"], status["reason"]) == ("Held", "DryRun")
    assert status["reasons"][0]["reason"] == "GPUsUnallocatable"
    assert "would quarantine" in status["message"]
    assert QUARANTINE_TAINT not in _taints(env, name)


def test_the_quarantine_limit_holds_it_in_service(env: Env) -> None:
    suite = suite_id("limit")
    env.policy(
        suite,
        maxQuarantined=0,
        inService={"enabled": True, "allocatableGraceSeconds": 2, "watchPods": False},
    )
    (name,) = env.nodes(suite, {"l": HEALTHY})
    env.wait_phase([name], "Accepted")
    _allocatable(env, name, _gpus(env, name) - 1)
    wait_for(
        f"{name} held by the limit",
        lambda: env.status(name).get("reason") == "BreakerOpen",
        60,
    )
    status = env.status(name)
    assert (status["phase"], status["heldAction"]) == ("Accepted", "Quarantine")
    assert status["reasons"][0]["reason"] == "GPUsUnallocatable"
    assert "quarantine limit" in status["message"]
    wait_node_side(env, name, "Accepted")
    assert QUARANTINE_TAINT not in _taints(env, name)
    assert any(e["reason"] == "BreakerOpen" for e in env.events(name, "Node"))


def _serial(pod_name: str) -> int:
    return int(pod_name.rsplit("-", 1)[1])


def _reserved(status: dict[str, Any]) -> str | None:
    """The watch pod name the status reserved (its intent on record), if any."""
    ledger = status.get("inService") or {}
    serial = ledger.get("watchSerial", 0)
    names = [i["name"] for i in status.get("creationIntents") or [] if i["kind"] == "Pod"]
    return next((n for n in names if n.endswith(f"-{serial + 1}")), None)


def _made_in_the_crash_window(env: Env, name: str, ended: dict[str, Any], reserved: str) -> str:
    """The API server as an operator killed between the create of the reserved pod and
    the status write that records it leaves it: the pod there, carrying the nonce of
    the intent on record (its digest replaced by one the test knows), no UID on record."""
    nonce = uuid.uuid4().hex
    status = env.status(name)
    intents = [
        {**i, "nonceDigest": hashlib.sha256(nonce.encode()).hexdigest()}
        if i["name"] == reserved
        else i
        for i in status["creationIntents"]
    ]
    env.cp.kubectl(
        "patch", "nodeacceptance", name, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"creationIntents": intents}}),
    )  # fmt: skip
    meta = ended["metadata"]
    annotations = {**(meta.get("annotations") or {}), CREATION_NONCE_ANNOTATION: nonce}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": reserved,
            "labels": meta.get("labels") or {},
            "annotations": annotations,
            "ownerReferences": meta.get("ownerReferences") or [],
        },
        "spec": ended["spec"],
    }
    env.core.create_namespaced_pod(NAMESPACE, body)
    return reserved


def _second_window_waits_for(gate: threading.Event) -> BehaviourHook:
    """The node's second watch pod starts only once ``gate`` is set (the first operator
    dead): else that operator could read it and delete it before the kill (a simulated
    window ends in well under a second)."""

    def hook(pod: PodInfo) -> Behaviour:
        watch = "gpuaccept.io/watch" in (pod.pod["metadata"].get("labels") or {})
        if watch and _serial(pod.name) == 2:
            gate.wait(120)
        return RunProcess()

    return hook


def _let_windows_run(env: Env, gate: threading.Event, suite: str) -> None:
    gate.set()
    for node in env.standin.nodes:
        if node.startswith(suite):
            env.standin.set_behaviour(node, None)


@pytest.mark.parametrize("step", ["create", "write"])
def test_an_operator_killed_at_each_step_of_a_watch_window_loses_no_report(
    env: Env, step: str
) -> None:
    """Issue 41 item 2: a window is create (the pod under the serial the last write
    reserved), one status write (the ended pod's report, the new pod's UID, the next
    reservation), delete. Killed (SIGKILL) before the create, or between the create and
    the write: the restarted operator counts the ended pod's
    report, deletes a pod it made but never recorded unread, passes over the serial
    the dead process reserved, and watches on under a new one. (Between the write and
    the delete: tests/operator/core/test_inservice_one_write.py.)"""
    suite = suite_id(f"watchkill-{step}")
    env.policy(suite, inService={"enabled": True, "windowSeconds": 10})
    lease = f"optest-watchkill-{uuid.uuid4().hex[:6]}"
    env.operator.stop()
    first = Operator(env.cp, env.log_dir, lease=lease, name=f"watchkill-{step}-1").start()
    gate = threading.Event()
    try:
        (name,) = env.nodes(suite, {"n": HEALTHY})
        env.standin.set_behaviour(name, _second_window_waits_for(gate))
        env.wait_phase([name], "Accepted")
        wait_for(
            "a window run with its next serial reserved",
            lambda: (
                _in_service(env, name).get("watchSerial", 0) >= 2
                and _reserved(env.status(name)) is not None
            ),
            120,
        )
        first.kill()
        gate.set()
        status = env.status(name)
        current, reserved = status["inService"]["watchPod"], _reserved(status)
        assert reserved is not None, status
        assert _serial(current) == 2, status

        def ended() -> dict[str, Any] | None:
            pods = [p for p in _watch_pods(env, name) if p["metadata"]["name"] == current]
            done = [p for p in pods if p["status"].get("phase") in ("Succeeded", "Failed")]
            return done[0] if done else None

        wait_for(f"{current} ended", lambda: ended() is not None, 60)
        pod = ended()
        assert pod is not None
        uid = pod["metadata"]["uid"]
        made = {p["metadata"]["name"] for p in _watch_pods(env, name)}
        if step == "write" and reserved not in made:  # else killed there already
            _made_in_the_crash_window(env, name, pod, reserved)
        second = Operator(env.cp, env.log_dir, lease=lease, name=f"watchkill-{step}-2").start()
        try:

            def watching_past() -> bool:
                ledger = env.status(name).get("inService") or {}
                return _serial(ledger.get("watchPod") or "x-0") > _serial(reserved)

            wait_for("a watch pod past the reserved serial", watching_past, 120)
            wait_for(f"{current} deleted", lambda: ended() is None, 60)
            status = env.status(name)
            assert status["phase"] == "Accepted", status
            ledger = status["inService"]
            assert any(k.startswith(f"{uid}/") for k in ledger["reports"]), ledger
            owned = {o["name"] for o in status.get("ownedPods") or []}
            assert reserved not in owned, status  # never recorded, never read
            wait_for(
                f"{reserved} gone",
                lambda: reserved not in {p["metadata"]["name"] for p in _watch_pods(env, name)},
                60,
            )
        finally:
            second.stop()
    finally:
        _let_windows_run(env, gate, suite)
        first.kill()
        env.operator.start(**operator_ports())
