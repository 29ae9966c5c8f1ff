"""The fleet benchmark's re-verification phase (issue 24): the operator
re-verifies an accepted fleet on the real API server, within its limit and rate.

``python -m bench.fleet_bench --arms operator --fail-every 0 --reverify-seconds S``:
once the operator arm has accepted every node, this phase

1. starts its own watch of the fleet's Nodes and NodeAcceptances (as the admin);
2. puts a GPU workload pod (``nvidia.com/gpu``, bound by ``spec.nodeName``, run
   forever by the kubelet stand-in) on every ``busy_every``-th node in the order the
   schedule takes them (verified longest ago first: the first of them is listed in
   the first pass): busy nodes, which must never be re-probed;
3. patches the policy: ``reverify`` on (short idle window, period and sampling),
   ``quarantineRate`` and ``maxQuarantined``, and ``reprobe.onPolicyChange:
   Ignore`` (else the patch would rejudge every node: a one-off status write per
   node that is not the cost of re-verifying); the stand-in now runs every
   re-verification's probe pod for ``round_s`` seconds (the healthy report), so
   rounds overlap and the limit and the rate both bind;
4. for ``seconds`` records, at every change of a Node, how many of the fleet carry
   the pending taint at once, and with the quarantined ones how many are out of
   service; every take-out (``status.takenOutTime``, the operator's own record of
   the moment it took an in-service node out; the rate's window counts these) and
   every pending taint added (as the harness's watch saw it); every round started
   (``status.reverify.round.started``) and ended (``status.reverify.last``);
5. counts the operator's requests from the audit log, those received from the
   patch to the end of the records, by call, per completed re-verification and per
   node.

The run checks itself: no more nodes out of service at once than
``maxQuarantined`` allows, no more take-outs within any window of
``quarantineRate.windowSeconds`` than its ``maxPerWindow``, no pending taint
added without a take-out recorded, no busy node re-probed, no round failed (every
node is healthy: a failure is a false quarantine), and at least one
re-verification completed. Any of them failing makes the benchmark exit 1.
"""

from __future__ import annotations

import argparse
import threading
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from bench import accounting, procstat
from bench.audit import AuditTail, RequestCounts
from bench.cluster import POLICY_NAME, ensure_namespace
from bench.watching import keep_watching, list_then_watch, list_then_watch_acceptances
from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.api import (
    ACCEPTANCE_PLURAL,
    GROUP,
    PENDING_TAINT_KEY,
    POLICY_PLURAL,
    QUARANTINE_TAINT_KEY,
    VERSION,
)
from gpuaccept.operator.core.capacity import rate_limit, standing_limit
from gpuaccept.testsupport.kubelet_standin import (
    Behaviour,
    BehaviourHook,
    Complete,
    Hang,
    KubeletStandIn,
    PodInfo,
)

WORKLOADS = "bench-workloads"  # the busy nodes' GPU pods
CEILING = "100%"  # the operator's --max-unavailable-ceiling default
Log = Callable[[str], None]


@dataclass(frozen=True)
class ReverifySettings:
    seconds: float
    idle_seconds: int = 10
    period_seconds: int = 60
    sample_seconds: int = 30
    rate: int | str = "1%"
    window_seconds: int = 60
    max_quarantined: int | str = "2%"
    round_s: float = 120.0  # a re-verification's probe pod runs this long
    busy_every: int = 50  # every k-th node holds a GPU pod (0: none)

    def policy_sections(self) -> dict[str, Any]:
        """The policy's spec fields this phase sets (wire names)."""
        return {
            "maxQuarantined": self.max_quarantined,
            "quarantineRate": {"maxPerWindow": self.rate, "windowSeconds": self.window_seconds},
            "reverify": {
                "enabled": True,
                "idleSeconds": self.idle_seconds,
                "periodSeconds": self.period_seconds,
                "sampleSeconds": self.sample_seconds,
            },
            "reprobe": {"onPolicyChange": "Ignore"},
        }

    def spec(self) -> NodeAcceptancePolicySpec:
        """The sections validated as the API's schema would (the limits read from it)."""
        return NodeAcceptancePolicySpec.model_validate(self.policy_sections())

    def busy(self, index: int) -> bool:
        """Whether the ``index``-th node in the schedule's order is busy."""
        return self.busy_every > 0 and index % self.busy_every == 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "re-verification phase (operator arm; bench/reverify_fleet.py)"
    )
    group.add_argument(
        "--reverify-seconds",
        type=float,
        default=0.0,
        help="after the operator accepted the fleet, re-verify it for this long (0: no phase)",
    )
    group.add_argument("--reverify-idle-seconds", type=int, default=10)
    group.add_argument("--reverify-period-seconds", type=int, default=60)
    group.add_argument("--reverify-sample-seconds", type=int, default=30)
    group.add_argument("--reverify-rate", default="1%", help="quarantineRate.maxPerWindow")
    group.add_argument("--reverify-window-seconds", type=int, default=60)
    group.add_argument("--reverify-max-quarantined", default="2%", help="maxQuarantined")
    group.add_argument(
        "--reverify-round-seconds",
        type=float,
        default=120.0,
        help="how long a re-verification's probe pod runs",
    )
    group.add_argument(
        "--reverify-busy-every", type=int, default=50, help="every k-th node runs a GPU pod"
    )


