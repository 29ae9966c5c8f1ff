"""Health in service at N nodes (issue 23, item 8), on the real API server.

``python -m bench.inservice_fleet --nodes N --window-seconds W``: the fleet
benchmark's operator arm (bench/fleet_bench.py: the controlplane binary with the
audit log, the kubelet stand-in in scale mode, the operator as a subprocess under
its own identity) accepts N nodes; then this phase

1. patches the policy: ``inService`` on (``windowSeconds: W``, watch pods on,
   ``correlation.minNodes`` above the number of fatal nodes: see below) and
   ``reprobe.onPolicyChange: Ignore`` (else the patch would re-judge every node,
   a one-off status write per node that is no cost of watching);
2. the stand-in completes every watch pod (``gpuaccept probe watch``) ``W`` seconds
   after it starts with a quiet watch report (contracts/watch_report.py) bound to
   the pod's node name and bootID, exit 0, without a process;
3. waits ``--warmup-windows`` windows (the first pods start at once on the patch),
   then measures ``--steady-windows`` windows: the operator's requests from the
   audit log (received in the interval, by call), its CPU seconds and peak RSS
   (/proc, ``VmHWM``);
4. arms ``--fatal`` nodes: each one's next watch pod completes ``--fatal-after``
   seconds after it starts with an Xid 79 report (endReason ``fatalXid``, exit 1);
   the harness watches the Nodes and records, per fatal node, the time from the
   pod's completion as the stand-in planned it (the fatal event) to the quarantine
   taint on the Node; and checks that no other node was tainted.

**The floor** (the fewest requests any in-service watch can make, per node and
window): the pod must be created (1), what it saw must reach durable state that
survives the controller (1 status write), and the ended pod must be removed (1
delete: a bare pod has no TTL, so ended pods would pile up). Watch streams
(the controller's own list+watch of Nodes, pods and NodeAcceptances) are shared
by everything and cost no request per window. So 3 x N / W requests per second.

**Correlation**: the fatal events of the K nodes fall where each node's next
window happens to start (so they spread over one window), and the policy's
``correlation.minNodes`` is set to K + 1, so the K nodes can never be held as a
common cause; the correlation index still runs on every verdict.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from bench import accounting, fleet_bench, procstat
from bench.audit import AuditTail, RequestCounts
from bench.cluster import (
    POLICY_NAME,
    ensure_namespace,
    ensure_policy,
    start_cluster,
)
from bench.fleet_bench import BENCH_LABEL, ArmRun, PreparedReports, Setup, latency_summary, log
from gpuaccept.contracts.api import (
    GPU_PRESENT_LABEL,
    GROUP,
    POLICY_PLURAL,
    QUARANTINE_TAINT_KEY,
    VERSION,
)
from gpuaccept.contracts.inservice import InService
from gpuaccept.contracts.probe_invocation import WatchExit
from gpuaccept.contracts.watch_report import WatchEnd, WatchReport, WatchXid
from gpuaccept.testsupport.crd_install import apply_crds
from gpuaccept.testsupport.kubelet_standin import Behaviour, BehaviourHook, Complete, PodInfo
from gpuaccept.testsupport.standin_pod_runner import runs_watch

REPO = Path(__file__).resolve().parent.parent
FATAL_XID = 79  # GPU has fallen off the bus: fatal on first (checks/xid_classes.py)
FLOOR_PER_WINDOW = 3  # create + status write + delete (module docstring)
FLOOR_CALLS = {"create pods": 1.0, "patch nodeacceptances/status": 1.0, "delete pods": 1.0}


def watch_message(pod: PodInfo, window_s: float, ended_s: float, fatal: bool) -> str:
    """The report ``gpuaccept probe watch`` would write on a simulated 8-GPU node."""
    start = datetime.now(UTC)
    report = WatchReport(
        node_name=pod.node_name,
        boot_id=pod.boot_id,
        probe_version="scale-mode",
        simulated=True,
        started_at=start,
        ended_at=start + timedelta(seconds=ended_s),
        window_s=window_s,
        watched_s=ended_s,
        end_reason=WatchEnd.FATAL_XID if fatal else WatchEnd.WINDOW,
        ended_early=fatal,
        gpus_expected=fleet_bench.GPUS_PER_NODE,
        gpus_seen=fleet_bench.GPUS_PER_NODE,
        xids=[WatchXid(gpu=3, xid=FATAL_XID, first_s=ended_s, last_s=ended_s)] if fatal else [],
    )
    return report.to_compact_json()


def is_watch_pod(pod: PodInfo) -> bool:
    containers = (pod.pod.get("spec") or {}).get("containers") or []
    return any(runs_watch([*(c.get("command") or []), *(c.get("args") or [])]) for c in containers)


@dataclass
class FatalPlan:
    """Which nodes fail, and when each one's fatal event was (monotonic, planned)."""

    after_s: float
    armed: set[str] = field(default_factory=set)
    event_at: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, node: str) -> float | None:
        """The delay of ``node``'s fatal event if its next pod is the one (once)."""
        with self.lock:
            if node not in self.armed:
                return None
            self.armed.discard(node)
            self.event_at[node] = time.monotonic() + self.after_s
            return self.after_s


