"""Health in service on DRA nodes end to end (issue 39, part 5): the real
kube-apiserver (resource.k8s.io/v1 ResourceSlices with KEP-5055 device taints), the
kubelet stand-in, the operator as a subprocess under the chart's RBAC.

How the node gets to Accepted: a DRA node cannot be probed yet (it waits for the
probe through a ResourceClaim), so each node here is accepted as a device-plugin node
and then moved to DRA as a cluster moving the GPU Operator to its DRA mode does:
the device plugin goes (the kubelet sets the capacity of a device plugin's resource
that is gone to 0, kubelet ``nodestatus/setters.go``) and NVIDIA's DRA driver
publishes the node's pool. The operator then holds the node to that pool, as it will
hold a node accepted through a claim:

* a pool that loses a GPU past the grace: Quarantined, GPUsUnallocatable; one that is
  republished under a new generation (incomplete for a moment) with the same GPUs
  stays Accepted;
* the driver's fatal Xid taint (gpu.nvidia.com/xid=79, NoSchedule): Quarantined,
  XidFatal; an application-class one (xid=13, None): recorded, stays Accepted; an
  unmonitored GPU: a WatchBlind Warning, stays Accepted;
* dryRun: a lost GPU's taint (gpu.nvidia.com/gpu-lost) is held, the quarantine it
  would apply recorded, the Node untouched;
* under ``fencing: {mode: gpu, maxFencedGpus: 2}`` (issue 40 item 6) the fatal Xid taint
  on GPU 2 fences that GPU (one DeviceTaintRule, value in_service) and the node stays
  Accepted; a fatal Xid taint on GPU 6 then adds its own rule beside the first;
* the fence is a take-out in the quarantine rate (issue 40 item 4): one node's fence in
  service takes one GPU of a rate of one node per window, so another node's in-service
  quarantine (all its GPUs) waits in service (BreakerOpen); before, the fence took
  nothing from the rate;
* a fenced GPU put in MIG mode (the driver republishes it as MIG devices naming it their
  ``parentUUID``) stays fenced: its rule moves onto each MIG device, and back onto the
  GPU when it is whole again.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuaccept.probe.hardware.simulated import simulated_uuid
from gpuaccept.testsupport.operator_env import HEALTHY, Env, suite_id, wait_for, wait_node_side
from gpuaccept.testsupport.standin_dra import DRA_DRIVER, GROUP, PLURAL, VERSION, driver_taint

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

QUARANTINE_TAINT = "gpuaccept.io/quarantined"
GRACE = 8
SIGNALS_ONLY = {"enabled": True, "allocatableGraceSeconds": GRACE, "watchPods": False}


def _in_service(env: Env, name: str) -> dict[str, Any]:
    return dict(env.status(name).get("inService") or {})


def _to_dra(env: Env, name: str) -> int:
    """The node's GPUs move from the device plugin to NVIDIA's DRA driver; returns how
    many once the operator's ledger holds the pool."""
    gpus = int(env.node(name)["status"]["capacity"]["nvidia.com/gpu"])
    zero = {"nvidia.com/gpu": "0"}  # the kubelet, its device plugin gone
    env.core.patch_node_status(name, {"status": {"capacity": zero, "allocatable": zero}})
    env.standin.publish_pool(name)
    wait_for(
        f"{name}'s ledger holding its DRA pool",
        lambda: len(_in_service(env, name).get("draDevices") or []) == gpus,
        60,
    )
    return gpus


def _since(record: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(record["since"]).replace("Z", "+00:00"))


def _slice_taints(env: Env, name: str, device: str) -> list[dict[str, Any]]:
    listed = env.kube.request(
        "GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}?fieldSelector=spec.nodeName%3D{name}"
    )
    return [
        t
        for s in listed["items"]
        for d in s["spec"].get("devices") or []
        if d["name"] == device
        for t in d.get("taints") or []
    ]


