"""``make demo``: the operator deciding a simulated GPU fleet on a real kube-apiserver.

1. Start (or reuse) the control plane from ``make cluster-up``; install the CRDs,
   the namespace, the probe ServiceAccount and a demo policy.
2. Register a fleet with the kubelet stand-in (a subprocess): healthy nodes, an
   idle-downshift node and one node per fault profile, all registered with the
   pending taint, as kubelet ``--register-with-taints`` would; and a batch of
   new nodes under a second policy with the fabric test on (docs/fabric.md), one
   node per fabric fault profile among healthy ones: their pairs run for real
   (``gpuaccept probe fabric``, gloo over the loopback); a re-verification node; and
   an in-service batch under a policy with ``inService`` on (docs/operator.md
   "Health in service"): nodes accepted healthy, then watched by token-less watch
   pods playing their profile's in-service timeline: Xid 79 (quarantined in
   service, XidFatal), a quiet window (stays Accepted), Xid 13 twice on one GPU (a
   suspect, stays Accepted); and DRA nodes under the first policy, whose GPUs the
   stand-in publishes as NVIDIA's DRA driver does (ResourceSlices of driver
   ``gpu.nvidia.com``, no ``nvidia.com/gpu``): two healthy ones and one with a PCIe
   link at x8. Their probe pods get the GPUs through a ResourceClaim the operator
   creates, which the real kube-scheduler (``.bin/kube-scheduler``, a subprocess)
   allocates; the stand-in also plays the controller manager's resourceclaim
   controller (the control plane runs none). One more DRA node, under a policy with
   ``fencing: {mode: gpu}`` (docs/policy.md "Fencing"), has one bad GPU of eight (a
   row remap pending on GPU 5): it is Accepted with that GPU fenced by one
   DeviceTaintRule, where the same profile quarantines a device-plugin node whole
   under the first policy.
3. Run ``gpuaccept operator`` (a subprocess) and wait until every node is decided.
4. Print ``kubectl get nodeacceptance``, the nodes with taints and labels, the
   fence's DeviceTaintRule and what to try next. Exit 0 only if every node ended where it should.
5. Stop everything it started, unless ``KEEP=1``: then everything keeps running
   and the kubeconfig is printed. ``make demo-down`` stops what the demo
   started (the control plane too, if the demo started it); ``make
   cluster-down`` stops the control plane and every process attached to it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.api import (
    ACCEPTANCE_PLURAL,
    FENCE_TAINT_KEY,
    GROUP,
    PENDING_TAINT_KEY,
    POLICY_PLURAL,
    VERSION,
)
from gpuaccept.operator.core.podspec import NODE_LABEL, node_label_value
from gpuaccept.operator.kube import Kube
from gpuaccept.probe.hardware.profile import expected_fabric_reasons, expected_fault_reasons
from gpuaccept.testsupport.attached import register, stop_attached
from gpuaccept.testsupport.controlplane import ControlPlane, default_dir, start
from gpuaccept.testsupport.controlplane import stop as stop_control_plane
from gpuaccept.testsupport.crd_install import apply_crds
from gpuaccept.testsupport.scheduler import scheduler_command
from gpuaccept.testsupport.standin_dra import device_class_manifest

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "gpuaccept-system"
POLICY = "demo"
FAULTS = expected_fault_reasons(ROOT / "profiles" / "faults")  # each profile's expect.reason
GOOD = {
    "gpu-healthy-1": "profiles/h100-sxm-8gpu-healthy.yaml",
    "gpu-healthy-2": "profiles/h100-sxm-8gpu-healthy.yaml",
    "gpu-healthy-3": "profiles/h100-sxm-8gpu-healthy.yaml",
    "gpu-idle-downshift": "profiles/h100-sxm-8gpu-idle-downshift.yaml",
}
BAD = {
    f"gpu-{fault}": (f"profiles/faults/{fault}.yaml", reason) for fault, reason in FAULTS.items()
}
# The fabric batch: healthy nodes and one node per fabric fault profile, under a
# second policy with the fabric test on. Five healthy nodes: a conviction needs two
# partners that failed with the bad node and passed with two others (docs/fabric.md).
FABRIC_POLICY = "demo-fabric"
FABRIC_LABEL = "gpuaccept.io/demo-fabric"
FABRIC_FAULTS = expected_fabric_reasons(ROOT / "profiles" / "fabric")
FABRIC_GOOD = {f"gpu-fabric-{i}": "profiles/h100-sxm-8gpu-healthy.yaml" for i in range(1, 6)}
FABRIC_BAD = {
    f"gpu-fabric-{fault}": (f"profiles/fabric/{fault}.yaml", reason)
    for fault, reason in FABRIC_FAULTS.items()
}
FABRIC_SECTION = {"enabled": True, "minBusbwGBps": 200, "deadlineSeconds": 600}
# Re-verification (docs/policy.md "reverify"): a node accepted healthy whose GPUs
# are 15 % slower at its next probe (the stand-in's laterProfile), re-probed once it
# has been idle, found by its own baseline. Seconds here; a week and an hour by default.
REVERIFY_POLICY = "demo-reverify"
REVERIFY_LABEL = "gpuaccept.io/demo-reverify"
REVERIFY_SECTION = {"enabled": True, "idleSeconds": 2, "periodSeconds": 15, "sampleSeconds": 2}
REVERIFY_BAD = {
    "gpu-reverify-drifted": (
        "profiles/h100-sxm-8gpu-healthy.yaml",
        "profiles/reverify/h100-sxm-8gpu-drifted.yaml",
        "BaselineDriftFailed",
    )
}
# Health in service (docs/operator.md): accepted at the door, then watched. Windows of
# 60 s (30 minutes by default): the simulated watch plays a window's timeline at
# once, so each profile's events are reported when its node's first watch pod starts.
INSERVICE_POLICY = "demo-inservice"
INSERVICE_LABEL = "gpuaccept.io/demo-inservice"
INSERVICE_SECTION = {"enabled": True, "windowSeconds": 60}
INSERVICE_QUARANTINED = {
    "gpu-inservice-xid79": ("profiles/inservice/xid79-after-acceptance.yaml", "XidFatal")
}
INSERVICE_QUIET = {"gpu-inservice-quiet": "profiles/inservice/quiet.yaml"}
INSERVICE_SUSPECT = {"gpu-inservice-xid13": ("profiles/inservice/xid13-twice-one-gpu.yaml", 13)}
INSERVICE_NODES = (*INSERVICE_QUARANTINED, *INSERVICE_QUIET, *INSERVICE_SUSPECT)
# DRA-published nodes under the first policy, beside its device-plugin nodes (docs/
# architecture.md, "The probe on a DRA node"): NVIDIA's driver's name, its chart's
# DeviceClass (testsupport/standin_dra.py).
DRA_DRIVER = "gpu.nvidia.com"
DRA_GOOD = {f"gpu-dra-{i}": "profiles/h100-sxm-8gpu-healthy.yaml" for i in (1, 2)}
DRA_BAD = {"gpu-dra-pcie-x8": ("profiles/faults/pcie-x8.yaml", FAULTS["pcie-x8"])}
# GPU fencing (docs/policy.md "Fencing"): a DRA node with one bad GPU of eight under a
# policy with `fencing: {mode: gpu}` ends Accepted with that GPU alone out of service,
# by one DeviceTaintRule with gpuaccept's key on its device; the same profile on a
# device-plugin node under the first policy (gpu-row-remap-pending) is quarantined whole.
FENCE_POLICY = "demo-fencing"
FENCE_LABEL = "gpuaccept.io/demo-fencing"
FENCE_SECTION = {"mode": "gpu", "maxFencedGpus": 1}
FENCE_EFFECT = "NoSchedule"  # fencing.effect's default
FENCED = {"gpu-dra-row-remap-pending": ("profiles/faults/row-remap-pending.yaml", 5)}  # GPU 5
DRA_NODES = (*DRA_GOOD, *DRA_BAD, *FENCED)
ALL_NODES = (
    *GOOD, *BAD, *FABRIC_GOOD, *FABRIC_BAD, *REVERIFY_BAD, *INSERVICE_NODES, *DRA_NODES
)  # fmt: skip
TIMEOUT_S = 300
# In <cluster dir>/demo: the demo started the control plane, so demo-down stops it.
STARTED_CLUSTER = "started-cluster"


def say(text: str) -> None:
    print(f"==> {text}", flush=True)


def out(text: str) -> None:
    print(text, flush=True)


POLICY_PATH = f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}"
NA_PATH = f"/apis/{GROUP}/{VERSION}/{ACCEPTANCE_PLURAL}"
SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
RULES_PATH = "/apis/resource.k8s.io/v1/devicetaintrules"


def _create(kube: Kube, path: str, body: dict[str, Any]) -> None:
    try:
        kube.request("POST", path, body)
    except ApiException as error:
        if error.status != 409:
            raise


def install(kube: Kube) -> None:
    apply_crds(kube.api)
    _create(kube, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    _create(kube, "/apis/resource.k8s.io/v1/deviceclasses", device_class_manifest())
    _create(
        kube,
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
        {"metadata": {"name": "gpuaccept-probe"}},
    )
    spec = {
        "nodeSelector": {"nvidia.com/gpu.present": "true", "gpuaccept.io/demo": "true"},
        # The default policy: each profile's `expect` is stated against it.
        "probe": yaml.safe_load((ROOT / "policies" / "default-h100-h200.yaml").read_text()),
        "probeRun": {"timeoutSeconds": 120, "retries": 1, "backoffSeconds": 5},
        # every fault node is quarantined (the DRA one too), none held by the breaker
        "maxQuarantined": len(BAD) + len(DRA_BAD),
        "dryRun": False,
        "paused": False,
    }
    fabric_spec = {
        **spec,
        "nodeSelector": {"nvidia.com/gpu.present": "true", FABRIC_LABEL: "true"},
        "maxQuarantined": max(len(FABRIC_BAD), 1),
        # The damaged cable measures at most its 180 GB/s (the simulation's hold is a
        # floor on each all-reduce's time); healthy pairs (390) measured 274-385 GB/s
        # over the loopback here while the other nodes' probes ran: 200 keeps a wide
        # margin on both sides.
        "fabric": FABRIC_SECTION,
    }
    reverify_spec = {
        **spec,
        "nodeSelector": {"nvidia.com/gpu.present": "true", REVERIFY_LABEL: "true"},
        "maxQuarantined": 1,
        "reverify": REVERIFY_SECTION,
    }
    inservice_spec = {
        **spec,
        "nodeSelector": {"nvidia.com/gpu.present": "true", INSERVICE_LABEL: "true"},
        "maxQuarantined": len(INSERVICE_QUARANTINED),
        "inService": INSERVICE_SECTION,
    }
    fence_spec = {
        **spec,
        "nodeSelector": {"nvidia.com/gpu.present": "true", FENCE_LABEL: "true"},
        "maxQuarantined": 1,
        "fencing": FENCE_SECTION,
    }
    for name, body in (
        (POLICY, spec),
        (FABRIC_POLICY, fabric_spec),
        (REVERIFY_POLICY, reverify_spec),
        (INSERVICE_POLICY, inservice_spec),
        (FENCE_POLICY, fence_spec),
    ):
        apply_policy(kube, name, body)


def apply_policy(kube: Kube, name: str, spec: dict[str, Any]) -> None:
    policy = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeAcceptancePolicy",
        "metadata": {"name": name},
        "spec": spec,
    }
    for _ in range(30):  # the CRD may take a moment to be served
        try:
            kube.request("POST", POLICY_PATH, policy)
            break
        except ApiException as error:
            if error.status == 409:
                kube.request(
                    "PATCH",
                    f"{POLICY_PATH}/{name}",
                    {"spec": spec},
                    content_type="application/merge-patch+json",
                )
                break
            if error.status != 404:
                raise
            time.sleep(1)


def fleet_file(state: Path) -> Path:
    profiles = {**GOOD, **{name: profile for name, (profile, _reason) in BAD.items()}}
    fabric = {**FABRIC_GOOD, **{name: profile for name, (profile, _r) in FABRIC_BAD.items()}}
    inservice = {
        **INSERVICE_QUIET,
        **{name: profile for name, (profile, _r) in INSERVICE_QUARANTINED.items()},
        **{name: profile for name, (profile, _x) in INSERVICE_SUSPECT.items()},
    }
    batches = (
        (profiles, "gpuaccept.io/demo"),
        (fabric, FABRIC_LABEL),
        (inservice, INSERVICE_LABEL),
    )
    nodes = [
        {
            "name": name,
            "profile": str(ROOT / profile),
            "labels": {label: "true"},
            "taints": [{"key": PENDING_TAINT_KEY, "effect": "NoSchedule"}],
        }
        for batch, label in batches
        for name, profile in batch.items()
    ]
    nodes += [
        {
            "name": name,
            "profile": str(ROOT / profile),
            "laterProfile": str(ROOT / later),
            "labels": {REVERIFY_LABEL: "true"},
            "taints": [{"key": PENDING_TAINT_KEY, "effect": "NoSchedule"}],
        }
        for name, (profile, later, _reason) in REVERIFY_BAD.items()
    ]
    dra = {
        **{name: (profile, "gpuaccept.io/demo") for name, profile in DRA_GOOD.items()},
        **{name: (profile, "gpuaccept.io/demo") for name, (profile, _r) in DRA_BAD.items()},
        **{name: (profile, FENCE_LABEL) for name, (profile, _gpu) in FENCED.items()},
    }
    nodes += [
        {
            "name": name,
            "profile": str(ROOT / profile),
            "labels": {label: "true"},
            "taints": [{"key": PENDING_TAINT_KEY, "effect": "NoSchedule"}],
            "draDriver": DRA_DRIVER,
        }
        for name, (profile, label) in dra.items()
    ]
    path = state / "fleet.yaml"
    path.write_text(yaml.safe_dump({"nodes": nodes}, sort_keys=False))
    return path


def delete_fence_rules(kube: Kube) -> None:
    """Delete the DRA nodes' fence rules (the operator deletes a rule whose node is gone
    on its next pass, and the garbage collector with its NodeAcceptance: once the demo's
    operator is stopped, and with no controller manager, neither runs)."""
    for name in DRA_NODES:
        selector = f"{NODE_LABEL}%3D{node_label_value(name)}"
        kube.request("DELETE", f"{RULES_PATH}?labelSelector={selector}")


def forget_fleet(kube: Kube) -> None:
    """Remove what an earlier demo (KEEP=1) left: its nodes, their NodeAcceptances, the
    DRA nodes' ResourceSlices and their fence rules."""
    names = list(ALL_NODES)
    for name in names:
        with contextlib.suppress(ApiException):
            kube.request("DELETE", f"/api/v1/nodes/{name}")
        kube.delete_na(name)
    for name in DRA_NODES:
        kube.request("DELETE", f"{SLICES_PATH}?fieldSelector=spec.nodeName%3D{name}")
    delete_fence_rules(kube)
    for name in names:
        for _ in range(30):
            if kube.get_node(name) is None and kube.get_na(name) is None:
                break
            time.sleep(0.5)