def watch_behaviour(
    previous: Behaviour | BehaviourHook, window_s: float, plan: FatalPlan
) -> BehaviourHook:
    """Watch pods: complete after the window, quiet, or early with Xid 79 on an armed
    node; every other pod as before."""

    def behaviour(pod: PodInfo) -> Behaviour:
        if not is_watch_pod(pod):
            return previous(pod) if callable(previous) else previous
        delay = plan.take(pod.node_name)
        if delay is None:
            message = watch_message(pod, window_s, window_s, fatal=False)
            return Complete(exit_code=WatchExit.QUIET, message=message, delay_s=window_s)
        message = watch_message(pod, window_s, delay, fatal=True)
        return Complete(exit_code=WatchExit.EARLY, message=message, delay_s=delay)

    return behaviour


class TaintWatch:
    """The harness's watch of the fleet's Nodes: when each got the quarantine taint."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.tainted_at: dict[str, float] = {}
        self.baseline: set[str] = set()  # tainted when the phase started
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                self._watch()
            except Exception as error:  # keep watching; the deadline catches a dead watch
                log(f"[yellow]taint watch: {error!r}; rewatching[/]")
                time.sleep(0.5)

    def _watch(self) -> None:
        selector = f"{BENCH_LABEL}=true"
        listed = self.core.list_node(label_selector=selector)
        for node in listed.items:
            self._on_node(node)
        self.ready.set()
        stream: Any = watch.Watch()  # type: ignore[no-untyped-call]
        for event in stream.stream(
            self.core.list_node,
            label_selector=selector,
            resource_version=listed.metadata.resource_version if listed.metadata else None,
            timeout_seconds=30,
        ):
            self._on_node(event["object"])
            if self.stop.is_set():
                stream.stop()

    def _on_node(self, node: Any) -> None:
        if any(t.key == QUARANTINE_TAINT_KEY for t in node.spec.taints or []):
            with self.lock:
                self.tainted_at.setdefault(node.metadata.name, time.monotonic())

    def tainted(self) -> dict[str, float]:
        with self.lock:
            return dict(self.tainted_at)


@dataclass
class InServiceResult:
    nodes: int
    watched_nodes: int  # accepted nodes (those watched)
    window_s: float
    steady_s: float = 0.0
    requests: dict[str, Any] = field(default_factory=dict)
    requests_per_s: float = 0.0
    floor_per_s: float = 0.0
    ratio_to_floor: float = 0.0
    per_node_window: dict[str, float] = field(default_factory=dict)  # by call
    # the same by loop and phase (bench/accounting.py), and the calls above the floor
    accounting: dict[str, Any] = field(default_factory=dict)
    cpu_s: float = 0.0
    cpu_ms_per_node_window: float = 0.0
    peak_rss_mb: float = 0.0  # VmHWM at the end: over the whole run, the join included
    # the operator's memory over the run (MB): VmRSS at the join's end, at the start and
    # end of the steady windows and at the end, and VmHWM at the join's end (its own peak)
    # and at the end; where the peak was made, and whether RSS grows in service
    memory: dict[str, float] = field(default_factory=dict)
    fatal_nodes: int = 0
    fatal_tainted: int = 0
    fatal_to_taint: dict[str, float] = field(default_factory=dict)
    other_tainted: int = 0  # a false quarantine
    problems: list[str] = field(default_factory=list)


def _received(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class PhaseSettings:
    window_s: int
    warmup_windows: float
    steady_windows: float
    fatal: int
    fatal_after_s: float
    fatal_timeout_s: float
    py_spy: str | None = None  # a py-spy binary: the measured windows sampled


def enable(admin: client.ApiClient, settings: PhaseSettings) -> dict[str, Any]:
    """Step 1: the policy's ``inService`` section on, re-judge on policy change off."""
    section = {
        "enabled": True,
        "windowSeconds": settings.window_s,
        "correlation": {"minNodes": max(3, settings.fatal + 1)},
    }
    InService.model_validate(section)
    custom: Any = client.CustomObjectsApi(admin)
    custom.patch_cluster_custom_object(
        GROUP,
        VERSION,
        POLICY_PLURAL,
        POLICY_NAME,
        {"spec": {"inService": section, "reprobe": {"onPolicyChange": "Ignore"}}},
    )
    return section


