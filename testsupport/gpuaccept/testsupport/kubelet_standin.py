"""kubelet stand-in — test support, not part of the shipped operator.

The local control plane (``hack/controlplane``) has no kubelet. This module
plays one for any number of simulated GPU nodes:

* registers Node objects (``nvidia.com/gpu`` capacity/allocatable, the usual
  GPU labels, Ready condition, ``status.nodeInfo.bootID``, optional taints at
  registration like ``kubelet --register-with-taints``), each tied to a
  hardware-profile file;
* watches Pods bound to its nodes (``spec.nodeName``; one list+watch for all
  its nodes) and runs each container's ``command`` + ``args`` as a local
  subprocess, with the node's profile path in ``GPUACCEPT_PROFILE``, its bootID
  in ``GPUACCEPT_BOOT_ID`` (unless the pod sets it) and the
  pod's env (``value``, downward-API ``fieldRef``, ``configMapKeyRef``,
  ``secretKeyRef``, ``envFrom``; ``$(VAR)`` expansion);
* writes pod status through ``pods/status`` as a kubelet does: phase
  Pending -> Running -> Succeeded/Failed, ``startTime``, ``containerStatuses``
  with running/terminated state, exit code, reason (``Completed``/``Error``)
  and the termination message;
* honours ``activeDeadlineSeconds`` (kill, phase Failed, reason
  ``DeadlineExceeded``), deletion (kill, then finalize with grace period 0),
  non-zero exits;
* simulates reboots (Ready False, new bootID, Ready True);
* scale mode: a behaviour that completes pods with a prepared report without
  starting a process (:func:`prepared_reports`), and per-node behaviour
  overrides (:class:`Hang`, :class:`Complete` with a garbage message, ...).

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
resource accounting or admission (taints are not checked on bound pods).

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
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.probe_invocation import ENV_BOOT_ID, ENV_PROFILE, TERMINATION_LOG_PATH

__all__ = [
    "Behaviour",
    "BehaviourHook",
    "Complete",
    "Hang",
    "KubeletStandIn",
    "PodInfo",
    "RunProcess",
    "SimNode",
    "StandInSettings",
    "main",
    "prepared_reports",
    "truncate_termination_message",
]

log = logging.getLogger("gpuaccept.testsupport.kubelet_standin")

JSON = dict[str, Any]

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"

# Limits from pkg/kubelet/container/runtime.go (k8s v1.37).
MAX_TERMINATION_MESSAGE_BYTES = 4 * 1024
MAX_TERMINATION_LOG_BYTES = 2 * 1024
MAX_TERMINATION_LOG_LINES = 80

DEADLINE_REASON = "DeadlineExceeded"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
DEFAULT_TERMINATION_MESSAGE_PATH = TERMINATION_LOG_PATH
KUBELET_VERSION = "v1.37.2-standin"
_BOUND_PODS = "spec.nodeName!="  # the field selector of the pods the stand-in watches


# --------------------------------------------------------------------------
# behaviours
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class RunProcess:
    """Run the containers' commands as local processes (the default)."""


@dataclass(frozen=True)
class Hang:
    """Start the pod (phase Running) and never finish: only the deadline or deletion ends it."""


@dataclass(frozen=True)
class Complete:
    """Run no process: after ``delay_s``, every container terminates with this exit code and
    termination message (raw; truncated like the kubelet would)."""

    exit_code: int = 0
    message: str = ""
    delay_s: float = 0.0


Behaviour = RunProcess | Hang | Complete


@dataclass(frozen=True)
class PodInfo:
    """What a :data:`BehaviourHook` gets to decide on a pod."""

    namespace: str
    name: str
    uid: str
    node_name: str
    boot_id: str
    profile: str | None
    pod: Mapping[str, Any]


BehaviourHook = Callable[[PodInfo], Behaviour]


def prepared_reports(
    report: Callable[[str, str], str], *, exit_code: int = 0, delay_s: float = 0.0
) -> BehaviourHook:
    """Scale mode: complete each pod with ``report(node_name, boot_id)`` as its
    termination message and ``exit_code``, without starting a process."""

    def hook(p: PodInfo) -> Behaviour:
        return Complete(
            exit_code=exit_code, message=report(p.node_name, p.boot_id), delay_s=delay_s
        )

    return hook


