"""One pod on a simulated node, run to completion in its own thread (kubelet
stand-in, test support): its containers as local processes or as a simulated
behaviour, and its status written through ``pods/status`` as a kubelet does."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.probe_invocation import (
    ENV_BOOT_ID,
    ENV_PROFILE,
    ENV_SIM_TIME_SCALE,
    WATCH_SUBCOMMAND,
)
from gpuaccept.probe.hardware.simulated_visible import ENV_VISIBLE_DEVICES
from gpuaccept.testsupport.standin_affinity import (
    AFFINITY_MESSAGE,
    AFFINITY_REASON,
    TAINT_MESSAGE,
    TAINT_REASON,
    matches_required_affinity,
    requires_node_labels,
    untolerated_no_execute,
)
from gpuaccept.testsupport.standin_behaviours import (
    Behaviour,
    Complete,
    CompleteAfterPod,
    Hang,
    ImagePullFailure,
    PodInfo,
    RunProcess,
    SandboxFailure,
    StartFailure,
)
from gpuaccept.testsupport.standin_containers import (
    DEFAULT_TERMINATION_MESSAGE_PATH,
    StartError,
    expand,
    log_tail_message,
    truncate_termination_message,
)
from gpuaccept.testsupport.standin_dra import device_uuid, prepared_devices
from gpuaccept.testsupport.standin_nodes import JSON, SimNode, timestamp

if TYPE_CHECKING:
    from gpuaccept.testsupport.kubelet_standin import KubeletStandIn

log = logging.getLogger("gpuaccept.testsupport.kubelet_standin")

DEADLINE_REASON = "DeadlineExceeded"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
GPU_RESOURCE = "nvidia.com/gpu"
START_ERROR_EXIT_CODE = 128  # what containerd reports for a container it could not start
NEVER_STARTED = "1970-01-01T00:00:00Z"  # a StartError's startedAt, as the kubelet reports it
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"  # pkg/kubelet/lifecycle/predicate.go


def exec_error(command: str) -> str:
    """runc's words for a command it cannot exec (runc 1.1, libcontainer/standard_init_linux.go)."""
    if "/" in command:
        return f'exec: "{command}": stat {command}: no such file or directory'
    return f'exec: "{command}": executable file not found in $PATH'


def runtime_start_error(cause: str) -> str:
    """The container's terminated message when containerd 2.4 + runc cannot start it
    (seen on the real node, tests/realnode/test_standin_vs_kubelet.py; containerd 1.6
    ended it with the gRPC code, ``: unknown``)."""
    return (
        "failed to create containerd task: failed to create shim task: OCI runtime create "
        f"failed: runc create failed: unable to start container process: {cause}"
    )


DIRECT_BEHAVIOURS = (
    RunProcess,
    Hang,
    Complete,
    CompleteAfterPod,
    StartFailure,
    ImagePullFailure,
    SandboxFailure,
)
PARTNER_POLL_S = 0.25
CLAIM_POLL_S = 0.25  # a pod waiting for its ResourceClaims re-reads them this often
NeverStarts = ImagePullFailure | SandboxFailure