def _count_or_percent(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def settings_from(args: argparse.Namespace) -> ReverifySettings | None:
    if args.reverify_seconds <= 0:
        return None
    settings = ReverifySettings(
        seconds=args.reverify_seconds,
        idle_seconds=args.reverify_idle_seconds,
        period_seconds=args.reverify_period_seconds,
        sample_seconds=args.reverify_sample_seconds,
        rate=_count_or_percent(args.reverify_rate),
        window_seconds=args.reverify_window_seconds,
        max_quarantined=_count_or_percent(args.reverify_max_quarantined),
        round_s=args.reverify_round_seconds,
        busy_every=args.reverify_busy_every,
    )
    settings.spec()  # a bad value fails here, before any cluster starts
    return settings


# --------------------------------------------------------------------------
# pure: what the records say
# --------------------------------------------------------------------------
def max_in_window(times: Sequence[float], window: float) -> int:
    """The most of ``times`` within any closed interval ``window`` long (the rate's
    sliding window: a take-out at ``now - window`` still counts at ``now``)."""
    ordered = sorted(times)
    return max((i + 1 - bisect_left(ordered, t - window) for i, t in enumerate(ordered)), default=0)


def _stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass
class RoundRecords:
    """What the NodeAcceptances recorded since the phase started, per node."""

    taken_out: dict[str, set[str]] = field(default_factory=dict)  # node → takenOutTime values
    started: dict[str, set[str]] = field(default_factory=dict)  # node → round.started values
    ended: dict[tuple[str, str], str] = field(default_factory=dict)  # (node, started) → outcome
    found_busy: set[str] = field(default_factory=set)  # a list found a GPU pod on it

    def add(self, name: str, status: dict[str, Any], since: datetime) -> None:
        """Record one NodeAcceptance status as watched."""
        taken = status.get("takenOutTime")
        if taken and _stamp(taken) >= since:
            self.taken_out.setdefault(name, set()).add(taken)
        rv = status.get("reverify") or {}
        if rv.get("busyPods"):
            self.found_busy.add(name)
        current, last = rv.get("round") or {}, rv.get("last") or {}
        for round_ in (current, last):
            if round_.get("started") and _stamp(round_["started"]) >= since:
                self.started.setdefault(name, set()).add(round_["started"])
        if last.get("finished") and last.get("started") and _stamp(last["started"]) >= since:
            self.ended[(name, last["started"])] = str(last.get("outcome") or "")

    def take_out_times(self) -> list[float]:
        return [_stamp(t).timestamp() for values in self.taken_out.values() for t in values]


# --------------------------------------------------------------------------
# the harness's watch during the phase
# --------------------------------------------------------------------------
class PhaseObserver:
    """Watches the fleet's Nodes (taints) and NodeAcceptances (take-outs, rounds)."""

    def __init__(self, api: client.ApiClient, selector: str, since: datetime, log: Log) -> None:
        self.core = client.CoreV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)
        self.selector, self.since, self.log = selector, since, log
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.pending: set[str] = set()
        self.quarantined: set[str] = set()
        self.max_pending = 0
        self.max_out = 0  # pending + quarantined: what maxQuarantined bounds
        self.taints_added: Counter[str] = Counter()  # node → pending taints added
        self.taint_times: list[float] = []  # when each was seen (epoch seconds, this clock)
        self.records = RoundRecords()
        self.synced = {"nodes": threading.Event(), "nas": threading.Event()}

    def start(self, timeout: float = 120.0) -> None:
        for body in (self._watch_nodes, self._watch_nas):
            threading.Thread(
                target=keep_watching, args=(body, self.stop, self.log), daemon=True
            ).start()
        for kind, ready in self.synced.items():
            if not ready.wait(timeout):
                raise TimeoutError(f"re-verification phase: no list of {kind} in {timeout:.0f}s")

    def _watch_nodes(self) -> None:
        list_then_watch(
            self.core.list_node,
            on_event=self._on_node,
            stop=self.stop,
            on_listed=self.synced["nodes"].set,
            label_selector=self.selector,
        )

    def _watch_nas(self) -> None:
        list_then_watch_acceptances(self.custom, self._on_na, self.stop, self.synced["nas"].set)

    def finish(self) -> None:
        """Stop: the Nodes as seen so far, then one list of the NodeAcceptances. The
        operator writes a take-out into the status before it taints the Node, so the
        list has every take-out behind a taint seen (their watch may lag the Nodes')."""
        with self.lock:
            self.stop.set()
        listed = self.custom.list_cluster_custom_object(GROUP, VERSION, ACCEPTANCE_PLURAL)
        for item in listed["items"]:
            self._on_na("ADDED", item)

    def _on_node(self, kind: str, node: Any) -> None:
        name = node.metadata.name
        keys = {t.key for t in node.spec.taints or []} if kind != "DELETED" else set()
        with self.lock:
            if self.stop.is_set():
                return
            pending = PENDING_TAINT_KEY in keys
            if pending and name not in self.pending:
                self.taints_added[name] += 1
                self.taint_times.append(time.time())
            (self.pending.add if pending else self.pending.discard)(name)
            quarantined = QUARANTINE_TAINT_KEY in keys
            (self.quarantined.add if quarantined else self.quarantined.discard)(name)
            self.max_pending = max(self.max_pending, len(self.pending))
            self.max_out = max(self.max_out, len(self.pending | self.quarantined))

    def _on_na(self, kind: str, obj: dict[str, Any]) -> None:
        if kind in ("ADDED", "MODIFIED"):
            with self.lock:
                self.records.add(obj["metadata"]["name"], obj.get("status") or {}, self.since)

    def progress(self) -> str:
        with self.lock:
            return (
                f"pending now {len(self.pending)} (max {self.max_pending}), rounds started "
                f"{sum(map(len, self.records.started.values()))}, ended {len(self.records.ended)}"
            )