def measure_steady(
    run: ArmRun, seconds: float, result: InServiceResult, py_spy: str | None = None
) -> None:
    """Step 3: the operator's requests (received in the interval), CPU, per node-window;
    with ``py_spy`` (a py-spy binary), the operator sampled over the same interval."""
    audit = run.setup.audit
    audit.poll()
    spy = None
    if py_spy:
        out = run.setup.out / f"py-spy-inservice-n{run.n}.txt"
        spy = fleet_bench.start_py_spy(py_spy, run.proc.pid, out, gil=True)
    cpu0, t0 = procstat.sample(run.proc.pid), datetime.now(UTC)
    log(f"in service: measuring steady state for {seconds:.0f}s")
    time.sleep(seconds)
    cpu1, t1 = procstat.sample(run.proc.pid), datetime.now(UTC)
    if spy is not None:
        fleet_bench.stop_py_spy(spy)
    if cpu0 is not None and cpu1 is not None:
        result.memory["steady_start_rss_mb"] = round(cpu0.rss_mb, 1)
        result.memory["steady_end_rss_mb"] = round(cpu1.rss_mb, 1)
    time.sleep(2.0)  # let the audit log catch up with the interval's last requests
    audit.poll()
    counts = RequestCounts()
    for request in audit.of_user(run.me.user):
        if request.received and t0 <= _received(request.received) < t1:
            counts.add(request)
    elapsed = (t1 - t0).total_seconds()
    watched, window = result.watched_nodes, result.window_s
    node_windows = watched * elapsed / window
    result.steady_s = round(elapsed, 1)
    result.requests = counts.to_json(watched)
    result.requests_per_s = round(counts.total / elapsed, 2)
    result.floor_per_s = round(FLOOR_PER_WINDOW * watched / window, 2)
    result.ratio_to_floor = round(result.requests_per_s / result.floor_per_s, 3)
    result.per_node_window = {
        call: round(n / node_windows, 3) for call, n in sorted(counts.by_call.items())
    }
    result.accounting = accounting.accounting(counts, round(node_windows, 2), "node-window")
    result.accounting["above_floor"] = accounting.above_floor(result.accounting, FLOOR_CALLS)
    result.problems += [
        f"accounting: {p}" for p in accounting.problems(result.accounting, required=("in-service",))
    ]
    for line in accounting.lines(result.accounting, "in service"):
        log(line)
    if cpu0 is not None and cpu1 is not None:
        result.cpu_s = round(cpu1.cpu_s - cpu0.cpu_s, 2)
        result.cpu_ms_per_node_window = round(1000 * result.cpu_s / node_windows, 3)
    log(
        f"in service: {result.requests_per_s} req/s (floor {result.floor_per_s}, "
        f"x{result.ratio_to_floor}), CPU {result.cpu_s}s, {result.per_node_window}"
    )


