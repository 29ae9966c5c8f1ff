"""kubelet stand-in — test support, not part of the shipped operator.

The local control plane (``hack/controlplane``) has no kubelet. This module
plays one for any number of simulated GPU nodes:

* registers Node objects (``nvidia.com/gpu`` capacity/allocatable and the GPU
  feature discovery label ``nvidia.com/gpu.count`` from the profile's
  ``node.gpuCapacity`` / ``gpuAllocatable`` / ``gfdGpuCount`` unless
  ``SimNode.gpu_count`` is set, the usual GPU labels, Ready condition,
  ``status.nodeInfo.bootID``, optional taints at registration like
  ``kubelet --register-with-taints``), each tied to a hardware-profile file;
* admits pods as the kubelet's device manager does for ``nvidia.com/gpu``: a
  pod that asks for more than are free (the node's allocatable, or
  ``SimNode.healthy_gpus``, minus what its running pods hold) is rejected,
  phase Failed, reason ``UnexpectedAdmissionError``, message ``Pod was
  rejected: Allocate failed due to requested number of devices unavailable
  for nvidia.com/gpu. Requested: N, Available: M, which is unexpected``
  (kubelet 1.37, checked on the real node: tests/realnode); then as its
  predicates do for node affinity: a pod whose ``nodeSelector`` or required
  node affinity the Node (read from the API server) does not match is
  rejected, reason ``NodeAffinity``, message ``Pod was rejected: Predicate
  NodeAffinity failed: node(s) didn't match Pod's node affinity/selector``
  (:mod:`.standin_affinity`);
* watches Pods bound to its nodes (``spec.nodeName``; one list+watch for all
  its nodes) and runs each container's ``command`` + ``args`` as a local
  subprocess, with the node's profile path in ``GPUACCEPT_PROFILE``, its bootID
  in ``GPUACCEPT_BOOT_ID`` (unless the pod sets it) and the
  pod's env (``value``, downward-API ``fieldRef``, ``configMapKeyRef``,
  ``secretKeyRef``, ``envFrom``; ``$(VAR)`` expansion);
* writes pod status through ``pods/status`` as a kubelet does: phase
  Pending -> Running -> Succeeded/Failed, ``startTime``, ``containerStatuses``
  with running/terminated state, exit code, reason (``Completed``/``Error``)
  and the termination message; containers that end on their own (or fail to
  start) are reported terminated while the pod is still Running (Pending), then
  the terminal phase (a kubelet ends the phase only once the pod is torn down;
  not in scale mode, whose pods end in one status write);
* honours ``activeDeadlineSeconds`` (kill, phase Failed, reason
  ``DeadlineExceeded``), deletion (kill, then finalize with grace period 0),
  non-zero exits. A kill is what the runtime does to a container: SIGTERM to
  its first process only if that process handles it (a container's PID 1
  ignores the others), SIGKILL to all of it after the grace period;
* simulates reboots (Ready False, new bootID, Ready True);
* scale mode: a behaviour that completes pods with a prepared report without
  starting a process (:func:`prepared_reports`), and per-node behaviour
  overrides (:class:`Hang`, :class:`Complete` with a garbage message, ...);
* start failures as a container runtime reports them: :class:`StartFailure`
  (``terminated.reason: StartError``, exit 128, e.g. the NVIDIA container
  toolkit's "driver/library version mismatch"), :class:`ImagePullFailure`
  (waiting ``ErrImagePull``), :class:`SandboxFailure` (a
  ``FailedCreatePodSandBox`` event, waiting ``ContainerCreating``).

Termination message: the container's ``terminationMessagePath`` (default
``/dev/termination-log``) is remapped to a per-pod temp file. Every occurrence
of that path string in ``command``, ``args`` and env values is replaced by the
temp file path, so ``gpuaccept probe --termination-log /dev/termination-log``
writes to the temp file. The env var ``GPUACCEPT_TERMINATION_LOG`` also holds the
temp path. As the kubelet does, the message is the *last* 4096 bytes of the
file; with ``terminationMessagePolicy: FallbackToLogsOnError``, an empty file
and a non-zero exit, it is the last 80 lines / 2048 bytes of the output.

``command[0]`` is resolved with PATH = ``extra_path`` + the directory of
``sys.executable`` (the venv's ``bin``, where the ``gpuaccept`` console script
lives) + the stand-in's own PATH. A container without ``command`` needs an
entry in ``entrypoints`` (image -> argv), or it fails with ``StartError``.

What it does not do (unlike a real kubelet): no images, no isolation (the
process runs as the stand-in's user; env holds PATH/HOME/LANG/TMPDIR/
PYTHONPATH/VIRTUAL_ENV from the stand-in plus the pod's env), no restarts
(``restartPolicy`` is treated as ``Never``), no probes, no volumes, no Events,
no node Lease heartbeats or periodic node status updates, no node-level
resource accounting. Its admission of a bound pod: the GPUs free, the node
affinity and an untolerated NoExecute taint (:mod:`.standin_affinity`), as the
kubelet's; a NoSchedule taint is not checked there, by the kubelet either.

Its parts: :mod:`~gpuaccept.testsupport.standin_nodes` (:class:`SimNode`, the Node
object it registers, fleet files), :mod:`~gpuaccept.testsupport.standin_behaviours`
(what a pod does: run, hang, complete; :func:`prepared_reports` is the scale mode),
:mod:`~gpuaccept.testsupport.standin_containers` (env, ``$(VAR)`` expansion,
termination messages) and :mod:`~gpuaccept.testsupport.standin_pod_runner` (one pod
to completion and its status). This module is the stand-in itself (node
registration, the pod watch, reboots) and the CLI.

Library use::

    standin = KubeletStandIn(control_plane.configuration(),
                             nodes=[SimNode("gpu-1", profile="profiles/h100.yaml")])
    standin.start()
    ...
    standin.stop(delete_nodes=True)

CLI (for the demo)::

    python -m gpuaccept.testsupport.kubelet_standin --kubeconfig .cluster/kubeconfig \\
        --nodes-file fleet.yaml
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import functools
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from gpuaccept.probe.hardware.profile import HardwareProfile, load_profile
from gpuaccept.testsupport.pod_addresses import PodAddressBlock
from gpuaccept.testsupport.standin_behaviours import (
    Behaviour,
    BehaviourHook,
    Complete,
    CompleteAfterPod,
    Hang,
    ImagePullFailure,
    PodInfo,
    RunProcess,
    SandboxFailure,
    StartFailure,
    fabric_pairs_from_profiles,
    prepared_reports,
)
from gpuaccept.testsupport.standin_containers import (
    StartError,
    expand,
    field_ref,
    truncate_termination_message,
)
from gpuaccept.testsupport.standin_dra import (
    DRA_DRIVER,
    ClaimController,
    DraPublisher,
    node_gpus,
)
from gpuaccept.testsupport.standin_nodes import (
    JSON,
    SimNode,
    load_fleet,
    node_status,
    ready_condition,
)
from gpuaccept.testsupport.standin_pod_runner import PodRunner

__all__ = [
    "Behaviour",
    "BehaviourHook",
    "Complete",
    "CompleteAfterPod",
    "Hang",
    "ImagePullFailure",
    "KubeletStandIn",
    "PodInfo",
    "RunProcess",
    "SandboxFailure",
    "SimNode",
    "StandInSettings",
    "StartFailure",
    "fabric_pairs_from_profiles",
    "load_fleet",
    "main",
    "prepared_reports",
    "truncate_termination_message",
]

log = logging.getLogger("gpuaccept.testsupport.kubelet_standin")


@functools.lru_cache(maxsize=256)
def _load_profile(path: str) -> HardwareProfile:
    return load_profile(Path(path))


STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"
_BOUND_PODS = "spec.nodeName!="  # the field selector of the pods the stand-in watches


@dataclass(frozen=True)
class StandInSettings:
    """How the stand-in talks to the API server and runs pod processes.

    ``api_concurrency``: API requests in flight at most; ``kill_grace_cap_s``: the
    longest grace period before SIGKILL; ``extra_path``: directories searched first
    for ``command[0]``; ``entrypoints``: image -> argv for containers without a
    ``command``; ``sim_time_scale``: how much of its profile's durations a simulated
    probe really takes (docs/profile-format.md)."""

    api_concurrency: int = 32
    kill_grace_cap_s: float = 5.0
    extra_path: Sequence[str] = ()
    entrypoints: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # Simulated probes take their profile's durations x this (GPUACCEPT_SIM_TIME_SCALE);
    # None: they only report them and finish at once.
    sim_time_scale: float | None = None


class KubeletStandIn:
    """The kubelet stand-in for a set of :class:`SimNode`. See the module docstring."""

    def __init__(
        self,
        configuration: k8s.Configuration,
        *,
        nodes: Iterable[SimNode] = (),
        default_behaviour: Behaviour | BehaviourHook | None = None,
        workdir: str | Path | None = None,
        settings: StandInSettings = StandInSettings(),
    ) -> None:
        api_concurrency = settings.api_concurrency
        cfg = copy.deepcopy(configuration)
        cfg.connection_pool_maxsize = max(api_concurrency + 4, 8)
        self._api = k8s.ApiClient(cfg)
        self._api.user_agent = "gpuaccept-kubelet-standin"
        self.core = k8s.CoreV1Api(self._api)
        self.dra = DraPublisher(self._api)  # the DRA-published nodes' ResourceSlices
        self.default_behaviour: Behaviour | BehaviourHook = default_behaviour or RunProcess()
        self.entrypoints: dict[str, list[str]] = {
            k: list(v) for k, v in settings.entrypoints.items()
        }
        self.kill_grace_cap_s = settings.kill_grace_cap_s
        self.sim_time_scale = settings.sim_time_scale
        self.search_path = os.pathsep.join(
            [
                *settings.extra_path,
                str(Path(sys.executable).parent),
                os.environ.get("PATH", os.defpath),
            ]
        )
        self._own_workdir = workdir is None
        self.workdir = (
            Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kubelet-standin-"))
        )
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._api_sem = threading.BoundedSemaphore(api_concurrency)
        self._api_concurrency = api_concurrency
        self._lock = threading.RLock()
        self._nodes: dict[str, SimNode] = {}
        self._pending_nodes: list[SimNode] = list(nodes)
        self._runners: dict[str, PodRunner] = {}
        self._done: dict[str, PodRunner] = {}  # finished runners by uid (logs stay readable)
        self._gpus_held: dict[str, dict[str, int]] = {}  # node -> pod uid -> nvidia.com/gpu
        self._stopping = threading.Event()
        self._watch_ready = threading.Event()
        self._watch_error: BaseException | None = None
        self._watch_thread: threading.Thread | None = None
        self._watch_resp: Any = None
        self._resource_version: str | None = None  # where the pod watch resumes; None: relist
        self._ip_counter = 0
        self._pod_addresses: PodAddressBlock | None = None  # claimed at the first pod
        self._pod_names: set[tuple[str, str]] = set()  # every pod bound here (pod_seen)

    # -- lifecycle -----------------------------------------------------------
    def start(self, *, timeout: float = 60.0) -> KubeletStandIn:
        """Register the nodes given so far and start watching pods (background thread).
        Returns once the initial pod list is processed and the watch runs."""
        self.add_nodes(self._pending_nodes)
        self._pending_nodes = []
        self._watch_thread = threading.Thread(
            target=self._watch_loop, name="standin-watch", daemon=True
        )
        self._watch_thread.start()
        if not self._watch_ready.wait(timeout):
            raise TimeoutError(f"pod watch not established after {timeout}s: {self._watch_error}")
        return self

    def stop(self, *, delete_nodes: bool = False, timeout: float = 30.0) -> None:
        """Stop watching, kill every process this stand-in started (pods are left as they
        are, like a stopped kubelet), optionally delete its Node objects."""
        self._stopping.set()
        resp = self._watch_resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # best effort: unblock the read
                log.debug("closing watch", exc_info=True)
        with self._lock:
            runners = list(self._runners.values())
        for r in runners:
            r.request_kill("shutdown", grace_s=0.0)
        end = time.monotonic() + timeout
        for r in runners:
            r.thread.join(max(0.0, end - time.monotonic()))
        if self._watch_thread is not None:
            self._watch_thread.join(max(0.1, end - time.monotonic()))
        if delete_nodes:
            self.delete_nodes()
        cast(Any, self._api).close()
        if self._pod_addresses is not None:
            self._pod_addresses.release()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KubeletStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- nodes ---------------------------------------------------------------
    @property
    def nodes(self) -> dict[str, SimNode]:
        with self._lock:
            return dict(self._nodes)

    def node(self, name: str) -> SimNode:
        with self._lock:
            return self._nodes[name]

    def add_nodes(self, nodes: Iterable[SimNode]) -> None:
        """Register nodes (concurrently, up to ``api_concurrency`` requests at a time)."""
        nodes = list(nodes)
        with self._lock:
            for n in nodes:
                if n.address is None:
                    self._ip_counter += 1
                    i = self._ip_counter
                    n.address = f"10.{200 + (i >> 16) % 50}.{(i >> 8) & 255}.{i & 255}"
                self._nodes[n.name] = n
        if not nodes:
            return
        with ThreadPoolExecutor(max_workers=min(self._api_concurrency, len(nodes))) as ex:
            list(ex.map(self._register, nodes))

    def add_node(self, node: SimNode) -> None:
        self.add_nodes([node])

    def _register(self, n: SimNode) -> None:
        self._register_node(n)
        if n.dra:  # its DRA driver publishes the pool once the node is there
            self.publish_pool(n.name, slices=n.dra_slices, leave_out=n.dra_left_out)

    def _register_node(self, n: SimNode) -> None:
        body: JSON = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": n.name,
                "labels": n.node_labels(),
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    "gpuaccept.io/kubelet-standin": "true",
                    **({"gpuaccept.io/standin-profile": n.profile} if n.profile else {}),
                    **n.annotations,
                },
            },
            "spec": {"taints": list(n.taints)} if n.taints else {},
            "status": node_status(n),
        }
        with self._api_sem:
            try:
                obj = _call(self.core.create_node, body)
                if obj.get("status", {}).get("nodeInfo", {}).get("bootID") != n.boot_id:
                    self._patch_node_status(n.name, node_status(n))
                return
            except ApiException as e:
                if e.status != 409:
                    raise
            # Re-registration (like a restarted kubelet): refresh labels and status;
            # taints are only set at first registration.
            _call(
                self.core.patch_node,
                n.name,
                {"metadata": {"labels": n.node_labels()}},
                _content_type=STRATEGIC_MERGE,
            )
        self._patch_node_status(n.name, node_status(n))

    def publish_pool(
        self,
        node_name: str,
        *,
        slices: int = 1,
        leave_out: Iterable[int] = (),
        drop: Iterable[int] = (),
        mig: Iterable[int] = (),
    ) -> int:
        """Publish the DRA node's pool under its next generation, as NVIDIA's driver
        does: its GPUs (the profile's count and product) in ``slices`` slices, the slices
        numbered in ``leave_out`` not published (an incomplete pool), the GPUs indexed in
        ``drop`` left out (a GPU the driver lost), those in ``mig`` in MIG mode (published
        as their MIG devices, ``standin_dra.DraGpu.devices``). Returns the generation."""
        with self._lock:
            n = self._nodes[node_name]
        dropped, cut = set(drop), set(mig)
        gpus = [
            replace(gpu, mig=gpu.index in cut)
            for gpu in node_gpus(n.name, n.gpu_counts().capacity, n.gpu_product.replace("-", " "))
            if gpu.index not in dropped
        ]
        driver = n.dra_driver or DRA_DRIVER
        with self._api_sem:
            return self.dra.publish(
                node_name, gpus, slices=slices, leave_out=leave_out, driver=driver
            )

    def taint_gpus(self, node_name: str, taints: Mapping[int, Sequence[JSON]]) -> None:
        """What the DRA driver's health monitor does: set the taints of the node's GPUs
        indexed in ``taints`` (``standin_dra.driver_taint``) in its published pool."""
        named = {f"gpu-{index}": list(found) for index, found in taints.items()}
        with self._api_sem:
            self.dra.set_taints(node_name, named)

    def read_node(self, name: str) -> JSON:
        """The Node object as the API server has it now (admission reads its labels)."""
        with self._api_sem:
            return _call(self.core.read_node, name)

    def _patch_node_status(self, name: str, status: JSON) -> None:
        with self._api_sem:
            _call(
                self.core.patch_node_status, name, {"status": status}, _content_type=STRATEGIC_MERGE
            )

    def delete_nodes(self, names: Iterable[str] | None = None) -> None:
        with self._lock:
            todo = list(names) if names is not None else list(self._nodes)
        for name in todo:
            with self._api_sem:
                try:
                    _call(self.core.delete_node, name)
                except ApiException as e:
                    if e.status != 404:
                        raise
            with self._lock:
                node = self._nodes.pop(name, None)
            if node is not None and node.dra:  # the driver's slices go with the node
                with self._api_sem:
                    self.dra.withdraw(name)

    def set_behaviour(self, node_name: str, behaviour: Behaviour | BehaviourHook | None) -> None:
        """Per-node override for pods started from now on (None: the default behaviour)."""
        with self._lock:
            self._nodes[node_name].behaviour = behaviour

    def set_ready(
        self, node_name: str, ready: bool, *, reason: str | None = None, message: str | None = None
    ) -> None:
        n = self.node(node_name)
        n.ready = ready
        self._patch_node_status(
            node_name, {"conditions": [ready_condition(ready, reason, message)]}
        )

    def reboot(self, node_name: str, *, down_s: float = 0.0) -> str:
        """Simulate a reboot: Ready=False, running pods on the node die (their containers end
        ``ContainerStatusUnknown``, exit 137), after ``down_s`` a new bootID and Ready=True.
        Blocks for ``down_s``; returns the new bootID."""
        self.set_ready(node_name, False, reason="KubeletNotReady", message="node is rebooting")
        with self._lock:
            victims = [r for r in self._runners.values() if r.node.name == node_name]
        for r in victims:
            r.request_kill("reboot", grace_s=0.0)
        for r in victims:
            r.thread.join(30)
        if down_s > 0:
            time.sleep(down_s)
        n = self.node(node_name)
        n.boot_id = str(uuid.uuid4())
        n.ready = True
        status = node_status(n)
        self._patch_node_status(
            node_name, {"nodeInfo": status["nodeInfo"], "conditions": [ready_condition(True)]}
        )
        return n.boot_id

    # -- pods ------------------------------------------------------------------
    def running_pods(self) -> list[tuple[str, str]]:
        """(namespace, name) of pods this stand-in is running now."""
        with self._lock:
            return [(r.namespace, r.name) for r in self._runners.values()]

    def process_ids(self, namespace: str, name: str) -> dict[str, int]:
        """container name -> pid of the processes started for a running pod."""
        with self._lock:
            for r in self._runners.values():
                if (r.namespace, r.name) == (namespace, name):
                    return r.pids()
        return {}

    def pod_log(self, namespace: str, name: str, container: str | None = None) -> str:
        """stdout+stderr of a pod's container (the first one by default), if it ran here."""
        with self._lock:
            cands = [
                r
                for r in [*self._runners.values(), *self._done.values()]
                if (r.namespace, r.name) == (namespace, name)
            ]
        if not cands:
            raise KeyError(f"{namespace}/{name}: not run by this stand-in")
        r = cands[-1]
        c = container or r.pod["spec"]["containers"][0]["name"]
        p = r.log_path(c)
        return p.read_text(errors="replace") if p.exists() else ""

    def inter_node_busbw(self, node_name: str) -> float | None:
        """The node's profile's ``interNode.busbwGBps`` (None: no such node or figure)."""
        with self._lock:
            node = self._nodes.get(node_name)
        if node is None or node.profile is None:
            return None
        inter_node = _load_profile(node.profile).inter_node
        return inter_node.busbw_gbps if inter_node is not None else None

    def pod_seen(self, namespace: str, name: str) -> bool:
        """Has a pod of this name been bound to one of this stand-in's nodes?"""
        with self._lock:
            return (namespace, name) in self._pod_names

    def take_gpus(self, node_name: str, uid: str, wanted: int, devices: int) -> int | None:
        """The device manager's allocation: None when ``wanted`` of the node's healthy
        ``devices`` were free (pod ``uid`` holds them now, until :meth:`release_gpus`);
        else how many were free."""
        with self._lock:
            held = self._gpus_held.setdefault(node_name, {})
            free = devices - sum(n for u, n in held.items() if u != uid)
            if wanted > free:
                return max(free, 0)
            held[uid] = wanted
            return None

    def release_gpus(self, node_name: str, uid: str) -> None:
        """A pod's containers ended: its GPUs are free again."""
        with self._lock:
            self._gpus_held.get(node_name, {}).pop(uid, None)

    def allocate_pod_ip(self) -> str:
        """Each pod's own loopback address, in turn from a 127.B.0.0/16 block that no
        other stand-in holds (gpuaccept.testsupport.pod_addresses): two pods of a
        fabric pair listen and connect on their own addresses, as on a pod network."""
        with self._lock:
            if self._pod_addresses is None:
                self._pod_addresses = PodAddressBlock()
            addresses = self._pod_addresses
        return addresses.next()

    def _container_env(
        self, pod: JSON, c: JSON, node: SimNode, pod_ip: str | None = None
    ) -> dict[str, str]:
        ns = pod["metadata"]["namespace"]
        env: dict[str, str] = {}
        for src in c.get("envFrom") or []:
            prefix = src.get("prefix", "")
            if "configMapRef" in src:
                ref = src["configMapRef"]
                data = self._read_data("configmap", ns, ref["name"], ref.get("optional", False))
            elif "secretRef" in src:
                ref = src["secretRef"]
                data = self._read_data("secret", ns, ref["name"], ref.get("optional", False))
            else:
                continue
            env.update({prefix + k: v for k, v in data.items()})
        for e in c.get("env") or []:
            name = e["name"]
            if "value" in e:
                env[name] = expand(str(e.get("value") or ""), env)
                continue
            vf = e.get("valueFrom") or {}
            if "fieldRef" in vf:
                env[name] = field_ref(pod, vf["fieldRef"]["fieldPath"], node, pod_ip)
            elif "configMapKeyRef" in vf or "secretKeyRef" in vf:
                kind = "configmap" if "configMapKeyRef" in vf else "secret"
                ref = vf.get("configMapKeyRef") or vf["secretKeyRef"]
                data = self._read_data(kind, ns, ref["name"], ref.get("optional", False))
                if ref["key"] in data:
                    env[name] = data[ref["key"]]
                elif not ref.get("optional", False):
                    raise StartError(f"couldn't find key {ref['key']} in {kind} {ns}/{ref['name']}")
            elif "resourceFieldRef" in vf:
                res = vf["resourceFieldRef"]["resource"]
                kind, _, rname = res.partition(".")
                val = (c.get("resources") or {}).get(kind, {}).get(rname)
                env[name] = str(val) if val is not None else ""
            else:
                env[name] = ""
        return env

    def _read_data(self, kind: str, ns: str, name: str, optional: bool) -> dict[str, str]:
        try:
            with self._api_sem:
                if kind == "configmap":
                    obj = _call(self.core.read_namespaced_config_map, name, ns)
                else:
                    obj = _call(self.core.read_namespaced_secret, name, ns)
        except ApiException as e:
            if e.status == 404 and optional:
                return {}
            raise StartError(f"{kind} {ns}/{name}: {e.status} {e.reason}") from e
        data: dict[str, str] = dict(obj.get("data") or {})
        if kind == "secret":
            data = {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
        return data

    def _patch_pod_status(self, ns: str, name: str, uid: str, status: JSON) -> None:
        body = {"metadata": {"uid": uid}, "status": status}
        with self._api_sem:
            _call(
                self.core.patch_namespaced_pod_status, name, ns, body, _content_type=STRATEGIC_MERGE
            )

    def pod_event(self, pod: JSON, reason: str, message: str) -> None:
        """A Warning event on ``pod``, as the kubelet records one (best effort)."""
        meta = pod["metadata"]
        now = datetime.now(UTC)
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "reason": reason,
            "message": message,
            "type": "Warning",
            "source": {"component": "kubelet", "host": pod.get("spec", {}).get("nodeName", "")},
            "firstTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "count": 1,
        }
        with self._api_sem:
            try:
                _call(self.core.create_namespaced_event, meta["namespace"], body)
            except ApiException as e:
                log.warning("event %s on pod %s not recorded: %s", reason, meta["name"], e)

    def _delete_pod(self, ns: str, name: str, uid: str) -> None:
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        with self._api_sem:
            try:
                _call(self.core.delete_namespaced_pod, name, ns, body=body)
            except ApiException as e:
                if e.status not in (404, 409):
                    raise

    def _runner_done(self, r: PodRunner) -> None:
        with self._lock:
            self._runners.pop(r.uid, None)
            self._done[r.uid] = r
            if len(self._done) > 10000:  # bound memory in long scale runs
                for uid in list(self._done)[:1000]:
                    self._done.pop(uid, None)

    # -- watch -----------------------------------------------------------------
    def _handle(self, typ: str, pod: JSON) -> None:
        spec = pod.get("spec", {})
        node_name = spec.get("nodeName")
        with self._lock:
            node = self._nodes.get(node_name or "")
            if node is None:
                return
            meta = pod["metadata"]
            uid = meta["uid"]
            runner = self._runners.get(uid)
            deleting = meta.get("deletionTimestamp") is not None
            grace = meta.get("deletionGracePeriodSeconds")
            if typ == "DELETED":
                if runner is not None:
                    runner.request_kill("deleted", gone=True, grace_s=0.0)
                return
            if runner is not None:
                if deleting:
                    runner.request_kill(
                        "deleted",
                        finalize=True,
                        grace_s=float(grace) if grace is not None else None,
                    )
                return
            phase = pod.get("status", {}).get("phase")
            if uid in self._done or phase in ("Succeeded", "Failed") or deleting:
                if deleting:
                    # Nothing runs for it here: finalize the deletion like a kubelet.
                    threading.Thread(
                        target=self._delete_pod,
                        args=(meta["namespace"], meta["name"], uid),
                        daemon=True,
                    ).start()
                return
            if self._stopping.is_set():
                return
            runner = PodRunner(self, pod, node)
            self._runners[uid] = runner
            self._pod_names.add((runner.namespace, runner.name))
        runner.thread.start()

    def _relist(self) -> None:
        """List every bound pod (from then on the watch starts at the list's
        resourceVersion), handle each, and kill runners whose pod is gone."""
        with self._api_sem:
            lst = _call(self.core.list_pod_for_all_namespaces, field_selector=_BOUND_PODS)
        self._resource_version = lst["metadata"]["resourceVersion"]
        live = set()
        for pod in lst.get("items", []):
            live.add(pod["metadata"]["uid"])
            self._handle("ADDED", pod)
        with self._lock:
            gone = [r for uid, r in self._runners.items() if uid not in live]
        for r in gone:
            r.request_kill("deleted", gone=True, grace_s=0.0)

    def _follow(self, resp: Any) -> None:
        """Handle a watch stream's events, keeping the resourceVersion seen last."""
        for ev in _watch_events(resp):
            typ = ev.get("type")
            obj = ev.get("object") or {}
            if typ == "ERROR":
                if obj.get("code") == 410:
                    self._resource_version = None  # too old: relist
                    return
                raise RuntimeError(f"watch error: {obj}")
            self._resource_version = obj.get("metadata", {}).get(
                "resourceVersion", self._resource_version
            )
            if typ in ("ADDED", "MODIFIED", "DELETED"):
                self._handle(typ, obj)

    def _watch_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                if self._resource_version is None:
                    self._relist()
                resp = self.core.list_pod_for_all_namespaces(
                    field_selector=_BOUND_PODS,
                    watch=True,
                    resource_version=self._resource_version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=300,
                    _preload_content=False,
                )
                self._watch_resp = resp
                self._watch_ready.set()
                if self._stopping.is_set():
                    break
                self._follow(resp)
            except Exception as e:  # keep watching
                if self._stopping.is_set():
                    break
                self._watch_error = e
                if isinstance(e, ApiException) and e.status == 410:
                    self._resource_version = None
                log.warning("pod watch: %s; retrying", e)
                time.sleep(0.5)
            finally:
                self._watch_resp = None


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> JSON:
    """Call a generated API method without model deserialization; the JSON body as a dict."""
    resp = fn(*args, _preload_content=False, **kwargs)
    try:
        data = resp.data
    finally:
        resp.release_conn()
    out = json.loads(data) if data else {}
    assert isinstance(out, dict)
    return out


def _watch_events(resp: Any) -> Iterator[JSON]:
    """Decode a watch stream (one JSON event per line) from a urllib3 response."""
    buf = b""
    try:
        for chunk in resp.stream(65536, decode_content=False):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    yield json.loads(line)
    finally:
        resp.release_conn()


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m gpuaccept.testsupport.kubelet_standin",
        description="kubelet stand-in (test support): simulated GPU nodes whose pods run as "
        "local processes. Runs until SIGINT/SIGTERM.",
    )
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--nodes-file", help="fleet YAML (see load_fleet)")
    ap.add_argument("--count", type=int, default=0, help="extra nodes named <prefix>NNNN")
    ap.add_argument("--name-prefix", default="sim-gpu-")
    ap.add_argument("--profile", help="profile file for the --count nodes")
    ap.add_argument(
        "--taint",
        action="append",
        default=[],
        help="key=value:Effect taint at registration for the --count nodes",
    )
    ap.add_argument(
        "--behaviour", default="run", choices=["run", "hang"], help="default behaviour for pods"
    )
    ap.add_argument(
        "--prepared-message-file",
        help="scale mode: complete every pod with this file's content "
        "(NODE_NAME/BOOT_ID placeholders {node_name} {boot_id} are filled in)",
    )
    ap.add_argument("--prepared-exit-code", type=int, default=0)
    ap.add_argument(
        "--fabric-from-profiles",
        action="store_true",
        help="scale mode for fabric pairs: complete them with the lower of the two nodes' "
        "interNode.busbwGBps instead of running gpuaccept probe fabric",
    )
    ap.add_argument("--delete-nodes-on-exit", action="store_true")
    ap.add_argument("--api-concurrency", type=int, default=32)
    ap.add_argument(
        "--sim-time-scale",
        type=float,
        default=None,
        help="simulated probes take their profile's durations x this (1: real time); "
        "prepared reports complete after their wallS x this",
    )
    ap.add_argument(
        "--claim-controller-namespace",
        help="also play kube-controller-manager's resourceclaim controller for the claims "
        "in this namespace (standin_dra.ClaimController): a control plane without a "
        "controller manager, whose DRA nodes' probe claims the scheduler allocates",
    )
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    cfg = k8s.Configuration()
    cast(Any, k8s_config).load_kube_config(config_file=args.kubeconfig, client_configuration=cfg)
    nodes = load_fleet(args.nodes_file) if args.nodes_file else []
    taints = []
    for t in args.taint:
        kv, _, effect = t.partition(":")
        k, _, v = kv.partition("=")
        taints.append({"key": k, "value": v, "effect": effect or "NoSchedule"})
    width = max(4, len(str(args.count - 1)))
    profile = str(Path(args.profile).resolve()) if args.profile else None
    nodes += [
        SimNode(name=f"{args.name_prefix}{i:0{width}d}", profile=profile, taints=list(taints))
        for i in range(args.count)
    ]
    default: Behaviour | BehaviourHook = Hang() if args.behaviour == "hang" else RunProcess()
    if args.prepared_message_file:
        template = Path(args.prepared_message_file).read_text()
        default = prepared_reports(
            lambda node_name, boot_id: template.replace("{node_name}", node_name).replace(
                "{boot_id}", boot_id
            ),
            exit_code=args.prepared_exit_code,
            time_scale=args.sim_time_scale,
        )
    standin = KubeletStandIn(
        cfg,
        nodes=nodes,
        default_behaviour=default,
        settings=StandInSettings(
            api_concurrency=args.api_concurrency, sim_time_scale=args.sim_time_scale
        ),
    )
    if args.fabric_from_profiles:
        standin.default_behaviour = fabric_pairs_from_profiles(standin.inter_node_busbw, default)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    t0 = time.monotonic()
    standin.start()
    log.info(
        "registered %d nodes in %.1fs; watching pods (Ctrl-C to stop)",
        len(nodes),
        time.monotonic() - t0,
    )
    with contextlib.ExitStack() as stack:
        if args.claim_controller_namespace:
            api = k8s.ApiClient(cfg)
            api.user_agent = "gpuaccept-standin-claim-controller"
            stack.enter_context(ClaimController(api, args.claim_controller_namespace))
        stop.wait()
    log.info("stopping")
    standin.stop(delete_nodes=args.delete_nodes_on_exit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