# --------------------------------------------------------------------------
# the phase
# --------------------------------------------------------------------------
@dataclass
class ReverifyResult:
    nodes: int
    seconds: float
    settings: dict[str, Any]
    standing_limit: int  # maxQuarantined of the fleet: out of service at once
    rate_limit: int  # quarantineRate.maxPerWindow of the fleet
    busy_nodes: int = 0
    quarantined_at_start: int = 0
    max_pending_at_once: int = 0
    max_out_at_once: int = 0  # pending + quarantined
    taken_out: int = 0  # take-outs the operator recorded (takenOutTime)
    max_taken_out_in_a_window: int = 0  # over the recorded take-outs
    taints_added: int = 0  # pending taints added, as watched
    max_taints_added_in_a_window: int = 0  # the same, on this harness's clock
    rounds_started: int = 0
    completed: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    busy_found_busy: int = 0  # busy nodes a list of the operator found busy
    busy_reprobed: int = 0
    requests: dict[str, Any] = field(default_factory=dict)
    per_reverification: float = 0.0  # the operator's requests / completed re-verifications
    per_round_started: float = 0.0  # the same / rounds started (those under way cost some)
    by_call_per_reverification: dict[str, float] = field(default_factory=dict)
    # the same by loop and phase, per completed re-verification (bench/accounting.py)
    accounting: dict[str, Any] = field(default_factory=dict)
    operator_cpu_s: float = 0.0
    within_limits: bool = False
    problems: list[str] = field(default_factory=list)


def probe_behaviour(previous: Behaviour | BehaviourHook, round_s: float) -> BehaviourHook:
    """The stand-in's behaviour from now on: a workload pod runs until deleted; a
    probe pod completes as before, ``round_s`` seconds after it starts."""

    def behaviour(pod: PodInfo) -> Behaviour:
        if pod.namespace == WORKLOADS:
            return Hang()
        chosen = previous(pod) if callable(previous) else previous
        return replace(chosen, delay_s=round_s) if isinstance(chosen, Complete) else chosen

    return behaviour


def _workload(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"gpu-job-{node}", "namespace": WORKLOADS},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "job",
                    "image": "bench/gpu-job",
                    "command": ["sleep", "infinity"],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ],
        },
    }