def measure_fatal(
    fatal: list[str],
    plan: FatalPlan,
    taints: TaintWatch,
    timeout_s: float,
    result: InServiceResult,
) -> None:
    """Step 4: arm the fatal nodes; fatal event → quarantine taint; no other node tainted
    since the phase started (``taints.baseline``: those tainted then)."""
    with plan.lock:
        plan.armed.update(fatal)
    result.fatal_nodes = len(fatal)
    log(f"in service: armed {len(fatal)} fatal nodes; their next watch pods fail")
    deadline = time.monotonic() + result.window_s + timeout_s
    while time.monotonic() < deadline and not set(fatal) <= set(taints.tainted()):
        time.sleep(1.0)
    time.sleep(2.0)  # a late false quarantine would show up
    tainted = taints.tainted()
    with plan.lock:
        events = dict(plan.event_at)
    latencies = [tainted[n] - events[n] for n in fatal if n in tainted and n in events]
    result.fatal_tainted = len(latencies)
    result.fatal_to_taint = latency_summary(latencies)
    others = set(tainted) - set(fatal) - taints.baseline
    result.other_tainted = len(others)
    if result.fatal_tainted < len(fatal):
        result.problems.append(f"{len(fatal) - result.fatal_tainted} fatal nodes not tainted")
    if others:
        result.problems.append(f"false quarantine: {sorted(others)[:5]}")
    log(f"in service: fatal → taint {result.fatal_to_taint}; others tainted {len(others)}")