# --------------------------------------------------------------------------
# nodes
# --------------------------------------------------------------------------
@dataclass
class SimNode:
    """A simulated GPU node. ``profile``: the hardware-profile file for its probe pods."""

    name: str
    profile: str | None = None
    gpu_count: int = 8
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    # Taints applied at registration only, like kubelet --register-with-taints:
    # [{"key": ..., "value": ..., "effect": "NoSchedule"}]
    taints: list[dict[str, str]] = field(default_factory=list)
    behaviour: Behaviour | BehaviourHook | None = None
    cpu: str = "96"
    memory: str = "2Ti"
    pods: str = "110"
    address: str | None = None
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    ready: bool = True

    def node_labels(self) -> dict[str, str]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": self.gpu_product,
            "nvidia.com/gpu.count": str(self.gpu_count),
        }
        labels.update(self.labels)
        return labels


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready_condition(ready: bool, reason: str | None = None, message: str | None = None) -> JSON:
    now = _now()
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": reason or ("KubeletReady" if ready else "KubeletNotReady"),
        "message": message
        or ("kubelet is posting ready status" if ready else "kubelet stand-in: node not ready"),
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def _node_status(n: SimNode) -> JSON:
    now = _now()
    capacity = {
        "cpu": n.cpu,
        "memory": n.memory,
        "pods": n.pods,
        "ephemeral-storage": "1Ti",
        "nvidia.com/gpu": str(n.gpu_count),
    }
    pressure = [
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ]
    conditions: list[JSON] = [
        {
            "type": t,
            "status": "False",
            "reason": r,
            "message": m,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for t, r, m in pressure
    ]
    conditions.append(_ready_condition(n.ready))
    return {
        "capacity": capacity,
        "allocatable": dict(capacity),
        "conditions": conditions,
        "addresses": [
            {"type": "InternalIP", "address": n.address or "127.0.0.1"},
            {"type": "Hostname", "address": n.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, n.name).hex,
            "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, n.name)),
            "bootID": n.boot_id,
            "kernelVersion": "6.8.0-standin",
            "osImage": "gpuaccept kubelet stand-in",
            "containerRuntimeVersion": "standin://1.0.0",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


# --------------------------------------------------------------------------
# helpers: termination messages, env, $(VAR) expansion
# --------------------------------------------------------------------------
def truncate_termination_message(data: bytes) -> str:
    """The kubelet keeps the *last* 4096 bytes of the termination-message file
    (tail.ReadAtMost in pkg/kubelet/kuberuntime); invalid UTF-8 is replaced."""
    return data[-MAX_TERMINATION_MESSAGE_BYTES:].decode("utf-8", errors="replace")


def _log_tail_message(log_path: Path) -> str:
    """FallbackToLogsOnError: last 80 lines, at most the last 2048 bytes."""
    try:
        data = log_path.read_bytes()
    except OSError as e:
        return f"Error on reading termination message from logs: {e}"
    lines = data.splitlines(keepends=True)[-MAX_TERMINATION_LOG_LINES:]
    return b"".join(lines)[-MAX_TERMINATION_LOG_BYTES:].decode("utf-8", errors="replace")


_VAR_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def expand(s: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined vars are replaced, ``$$`` is a literal ``$``,
    undefined references stay as they are."""

    def repl(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _VAR_REF.sub(repl, s)


_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def _field_ref(pod: Mapping[str, Any], path: str, node: SimNode) -> str:
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    ip = node.address or "127.0.0.1"
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": ip,
        "status.hostIPs": ip,
        "status.podIP": ip,
        "status.podIPs": ip,
    }
    if path in simple:
        return str(simple[path])
    m = _LABEL_REF.match(path)
    if m:
        return str(meta.get(m.group(1), {}).get(m.group(2), ""))
    raise ValueError(f"unsupported fieldRef {path!r}")


# --------------------------------------------------------------------------
# the stand-in
# --------------------------------------------------------------------------
class _StartError(Exception):
    """A container could not be started (exit code 128, reason StartError)."""


@dataclass
class _PodProgress:
    """How far a pod has come: when it started, its containers and their states so far."""

    start_time: str
    init_containers: list[JSON]
    containers: list[JSON]
    init_results: dict[str, JSON] = field(default_factory=dict)  # name -> terminated state
    running: dict[str, str] = field(default_factory=dict)  # name -> startedAt
    results: dict[str, JSON] = field(default_factory=dict)  # name -> terminated state


class _PodRunner:
    """Runs one pod to completion in its own thread."""

    def __init__(self, standin: KubeletStandIn, pod: JSON, node: SimNode) -> None:
        self.s = standin
        self.pod = pod
        self.node = node
        meta = pod["metadata"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.uid: str = meta["uid"]
        self.wake = threading.Event()
        self.lock = threading.Lock()
        self.kill_reason: str | None = None  # "deleted" | "deadline" | "reboot" | "shutdown"
        self.gone = False  # the pod object no longer exists: no status writes
        self.finalize = False  # deletionTimestamp seen: delete with grace 0 at the end
        self.grace_s: float | None = None
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.dir = Path(
            tempfile.mkdtemp(prefix=f"{self.namespace}_{self.name}_", dir=standin.workdir)
        )
        self.thread = threading.Thread(
            target=self._run_guarded, name=f"pod-{self.namespace}/{self.name}", daemon=True
        )

    # -- control -----------------------------------------------------------
    def request_kill(
        self,
        reason: str,
        *,
        gone: bool = False,
        finalize: bool = False,
        grace_s: float | None = None,
    ) -> None:
        with self.lock:
            if self.kill_reason is None:
                self.kill_reason = reason
            self.gone = self.gone or gone
            self.finalize = self.finalize or finalize
            if grace_s is not None:
                self.grace_s = grace_s
        self.wake.set()

    def pids(self) -> dict[str, int]:
        with self.lock:
            return {name: p.pid for name, p in self.procs.items() if p.poll() is None}

    def log_path(self, container: str) -> Path:
        return self.dir / f"{container}.log"

    # -- main --------------------------------------------------------------
    def _run_guarded(self) -> None:
        try:
            self._run()
        except Exception:
            log.exception("pod %s/%s: stand-in error", self.namespace, self.name)
            self._kill_all(0.0)
        finally:
            self.s._runner_done(self)

    def _behaviour(self) -> Behaviour:
        b = self.node.behaviour if self.node.behaviour is not None else self.s.default_behaviour
        if isinstance(b, RunProcess | Hang | Complete):
            return b
        return b(
            PodInfo(
                namespace=self.namespace,
                name=self.name,
                uid=self.uid,
                node_name=self.node.name,
                boot_id=self.node.boot_id,
                profile=self.node.profile,
                pod=self.pod,
            )
        )

    def _run(self) -> None:
        spec = self.pod.get("spec", {})
        containers: list[JSON] = list(spec.get("containers", []))
        init_containers: list[JSON] = list(spec.get("initContainers", []))
        start_mono = time.monotonic()
        progress = _PodProgress(_now(), init_containers, containers)
        ads = spec.get("activeDeadlineSeconds")
        deadline = start_mono + float(ads) if ads is not None else None
        behaviour = self._behaviour()

        if isinstance(behaviour, Complete) and behaviour.delay_s <= 0:
            # One status write, straight to the terminal phase.
            t = _now()
            for c in containers:
                progress.results[c["name"]] = self._terminated(
                    behaviour.exit_code, behaviour.message.encode(), t, t
                )
            self._finish(progress, deadline_hit=False)
            return

        self._run_init_containers(behaviour, progress, deadline)
        failed_init = any(r["exitCode"] != 0 for r in progress.init_results.values())
        if not failed_init and self.kill_reason is None and not self._deadline_passed(deadline):

            def write_running(running: Mapping[str, str]) -> None:
                # Like the kubelet: Running once the containers have been started.
                progress.running.update(running)
                self._write_status(self._status("Running", progress))

            if isinstance(behaviour, RunProcess):
                progress.results = self._run_containers(
                    containers, deadline, on_started=write_running
                )
            else:
                t = _now()
                write_running({c["name"]: t for c in containers})
                progress.results = self._simulate(behaviour, containers, deadline, progress.running)
        self._finish(progress, deadline_hit=self.kill_reason == "deadline")

    def _run_init_containers(
        self, behaviour: Behaviour, progress: _PodProgress, deadline: float | None
    ) -> None:
        """Init containers run one after the other, before the Running write; simulated
        behaviours complete them at once."""
        if isinstance(behaviour, RunProcess):
            for c in progress.init_containers:
                res = self._run_containers([c], deadline)
                progress.init_results.update(res)
                if res[c["name"]]["exitCode"] != 0 or self.kill_reason:
                    break
        else:
            t = _now()
            for c in progress.init_containers:
                progress.init_results[c["name"]] = self._terminated(0, b"", t, t)

    def _deadline_passed(self, deadline: float | None) -> bool:
        if deadline is not None and time.monotonic() >= deadline:
            self.request_kill("deadline")
            return True
        return False

    def _wait(self, deadline: float | None, until: float | None = None) -> bool:
        """Sleep until woken, the deadline or ``until``. True when a kill was requested."""
        limits = [x for x in (deadline, until) if x is not None]
        timeout = max(0.0, min(limits) - time.monotonic()) if limits else None
        self.wake.wait(timeout)
        self.wake.clear()
        self._deadline_passed(deadline)
        return self.kill_reason is not None

    def _simulate(
        self,
        b: Hang | Complete,
        containers: list[JSON],
        deadline: float | None,
        started: Mapping[str, str],
    ) -> dict[str, JSON]:
        until = None if isinstance(b, Hang) else time.monotonic() + b.delay_s
        while True:
            if self._wait(deadline, until):
                code = 137
                msg = b""
                break
            if until is not None and time.monotonic() >= until:
                assert isinstance(b, Complete)
                code, msg = b.exit_code, b.message.encode()
                break
        t = _now()
        return {c["name"]: self._terminated(code, msg, started[c["name"]], t) for c in containers}

    # -- processes -----------------------------------------------------------
    def _argv_env(self, c: JSON, msg_file: Path) -> tuple[list[str], dict[str, str], str]:
        tpath = c.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH
        env: dict[str, str] = {
            k: v
            for k, v in os.environ.items()
            if k in ("HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "USER")
        }
        env["PATH"] = self.s.search_path
        env["HOSTNAME"] = self.name
        pod_env = self.s._container_env(self.pod, c, self.node)
        env.update({k: v.replace(tpath, str(msg_file)) for k, v in pod_env.items()})
        if self.node.profile is not None:
            env[ENV_PROFILE] = self.node.profile
        # The simulated node's boot ID, which the probe reports (gpuaccept probe
        # reads GPUACCEPT_BOOT_ID in simulation); the operator checks it.
        env.setdefault(ENV_BOOT_ID, self.node.boot_id)
        env["GPUACCEPT_TERMINATION_LOG"] = str(msg_file)
        command = list(c.get("command") or [])
        if not command:
            image = str(c.get("image", ""))
            entry = self.s.entrypoints.get(image) or self.s.entrypoints.get(
                image.split(":", maxsplit=1)[0]
            )
            if not entry:
                raise _StartError(
                    f"container {c['name']!r} has no command and the stand-in knows no "
                    f"entrypoint for image {image!r}"
                )
            command = list(entry)
        argv = [
            expand(a, pod_env).replace(tpath, str(msg_file))
            for a in command + list(c.get("args") or [])
        ]
        exe = shutil.which(argv[0], path=self.s.search_path)
        if exe is None:
            raise _StartError(f'exec: "{argv[0]}": executable file not found in $PATH')
        argv[0] = exe
        workdir = c.get("workingDir")
        cwd = workdir if workdir and Path(workdir).is_dir() else str(self.dir)
        return argv, env, cwd

    def _run_containers(
        self,
        containers: list[JSON],
        deadline: float | None,
        on_started: Callable[[Mapping[str, str]], None] | None = None,
    ) -> dict[str, JSON]:
        results: dict[str, JSON] = {}
        starts: dict[str, str] = {}
        msg_files: dict[str, Path] = {}
        for c in containers:
            name = c["name"]
            msg_file = self.dir / f"{name}.termination-log"
            msg_file.write_bytes(b"")
            msg_files[name] = msg_file
            starts[name] = _now()
            try:
                argv, env, cwd = self._argv_env(c, msg_file)
                with open(self.log_path(name), "ab") as out:
                    proc = subprocess.Popen(
                        argv,
                        env=env,
                        cwd=cwd,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
            except (_StartError, OSError, ValueError) as e:
                t = _now()
                results[name] = {
                    "exitCode": 128,
                    "reason": "StartError",
                    "message": str(e)[-4096:],
                    "startedAt": t,
                    "finishedAt": t,
                }
                continue
            log.debug(
                "pod %s/%s container %s: pid %d: %s",
                self.namespace,
                self.name,
                name,
                proc.pid,
                argv,
            )
            with self.lock:
                self.procs[name] = proc
            threading.Thread(target=self._reap, args=(proc,), daemon=True).start()

        running = {n: p for n, p in self.procs.items() if n in {c["name"] for c in containers}}
        if running and on_started is not None:
            on_started({n: starts[n] for n in running})
        while any(p.poll() is None for p in running.values()):
            if self._wait(deadline):
                self._kill_all(self._grace())
                break
        for name, p in running.items():
            rc = p.wait()
            code = 128 - rc if rc < 0 else rc
            c = next(x for x in containers if x["name"] == name)
            data = msg_files[name].read_bytes()
            fallback = (
                c.get("terminationMessagePolicy") == "FallbackToLogsOnError"
                and not data
                and code != 0
            )
            results[name] = self._terminated(
                code,
                data,
                starts[name],
                _now(),
                log_fallback=self.log_path(name) if fallback else None,
            )
        return results

    def _reap(self, proc: subprocess.Popen[bytes]) -> None:
        proc.wait()
        self.wake.set()

    def _grace(self) -> float:
        spec_grace = self.pod.get("spec", {}).get("terminationGracePeriodSeconds", 30)
        g = self.grace_s if self.grace_s is not None else float(spec_grace)
        return max(0.0, min(g, self.s.kill_grace_cap_s))

    def _kill_all(self, grace_s: float) -> None:
        live = [p for p in self.procs.values() if p.poll() is None]
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            for p in live:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, sig)
            end = time.monotonic() + wait_s
            while time.monotonic() < end and any(p.poll() is None for p in live):
                time.sleep(0.02)
            live = [p for p in live if p.poll() is None]
            if not live:
                break

    # -- status --------------------------------------------------------------
    def _terminated(
        self,
        code: int,
        data: bytes,
        started: str,
        finished: str,
        *,
        log_fallback: Path | None = None,
    ) -> JSON:
        if self.kill_reason == "reboot":
            return {
                "exitCode": 137,
                "reason": "ContainerStatusUnknown",
                "message": "The container could not be located when the pod was terminated",
                "startedAt": started,
                "finishedAt": finished,
            }
        msg = truncate_termination_message(data)
        if log_fallback is not None:
            msg = _log_tail_message(log_fallback)
        st: JSON = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started,
            "finishedAt": finished,
        }
        if msg:
            st["message"] = msg
        return st

    def _container_status(self, c: JSON, state: JSON, *, ready: bool, started: bool) -> JSON:
        return {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "standin://" + str(c.get("image", "")),
            "containerID": f"standin://{self.uid}/{c['name']}",
            "ready": ready,
            "started": started,
            "restartCount": 0,
            "state": state,
            "lastState": {},
        }

    def _status(
        self,
        phase: str,
        progress: _PodProgress,
        *,
        reason: str | None = None,
        message: str | None = None,
    ) -> JSON:
        now = _now()
        start_time, running = progress.start_time, progress.running
        init_containers, containers = progress.init_containers, progress.containers
        init_results, results = progress.init_results, progress.results
        terminal = phase in ("Succeeded", "Failed")
        init_done = all(
            init_results.get(c["name"], {}).get("exitCode") == 0 for c in init_containers
        )
        all_running = bool(containers) and all(c["name"] in running for c in containers)

        def cond(typ: str, ok: bool, why: str | None = None) -> JSON:
            d: JSON = {
                "type": typ,
                "status": "True" if ok else "False",
                "lastProbeTime": None,
                "lastTransitionTime": now,
            }
            if why and not ok:
                d["reason"] = why
            return d

        ready = all_running and not terminal
        cstatuses = []
        for c in containers:
            n = c["name"]
            if n in results:
                state: JSON = {"terminated": results[n]}
            elif n in running:
                state = {"running": {"startedAt": running[n]}}
            else:
                state = {
                    "waiting": {
                        "reason": "PodInitializing" if init_containers else "ContainerCreating"
                    }
                }
            cstatuses.append(
                self._container_status(
                    c,
                    state,
                    ready=ready and n in running,
                    started=n in running and n not in results,
                )
            )
        istatuses = []
        for c in init_containers:
            n = c["name"]
            if n in init_results:
                state = {"terminated": init_results[n]}
            else:
                state = {"waiting": {"reason": "PodInitializing"}}
            istatuses.append(
                self._container_status(
                    c,
                    state,
                    ready=n in init_results and init_results[n]["exitCode"] == 0,
                    started=False,
                )
            )
        ip = self.node.address or "127.0.0.1"
        status: JSON = {
            "phase": phase,
            "startTime": start_time,
            "hostIP": ip,
            "hostIPs": [{"ip": ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": [
                cond("PodReadyToStartContainers", not terminal),
                cond("Initialized", init_done, "ContainersNotInitialized"),
                cond(
                    "ContainersReady", ready, "PodCompleted" if terminal else "ContainersNotReady"
                ),
                cond("Ready", ready, "PodCompleted" if terminal else "ContainersNotReady"),
                # The kubelet adds this one when missing (no scheduler bound the pod here).
                cond("PodScheduled", True),
            ],
            "containerStatuses": cstatuses,
            "reason": reason,
            "message": message,
        }
        if init_containers:
            status["initContainerStatuses"] = istatuses
        return status

    def _finish(self, progress: _PodProgress, *, deadline_hit: bool) -> None:
        """The terminal status write (and the pod's deletion, if it was being deleted).
        Containers that never started (failed init, killed early) end as unknown or errors."""
        results, init_results = progress.results, progress.init_results
        t = _now()
        for c in progress.containers:  # containers that never started (failed init / killed early)
            if c["name"] not in results:
                results[c["name"]] = {
                    "exitCode": 137 if self.kill_reason else 1,
                    "reason": "ContainerStatusUnknown" if self.kill_reason else "Error",
                    "startedAt": t,
                    "finishedAt": t,
                }
        ok = all(r["exitCode"] == 0 for r in results.values()) and all(
            r["exitCode"] == 0 for r in init_results.values()
        )
        phase = "Succeeded" if ok and not deadline_hit else "Failed"
        reason = DEADLINE_REASON if deadline_hit else None
        message = DEADLINE_MESSAGE if deadline_hit else None
        if self.kill_reason in ("shutdown",) or self.gone:
            return
        self._write_status(self._status(phase, progress, reason=reason, message=message))
        if self.finalize:
            self.s._delete_pod(self.namespace, self.name, self.uid)

    def _write_status(self, status: JSON) -> None:
        if self.gone or self.kill_reason == "shutdown":
            return
        try:
            self.s._patch_pod_status(self.namespace, self.name, self.uid, status)
        except ApiException as e:
            if e.status in (404, 409):
                self.gone = True  # deleted (or replaced by a pod with another uid)
                return
            raise


@dataclass(frozen=True)
class StandInSettings:
    """How the stand-in talks to the API server and runs pod processes.

    ``api_concurrency``: API requests in flight at most; ``kill_grace_cap_s``: the
    longest grace period before SIGKILL; ``extra_path``: directories searched first
    for ``command[0]``; ``entrypoints``: image -> argv for containers without a
    ``command``."""

    api_concurrency: int = 32
    kill_grace_cap_s: float = 5.0
    extra_path: Sequence[str] = ()
    entrypoints: Mapping[str, Sequence[str]] = field(default_factory=dict)


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
        self.default_behaviour: Behaviour | BehaviourHook = default_behaviour or RunProcess()
        self.entrypoints: dict[str, list[str]] = {
            k: list(v) for k, v in settings.entrypoints.items()
        }
        self.kill_grace_cap_s = settings.kill_grace_cap_s
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
        self._runners: dict[str, _PodRunner] = {}
        self._done: dict[str, _PodRunner] = {}  # finished runners by uid (logs stay readable)
        self._stopping = threading.Event()
        self._watch_ready = threading.Event()
        self._watch_error: BaseException | None = None
        self._watch_thread: threading.Thread | None = None
        self._watch_resp: Any = None
        self._resource_version: str | None = None  # where the pod watch resumes; None: relist
        self._ip_counter = 0

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
            "status": _node_status(n),
        }
        with self._api_sem:
            try:
                obj = _call(self.core.create_node, body)
                if obj.get("status", {}).get("nodeInfo", {}).get("bootID") != n.boot_id:
                    self._patch_node_status(n.name, _node_status(n))
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
        self._patch_node_status(n.name, _node_status(n))

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
                self._nodes.pop(name, None)

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
            node_name, {"conditions": [_ready_condition(ready, reason, message)]}
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
        status = _node_status(n)
        self._patch_node_status(
            node_name, {"nodeInfo": status["nodeInfo"], "conditions": [_ready_condition(True)]}
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

    def _container_env(self, pod: JSON, c: JSON, node: SimNode) -> dict[str, str]:
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
                env[name] = _field_ref(pod, vf["fieldRef"]["fieldPath"], node)
            elif "configMapKeyRef" in vf or "secretKeyRef" in vf:
                kind = "configmap" if "configMapKeyRef" in vf else "secret"
                ref = vf.get("configMapKeyRef") or vf["secretKeyRef"]
                data = self._read_data(kind, ns, ref["name"], ref.get("optional", False))
                if ref["key"] in data:
                    env[name] = data[ref["key"]]
                elif not ref.get("optional", False):
                    raise _StartError(
                        f"couldn't find key {ref['key']} in {kind} {ns}/{ref['name']}"
                    )
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
            raise _StartError(f"{kind} {ns}/{name}: {e.status} {e.reason}") from e
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

    def _delete_pod(self, ns: str, name: str, uid: str) -> None:
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        with self._api_sem:
            try:
                _call(self.core.delete_namespaced_pod, name, ns, body=body)
            except ApiException as e:
                if e.status not in (404, 409):
                    raise

    def _runner_done(self, r: _PodRunner) -> None:
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
            runner = _PodRunner(self, pod, node)
            self._runners[uid] = runner
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
def _behaviour_from_spec(spec: Any) -> Behaviour | None:
    if spec is None:
        return None
    if spec == "run":
        return RunProcess()
    if spec == "hang":
        return Hang()
    if isinstance(spec, dict) and "complete" in spec:
        c = spec["complete"] or {}
        message = c.get("message", "")
        if "messageFile" in c:
            message = Path(c["messageFile"]).read_text()
        return Complete(
            exit_code=int(c.get("exitCode", 0)),
            message=message,
            delay_s=float(c.get("delaySeconds", 0)),
        )
    raise ValueError(f"unknown behaviour {spec!r} (run | hang | {{complete: {{...}}}})")


def load_fleet(path: str | Path) -> list[SimNode]:
    """Read a fleet file::

    nodes:
      - name: gpu-a-1                 # one node ...
        profile: ../profiles/h100-healthy.yaml   # relative to this file
        gpuCount: 8
        gpuProduct: NVIDIA-H100-80GB-HBM3
        labels: {topology.kubernetes.io/zone: a}
        taints: [{key: gpuaccept.io/unverified, value: "true", effect: NoSchedule}]
        behaviour: run                # run | hang | {complete: {exitCode, message, delaySeconds}}
      - namePrefix: sim-gpu-          # ... or `count` nodes named sim-gpu-0000 ...
        count: 200
        profile: ../profiles/h100-healthy.yaml
    """
    p = Path(path)
    doc = yaml.safe_load(p.read_text()) or {}
    out: list[SimNode] = []
    for item in doc.get("nodes", []):
        prof = item.get("profile")
        profile = str((p.parent / prof).resolve()) if prof else None
        names: list[str]
        if "count" in item:
            prefix = item.get("namePrefix", "sim-gpu-")
            count = int(item["count"])
            width = max(4, len(str(count - 1)))
            names = [f"{prefix}{i:0{width}d}" for i in range(count)]
        else:
            names = [item["name"]]
        for name in names:
            out.append(
                SimNode(
                    name=name,
                    profile=profile,
                    gpu_count=int(item.get("gpuCount", 8)),
                    gpu_product=str(item.get("gpuProduct", "NVIDIA-H100-80GB-HBM3")),
                    labels={str(k): str(v) for k, v in (item.get("labels") or {}).items()},
                    taints=[
                        {str(k): str(v) for k, v in t.items()} for t in item.get("taints") or []
                    ],
                    behaviour=_behaviour_from_spec(item.get("behaviour")),
                )
            )
    return out


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
    ap.add_argument("--delete-nodes-on-exit", action="store_true")
    ap.add_argument("--api-concurrency", type=int, default=32)
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
        )
    standin = KubeletStandIn(
        cfg,
        nodes=nodes,
        default_behaviour=default,
        settings=StandInSettings(api_concurrency=args.api_concurrency),
    )
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
    stop.wait()
    log.info("stopping")
    standin.stop(delete_nodes=args.delete_nodes_on_exit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