def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as handle:
        return subprocess.Popen(
            args, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
        )


def phases(kube: Kube) -> dict[str, dict[str, Any]]:
    items = kube.request("GET", NA_PATH)["items"]
    names = set(ALL_NODES)
    return {
        i["metadata"]["name"]: i.get("status") or {}
        for i in items
        if i["metadata"]["name"] in names
    }


def kubectl(cp: ControlPlane, *args: str) -> str:
    exe = ROOT / ".bin" / "kubectl"
    if not exe.exists():
        return "(no .bin/kubectl; run make cluster-tools)\n"
    proc = subprocess.run(
        [str(exe), "--kubeconfig", str(cp.kubeconfig), *args],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    return proc.stdout + proc.stderr


def stop_child(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process this script started (SIGTERM to its group, then SIGKILL)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def down() -> int:
    """``make demo-down``: stop everything the demo started.

    Its operator and kubelet stand-in (registered as attached to the control
    plane), and the control plane too when the demo started it. A control plane
    from ``make cluster-up`` is left running; ``make cluster-down`` stops it and
    anything still attached to it.
    """
    directory = default_dir()
    stopped = stop_attached(directory)
    say(f"stopped {', '.join(stopped)}" if stopped else "no demo process running")
    if (directory / "demo" / STARTED_CLUSTER).exists():
        say("stopping the control plane the demo started")
        stop_control_plane(directory)
    return 0


@dataclass
class DemoRun:
    """The processes of one demo run and where they write."""

    cp: ControlPlane
    kube: Kube
    state: Path
    operator: subprocess.Popen[bytes]
    standin: subprocess.Popen[bytes]
    scheduler: subprocess.Popen[bytes]


def start_fleet(cp: ControlPlane, *, keep: bool) -> DemoRun:
    """Install the demo, then start the kubelet stand-in and the operator."""
    state = cp.dir / "demo"
    state.mkdir(exist_ok=True)
    if cp.owned:
        (state / STARTED_CLUSTER).touch()
    stop_attached(cp.dir)  # an earlier KEEP=1 run's processes
    kube = Kube(cp.api_client())
    kube.api.user_agent = "gpuaccept-demo"
    forget_fleet(kube)
    say(f"control plane ready at {cp.server}; installing CRDs and the '{POLICY}' policy")
    install(kube)
    say(
        f"registering {len(ALL_NODES)} simulated GPU nodes with the pending taint "
        f"({len(FABRIC_GOOD) + len(FABRIC_BAD)} of them under '{FABRIC_POLICY}', which runs "
        f"the fabric test; {len(INSERVICE_NODES)} under '{INSERVICE_POLICY}', watched in "
        f"service once accepted; {len(DRA_NODES)} whose GPUs are published through DRA, "
        f"{len(FENCED)} of them under '{FENCE_POLICY}', which fences a bad GPU alone)"
    )
    standin = spawn(
        [sys.executable, "-m", "gpuaccept.testsupport.kubelet_standin", "--kubeconfig",
         str(cp.kubeconfig), "--nodes-file", str(fleet_file(state)),
         "--claim-controller-namespace", NAMESPACE]
        + ([] if keep else ["--delete-nodes-on-exit"]),
        state / "kubelet-standin.log",
    )  # fmt: skip
    register(cp.dir, "demo-kubelet-standin", standin.pid)
    say("running kube-scheduler (it allocates the DRA nodes' probe claims)")
    scheduler = spawn(scheduler_command(cp), state / "kube-scheduler.log")
    register(cp.dir, "demo-kube-scheduler", scheduler.pid)
    say("running gpuaccept operator")
    operator = spawn(
        [sys.executable, "-m", "gpuaccept.cli", "operator", "--kubeconfig", str(cp.kubeconfig),
         "--namespace", NAMESPACE, "--standalone", "--metrics-port", "0", "--health-port", "0",
         "--status-interval", "2", "--probe-image", "local/gpuaccept-probe:demo",
         "--accept-simulated-reports"],  # the demo's nodes are simulated hardware
        state / "operator.log",
    )  # fmt: skip
    register(cp.dir, "demo-operator", operator.pid)
    return DemoRun(cp, kube, state, operator, standin, scheduler)


def wait_for_verdicts(run: DemoRun) -> bool:
    """Until every node is Accepted or Quarantined, printing the counts as they change."""
    deadline = time.monotonic() + TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in (run.operator, run.standin, run.scheduler)):
            say(
                f"a process died; see {run.state}/operator.log, kubelet-standin.log and "
                "kube-scheduler.log"
            )
            return False
        current = phases(run.kube)
        counts: dict[str, int] = {}
        for status in current.values():
            phase = status.get("phase", "Pending")
            counts[phase] = counts.get(phase, 0) + 1
        line = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "waiting"
        if line != last:
            say(f"nodes: {line}")
            last = line
        decided = {n for n, s in current.items() if s.get("phase") in ("Accepted", "Quarantined")}
        # a re-verification node is decided once its re-verification found it
        decided -= {n for n in REVERIFY_BAD if current.get(n, {}).get("phase") != "Quarantined"}
        decided -= {n for n in INSERVICE_NODES if not in_service_done(n, current.get(n, {}))}
        decided -= {n for n in FENCED if not fence_done(run.kube, n, current.get(n, {}))}
        if decided == set(ALL_NODES):
            return True
        time.sleep(1)
    say(f"not every node was decided within {TIMEOUT_S}s")
    return False


def fence_done(kube: Kube, name: str, status: dict[str, Any]) -> bool:
    """A node under the fencing policy is decided once Quarantined, or Accepted with its
    pending taint off (its fence rules are made before the taint comes off)."""
    if status.get("phase") != "Accepted":
        return status.get("phase") == "Quarantined"
    node = kube.get_node(name) or {}
    taints = (node.get("spec") or {}).get("taints") or ()
    return not any(t.get("key") == PENDING_TAINT_KEY for t in taints)


def fence_rules(kube: Kube) -> list[dict[str, Any]]:
    """Every DeviceTaintRule with gpuaccept's fence key, the demo's or not."""
    items = kube.request("GET", RULES_PATH)["items"]
    return [r for r in items if (r["spec"].get("taint") or {}).get("key") == FENCE_TAINT_KEY]


def gpu_device(kube: Kube, node: str, gpu_uuid: str) -> tuple[str, str, str] | None:
    """(driver, pool, device) that publishes the GPU ``gpu_uuid`` in ``node``'s slices."""
    slices = kube.request("GET", f"{SLICES_PATH}?fieldSelector=spec.nodeName%3D{node}")["items"]
    found = [
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
        for s in slices
        for d in s["spec"].get("devices") or ()
        if ((d.get("attributes") or {}).get("uuid") or {}).get("string") == gpu_uuid
    ]
    return found[0] if len(found) == 1 else None


def unexpected_fences(kube: Kube, current: dict[str, dict[str, Any]]) -> list[str]:
    """Each node under the fencing policy Accepted with exactly its bad GPU fenced, by
    exactly one rule with gpuaccept's key, on that GPU's device; no other such rule."""
    problems = []
    rules = fence_rules(kube)
    for name, (_profile, index) in FENCED.items():
        status = current.get(name, {})
        fenced = [g for g in status.get("gpuVerdicts") or () if g.get("fenced")]
        if (status.get("phase"), status.get("fenced"), [g.get("index") for g in fenced]) != (
            "Accepted",
            "1/8",
            [index],
        ):
            problems.append(
                f"{name}: expected Accepted with GPU {index} fenced (FENCED 1/8), got "
                f"{status.get('phase')}/{status.get('reason')} FENCED {status.get('fenced')}, "
                f"GPU verdicts {status.get('gpuVerdicts')}"
            )
            continue
        where = gpu_device(kube, name, str(fenced[0].get("uuid")))
        want = None
        if where is not None:
            want = {"driver": where[0], "pool": where[1], "device": where[2]}
        label = node_label_value(name)
        mine = [r for r in rules if r["metadata"].get("labels", {}).get(NODE_LABEL) == label]
        got = [(r["spec"]["deviceSelector"], r["spec"]["taint"]["effect"]) for r in mine]
        if want is None or got != [(want, FENCE_EFFECT)]:
            problems.append(
                f"{name}: expected one rule on the device of GPU {index} {want} with effect "
                f"{FENCE_EFFECT}, got {got}"
            )
    if len(rules) != len(FENCED):
        problems.append(
            f"expected {len(FENCED)} DeviceTaintRule(s) with key {FENCE_TAINT_KEY}, got "
            f"{[r['metadata']['name'] for r in rules]}"
        )
    return problems


def in_service_done(name: str, status: dict[str, Any]) -> bool:
    """An in-service node is decided once the watch has told: quarantined in service,
    or a watch window counted (a suspect's: its suspect recorded)."""
    if name in INSERVICE_QUARANTINED:
        return status.get("phase") == "Quarantined"
    ledger = status.get("inService") or {}
    if name in INSERVICE_SUSPECT:
        return bool(ledger.get("suspects"))
    return bool(ledger.get("reports"))


def unexpected_in_service(current: dict[str, dict[str, Any]]) -> list[str]:
    """Every in-service node not where its profile says it must end."""
    problems = []
    for name, (_profile, reason) in INSERVICE_QUARANTINED.items():
        status = current.get(name, {})
        check = ((status.get("reasons") or [{}])[0]).get("check")
        if (status.get("phase"), status.get("reason"), check) != (
            "Quarantined",
            reason,
            "in_service",
        ):
            problems.append(
                f"{name}: expected Quarantined/{reason} in service, got "
                f"{status.get('phase')}/{status.get('reason')} (check {check})"
            )
    for name in INSERVICE_QUIET:
        status = current.get(name, {})
        ledger = status.get("inService") or {}
        if status.get("phase") != "Accepted" or status.get("reason") or ledger.get("verdict"):
            problems.append(f"{name}: expected Accepted in service, got {status}")
        elif not ledger.get("reports") or ledger.get("suspects"):
            problems.append(f"{name}: expected a quiet watch window counted, got {ledger}")
    for name, (_profile, xid) in INSERVICE_SUSPECT.items():
        status = current.get(name, {})
        suspects = (status.get("inService") or {}).get("suspects") or []
        if status.get("phase") != "Accepted" or status.get("reason"):
            problems.append(f"{name}: expected Accepted (a suspect), got {status}")
        elif [x.get("xid") for x in suspects] != [xid] or suspects[0].get("commonCause"):
            problems.append(f"{name}: expected a suspect of Xid {xid}, got {suspects}")
    return problems


def unexpected(kube: Kube, current: dict[str, dict[str, Any]]) -> list[str]:
    """Every node not where its profile says it must end."""
    problems = unexpected_in_service(current) + unexpected_fences(kube, current)
    for name in (*GOOD, *FABRIC_GOOD, *DRA_GOOD):
        if current.get(name, {}).get("phase") != "Accepted":
            problems.append(f"{name}: expected Accepted, got {current.get(name)}")
    reverify = {name: (profile, reason) for name, (profile, _l, reason) in REVERIFY_BAD.items()}
    for name, (_profile, reason) in {**BAD, **FABRIC_BAD, **reverify, **DRA_BAD}.items():
        status = current.get(name, {})
        if status.get("phase") != "Quarantined" or status.get("reason") != reason:
            problems.append(
                f"{name}: expected Quarantined/{reason}, got "
                f"{status.get('phase')}/{status.get('reason')}"
            )
    for name, status in current.items():
        publishing = "DRA" if name in DRA_NODES else "DevicePlugin"
        if status.get("gpuPublishing") != publishing:
            problems.append(
                f"{name}: expected its GPUs published by {publishing}, got "
                f"{status.get('gpuPublishing')}"
            )
    return problems


def publishing_summary(current: dict[str, dict[str, Any]]) -> str:
    """How many nodes publish their GPUs each way, and how they ended."""
    counts: dict[tuple[str, str], int] = {}
    for status in current.values():
        key = (str(status.get("gpuPublishing")), str(status.get("phase")))
        counts[key] = counts.get(key, 0) + 1
    ways = sorted({way for way, _phase in counts})
    return "; ".join(
        f"{way}: "
        + ", ".join(f"{n} {phase}" for (w, phase), n in sorted(counts.items()) if w == way)
        for way in ways
    )


def show(cp: ControlPlane, kube: Kube) -> None:
    out("")
    time.sleep(3)  # let the policy status catch up (it is written every 2 s)
    out(kubectl(cp, "get", "nodeacceptancepolicy"))
    out(kubectl(cp, "get", "nodeacceptance"))
    columns = (
        "custom-columns=NODE:.metadata.name,PHASE:.status.phase,REASON:.status.reason,"
        "ROUND:.status.reverify.last.cause,DRIFT:.status.reverify.drift[0].message"
    )
    for name in REVERIFY_BAD:  # accepted healthy, then found by its re-verification
        out(kubectl(cp, "get", "nodeacceptance", name, "-o", columns))
    columns = (
        "custom-columns=NODE:.metadata.name,PHASE:.status.phase,REASON:.status.reason,"
        "CHECK:.status.reasons[*].check,VERDICT:.status.inService.verdict.message,"
        "SUSPECT_XIDS:.status.inService.suspects[*].xid,WINDOWS:.status.inService.watchSerial"
    )
    out("In service (accepted at the door, then watched):")
    out(kubectl(cp, "get", "nodeacceptance", *INSERVICE_NODES, "-o", columns))
    columns = (
        "custom-columns=NODE:.metadata.name,GPUS:.status.gpuPublishing,PHASE:.status.phase,"
        "REASON:.status.reason,FENCED:.status.fenced,POLICY:.status.policy,"
        "ATTEMPTS:.status.attempts"
    )
    out("GPUs published through DRA (ResourceSlices of gpu.nvidia.com; probed through a claim):")
    out(kubectl(cp, "get", "nodeacceptance", *DRA_NODES, "-o", columns))
    show_fences(cp, kube)
    for label in ("gpuaccept.io/demo", FABRIC_LABEL, REVERIFY_LABEL, INSERVICE_LABEL, FENCE_LABEL):
        out(kubectl(cp, "get", "nodes", "-l", f"{label}=true", "-o",
                    "custom-columns=NODE:.metadata.name,ACCEPTANCE:.metadata.labels.gpuaccept"
                    "\\.io/acceptance,REASON:.metadata.labels.gpuaccept\\.io/reason,"
                    "TAINTS:.spec.taints[*].key"))  # fmt: skip
    say(f"GPU publishing: {publishing_summary(phases(kube))}")


def show_fences(cp: ControlPlane, kube: Kube) -> None:
    """The fenced GPUs of the fencing policy's nodes, and their DeviceTaintRules."""
    out(f"GPUs fenced under '{FENCE_POLICY}' (fencing.mode gpu), one DeviceTaintRule each:")
    columns = (
        "custom-columns=RULE:.metadata.name,DRIVER:.spec.deviceSelector.driver,"
        "POOL:.spec.deviceSelector.pool,DEVICE:.spec.deviceSelector.device,"
        "KEY:.spec.taint.key,VALUE:.spec.taint.value,EFFECT:.spec.taint.effect"
    )
    nodes = ",".join(node_label_value(name) for name in FENCED)
    out(kubectl(cp, "get", "devicetaintrules", "-l", f"{NODE_LABEL} in ({nodes})", "-o", columns))
    by_node = {r["metadata"].get("labels", {}).get(NODE_LABEL): r for r in fence_rules(kube)}
    for name in FENCED:
        status = kube.get_na(name) or {}
        for gpu in (status.get("status") or {}).get("gpuVerdicts") or ():
            if not gpu.get("fenced"):
                continue
            rule = by_node.get(node_label_value(name))
            if rule is None:
                say(f"{name}: GPU {gpu.get('index')} ({gpu.get('uuid')}) fenced, but no rule")
                continue
            where = rule["spec"]["deviceSelector"]
            taint = rule["spec"]["taint"]
            say(
                f"{name}: GPU {gpu.get('index')} ({gpu.get('uuid')}, {', '.join(gpu['checks'])}) "
                f"fenced by DeviceTaintRule {rule['metadata']['name']} on device "
                f"{where['driver']}/{where['pool']}/{where['device']} "
                f"({taint['key']}={taint.get('value', '')}:{taint['effect']})"
            )


def next_steps(cp: ControlPlane) -> None:
    out("Try next (with KEEP=1 make demo):")
    out(f"  export KUBECONFIG={cp.kubeconfig}")
    out(f"  export PATH={ROOT / '.bin'}:{ROOT / '.venv' / 'bin'}:$PATH"
        "   # this control plane's kubectl, and the kubectl-gpuaccept plugin")  # fmt: skip
    out("  kubectl gpuaccept explain gpu-pcie-x8            # why: every reason, the probe's table")
    out("  kubectl get nodeacceptance gpu-pcie-x8 -o yaml        # reasons, checks, report")
    out("  kubectl wait --for=condition=Accepted na/gpu-healthy-1   # returns once accepted")
    for name in FABRIC_BAD:
        out(f"  kubectl get nodeacceptance {name} -o yaml   # the fabric pairs it failed")
    out("  kubectl gpuaccept explain gpu-inservice-xid79   # in service: the ledger, the Xid 79")
    out("  kubectl gpuaccept explain gpu-dra-pcie-x8   # a DRA node: its GPUs from its pool")
    out("  kubectl get resourceslices -o wide          # the DRA nodes' pools")
    for name in FENCED:
        out(f"  kubectl gpuaccept explain {name}   # a fenced GPU: its verdict")
    out("  kubectl get devicetaintrules -o yaml        # the fence: its device, its taint")
    out("  kubectl annotate node gpu-healthy-1 gpuaccept.io/reprobe=now   # re-probe")
    out("  kubectl patch nodeacceptancepolicy demo --type merge -p "
        "'{\"spec\":{\"dryRun\":true}}'   # dry run")  # fmt: skip
    out("  kubectl gpuaccept release gpu-pcie-x8 --reason 'why'   # in service, with who and when")
    out("  docs/runbook.md, 'Release a quarantined node': repair + re-probe, or no probe")
    out("  docs/runbook.md also: reset the breaker, dryRun, paused")
    out("  make demo-down                                          # stop it all")


def tear_down(run: DemoRun) -> None:
    say("stopping the operator, the kubelet stand-in and kube-scheduler")
    stop_child(run.operator)
    stop_child(run.standin)
    stop_child(run.scheduler)
    stop_attached(run.cp.dir)  # removes the registrations
    for policy in (POLICY, FABRIC_POLICY, REVERIFY_POLICY, INSERVICE_POLICY, FENCE_POLICY):
        with contextlib.suppress(ApiException):
            run.kube.request("DELETE", f"{POLICY_PATH}/{policy}")
    for name in ALL_NODES:
        run.kube.delete_na(name)
    delete_fence_rules(run.kube)
    if run.cp.owned:
        say("stopping the control plane")
        run.cp.stop()


def main() -> int:
    if sys.argv[1:] == ["down"]:
        return down()
    keep = os.environ.get("KEEP") == "1"
    say("starting the control plane (kube-apiserver + etcd; built on first use)")
    run = start_fleet(start(default_dir()), keep=keep)
    ok = False
    try:
        ok = wait_for_verdicts(run)
        show(run.cp, run.kube)
        problems = unexpected(run.kube, phases(run.kube))
        for problem in problems:
            say(f"UNEXPECTED {problem}")
        ok = ok and not problems
        next_steps(run.cp)
    finally:
        if keep:
            say(f"KEEP=1: left running. KUBECONFIG={run.cp.kubeconfig}; stop with: make demo-down")
        else:
            tear_down(run)
    say("demo ok" if ok else "demo FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