def run_phase(run: ArmRun, settings: PhaseSettings) -> InServiceResult:
    """Steps 1 to 4 of the module docstring on the fleet ``run`` accepted."""
    standin = run.standin
    assert standin is not None
    run.tracker.stop.set()  # its pod watch would count watch pods as duplicates
    taints = TaintWatch(run.setup.admin)
    taints.thread.start()
    taints.ready.wait(120)
    taints.baseline = set(taints.tainted())  # node 0, quarantined at acceptance
    accepted = sorted(set(run.created) - taints.baseline)
    window = float(settings.window_s)
    result = InServiceResult(nodes=run.n, watched_nodes=len(accepted), window_s=window)
    result.memory = {
        "join_end_rss_mb": run.result.join_end_rss_mb,
        "join_peak_rss_mb": run.result.join_peak_rss_mb,
    }
    plan = FatalPlan(after_s=settings.fatal_after_s)
    standin.default_behaviour = watch_behaviour(standin.default_behaviour, window, plan)
    section = enable(run.setup.admin, settings)
    log(f"in service: policy patched ({section}); warming up {settings.warmup_windows} windows")
    time.sleep(settings.warmup_windows * window)
    try:
        measure_steady(run, settings.steady_windows * window, result, settings.py_spy)
        fatal = accepted[:: max(1, len(accepted) // max(1, settings.fatal))][: settings.fatal]
        measure_fatal(fatal, plan, taints, settings.fatal_timeout_s, result)
    finally:
        taints.stop.set()
    final = procstat.sample(run.proc.pid)
    result.peak_rss_mb = round(final.peak_rss_mb, 1) if final else 0.0
    if final is not None:
        result.memory["end_rss_mb"] = round(final.rss_mb, 1)
        result.memory["peak_rss_mb"] = round(final.peak_rss_mb, 1)
    log(f"in service: operator memory (MB) {result.memory}")
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.inservice_fleet",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--window-seconds", type=int, default=60)
    parser.add_argument("--warmup-windows", type=float, default=1.5)
    parser.add_argument("--steady-windows", type=float, default=3.0)
    parser.add_argument("--fatal", type=int, default=20, help="nodes that get a fatal event")
    parser.add_argument("--fatal-after", type=float, default=2.0, help="seconds into the pod")
    parser.add_argument("--fatal-timeout", type=float, default=120.0)
    parser.add_argument("--label", default="bench-inservice")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--standin-concurrency", type=int, default=32)
    parser.add_argument(
        "--py-spy",
        metavar="BINARY",
        help="sample the operator with this py-spy over the measured windows (only the "
        "thread holding the GIL: its CPU; raw stacks in OUT/LABEL; python -m "
        "bench.profile_summary FILE)",
    )
    parser.add_argument(
        "--operator-cmd",
        default=fleet_bench.parse_args([]).operator_cmd,
        help="as the fleet benchmark's ({python} {kubeconfig} {namespace} are filled in)",
    )
    return parser.parse_args(argv)


def make_setup(
    args: argparse.Namespace, cp: Any, admin: client.ApiClient, audit: AuditTail, out: Path
) -> Setup:
    """The fleet benchmark's setup for its operator arm: every node passes but one
    (node 0 gets the failing report: ``fail_every`` is larger than any fleet)."""
    prepared = PreparedReports.from_args(
        argparse.Namespace(synthetic_reports=False, healthy_profile=None, fault_profile=None)
    )
    return Setup(
        cp=cp,
        admin=admin,
        audit=audit,
        out=out,
        healthy=prepared.healthy,
        faulty=prepared.faulty,
        fail_every=10**9,
        timeout_s=lambda n: 120.0 + 0.5 * n,
        operator_cmd=shlex.split(args.operator_cmd),
        floor_cmd=[],
        probe_delay_s=0.0,
        settle_s=1.0,
        standin_concurrency=args.standin_concurrency,
        profile_operator=False,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = (args.out / args.label).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC)
    settings = PhaseSettings(
        window_s=args.window_seconds,
        warmup_windows=args.warmup_windows,
        steady_windows=args.steady_windows,
        fatal=args.fatal,
        fatal_after_s=args.fatal_after,
        fatal_timeout_s=args.fatal_timeout,
        py_spy=args.py_spy,
    )
    cp, audit_log = start_cluster(out / "cluster", out / "audit")
    log(f"control plane {cp.server} (pid {cp.pid}), audit log {audit_log}")
    try:
        with cp.api_client() as admin:
            apply_crds(admin, REPO / "crds")
            ensure_namespace(admin)
            ensure_policy(admin, {GPU_PRESENT_LABEL: "true", BENCH_LABEL: "true"})
            setup = make_setup(args, cp, admin, AuditTail(audit_log), out)
            run = ArmRun(setup, "operator", args.nodes)
            run.launch()
            try:
                run.decide_fleet()
                accept = run.result
                phase = run_phase(run, settings)
            finally:
                run.stop()
    finally:
        cp.stop(force=True)
    document = {
        "label": args.label,
        "git": fleet_bench.git_revision(),
        "started": started.isoformat(),
        "finished": datetime.now(UTC).isoformat(),
        "machine": fleet_bench.machine_description(),
        "command": shlex.join(
            [sys.executable, "-m", "bench.inservice_fleet", *(argv or sys.argv[1:])]
        ),
        "acceptance": {"decided": accept.decided, "wall_s": accept.wall_s, "lost": accept.lost},
        "in_service": asdict(phase),
    }
    (out / "results.json").write_text(json.dumps(document, indent=2) + "\n")
    print(f"results: {out / 'results.json'}", flush=True)
    print(summary_line(args.label, phase), flush=True)
    return 1 if phase.problems or accept.lost else 0


def summary_line(label: str, r: InServiceResult) -> str:
    fields: dict[str, object] = {
        "nodes": r.nodes,
        "window_s": r.window_s,
        "req_per_s": r.requests_per_s,
        "floor_per_s": r.floor_per_s,
        "ratio": r.ratio_to_floor,
        "cpu_ms_per_node_window": r.cpu_ms_per_node_window,
        "rss_mb": r.peak_rss_mb,
        "join_peak_rss_mb": r.memory.get("join_peak_rss_mb"),
        "steady_rss_mb": "{}->{}".format(
            r.memory.get("steady_start_rss_mb"), r.memory.get("steady_end_rss_mb")
        ),
        "fatal_tainted": f"{r.fatal_tainted}/{r.fatal_nodes}",
        "p50_s": r.fatal_to_taint.get("p50_s"),
        "p95_s": r.fatal_to_taint.get("p95_s"),
        "false_quarantines": r.other_tainted,
    }
    return f"{label}: " + " ".join(f"{k}={v}" for k, v in fields.items())


if __name__ == "__main__":
    raise SystemExit(main())