def test_a_dra_pool_that_loses_a_gpu_is_quarantined_a_republish_is_not(env: Env) -> None:
    suite = suite_id("dra-lost")
    env.policy(suite, inService=SIGNALS_ONLY)
    republish, lost = env.nodes(suite, {"rep": HEALTHY, "lost": HEALTHY})
    env.wait_phase([republish, lost], "Accepted")
    gpus = _to_dra(env, republish)
    assert _to_dra(env, lost) == gpus
    assert env.status(lost)["phase"] == "Accepted"

    env.standin.publish_pool(republish, slices=2, leave_out=(1,))  # generation 3, half of it
    wait_for(
        f"{republish}'s incomplete republish timed",
        lambda: _in_service(env, republish).get("unallocatableSince"),
        30,
    )
    env.standin.publish_pool(lost, drop=(3,))  # the driver no longer publishes GPU 3
    time.sleep(2)
    env.standin.publish_pool(republish, slices=2)  # whole, the same GPUs

    wait_for(
        f"{lost} quarantined in service",
        lambda: env.status(lost).get("reason") == "GPUsUnallocatable",
        90,
    )
    wait_node_side(env, lost, "Quarantined", reason="GPUsUnallocatable")
    status = env.status(lost)
    assert status["reasons"][0]["check"] == "in_service"
    message = status["inService"]["verdict"]["message"]
    assert f"{gpus - 1} of the {gpus} GPUs it published through DRA" in message
    assert f"{simulated_uuid(lost, 3)} gone" in message
    assert env.node(lost)["status"]["capacity"]["nvidia.com/gpu"] == "0"

    kept = env.status(republish)
    assert kept["phase"] == "Accepted"
    assert "reason" not in kept
    assert "unallocatableSince" not in kept["inService"]
    assert [e["what"] for e in kept["inService"]["events"]] == ["GPUsUnallocatable"]
    assert QUARANTINE_TAINT not in env.taint_keys(republish)


def test_a_fatal_xid_taint_quarantines_an_application_one_does_not(env: Env) -> None:
    suite = suite_id("dra-xid")
    env.policy(suite, inService=SIGNALS_ONLY)
    fatal, app = env.nodes(suite, {"fatal": HEALTHY, "app": HEALTHY})
    env.wait_phase([fatal, app], "Accepted")
    _to_dra(env, fatal)
    _to_dra(env, app)

    env.standin.taint_gpus(fatal, {2: [driver_taint("xid", 79)]})
    env.standin.taint_gpus(app, {2: [driver_taint("xid", 13)], 5: [driver_taint("unmonitored")]})
    (xid13,) = _slice_taints(env, app, "gpu-2")
    assert (xid13["key"], xid13["value"], xid13["effect"]) == (f"{DRA_DRIVER}/xid", "13", "None")
    assert xid13["timeAdded"]  # the API server dates it

    wait_for(
        f"{fatal} quarantined in service",
        lambda: env.status(fatal).get("reason") == "XidFatal",
        90,
    )
    wait_node_side(env, fatal, "Quarantined", reason="XidFatal")
    status = env.status(fatal)
    assert "Xid 79 (fatal)" in status["message"]
    assert f"DRA driver taint {DRA_DRIVER}/xid" in status["message"]
    assert status["inService"]["verdict"]["gpu"] == simulated_uuid(fatal, 2)

    wait_for(
        f"{app}'s driver taints recorded",
        lambda: len(_in_service(env, app).get("driverTaints") or []) == 2,
        60,
    )
    wait_for(
        f"{app}'s unmonitored GPU said",
        lambda: any(e["reason"] == "WatchBlind" for e in env.events(app, "NodeAcceptance")),
        30,
    )
    # 20 s past the onset of the app's evidence (its taints' timeAdded, recorded as
    # since), beyond correlation.settleSeconds (15 s): a verdict would be applied by now
    onset = max(_since(r) for r in _in_service(env, app)["driverTaints"])
    time.sleep(max(0.0, (onset + timedelta(seconds=20) - datetime.now(UTC)).total_seconds()))
    kept = env.status(app)
    assert kept["phase"] == "Accepted"
    assert "reason" not in kept
    assert "verdict" not in kept["inService"]
    records = {(r["gpu"], r["key"], r.get("value", "")) for r in kept["inService"]["driverTaints"]}
    assert records == {
        (simulated_uuid(app, 2), f"{DRA_DRIVER}/xid", "13"),
        (simulated_uuid(app, 5), f"{DRA_DRIVER}/unmonitored", ""),
    }
    assert any(e.get("xid") == 13 for e in kept["inService"]["events"])
    assert QUARANTINE_TAINT not in env.taint_keys(app)


