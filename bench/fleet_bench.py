"""The fleet benchmark: N simulated GPU nodes join at once; the operator and the
API floor script each decide all of them, measured the same way.

For each N and each arm (``floor``, then ``operator``), on one fresh control
plane (the binary ``make cluster-up`` runs, kube-apiserver's audit log on):

1. the previous arm's nodes, NodeAcceptances and pods are removed;
2. the arm starts as a subprocess under its own ServiceAccount identity and
   the harness waits until it watches Nodes (seen in the audit log);
3. the kubelet stand-in (scale mode) registers N nodes at once, with the
   pending taint as ``--register-with-taints`` would, and completes every probe
   pod with a prepared report from the real probe (a fixed fraction fail);
4. the harness watches NodeAcceptances until every node has its final phase,
   then checks the end state (labels, taints, one probe pod per node, one
   verdict per node) and stops the arm;
5. the arm's requests are counted from the audit log (its identity only), its
   peak RSS (``VmHWM``) and CPU seconds are read from /proc.

With ``--fabric-slow-every K`` the policy runs the fabric test (docs/fabric.md):
every node's profile is the healthy H100's or, for every K-th, the damaged-cable
one (profiles/fabric/), the stand-in completes fabric pairs from the two profiles'
``interNode.busbwGBps`` (scale mode), and the result adds the rounds, pairs and
fabric verdicts. The floor does no fabric test: it accepts those nodes.

With ``--full-policy`` the policy also watches accepted nodes in service and
re-verifies them (``inService`` and ``reverify`` on with their defaults: watch pods
of 1800 s windows, re-verification after 3600 s idle at most once a week). Each
accepted node then gets its first watch pod during the join; the stand-in runs it
(phase Running) past the join's end, as a real one runs its window. The join's
accounting adds those loops' requests; the floor does neither (its numbers are the
plain join's).

With ``--dra-every K`` (the operator arm only) every K-th node publishes its GPUs as
NVIDIA's DRA driver does (the stand-in's ResourceSlices of ``gpu.nvidia.com``, no
``nvidia.com/gpu``; 2: half the fleet, the failing nodes shared between both kinds):
its probe gets the GPUs through a ResourceClaim the operator creates, which the real
kube-scheduler (``.bin/kube-scheduler``, run for the benchmark as the admin) allocates
and binds; the harness plays the controller manager's resourceclaim controller
(testsupport/standin_dra.py), as the admin too. Neither is counted for the arm. The
result adds the DRA nodes and the operator's DRA requests (claims, slices) per DRA node.

The last stdout line is a machine-readable summary (``--label``).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from rich.console import Console
from rich.table import Table

from bench import accounting, apiserver_metrics, procstat, reports, reverify_fleet
from bench.audit import AuditTail, RequestCounts
from bench.cluster import (
    NAMESPACE,
    clean_fleet,
    ensure_namespace,
    ensure_policy,
    identity,
    start_cluster,
)
from bench.plot import plot_time_to_verdict
from bench.reverify_fleet import ReverifySettings
from bench.watching import keep_watching, list_then_watch, list_then_watch_acceptances
from gpuaccept.contracts.api import (
    ACCEPTANCE_LABEL,
    ACCEPTANCE_PLURAL,
    GPU_PRESENT_LABEL,
    GROUP,
    PENDING_TAINT_KEY,
    QUARANTINE_TAINT_KEY,
    VERSION,
)
from gpuaccept.contracts.probe_invocation import ProbeExit
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core.podspec import WATCH_LABEL
from gpuaccept.testsupport.controlplane import ControlPlane
from gpuaccept.testsupport.crd_install import apply_crds
from gpuaccept.testsupport.kubelet_standin import (
    Behaviour,
    BehaviourHook,
    Complete,
    Hang,
    KubeletStandIn,
    PodInfo,
    SimNode,
    StandInSettings,
    fabric_pairs_from_profiles,
)
from gpuaccept.testsupport.scheduler import kube_scheduler
from gpuaccept.testsupport.standin_behaviours import reported_wall_s
from gpuaccept.testsupport.standin_dra import DRA_DRIVER, ClaimController, device_class_manifest

REPO = Path(__file__).resolve().parent.parent
FINAL = ("Accepted", "Quarantined")
BENCH_LABEL = "bench.gpuaccept.io/fleet"
GPUS_PER_NODE = 8
HEALTHY_PROFILE = REPO / "profiles" / "h100-sxm-8gpu-healthy.yaml"
DAMAGED_PROFILE = REPO / "profiles" / "fabric" / "h100-sxm-8gpu-damaged-cable.yaml"
FABRIC_SECTION = {"enabled": True, "minBusbwGBps": 200, "deadlineSeconds": 1800}
FABRIC_REASON = "FabricAllreduceFailed"
FABRIC_POD_LABEL = "gpuaccept.io/fabric-pair"
PROBE_NODE_LABEL = "gpuaccept.io/node"  # a probe pod's node (a DRA node's pod is bound later)
DRA_RESOURCES = ("resourceclaims", "resourceslices")
FLOOR_WRITES_PER_PAIR = 6
# The loops that make requests in every join (bench/accounting.py): the watches, the
# nodes' reconciles, the leader election and the installation lock (the policy status
# writes once per --status-interval at most: a small fleet can be decided before it).
JOIN_LOOPS = ("kopf", "reconcile", "leader-election", "installation-lock")
# --full-policy: in service and re-verification on, as shipped (their defaults); the
# in-service loop then makes requests in every join (the first watch pod of a node)
FULL_POLICY_SECTIONS: dict[str, Any] = {
    "inService": {"enabled": True},
    "reverify": {"enabled": True},
}
FULL_POLICY_LOOPS = (*JOIN_LOOPS, "in-service")

console = Console(stderr=True, highlight=False, width=160)


def log(message: str) -> None:
    console.print(f"[dim]{datetime.now(UTC):%H:%M:%S}[/] {message}")


# --------------------------------------------------------------------------
# what one arm run produces
# --------------------------------------------------------------------------
@dataclass
class ArmResult:
    arm: str
    nodes: int
    decided: int = 0
    correct: int = 0  # final phase, label and taints as the prepared report says
    lost: int = 0  # no final phase by the deadline, or an end state that disagrees
    duplicated: int = 0  # a node that reached a final phase twice, or got two probe pods
    held: int = 0
    wall_s: float = 0.0  # first node created → last node decided
    register_s: float = 0.0  # time the stand-in took to create the N nodes
    latency: dict[str, float] = field(default_factory=dict)
    requests: dict[str, Any] = field(default_factory=dict)
    standin_requests: dict[str, Any] = field(default_factory=dict)
    apiserver_delta_by_verb: dict[str, int] = field(default_factory=dict)
    peak_rss_mb: float = 0.0  # VmHWM when the arm is stopped: over the whole run
    # at the join's end (after the settle): VmRSS then and VmHWM then (the join's own peak)
    join_end_rss_mb: float = 0.0
    join_peak_rss_mb: float = 0.0
    cpu_s: float = 0.0
    # CPU seconds spent between the first node's creation and the last verdict, by
    # process: the arm, kube-apiserver+etcd, and this harness with the in-process stand-in.
    window_cpu_s: dict[str, float] = field(default_factory=dict)
    exit_code: int | None = None
    problems: list[str] = field(default_factory=list)
    log_file: str = ""
    # with --fabric-slow-every: rounds (pairs up to a node's verdict), pairs, correctness
    fabric: dict[str, Any] = field(default_factory=dict)
    # with --reverify-seconds (the operator arm): bench/reverify_fleet.py's ReverifyResult
    reverify: dict[str, Any] = field(default_factory=dict)
    # with --dra-every: {"nodes": DRA nodes, "requests": the arm's claim and slice
    # requests, "per_dra_node": those per DRA node, "by_call_per_dra_node": by call}
    dra: dict[str, Any] = field(default_factory=dict)
    # the operator arm's requests of the join by loop and phase, per node (bench/accounting.py);
    # with the floor: the calls above its requests per node
    accounting: dict[str, Any] = field(default_factory=dict)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_summary(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"p50_s": math.nan, "p95_s": math.nan, "max_s": math.nan, "mean_s": math.nan}
    return {
        "p50_s": round(percentile(values, 50), 3),
        "p95_s": round(percentile(values, 95), 3),
        "max_s": round(max(values), 3),
        "mean_s": round(statistics.fmean(values), 3),
    }


# --------------------------------------------------------------------------
# the harness's own view: NodeAcceptance phases and probe pods
# --------------------------------------------------------------------------
class Tracker:
    """Watches NodeAcceptances and probe pods (as the admin; not counted for the arms)."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.custom: Any = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.lock = threading.Lock()
        self.phase: dict[str, str] = {}
        self.decided_at: dict[str, float] = {}
        self.final_entries: dict[str, int] = {}  # times a node entered a final phase
        self.pods: dict[str, set[str]] = {}  # node → probe pod uids
        self.stop = threading.Event()
        self.changed = threading.Condition(self.lock)
        self.threads = [
            threading.Thread(target=self._loop, args=(self._watch_nas,), daemon=True),
            threading.Thread(target=self._loop, args=(self._watch_pods,), daemon=True),
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _loop(self, body: Callable[[], None]) -> None:
        keep_watching(body, self.stop, lambda message: log(f"tracker: {message}"))

    def _watch_nas(self) -> None:
        list_then_watch_acceptances(
            self.custom,
            lambda kind, obj: self._on_na(obj) if kind in ("ADDED", "MODIFIED") else None,
            self.stop,
        )

    def _on_na(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        phase = (obj.get("status") or {}).get("phase") or ""
        now = time.monotonic()
        with self.lock:
            before = self.phase.get(name, "")
            self.phase[name] = phase
            if phase in FINAL and phase != before:
                self.final_entries[name] = self.final_entries.get(name, 0) + 1
                self.decided_at.setdefault(name, now)
                self.changed.notify_all()

    def _watch_pods(self) -> None:
        list_then_watch(
            self.core.list_namespaced_pod,
            self.namespace,
            on_event=lambda kind, pod: self._on_pod(pod) if kind == "ADDED" else None,
            stop=self.stop,
        )

    def _on_pod(self, pod: Any) -> None:
        node = (pod.metadata.labels or {}).get(PROBE_NODE_LABEL) or pod.spec.node_name or ""
        labels = pod.metadata.labels or {}
        if FABRIC_POD_LABEL in labels or WATCH_LABEL in labels:
            return  # a fabric pair's or a watch pod, not a second probe of the node
        with self.lock:
            self.pods.setdefault(node, set()).add(pod.metadata.uid)

    def decided(self) -> int:
        with self.lock:
            return len(self.decided_at)

    def wait_decided(self, count: int, deadline: float, alive: Callable[[], bool]) -> bool:
        with self.lock:
            while len(self.decided_at) < count:
                left = deadline - time.monotonic()
                if left <= 0 or not alive():
                    return False
                self.changed.wait(min(left, 1.0))
        return True


# --------------------------------------------------------------------------
# one arm, one N
# --------------------------------------------------------------------------
@dataclass
class Setup:
    cp: ControlPlane
    admin: client.ApiClient
    audit: AuditTail
    out: Path
    healthy: ProbeReport
    faulty: ProbeReport
    fail_every: int
    timeout_s: Callable[[int], float]
    operator_cmd: list[str]
    floor_cmd: list[str]
    probe_delay_s: float
    settle_s: float
    standin_concurrency: int
    profile_operator: bool
    py_spy: str | None = None  # py-spy binary: sample the operator from outside while it works
    py_spy_gil: bool = True  # only the thread holding the GIL: where the Python CPU goes
    # probe pods last their report's wallS x this (the simulated probe's stated durations,
    # docs/probe.md#time-budget), instead of probe_delay_s
    probe_time_scale: float | None = None
    fabric_slow_every: int = 0  # 0: no fabric test; else every k-th node's fabric is slow
    dra_every: int = 0  # 0: every node's GPUs through the device plugin; else every k-th's DRA
    reverify: ReverifySettings | None = None  # the re-verification phase after the operator's
    full_policy: bool = False  # in service and re-verification on (FULL_POLICY_SECTIONS)


def arm_command(setup: Setup, arm: str, kubeconfig: Path, tag: str) -> list[str]:
    template = setup.operator_cmd if arm == "operator" else setup.floor_cmd
    values = {
        "kubeconfig": str(kubeconfig),
        "namespace": NAMESPACE,
        "python": sys.executable,
        "lease": f"bench-{tag}",
    }
    cmd = [part.format(**values) for part in template]
    if arm == "operator" and setup.profile_operator:
        # pyinstrument runs the operator in its own process: the pid measured is the
        # profiled operator (RSS and CPU include the profiler's overhead).
        report = setup.out / f"profile-{tag}.html"
        module = cmd.index("-m") if "-m" in cmd else None
        if module is None:
            raise SystemExit(
                "--profile-operator needs an operator command of the form PY -m MOD ..."
            )
        cmd = [
            cmd[0],
            "-m",
            "pyinstrument",
            "--renderer",
            "html",
            "--outfile",
            str(report),
            *cmd[module:],
        ]
    return cmd


def wait_watching(setup: Setup, user: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Until ``user`` has a watch open on Nodes (so no node is missed or seen by a list)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        setup.audit.poll()
        if any(r.verb == "watch" and r.resource == "nodes" for r in setup.audit.of_user(user)):
            time.sleep(1.0)  # let it open its other watches too
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{user}: exited with {proc.returncode} before watching Nodes")
        time.sleep(0.2)
    raise TimeoutError(f"{user}: no watch on Nodes after {timeout:.0f}s")


class ArmRun:
    """One arm deciding one fleet of N nodes, in the steps of the module docstring."""

    def __init__(self, setup: Setup, arm: str, n: int) -> None:
        self.setup, self.arm, self.n = setup, arm, n
        self.tag = f"{arm}-n{n}"
        self.result = ArmResult(arm=arm, nodes=n)
        self.tracker = Tracker(setup.admin, NAMESPACE)
        self.spy: subprocess.Popen[bytes] | None = None
        self.standin: KubeletStandIn | None = None
        self.last: procstat.ProcSample | None = None
        self.created: dict[str, float] = {}  # node → when the stand-in created it
        self.samples: list[procstat.ProcSample] = []
        self.sampler_stop = threading.Event()
        self.join_until: datetime | None = None  # the join's end (its requests are before)

    def launch(self) -> None:
        """Step 1 and the start of 2: clean up, then start the arm under its identity."""
        setup, tag = self.setup, self.tag
        log(f"[bold]{tag}[/]: cleaning the previous fleet")
        clean_fleet(setup.admin, f"{BENCH_LABEL}=true")
        self.me = identity(setup.cp, tag, setup.out)
        self.standin_id = identity(setup.cp, f"standin-{tag}", setup.out)
        log_path = setup.out / f"{tag}.log"
        self.result.log_file = str(log_path)
        cmd = arm_command(setup, self.arm, self.me.kubeconfig, tag)
        log(f"{tag}: starting {shlex.join(cmd)}")
        with log_path.open("wb") as log_file:
            self.proc = subprocess.Popen(
                cmd, stdout=log_file, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True
            )

    def fails(self, name: str) -> bool:
        """Every ``fail_every``-th node gets the faulty report (0: none)."""
        every = self.setup.fail_every
        return every > 0 and int(name.rsplit("-", 1)[1]) % every == 0

    def slow_fabric(self, name: str) -> bool:
        """With the fabric test, every ``fabric_slow_every``-th node (from the second on,
        so apart from ``fails``) has the damaged cable."""
        every = self.setup.fabric_slow_every
        return every > 0 and int(name.rsplit("-", 1)[1]) % every == 1

    def dra(self, name: str) -> bool:
        """Every ``dra_every``-th node publishes its GPUs through DRA, counted so that the
        failing nodes (every ``fail_every``-th) alternate between both kinds."""
        every = self.setup.dra_every
        index = int(name.rsplit("-", 1)[1])
        return every > 0 and (index + index // max(self.setup.fail_every, 1)) % every == 0

    def _await_watching(self) -> None:
        """The rest of step 2: the arm watches Nodes; the tracker and py-spy start."""
        setup = self.setup
        wait_watching(setup, self.me.user, self.proc, timeout=120)
        self.tracker.start()
        if setup.py_spy and self.arm == "operator":
            self.spy = start_py_spy(
                setup.py_spy,
                self.proc.pid,
                setup.out / f"py-spy-{self.tag}.txt",
                gil=setup.py_spy_gil,
            )

    def _start_standin(self) -> KubeletStandIn:
        setup = self.setup
        message = reports.message_for(setup.healthy, setup.faulty, self.fails)

        def complete(p: PodInfo) -> Behaviour:
            # As the probe ends: exit 1 with a failing report (the operator checks they agree).
            code = ProbeExit.QUARANTINED if self.fails(p.node_name) else ProbeExit.ACCEPTED
            text = message(p.node_name, p.boot_id)
            scale = setup.probe_time_scale
            delay = setup.probe_delay_s if scale is None else reported_wall_s(text) * scale
            return Complete(exit_code=code, message=text, delay_s=delay)

        self.standin = KubeletStandIn(
            setup.cp.configuration(token=self.standin_id.token),
            default_behaviour=complete,
            settings=StandInSettings(api_concurrency=setup.standin_concurrency),
        )
        if setup.fabric_slow_every:
            self.standin.default_behaviour = fabric_pairs_from_profiles(
                self.standin.inter_node_busbw, complete
            )
        if setup.full_policy:
            self.standin.default_behaviour = watch_pods_run(self.standin.default_behaviour)
        self.standin.start()
        return self.standin

    def _fleet(self) -> tuple[list[SimNode], dict[str, str]]:
        """The N nodes, under the pending taint, and the final phase each must reach."""
        fabric = self.setup.fabric_slow_every > 0
        nodes = [
            SimNode(
                name=f"{self.arm}-{self.n}-{i:05d}",
                gpu_count=GPUS_PER_NODE,
                labels={BENCH_LABEL: "true"},
                taints=[{"key": PENDING_TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
            )
            for i in range(self.n)
        ]
        for node in nodes:  # the profiles only matter to the fabric pairs
            if self.dra(node.name):
                node.dra_driver = DRA_DRIVER
            if fabric:
                slow = self.slow_fabric(node.name)
                node.profile = str(DAMAGED_PROFILE if slow else HEALTHY_PROFILE)
        expected = {
            node.name: "Quarantined"
            if self.fails(node.name) or (self.arm == "operator" and self.slow_fabric(node.name))
            else "Accepted"
            for node in nodes
        }
        return nodes, expected

    def _start_sampler(self) -> threading.Thread:
        """Samples the arm's RSS and CPU every 0.5 s until ``sampler_stop``."""

        def sample_loop() -> None:
            while not self.sampler_stop.wait(0.5):
                s = procstat.sample(self.proc.pid)
                if s is not None:
                    self.samples.append(s)

        sampler = threading.Thread(target=sample_loop, daemon=True)
        sampler.start()
        return sampler

    def _register(self, standin: KubeletStandIn, nodes: list[SimNode], t0: float) -> None:
        """Step 3: the stand-in registers every node at once."""

        def register(node: SimNode) -> None:
            standin.add_node(node)
            self.created[node.name] = time.monotonic()

        with ThreadPoolExecutor(max_workers=self.setup.standin_concurrency) as pool:
            list(pool.map(register, nodes))
        self.result.register_s = round(time.monotonic() - t0, 3)
        log(f"{self.tag}: registered in {self.result.register_s:.1f}s; waiting for verdicts")

    def _await_verdicts(self, t0: float) -> None:
        """Step 4: until every node is decided, the arm exits or the deadline passes."""
        n, proc, tracker = self.n, self.proc, self.tracker
        deadline = t0 + self.setup.timeout_s(n)
        progress_at = time.monotonic()
        while not tracker.wait_decided(
            n, min(deadline, time.monotonic() + 15), lambda: proc.poll() is None
        ):
            if proc.poll() is not None or time.monotonic() >= deadline:
                break
            if time.monotonic() - progress_at >= 15:
                progress_at = time.monotonic()
                elapsed = time.monotonic() - t0
                log(f"{self.tag}: {tracker.decided()}/{n} decided after {elapsed:.0f}s")

    def _settle(self, sampler: threading.Thread) -> None:
        """Watch a while longer (a late duplicate action would show up), then stop sampling."""
        decided, settle_s = self.tracker.decided(), self.setup.settle_s
        log(f"{self.tag}: {decided}/{self.n} decided; settling {settle_s:.0f}s")
        time.sleep(self.setup.settle_s)
        if self.spy is not None:
            stop_py_spy(self.spy)
            self.spy = None
        self.sampler_stop.set()
        sampler.join()
        self.last = procstat.sample(self.proc.pid) or (self.samples[-1] if self.samples else None)
        if self.last is not None:
            self.result.join_end_rss_mb = round(self.last.rss_mb, 1)
            self.result.join_peak_rss_mb = round(self.last.peak_rss_mb, 1)

    def _tally(self, expected: dict[str, str]) -> None:
        """Latency, decided, held and duplicated nodes, as the tracker saw them."""
        tracker, result = self.tracker, self.result
        with tracker.lock:
            latencies = [
                tracker.decided_at[name] - self.created[name]
                for name in expected
                if name in tracker.decided_at and name in self.created
            ]
            result.decided = sum(1 for name in expected if tracker.phase.get(name) in FINAL)
            result.held = sum(1 for name in expected if tracker.phase.get(name) == "Held")
            result.duplicated = sum(
                1
                for name in expected
                if tracker.final_entries.get(name, 0) > 1 or len(tracker.pods.get(name, ())) > 1
            )
        result.latency = latency_summary(latencies)

    def decide_fleet(self) -> None:
        """Steps 2 to 4: the fleet joins and the arm decides it; measured meanwhile."""
        setup, result = self.setup, self.result
        self._await_watching()
        standin = self._start_standin()
        nodes, expected = self._fleet()
        before = apiserver_metrics.scrape(setup.admin)
        log(f"{self.tag}: registering {self.n} nodes with the pending taint")
        cpu_pids = {
            "arm": self.proc.pid,
            "apiserver+etcd": setup.cp.pid,
            "harness+standin": os.getpid(),
        }
        cpu_before = {k: procstat.sample(pid) for k, pid in cpu_pids.items()}
        t0 = time.monotonic()
        sampler = self._start_sampler()
        self._register(standin, nodes, t0)
        self._await_verdicts(t0)
        cpu_after = {k: procstat.sample(pid) for k, pid in cpu_pids.items()}
        for key, start in cpu_before.items():
            end = cpu_after[key]
            if start is not None and end is not None:
                result.window_cpu_s[key] = round(end.cpu_s - start.cpu_s, 2)
        t_end = max(self.tracker.decided_at.values(), default=time.monotonic())
        result.wall_s = round(t_end - t0, 3)
        self._settle(sampler)
        self.join_until = datetime.now(UTC)
        after = apiserver_metrics.scrape(setup.admin)
        result.apiserver_delta_by_verb = dict(
            sorted(apiserver_metrics.by_verb(apiserver_metrics.delta(after, before)).items())
        )
        self._tally(expected)
        check_end_state(setup.admin, expected, result)
        if setup.fabric_slow_every and self.arm == "operator":
            result.fabric = fabric_outcome(setup.admin, expected, self.slow_fabric)

    def reverify(self, settings: ReverifySettings) -> None:
        """The re-verification phase on the accepted fleet (bench/reverify_fleet.py)."""
        assert self.standin is not None
        fleet = reverify_fleet.Fleet(
            admin=self.setup.admin,
            audit=self.setup.audit,
            operator_user=self.me.user,
            operator_pid=self.proc.pid,
            standin=self.standin,
            nodes=sorted(self.created),
            selector=f"{BENCH_LABEL}=true",
        )
        phase = reverify_fleet.run_phase(fleet, settings, log)
        self.result.reverify = asdict(phase)
        self.result.problems += [f"re-verification: {p}" for p in phase.problems]

    def stop(self) -> None:
        """Stop the tracker, py-spy, the arm (recording its RSS and CPU) and the stand-in."""
        self.tracker.stop.set()
        if self.spy is not None:
            stop_py_spy(self.spy)
        self.result.exit_code = stop_process(self.proc, self.last, self.result)
        if self.standin is not None:
            self.standin.stop()

    def count_requests(self) -> ArmResult:
        """Step 5: the arm's and the stand-in's requests, from the audit log."""
        setup, result, n = self.setup, self.result, self.n
        setup.audit.poll()
        counts = RequestCounts()
        for request in setup.audit.of_user(self.me.user):
            counts.add(request)
        result.requests = counts.to_json(n)
        if self.arm == "operator":
            self._account(n)
        if setup.dra_every:
            result.dra = dra_requests(counts, sum(1 for name in self.created if self.dra(name)))
        standin_counts = RequestCounts()
        for request in setup.audit.of_user(self.standin_id.user):
            standin_counts.add(request)
        result.standin_requests = standin_counts.to_json(n)
        log(
            f"{self.tag}: decided={result.decided}/{n} lost={result.lost} "
            f"dup={result.duplicated} wall={result.wall_s:.1f}s "
            f"req/node={counts.per_node(n):.2f} "
            f"rss={result.peak_rss_mb:.0f}MB (at the join's end {result.join_end_rss_mb:.0f}MB, "
            f"its peak {result.join_peak_rss_mb:.0f}MB) cpu={result.cpu_s:.1f}s"
            + (
                f" dra_nodes={result.dra['nodes']} "
                f"dra_req/dra_node={result.dra['per_dra_node']:.2f}"
                if result.dra
                else ""
            )
        )
        return result

    def _account(self, n: int) -> None:
        """The operator's requests of the join (received before its end) by loop."""
        joined = RequestCounts()
        until = self.join_until
        for request in self.setup.audit.of_user(self.me.user):
            if until is None or (request.received and _stamp(request.received) < until):
                joined.add(request)
        self.result.accounting = accounting.accounting(joined, n, "node")
        required = FULL_POLICY_LOOPS if self.setup.full_policy else JOIN_LOOPS
        self.result.problems += [
            f"accounting: {p}"
            for p in accounting.problems(self.result.accounting, required=required)
        ]


def watch_pods_run(previous: Behaviour | BehaviourHook) -> BehaviourHook:
    """A watch pod runs (its window outlasts the join); every other pod as before."""

    def behaviour(pod: PodInfo) -> Behaviour:
        if WATCH_LABEL in ((pod.pod.get("metadata") or {}).get("labels") or {}):
            return Hang()
        return previous(pod) if callable(previous) else previous

    return behaviour


def dra_requests(counts: RequestCounts, dra_nodes: int) -> dict[str, Any]:
    """The arm's requests on claims and slices (only DRA nodes cause them), per DRA node."""
    calls = {
        call: count
        for call, count in sorted(counts.by_call.items())
        if call.split(" ", 1)[1].split("/", 1)[0] in DRA_RESOURCES
    }
    total = sum(calls.values())
    return {
        "nodes": dra_nodes,
        "requests": total,
        "per_dra_node": round(total / dra_nodes, 3) if dra_nodes else 0.0,
        "by_call_per_dra_node": {
            call: round(count / dra_nodes, 3) if dra_nodes else 0.0 for call, count in calls.items()
        },
    }


def _stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def run_arm(setup: Setup, arm: str, n: int) -> ArmResult:
    run = ArmRun(setup, arm, n)
    run.launch()
    try:
        run.decide_fleet()
        if setup.reverify is not None and arm == "operator":
            run.reverify(setup.reverify)
    finally:
        run.stop()
    return run.count_requests()


def start_py_spy(binary: str, pid: int, out: Path, *, gil: bool) -> subprocess.Popen[bytes]:
    """py-spy samples the operator from outside (no in-process profiler overhead).

    ``gil``: only the thread holding the GIL, i.e. where the Python CPU goes; else
    every thread, waiting ones included (where the time goes). Raw (folded) stacks;
    ``python -m bench.profile_summary FILE`` prints the top frames.
    """
    cmd = [binary, "record", "--pid", str(pid), "--rate", "50", *(["--gil"] if gil else [])]
    cmd += ["--format", "raw", "--output", str(out)]
    log(f"py-spy: {shlex.join(cmd)}")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_py_spy(spy: subprocess.Popen[bytes]) -> None:
    spy.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
    try:
        spy.wait(timeout=60)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.wait()


def stop_process(
    proc: subprocess.Popen[bytes], last: procstat.ProcSample | None, result: ArmResult
) -> int | None:
    final = procstat.sample(proc.pid) or last
    if final is not None:
        result.peak_rss_mb = round(final.peak_rss_mb, 1)
        result.cpu_s = round(final.cpu_s, 2)
    if proc.poll() is None:
        # SIGINT: kopf (and pyinstrument, when profiling) stop gracefully on it.
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            result.problems.append("did not stop within 30 s of SIGINT; killed")
    else:
        result.problems.append(f"exited on its own with code {proc.returncode} during the run")
    return proc.returncode


def check_end_state(api: client.ApiClient, expected: dict[str, str], result: ArmResult) -> None:
    """Compare every node's NodeAcceptance phase, label and taints with the prepared verdict."""
    core = client.CoreV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    listed: Any = core.list_node(label_selector=f"{BENCH_LABEL}=true")
    nodes = {n.metadata.name: n for n in listed.items}
    phases = {
        item["metadata"]["name"]: (item.get("status") or {}).get("phase", "")
        for item in custom.list_cluster_custom_object(GROUP, VERSION, ACCEPTANCE_PLURAL)["items"]
    }
    wrong: list[str] = []
    for name, want in expected.items():
        node: Any = nodes.get(name)
        phase = phases.get(name, "")
        if node is None:
            wrong.append(f"{name}: node missing")
            continue
        label = (node.metadata.labels or {}).get(ACCEPTANCE_LABEL)
        taints = {t.key for t in node.spec.taints or []}
        ok = (
            phase == want
            and label == want.lower()
            and PENDING_TAINT_KEY not in taints
            and ((QUARANTINE_TAINT_KEY in taints) == (want == "Quarantined"))
        )
        if ok:
            result.correct += 1
        else:
            wrong.append(
                f"{name}: want {want}, got phase={phase!r} label={label!r} taints={sorted(taints)}"
            )
    result.lost = len(wrong)
    if wrong:
        result.problems.append(f"{len(wrong)} nodes not as expected, e.g. " + "; ".join(wrong[:3]))


def fabric_outcome(
    api: client.ApiClient, expected: dict[str, str], slow: Callable[[str], bool]
) -> dict[str, Any]:
    """Rounds (the most pairs a node was in up to its verdict: its first pass, or all
    of a quarantined node's; a cleared node's later pairs as a partner do not count),
    pairs run, and whether each slow-fabric node was quarantined with
    FabricAllreduceFailed and no other node was."""
    custom: Any = client.CustomObjectsApi(api)
    items = custom.list_cluster_custom_object(GROUP, VERSION, ACCEPTANCE_PLURAL)["items"]
    statuses = {i["metadata"]["name"]: i.get("status") or {} for i in items}
    pairs: set[str] = set()
    per_node: list[int] = []
    outcomes: dict[str, int] = {}
    for name in expected:
        records = (statuses.get(name, {}).get("fabric") or {}).get("pairs") or []
        ordered = sorted(records, key=lambda r: str(r["finishedAt"]))
        passes = [i for i, r in enumerate(ordered) if r["outcome"] == "passed"]
        per_node.append(passes[0] + 1 if passes else len(ordered))
        for record in records:
            if record["pair"] not in pairs:
                outcomes[record["outcome"]] = outcomes.get(record["outcome"], 0) + 1
            pairs.add(record["pair"])
    convicted = {n for n in expected if statuses.get(n, {}).get("reason") == FABRIC_REASON}
    slow_nodes = {n for n in expected if slow(n)}
    return {
        "slow_nodes": len(slow_nodes),
        "slow_quarantined": len(slow_nodes & convicted),
        "healthy_quarantined": len(convicted - slow_nodes),
        "rounds": max(per_node, default=0),
        "pairs": len(pairs),
        "pair_outcomes": dict(sorted(outcomes.items())),
        "pairs_per_node_mean": round(statistics.fmean(per_node), 2) if per_node else 0.0,
        # the least a client can do per pair: create and delete two pods, write the
        # result into two statuses (the verdict's own writes are in the floor already)
        "floor_extra_per_node": round(FLOOR_WRITES_PER_PAIR * len(pairs) / len(expected), 2)
        if expected
        else 0.0,
    }


# --------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------
def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else math.nan


def show_table(results: Sequence[ArmResult], machine: str) -> None:
    table = Table(title=f"fleet benchmark ({machine})", title_style="bold")
    for column in (
        "N",
        "arm",
        "decided",
        "lost",
        "dup",
        "p50 s",
        "p95 s",
        "max s",
        "wall s",
        "req/node",
        "by verb per node",
        "peak RSS MB",
        "CPU s",
    ):
        table.add_column(
            column, justify="left" if column in ("arm", "by verb per node") else "right"
        )
    for r in results:
        verbs = ", ".join(
            f"{verb} {count:g}" for verb, count in r.requests.get("by_verb_per_node", {}).items()
        )
        table.add_row(
            str(r.nodes),
            r.arm,
            str(r.decided),
            str(r.lost),
            str(r.duplicated),
            f"{r.latency.get('p50_s', math.nan):.2f}",
            f"{r.latency.get('p95_s', math.nan):.2f}",
            f"{r.latency.get('max_s', math.nan):.2f}",
            f"{r.wall_s:.2f}",
            f"{r.requests.get('per_node', math.nan):.2f}",
            verbs,
            f"{r.peak_rss_mb:.0f}",
            f"{r.cpu_s:.1f}",
        )
    out = Console(width=200)
    out.print(table)
    show_notes(out, results)


def show_notes(out: Console, results: Sequence[ArmResult]) -> None:
    """Under the table: fabric rounds, the accounting by loop, re-verification, ratios."""
    for r in results:
        if r.fabric:
            out.print(
                f"N={r.nodes} {r.arm} fabric: rounds {r.fabric['rounds']}, pairs "
                f"{r.fabric['pairs']} {r.fabric['pair_outcomes']}, slow fabrics quarantined "
                f"{r.fabric['slow_quarantined']}/{r.fabric['slow_nodes']}, healthy quarantined "
                f"{r.fabric['healthy_quarantined']}; the floor's requests per node plus "
                f"{r.fabric['floor_extra_per_node']} for the pairs"
            )
    for r in results:
        if r.accounting:
            for line in accounting.lines(r.accounting, f"N={r.nodes} {r.arm} join"):
                out.print(line, highlight=False, markup=False)
            if r.accounting.get("above_floor"):
                above = ", ".join(f"{c} +{v:g}" for c, v in r.accounting["above_floor"].items())
                out.print(f"  above the floor per node: {above}", highlight=False, markup=False)
    for r in results:
        if r.reverify:
            out.print(f"N={r.nodes} {r.arm} re-verification: {reverify_fleet.describe(r.reverify)}")
            if r.reverify.get("accounting"):
                title = f"N={r.nodes} {r.arm} re-verification"
                for line in accounting.lines(r.reverify["accounting"], title):
                    out.print(line, highlight=False, markup=False)
    for n in sorted({r.nodes for r in results}):
        op = next((r for r in results if r.nodes == n and r.arm == "operator"), None)
        fl = next((r for r in results if r.nodes == n and r.arm == "floor"), None)
        if op and fl:
            out.print(
                f"N={n}: operator/floor requests per node "
                f"{ratio(op.requests['per_node'], fl.requests['per_node'])}, wall time "
                f"{ratio(op.wall_s, fl.wall_s)}"
            )


def compare_with_floor(results: Sequence[ArmResult]) -> None:
    """The operator's join account gains the calls above the floor's, per node."""
    for op in results:
        fl = next((r for r in results if r.nodes == op.nodes and r.arm == "floor"), None)
        if op.arm != "operator" or not op.accounting or fl is None or not fl.requests:
            continue
        floor = {call: n / fl.nodes for call, n in fl.requests.get("by_call", {}).items()}
        op.accounting["above_floor"] = accounting.above_floor(op.accounting, floor)


def summary_line(label: str, results: Sequence[ArmResult]) -> str:
    """``<label>: nodes=… decided=… req_per_node=… floor_req_per_node=… wall_ratio=… rss_mb=…``
    for the largest N (the operator arm; the floor's numbers when it ran alone)."""
    n = max(r.nodes for r in results)
    op = next((r for r in results if r.nodes == n and r.arm == "operator"), None)
    fl = next((r for r in results if r.nodes == n and r.arm == "floor"), None)
    main = op or fl
    assert main is not None
    fields = {
        "nodes": n,
        "decided": main.decided,
        "correct": main.correct,
        "lost": main.lost,
        "duplicated": main.duplicated,
        "req_per_node": f"{op.requests['per_node']:.2f}" if op else "nan",
        "floor_req_per_node": f"{fl.requests['per_node']:.2f}" if fl else "nan",
        "req_ratio": f"{ratio(op.requests['per_node'], fl.requests['per_node']):.2f}"
        if op and fl
        else "nan",
        "wall_s": f"{main.wall_s:.2f}",
        "floor_wall_s": f"{fl.wall_s:.2f}" if fl else "nan",
        "wall_ratio": f"{ratio(op.wall_s, fl.wall_s):.2f}" if op and fl else "nan",
        "p95_s": f"{main.latency.get('p95_s', math.nan):.2f}",
        "rss_mb": f"{op.peak_rss_mb:.0f}" if op else "nan",
        "cpu_s": f"{op.cpu_s:.1f}" if op else "nan",
    }
    if op and op.dra:
        fields |= {"dra_nodes": op.dra["nodes"], "dra_req_per_dra_node": op.dra["per_dra_node"]}
    if op and op.fabric:
        fields |= {
            "fabric_rounds": op.fabric["rounds"],
            "fabric_pairs": op.fabric["pairs"],
            "slow_quarantined": f"{op.fabric['slow_quarantined']}/{op.fabric['slow_nodes']}",
            "healthy_quarantined": op.fabric["healthy_quarantined"],
            "fabric_floor_req_per_node": (
                f"{fl.requests['per_node'] + op.fabric['floor_extra_per_node']:.2f}"
                if fl
                else "nan"
            ),
        }
    if op and op.reverify:
        fields |= reverify_fleet.summary_fields(op.reverify)
    return f"{label}: " + " ".join(f"{k}={v}" for k, v in fields.items())


def git_revision() -> str:
    """HEAD, and which source folders had uncommitted changes when the run started."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "operator", "contracts", "bench", "testsupport"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split("\n")
    except OSError:
        return "unknown"
    folders = sorted({line[3:].split("/")[0] for line in dirty if line.strip()})
    return head + (f" (uncommitted changes in {', '.join(folders)})" if folders else "")


def machine_description() -> str:
    cores = os.cpu_count() or 0
    try:
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{mem_kb / 1024 / 1024:.0f} GB RAM"
    except (OSError, ValueError, IndexError):
        mem = "? RAM"
    return f"{cores} cores, {mem}, Python {sys.version.split()[0]}"


def show_problems(results: Sequence[ArmResult]) -> None:
    for r in results:
        for problem in r.problems:
            console.print(f"[yellow]{r.arm} N={r.nodes}: {problem}[/]")


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class PreparedReports:
    """The two reports the stand-in completes probe pods with, and where they came from."""

    healthy_profile: Path
    fault_profile: Path
    healthy: ProbeReport
    faulty: ProbeReport

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> PreparedReports:
        """The probe's reports on two profiles, or hand-made ones (``--synthetic-reports``)."""
        if args.synthetic_reports:
            return cls(
                Path("synthetic-pass"),
                Path("synthetic-fail"),
                reports.synthetic(True),
                reports.synthetic(False),
            )
        healthy_profile, fault_profile = (
            (args.healthy_profile, args.fault_profile)
            if args.healthy_profile and args.fault_profile
            else reports.default_profiles()
        )
        return cls(
            healthy_profile,
            fault_profile,
            reports.probe_report(healthy_profile, GPUS_PER_NODE),
            reports.probe_report(fault_profile, GPUS_PER_NODE),
        )


def run_arms(
    setup: Setup, sizes: Sequence[int], arms: Sequence[str]
) -> tuple[list[ArmResult], int]:
    """Every arm for every N; an arm that fails counts all its nodes lost (exit code 1)."""
    results: list[ArmResult] = []
    code = 0
    for n in sizes:
        for arm in arms:
            try:
                results.append(run_arm(setup, arm, n))
            except (ApiException, RuntimeError, TimeoutError) as error:
                log(f"[red]{arm} N={n} failed: {error}[/]")
                failed = ArmResult(arm=arm, nodes=n, lost=n)
                failed.problems.append(str(error)[:500])
                results.append(failed)
                code = 1
    return results, code


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fleet_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nodes", type=int, action="append", help="N (repeatable); default 100")
    parser.add_argument("--arms", default="floor,operator", help="comma-separated: floor,operator")
    parser.add_argument("--label", default="bench", help="prefix of the summary line")
    parser.add_argument(
        "--fail-every", type=int, default=10, help="every k-th node fails (10%%; 0: none)"
    )
    parser.add_argument(
        "--fabric-slow-every",
        type=int,
        default=0,
        help="run the fabric test; every k-th node has a slow fabric (20: 5%%; 0: no fabric)",
    )
    parser.add_argument(
        "--dra-every",
        type=int,
        default=0,
        help="every k-th node publishes its GPUs through DRA (2: half; 0: none; the operator "
        "arm only: the floor places no claim); runs kube-scheduler",
    )
    parser.add_argument(
        "--full-policy",
        action="store_true",
        help="in service (watch pods) and re-verification on in the policy, with their "
        "defaults; the join's accounting adds their requests",
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    parser.add_argument(
        "--plot", type=Path, help="PNG path (default OUT/<label>/time-to-verdict.png)"
    )
    parser.add_argument("--healthy-profile", type=Path)
    parser.add_argument("--fault-profile", type=Path)
    parser.add_argument(
        "--synthetic-reports",
        action="store_true",
        help="hand-made reports (status only, no observed values) instead of the probe's: "
        "enough for the floor, not for the operator, which re-judges observed values",
    )
    parser.add_argument("--probe-delay", type=float, default=0.0, help="seconds a probe pod runs")
    parser.add_argument(
        "--probe-time-scale",
        type=float,
        help="probe pods run their report's wallS x this (1: as long as the probe it stands "
        "for; docs/probe.md#time-budget) instead of --probe-delay",
    )
    parser.add_argument(
        "--settle", type=float, default=3.0, help="seconds watched after the last verdict"
    )
    parser.add_argument("--timeout-base", type=float, default=120.0)
    parser.add_argument("--timeout-per-node", type=float, default=0.5)
    parser.add_argument("--standin-concurrency", type=int, default=32)
    parser.add_argument(
        "--operator-cmd",
        default="{python} -m gpuaccept.cli operator --kubeconfig {kubeconfig} "
        # Leader election and the installation lock on, as the chart runs it (their
        # requests are in the accounting), a Lease of each per arm and N.
        "--namespace {namespace} --lease-name {lease} --installation-lock {lease} "
        "--metrics-port 0 --health-port 0 "
        # The bench's reports come from simulated hardware profiles.
        "--accept-simulated-reports",
        help="the operator's command line ({python} {kubeconfig} {namespace} {lease} are "
        "filled in)",
    )
    parser.add_argument(
        "--floor-cmd",
        default="{python} -m bench.floor --kubeconfig {kubeconfig} --namespace {namespace}",
    )
    parser.add_argument("--profile-operator", action="store_true", help="run it under pyinstrument")
    parser.add_argument(
        "--py-spy",
        metavar="BINARY",
        help="attach this py-spy to the operator while it decides the fleet (raw stacks in OUT)",
    )
    parser.add_argument(
        "--py-spy-all-threads",
        action="store_true",
        help="sample every thread, waiting ones too (default: only the GIL holder = CPU)",
    )
    parser.add_argument("--keep-cluster", action="store_true", help="leave the control plane up")
    reverify_fleet.add_arguments(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = args.nodes or [100]
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    out: Path = (args.out / args.label).resolve()
    out.mkdir(parents=True, exist_ok=True)
    machine = machine_description()
    started = datetime.now(UTC)
    revision = git_revision()  # of the code this run loaded (HEAD may move while it runs)
    log(f"fleet benchmark: N={sizes} arms={arms} on {machine}; output in {out}")

    reverify = reverify_fleet.settings_from(args)  # a bad value fails before the cluster starts
    if args.dra_every < 0 or (args.dra_every and arms != ["operator"]):
        log("[red]--dra-every: a count >= 0, with --arms operator (the floor places no claim)[/]")
        return 2
    prepared = PreparedReports.from_args(args)
    healthy_profile, fault_profile = prepared.healthy_profile, prepared.fault_profile
    log(
        f"reports: {healthy_profile.name} and {fault_profile.name} (every {args.fail_every}th node)"
    )

    # One run per output dir at a time: its control plane lives in OUT/<label>/cluster and
    # is stopped and restarted fresh, so a second run there would pull it from under the first.
    lock = (out / ".lock").open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log(f"[red]another benchmark is running in {out}; use another --label or --out[/]")
        return 2
    cp, audit_log = start_cluster(out / "cluster", out / "audit")
    log(f"control plane {cp.server} (pid {cp.pid}), audit log {audit_log}")
    results: list[ArmResult] = []
    code = 0
    try:
        with cp.api_client() as admin, contextlib.ExitStack() as dra:
            apply_crds(admin, REPO / "crds")
            ensure_namespace(admin)
            ensure_policy(
                admin,
                {GPU_PRESENT_LABEL: "true", BENCH_LABEL: "true"},
                fabric=FABRIC_SECTION if args.fabric_slow_every else None,
                sections=FULL_POLICY_SECTIONS if args.full_policy else None,
            )
            if args.dra_every:
                start_dra(cp, admin, out, dra)
            setup = Setup(
                cp=cp,
                admin=admin,
                audit=AuditTail(audit_log),
                out=out,
                healthy=prepared.healthy,
                faulty=prepared.faulty,
                fail_every=args.fail_every,
                timeout_s=lambda n: args.timeout_base + args.timeout_per_node * n,
                operator_cmd=shlex.split(args.operator_cmd),
                floor_cmd=shlex.split(args.floor_cmd),
                probe_delay_s=args.probe_delay,
                settle_s=args.settle,
                standin_concurrency=args.standin_concurrency,
                profile_operator=args.profile_operator,
                py_spy=args.py_spy,
                py_spy_gil=not args.py_spy_all_threads,
                probe_time_scale=args.probe_time_scale,
                fabric_slow_every=args.fabric_slow_every,
                dra_every=args.dra_every,
                reverify=reverify,
                full_policy=args.full_policy,
            )
            results, code = run_arms(setup, sizes, arms)
    finally:
        if not args.keep_cluster:
            cp.stop(force=True)
    if not results:
        return 1
    compare_with_floor(results)
    document = {
        "label": args.label,
        "git": revision,
        "started": started.isoformat(),
        "finished": datetime.now(UTC).isoformat(),
        "machine": machine,
        "command": shlex.join([sys.executable, "-m", "bench.fleet_bench", *(argv or sys.argv[1:])]),
        "kubernetes": cp.kubernetes_version,
        "profiles": [str(healthy_profile), str(fault_profile)],
        "fail_every": args.fail_every,
        "fabric_slow_every": args.fabric_slow_every,
        "dra_every": args.dra_every,
        "full_policy": args.full_policy,
        "results": [asdict(r) for r in results],
    }
    (out / "results.json").write_text(json.dumps(document, indent=2) + "\n")
    plot = args.plot or out / "time-to-verdict.png"
    plot_time_to_verdict(
        [asdict(r) for r in results if r.decided],
        plot,
        f"{args.label}: {machine}, {started:%Y-%m-%d}",
    )
    show_table(results, machine)
    show_problems(results)
    print(f"results: {out / 'results.json'}  plot: {plot}", flush=True)
    print(summary_line(args.label, results), flush=True)
    return 1 if failed(results) else code


def start_dra(
    cp: ControlPlane, admin: client.ApiClient, out: Path, stack: contextlib.ExitStack
) -> None:
    """What a DRA node's probe needs beside the operator: NVIDIA's chart's DeviceClass,
    kube-scheduler (it allocates the claims and binds the pods) and the resourceclaim
    controller's part (testsupport/standin_dra.py), for the rest of the run."""
    try:
        client.CustomObjectsApi(admin).create_cluster_custom_object(
            "resource.k8s.io", "v1", "deviceclasses", device_class_manifest()
        )
    except ApiException as error:
        if error.status != 409:
            raise
    stack.enter_context(kube_scheduler(cp, out))
    stack.enter_context(ClaimController(admin, NAMESPACE))
    log(f"DRA: kube-scheduler and the claim controller running (log {out}/kube-scheduler.log)")


def failed(results: Sequence[ArmResult]) -> bool:
    """A node not decided as prepared, a healthy node quarantined by the fabric test, a
    re-verification over its limits, or a loop's accounting missing or incomplete."""
    return (
        any(r.decided != r.nodes or r.lost or r.duplicated for r in results)
        or any(r.fabric.get("healthy_quarantined") for r in results)
        or any(r.reverify and r.reverify["problems"] for r in results)
        or any(p.startswith("accounting: ") for r in results for p in r.problems)
    )


if __name__ == "__main__":
    raise SystemExit(main())