@dataclass(frozen=True)
class Fleet:
    """The accepted fleet and the operator arm, as the phase sees them."""

    admin: client.ApiClient
    audit: AuditTail
    operator_user: str  # as the audit log names it
    operator_pid: int
    standin: KubeletStandIn
    nodes: Sequence[str]
    selector: str  # the fleet's Nodes


def run_phase(fleet: Fleet, settings: ReverifySettings, log: Log) -> ReverifyResult:
    """Steps 1 to 5 of the module docstring on an accepted fleet."""
    spec, nodes, admin = settings.spec(), fleet.nodes, fleet.admin
    n = len(nodes)
    result = ReverifyResult(
        nodes=n,
        seconds=settings.seconds,
        settings=asdict(settings),
        standing_limit=standing_limit(spec, n, CEILING),
        rate_limit=rate_limit(spec, n, CEILING),
    )
    core = client.CoreV1Api(admin)
    busy = [name for i, name in enumerate(schedule_order(admin, nodes)) if settings.busy(i)]
    ensure_namespace(admin, WORKLOADS)
    standin = fleet.standin
    standin.default_behaviour = probe_behaviour(standin.default_behaviour, settings.round_s)
    since = datetime.now(UTC)
    observer = PhaseObserver(admin, fleet.selector, since, log)
    observer.start()
    result.quarantined_at_start = len(observer.quarantined)
    for name in busy:
        body: Any = _workload(name)
        core.create_namespaced_pod(WORKLOADS, body)
    result.busy_nodes = len(busy)
    cpu_before = procstat.sample(fleet.operator_pid)
    log(
        f"re-verification: {n} nodes ({len(busy)} busy), limit {result.standing_limit} out at "
        f"once, rate {result.rate_limit} per {settings.window_seconds}s; patching the policy"
    )
    custom: Any = client.CustomObjectsApi(admin)
    custom.patch_cluster_custom_object(
        GROUP, VERSION, POLICY_PLURAL, POLICY_NAME, {"spec": settings.policy_sections()}
    )
    end = time.monotonic() + settings.seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(30.0, left))
        log(f"re-verification: {observer.progress()}")
    cpu_after = procstat.sample(fleet.operator_pid)
    until = datetime.now(UTC)  # the records' end: the requests counted end there too
    observer.finish()
    with observer.lock:
        _tally(result, observer, set(busy), settings.window_seconds)
    if cpu_before is not None and cpu_after is not None:
        result.operator_cpu_s = round(cpu_after.cpu_s - cpu_before.cpu_s, 2)
    _count_requests(result, fleet.audit, fleet.operator_user, (since, until))
    _check(result)
    try:
        core.delete_collection_namespaced_pod(WORKLOADS, grace_period_seconds=0)
    except ApiException as error:
        result.problems.append(f"workload pods not deleted: {error.status}")
    return result


def schedule_order(admin: client.ApiClient, nodes: Sequence[str]) -> list[str]:
    """``nodes`` as the re-verification schedule ranks them (no suspects here): last
    probed first, then by name (``reverify_schedule.select_for_sampling``)."""
    custom: Any = client.CustomObjectsApi(admin)
    items = custom.list_cluster_custom_object(GROUP, VERSION, ACCEPTANCE_PLURAL)["items"]
    never = datetime.min.replace(tzinfo=UTC)
    probed = {
        i["metadata"]["name"]: _stamp(t)
        if (t := (i.get("status") or {}).get("lastProbeTime"))
        else never
        for i in items
    }
    return sorted(nodes, key=lambda name: (probed.get(name, never), name))


def _tally(result: ReverifyResult, observer: PhaseObserver, busy: set[str], window: int) -> None:
    records = observer.records
    result.max_pending_at_once = observer.max_pending
    result.max_out_at_once = observer.max_out
    times = records.take_out_times()
    result.taken_out = len(times)
    result.max_taken_out_in_a_window = max_in_window(times, window)
    result.taints_added = sum(observer.taints_added.values())
    result.max_taints_added_in_a_window = max_in_window(observer.taint_times, window)
    result.rounds_started = sum(map(len, records.started.values()))
    result.completed = len(records.ended)
    result.outcomes = dict(sorted(Counter(records.ended.values()).items()))
    result.busy_reprobed = len(busy & set(records.started))
    result.busy_found_busy = len(busy & records.found_busy)
    unrecorded = [
        name
        for name, added in observer.taints_added.items()
        if added > len(records.taken_out.get(name, ()))
    ]
    if unrecorded:
        result.problems.append(
            f"{len(unrecorded)} nodes got the pending taint more often than a take-out was "
            f"recorded, e.g. {unrecorded[:3]}"
        )