def test_dry_run_holds_a_dra_driver_s_gpu_lost(env: Env) -> None:
    suite = suite_id("dra-dry")
    env.policy(suite, dryRun=True, inService=SIGNALS_ONLY)
    (name,) = env.nodes(suite, {"d": HEALTHY})
    wait_for(
        f"{name} held, would accept",
        lambda: env.status(name).get("heldAction") == "Accept",
        120,
    )
    gpus = _to_dra(env, name)
    env.standin.taint_gpus(name, {i: [driver_taint("gpu-lost")] for i in range(gpus)})
    wait_for(
        f"{name} held, would quarantine",
        lambda: env.status(name).get("heldAction") == "Quarantine",
        90,
    )
    status = env.status(name)
    assert (status["phase"], status["reason"]) == ("Held", "DryRun")
    assert status["reasons"][0]["reason"] == "GPULost"
    assert "would quarantine" in status["message"]
    assert QUARANTINE_TAINT not in env.taint_keys(name)


def _fence_rules(env: Env, name: str) -> dict[str, tuple[str, str, str]]:
    """The node's fence rules: device -> the taint's key, value and effect."""
    items = env.kube.request("GET", "/apis/resource.k8s.io/v1/devicetaintrules")["items"]
    return {
        r["spec"]["deviceSelector"]["device"]: (
            r["spec"]["taint"]["key"],
            r["spec"]["taint"].get("value", ""),
            r["spec"]["taint"]["effect"],
        )
        for r in items
        if r["metadata"]["labels"].get("gpuaccept.io/node") == name
    }


def test_under_gpu_fencing_a_fatal_xid_taint_fences_its_gpu_and_fences_add_up(env: Env) -> None:
    """Issue 40 item 6: the driver's fatal Xid taint on one GPU fences that GPU with one
    DeviceTaintRule and the node stays Accepted; one on another GPU adds its fence."""
    suite = suite_id("dra-fence")
    env.policy(suite, inService=SIGNALS_ONLY, fencing={"mode": "gpu", "maxFencedGpus": 2})
    (name,) = env.nodes(suite, {"f": HEALTHY})
    env.wait_phase([name], "Accepted")
    gpus = _to_dra(env, name)
    fence = ("gpuaccept.io/fenced", "in_service", "NoSchedule")

    env.standin.taint_gpus(name, {2: [driver_taint("xid", 79)]})
    wait_for(f"{name}'s GPU 2 fenced", lambda: env.status(name).get("fenced") == f"1/{gpus}", 90)
    wait_for(f"{name}'s rule", lambda: _fence_rules(env, name) == {"gpu-2": fence}, 30)
    status = env.status(name)
    assert (status["phase"], status.get("reason")) == ("Accepted", None)
    assert [(g["index"], g["uuid"], g["fenced"]) for g in status["gpuVerdicts"]] == [
        (2, simulated_uuid(name, 2), True)
    ]
    assert QUARANTINE_TAINT not in env.taint_keys(name)

    env.standin.taint_gpus(name, {2: [driver_taint("xid", 79)], 6: [driver_taint("xid", 48)]})
    wait_for(
        f"{name}'s GPU 6 fenced too", lambda: env.status(name).get("fenced") == f"2/{gpus}", 90
    )
    wait_for(
        f"{name}'s two rules",
        lambda: _fence_rules(env, name) == {"gpu-2": fence, "gpu-6": fence},
        30,
    )
    assert env.status(name)["phase"] == "Accepted"
    assert QUARANTINE_TAINT not in env.taint_keys(name)