def handles_signal(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (``SigCgt`` in /proc/PID/status).
    A container's PID 1 gets only the signals it handles from the runtime: the
    kernel drops the others (pid_namespaces(7))."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def kill_group(pid: int) -> None:
    """SIGKILL what is left of a container (its process group), as the kernel kills
    every process of a PID namespace whose first process has exited."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def runs_watch(argv: list[str]) -> bool:
    """Whether a container's command and args run ``gpuaccept probe watch``."""
    return any(a == "probe" and b == WATCH_SUBCOMMAND for a, b in itertools.pairwise(argv))


def requested_gpus(pod: JSON) -> int:
    """nvidia.com/gpu the pod's containers ask for (an extended resource: limits = requests)."""
    total = 0
    for c in pod.get("spec", {}).get("containers", []):
        resources = c.get("resources") or {}
        value = (resources.get("limits") or {}).get(GPU_RESOURCE) or (
            resources.get("requests") or {}
        ).get(GPU_RESOURCE)
        total += int(value or 0)
    return total


@dataclass
class PodProgress:
    """How far a pod has come: when it started, its containers and their states so far."""

    start_time: str
    init_containers: list[JSON]
    containers: list[JSON]
    init_results: dict[str, JSON] = field(default_factory=dict)  # name -> terminated state
    running: dict[str, str] = field(default_factory=dict)  # name -> startedAt
    results: dict[str, JSON] = field(default_factory=dict)  # name -> terminated state


class PodRunner:
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
        self.claim_devices: list[str] = []  # DRA: the devices its claims were allocated
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.pod_ip = standin.allocate_pod_ip()
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
            self.s.release_gpus(self.node.name, self.uid)
            self.s._runner_done(self)

    def _behaviour(self) -> Behaviour:
        b = self.node.behaviour if self.node.behaviour is not None else self.s.default_behaviour
        if isinstance(b, DIRECT_BEHAVIOURS):
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
        progress = PodProgress(timestamp(), init_containers, containers)
        ads = spec.get("activeDeadlineSeconds")
        deadline = start_mono + float(ads) if ads is not None else None
        if not self._claims_prepared(deadline):
            self._finish(progress, deadline_hit=self.kill_reason == "deadline")
            return
        if self._admission_rejected(progress):
            return
        behaviour = self._behaviour()
        if isinstance(behaviour, StartFailure):
            t = timestamp()
            for c in containers:
                progress.results[c["name"]] = {
                    "exitCode": START_ERROR_EXIT_CODE,
                    "reason": "StartError",
                    "message": behaviour.message,
                    "startedAt": NEVER_STARTED,
                    "finishedAt": t,
                }
            self._finish(progress, deadline_hit=False)
            return
        if isinstance(behaviour, ImagePullFailure | SandboxFailure):
            self._never_start(behaviour, progress, deadline)
            return

        if isinstance(behaviour, Complete) and behaviour.delay_s <= 0:
            # One status write, straight to the terminal phase.
            t = timestamp()
            for c in containers:
                progress.results[c["name"]] = self._terminated(
                    behaviour.exit_code, behaviour.message.encode(), t, t
                )
            self._finish(progress, deadline_hit=False, single_write=True)
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
                t = timestamp()
                write_running({c["name"]: t for c in containers})
                progress.results = self._simulate(behaviour, containers, deadline, progress.running)
        self._finish(progress, deadline_hit=self.kill_reason == "deadline")

    def _claims_prepared(self, deadline: float | None) -> bool:
        """A pod with ResourceClaims runs only once each is allocated and reserved for
        it, as a kubelet's DRA manager prepares them (the scheduler does both before it
        binds the pod); the devices allocated on this node are the pod's
        (:attr:`claim_devices`). False when the pod was killed or its deadline passed
        first."""
        names = [
            str(c.get("resourceClaimName") or "")
            for c in self.pod.get("spec", {}).get("resourceClaims") or ()
        ]
        devices: list[str] = []
        for name in names:
            while True:
                claim = self.s.dra.claim(self.namespace, name)
                prepared = (
                    None if claim is None else prepared_devices(claim, self.uid, self.node.name)
                )
                if prepared is not None:
                    devices += prepared
                    break
                if self._wait(deadline, time.monotonic() + CLAIM_POLL_S):
                    return False
        self.claim_devices = devices
        return True

    def _admission_rejected(self, progress: PodProgress) -> bool:
        """The kubelet's admission of a pod pinned by nodeName, in its order: the device
        manager, then the predicates (node affinity, a NoExecute taint). Rejected
        (pkg/kubelet/kubelet.go rejectPod): phase Failed, no containers, the admission's
        reason and message."""
        rejection = (
            self._devices_unavailable() or self._affinity_mismatch() or self._untolerated_taint()
        )
        if rejection is None:
            return False
        reason, message = rejection
        status = {
            "phase": "Failed",
            "reason": reason,
            "message": message,
            "startTime": progress.start_time,
        }
        self._write_status(status)
        return True

    def _devices_unavailable(self) -> tuple[str, str] | None:
        """The device manager allocates the pod's nvidia.com/gpu from the healthy devices
        that no running pod holds, before the resource-fit predicate runs; too few free:
        UnexpectedAdmissionError (kubelet 1.37 on the real node, docs/controlplane.md)."""
        devices = self.node.gpu_counts().allocatable
        if self.node.healthy_gpus is not None:
            devices = min(devices, self.node.healthy_gpus)
        wanted = requested_gpus(self.pod)
        if wanted == 0:
            return None
        free = self.s.take_gpus(self.node.name, self.uid, wanted, devices)
        if free is None:
            return None
        return UNEXPECTED_ADMISSION_ERROR, (
            "Pod was rejected: Allocate failed due to requested number of devices "
            f"unavailable for {GPU_RESOURCE}. Requested: {wanted}, Available: {free}, "
            "which is unexpected"
        )

    def _affinity_mismatch(self) -> tuple[str, str] | None:
        """The predicates: a nodeSelector or required node affinity that the Node (read
        now, as the kubelet re-reads it before rejecting on affinity) does not match
        (:mod:`.standin_affinity`)."""
        if not requires_node_labels(self.pod):
            return None
        if matches_required_affinity(self.pod, self.s.read_node(self.node.name)):
            return None
        return AFFINITY_REASON, AFFINITY_MESSAGE

    def _untolerated_taint(self) -> tuple[str, str] | None:
        """The kubelet's taint predicate: a NoExecute taint of the Node (read now) that
        the pod does not tolerate (:mod:`.standin_affinity`)."""
        if untolerated_no_execute(self.pod, self.s.read_node(self.node.name)):
            return TAINT_REASON, TAINT_MESSAGE
        return None

    def _never_start(
        self, behaviour: NeverStarts, progress: PodProgress, deadline: float | None
    ) -> None:
        """The container is never created: it waits with the runtime's reason until the
        pod is deleted or its deadline passes."""
        if isinstance(behaviour, SandboxFailure):
            waiting: JSON = {"reason": "ContainerCreating"}
            self.s.pod_event(self.pod, "FailedCreatePodSandBox", behaviour.message)
        else:
            waiting = {"reason": "ErrImagePull", "message": behaviour.message}
        self._write_status(self._waiting_status("Pending", progress, waiting))
        while not self._wait(deadline):
            pass
        if self.kill_reason == "shutdown" or self.gone:
            return
        # A container that never ran stays waiting in the terminal status (the kubelet
        # reports ContainerStatusUnknown only for one that used to run).
        hit = self.kill_reason == "deadline"
        self._write_status(
            self._waiting_status(
                "Failed",
                progress,
                waiting,
                reason=DEADLINE_REASON if hit else None,
                message=DEADLINE_MESSAGE if hit else None,
            )
        )
        if self.finalize:
            self.s._delete_pod(self.namespace, self.name, self.uid)

    def _waiting_status(
        self,
        phase: str,
        progress: PodProgress,
        waiting: JSON,
        *,
        reason: str | None = None,
        message: str | None = None,
    ) -> JSON:
        status = self._status(phase, progress, reason=reason, message=message)
        for cs in status["containerStatuses"]:
            cs["state"] = {"waiting": dict(waiting)}
        return status

    def _run_init_containers(
        self, behaviour: Behaviour, progress: PodProgress, deadline: float | None
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
            t = timestamp()
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
        b: Hang | Complete | CompleteAfterPod,
        containers: list[JSON],
        deadline: float | None,
        started: Mapping[str, str],
    ) -> dict[str, JSON]:
        until = None if isinstance(b, Hang) else time.monotonic()
        if isinstance(b, Complete):
            until = time.monotonic() + b.delay_s
        while True:
            if self._wait(deadline, until):
                code = 137
                msg = b""
                break
            if isinstance(b, CompleteAfterPod) and not self.s.pod_seen(self.namespace, b.pod):
                until = time.monotonic() + PARTNER_POLL_S
                continue
            if until is not None and time.monotonic() >= until:
                assert not isinstance(b, Hang)
                code, msg = b.exit_code, b.message.encode()
                break
        t = timestamp()
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
        pod_env = self.s._container_env(self.pod, c, self.node, self.pod_ip)
        env.update({k: v.replace(tpath, str(msg_file)) for k, v in pod_env.items()})
        # A watch pod (gpuaccept probe watch) watches the node as it is now: it is no
        # probe, so it does not move the node on to its laterProfile.
        watching = runs_watch([*(c.get("command") or []), *(c.get("args") or [])])
        profile = self.node.watch_profile() if watching else self.node.probe_profile()
        if profile is not None:
            env[ENV_PROFILE] = profile
            if self.s.sim_time_scale is not None:
                env.setdefault(ENV_SIM_TIME_SCALE, f"{self.s.sim_time_scale:g}")
        # The simulated node's boot ID, which the probe reports (gpuaccept probe
        # reads GPUACCEPT_BOOT_ID in simulation); the operator checks it.
        env.setdefault(ENV_BOOT_ID, self.node.boot_id)
        if (c.get("resources") or {}).get("claims"):
            # The GPUs its claims were allocated, and no other: a real container gets
            # their device nodes through the DRA driver's CDI edits (with
            # NVIDIA_VISIBLE_DEVICES=void); the simulated probe reads them here, as
            # the device plugin states them (probe/hardware/simulated_visible.py).
            env[ENV_VISIBLE_DEVICES] = ",".join(
                device_uuid(self.node.name, device) for device in self.claim_devices
            )
        env["GPUACCEPT_TERMINATION_LOG"] = str(msg_file)
        command = list(c.get("command") or [])
        if not command:
            image = str(c.get("image", ""))
            entry = self.s.entrypoints.get(image) or self.s.entrypoints.get(
                image.split(":", maxsplit=1)[0]
            )
            if not entry:
                raise StartError(
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
            raise StartError(runtime_start_error(exec_error(argv[0])))
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
            starts[name] = timestamp()
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
            except (StartError, OSError, ValueError) as e:
                results[name] = {
                    "exitCode": START_ERROR_EXIT_CODE,
                    "reason": "StartError",
                    "message": str(e)[-4096:],
                    # The kubelet reports a container that never started from the epoch.
                    "startedAt": NEVER_STARTED,
                    "finishedAt": timestamp(),
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
            kill_group(p.pid)  # the container's other processes end with its first
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
                timestamp(),
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
        """Stop the containers as the runtime does: SIGTERM to each container's first
        process, which, being PID 1 of its namespace, ignores it unless it handles it;
        SIGKILL to all of it after the grace period."""
        live = [p for p in self.procs.values() if p.poll() is None]
        for p in live:
            if handles_signal(p.pid, signal.SIGTERM):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)
        for wait_s in (grace_s, 5.0):
            end = time.monotonic() + wait_s
            while time.monotonic() < end and any(p.poll() is None for p in live):
                time.sleep(0.02)
            for p in live:
                kill_group(p.pid)
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
            msg = log_tail_message(log_fallback)
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
        progress: PodProgress,
        *,
        reason: str | None = None,
        message: str | None = None,
    ) -> JSON:
        now = timestamp()
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
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
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

    def _finish(
        self, progress: PodProgress, *, deadline_hit: bool, single_write: bool = False
    ) -> None:
        """The terminal status write (and the pod's deletion, if it was being deleted).
        Containers that never started (failed init, killed early) end as unknown or errors."""
        results, init_results = progress.results, progress.init_results
        t = timestamp()
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
        if not single_write and self.kill_reason is None and not deadline_hit:
            # As a kubelet does: the containers' end first, the pod still Running (or
            # Pending when none started: a StartError); the terminal phase once the pod
            # is torn down (kubelet 1.37, tests/realnode). Scale mode: one write.
            self._write_status(self._status("Running" if progress.running else "Pending", progress))
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