def _count_requests(
    result: ReverifyResult, audit: AuditTail, user: str, span: tuple[datetime, datetime]
) -> None:
    """The operator's requests received within ``span`` (the phase: from the patch to
    the end of the records; the audit log is read later, and keeps growing)."""
    audit.poll()
    counts = RequestCounts()
    for request in audit.of_user(user):
        if request.received and span[0] <= _stamp(request.received) < span[1]:
            counts.add(request)
    result.requests = counts.to_json(result.nodes)
    if result.rounds_started:
        result.per_round_started = round(counts.total / result.rounds_started, 2)
    if result.completed:
        result.per_reverification = round(counts.total / result.completed, 2)
        result.by_call_per_reverification = {
            call: round(count / result.completed, 2)
            for call, count in sorted(counts.by_call.items())
        }
    result.accounting = accounting.accounting(counts, result.completed, "re-verification")
    result.problems += [
        f"accounting: {p}" for p in accounting.problems(result.accounting, required=("reverify",))
    ]


def _check(result: ReverifyResult) -> None:
    """The phase's own verdict (``within_limits`` and ``problems``)."""
    if result.max_out_at_once > result.standing_limit:
        result.problems.append(
            f"{result.max_out_at_once} nodes out of service at once, over the limit "
            f"{result.standing_limit}"
        )
    if result.max_taken_out_in_a_window > result.rate_limit:
        result.problems.append(
            f"{result.max_taken_out_in_a_window} nodes taken out within one window, over the "
            f"rate {result.rate_limit}"
        )
    if result.busy_reprobed:
        result.problems.append(f"{result.busy_reprobed} busy nodes were re-probed")
    failed = sum(v for k, v in result.outcomes.items() if k != "Passed")
    if failed:
        result.problems.append(f"{failed} re-verifications of healthy nodes did not pass")
    if not result.completed:
        result.problems.append("no re-verification completed")
    result.within_limits = (
        result.max_out_at_once <= result.standing_limit
        and result.max_taken_out_in_a_window <= result.rate_limit
    )


# --------------------------------------------------------------------------
# output (from the result as results.json keeps it)
# --------------------------------------------------------------------------
def describe(r: dict[str, Any]) -> str:
    calls = ", ".join(f"{call} {per:g}" for call, per in r["by_call_per_reverification"].items())
    return (
        f"{r['seconds']:.0f}s, {r['busy_nodes']} busy; out of service at once max "
        f"{r['max_out_at_once']} (pending taint {r['max_pending_at_once']}) of limit "
        f"{r['standing_limit']}; taken out within a window max "
        f"{r['max_taken_out_in_a_window']} of rate {r['rate_limit']} ({r['taken_out']} in all, "
        f"{r['taints_added']} pending taints seen added, max {r['max_taints_added_in_a_window']} "
        f"in a window on this clock); rounds started {r['rounds_started']}, ended "
        f"{r['completed']} {r['outcomes']}; busy nodes found busy {r['busy_found_busy']}, "
        f"re-probed {r['busy_reprobed']}; operator requests {r['requests'].get('total', 0)} "
        f"({r['requests'].get('per_node', 0):g}/node, {r['per_round_started']:g} per round "
        f"started, {r['per_reverification']:g} per completed re-verification: {calls}); "
        f"operator CPU {r['operator_cpu_s']:g}s"
    )


def summary_fields(r: dict[str, Any]) -> dict[str, object]:
    return {
        "reverified": r["completed"],
        "max_out": r["max_out_at_once"],
        "max_pending": r["max_pending_at_once"],
        "limit": r["standing_limit"],
        "max_taken_out_in_window": r["max_taken_out_in_a_window"],
        "rate": r["rate_limit"],
        "req_per_reverification": f"{r['per_reverification']:.2f}",
        "binds": what_binds(r),
        "reverify_ok": int(not r["problems"]),
    }


def what_binds(r: dict[str, Any]) -> str:
    """Which of the policy's limits the phase reached: ``limit`` (as many out at once as
    ``maxQuarantined`` allows), ``rate`` (as many taken out within one window as
    ``quarantineRate`` allows), both (``limit+rate``), or ``none``: then something else
    (the loop, the operator's pace, the phase's length) held the rounds back."""
    reached = [
        name
        for name, most, allowed in (
            ("limit", r["max_out_at_once"], r["standing_limit"]),
            ("rate", r["max_taken_out_in_a_window"], r["rate_limit"]),
        )
        if most >= allowed
    ]
    return "+".join(reached) or "none"