def test_an_in_service_fence_counts_in_the_quarantine_rate(env: Env) -> None:
    """Issue 40 item 4: a fence of a GPU in service is recorded in the rate's window
    (``takenOutTime``, ``takenOutGpus`` 1): with a rate of one node per window (8 GPUs
    of two 8-GPU nodes), the fence's GPU leaves room for 7, so the next node's
    in-service quarantine (8 GPUs) waits in service, its would-be action recorded."""
    suite = suite_id("dra-fence-rate")
    env.policy(
        suite,
        inService=SIGNALS_ONLY,
        fencing={"mode": "gpu"},
        maxQuarantined=2,
        quarantineRate={"maxPerWindow": 1, "windowSeconds": 3600},
    )
    fenced, lost = env.nodes(suite, {"fen": HEALTHY, "lost": HEALTHY})
    env.wait_phase([fenced, lost], "Accepted")
    gpus = _to_dra(env, fenced)
    _to_dra(env, lost)
    assert "takenOutTime" not in env.status(fenced)  # its acceptance took nothing out

    env.standin.taint_gpus(fenced, {2: [driver_taint("xid", 79)]})
    wait_for(
        f"{fenced}'s GPU 2 fenced", lambda: env.status(fenced).get("fenced") == f"1/{gpus}", 90
    )
    status = env.status(fenced)
    assert (status["phase"], status.get("takenOutGpus")) == ("Accepted", 1)
    assert status["takenOutTime"]

    env.standin.taint_gpus(lost, {4: [driver_taint("gpu-lost")]})
    wait_for(
        f"{lost}'s quarantine held by the rate",
        lambda: env.status(lost).get("heldAction") == "Quarantine",
        90,
    )
    status = env.status(lost)
    assert (status["phase"], status["reason"]) == ("Accepted", "BreakerOpen")
    assert "quarantineRate=1/3600s: 1 GPU(s) of limit 8 taken out" in status["message"]
    assert QUARANTINE_TAINT not in env.taint_keys(lost)


def test_a_fenced_gpu_cut_into_mig_devices_stays_fenced_on_them(env: Env) -> None:
    """Issue 40: GPU 2 fenced in service, then put in MIG mode: NVIDIA's driver
    republishes the pool with MIG devices in place of ``gpu-2``, each naming GPU 2's UUID
    as ``parentUUID``; the fence's rules select those MIG devices (none lifted), the node
    stays Accepted past the grace, and a GPU whole again gets its own rule back."""
    suite = suite_id("dra-fence-mig")
    env.policy(suite, inService=SIGNALS_ONLY, fencing={"mode": "gpu"})
    (name,) = env.nodes(suite, {"m": HEALTHY})
    env.wait_phase([name], "Accepted")
    gpus = _to_dra(env, name)
    fence = ("gpuaccept.io/fenced", "in_service", "NoSchedule")
    env.standin.taint_gpus(name, {2: [driver_taint("xid", 79)]})
    wait_for(f"{name}'s rule", lambda: _fence_rules(env, name) == {"gpu-2": fence}, 90)

    env.standin.publish_pool(name, mig=(2,))
    on_migs = {"gpu-2-mig-3g40gb-9-0": fence, "gpu-2-mig-3g40gb-9-4": fence}
    wait_for(
        f"{name}'s rules on GPU 2's MIG devices", lambda: _fence_rules(env, name) == on_migs, 60
    )
    time.sleep(GRACE + 4)  # past allocatableGraceSeconds: a repartition is no loss
    status = env.status(name)
    assert (status["phase"], status.get("fenced")) == ("Accepted", f"1/{gpus}"), status
    assert _fence_rules(env, name) == on_migs

    env.standin.publish_pool(name)
    wait_for(
        f"{name}'s rule back on gpu-2", lambda: _fence_rules(env, name) == {"gpu-2": fence}, 60
    )
