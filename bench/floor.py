"""The API request floor: the least API work that accepts or quarantines a node.

Per node, exactly the work issue 6 lists, one request each:

1. create the ``NodeAcceptance``                    POST   nodeacceptances
2. taint the node (pending)                         PATCH  nodes
3. create the probe pod                             POST   pods
4. read the result                                  GET    pods
5. delete the probe pod                             DELETE pods
6. untaint and label (or quarantine-taint and label) PATCH  nodes
7. write the status                                 PATCH  nodeacceptances/status

and, for a quarantined node only, what the design requires on top
(8. ``GPUAcceptance=False`` condition, PATCH nodes/status; 9. a Warning Event,
POST events). Nodes and pods are seen through one list+watch each, so that cost
is per run, not per node. No retries, no breaker, no re-probe: this is a
yardstick, not an operator. Run it with ``python -m bench.floor --kubeconfig K``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.contracts.api import (
    ACCEPTANCE_LABEL,
    ACCEPTANCE_PLURAL,
    GPU_PRESENT_LABEL,
    GPU_RESOURCE,
    GROUP,
    NODE_CONDITION_TYPE,
    PENDING_TAINT_KEY,
    QUARANTINE_TAINT_KEY,
    VERSION,
)
from gpuaccept.contracts.nodeacceptance import (
    CheckSummary,
    NodeAcceptanceStatus,
    Phase,
    Reason,
)
from gpuaccept.contracts.report import CheckStatus, ProbeReport, decode_termination_message

POD_LABEL = "bench.gpuaccept.io/floor-probe"
BAD_STATUSES = {CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.SKIP}


def now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def judge(report: ProbeReport, policy: ProbePolicy) -> list[Reason]:
    """Reasons to quarantine (empty: accept). A required check must pass or warn."""
    reasons = []
    for result in report.results:
        switch = policy.switch(result.check)
        if switch is not None and not switch.enabled:
            continue
        if result.status in BAD_STATUSES and (switch is None or switch.required):
            word = {CheckStatus.FAIL: "CheckFailed", CheckStatus.ERROR: "ProbeError"}.get(
                result.status, "CheckSkipped"
            )
            reasons.append(Reason(check=result.check, reason=word, message=result.message[:512]))
    return reasons


class Floor:
    """Accept or quarantine every pending GPU node with the minimum of API requests."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        image: str,
        selector: str,
        workers: int,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.image = image
        self.selector = selector
        self.policy = ProbePolicy()
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="floor")
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.nodes: dict[str, Any] = {}  # latest Node object seen by the watch
        self.started: set[str] = set()
        self.finished: set[str] = set()
        self.decided = 0
        self.failures = 0

    # -- watches -----------------------------------------------------------

    def watch_forever(
        self, lister: Callable[..., Any], handle: Callable[[str, Any], None], **kwargs: Any
    ) -> None:
        """list, then watch from the list's resourceVersion; relist only on 410 Gone."""
        while not self.stop.is_set():
            listed = lister(**kwargs)
            for item in listed.items:
                handle("ADDED", item)
            version = listed.metadata.resource_version
            while not self.stop.is_set():
                stream: Any = watch.Watch()  # type: ignore[no-untyped-call]
                try:
                    for event in stream.stream(
                        lister, resource_version=version, timeout_seconds=60, **kwargs
                    ):
                        obj = event["object"]
                        version = obj.metadata.resource_version
                        handle(event["type"], obj)
                        if self.stop.is_set():
                            break
                except ApiException as error:
                    if error.status == 410:
                        break  # relist
                    raise
                finally:
                    stream.stop()

    def on_node(self, kind: str, node: Any) -> None:
        if kind == "DELETED":
            return
        name = node.metadata.name
        with self.lock:
            self.nodes[name] = node
            if name in self.started:
                return
            labels = node.metadata.labels or {}
            taints = node.spec.taints or []
            if ACCEPTANCE_LABEL in labels or not any(t.key == PENDING_TAINT_KEY for t in taints):
                return
            self.started.add(name)
        self.pool.submit(self.guard, self.start, name)

    def on_pod(self, kind: str, pod: Any) -> None:
        if kind == "DELETED":
            return
        statuses = pod.status.container_statuses or []
        done = pod.status.phase in ("Succeeded", "Failed") or any(
            s.state is not None and s.state.terminated is not None for s in statuses
        )
        if not done:
            return
        node = pod.spec.node_name
        with self.lock:
            if node in self.finished:
                return
            self.finished.add(node)
        self.pool.submit(self.guard, self.finish, node, pod.metadata.name)

    def guard(self, step: Callable[..., None], *args: str) -> None:
        try:
            step(*args)
        except Exception as error:  # a yardstick: count it, say it, go on
            with self.lock:
                self.failures += 1
            text = (
                f"{error.status} {error.reason}: {str(error.body)[:300]}"
                if isinstance(error, ApiException)
                else repr(error)
            )
            print(f"floor: {step.__name__}{args}: {text}", file=sys.stderr, flush=True)

    # -- per node ----------------------------------------------------------

    def start(self, name: str) -> None:
        node = self.nodes[name]
        # 1. the NodeAcceptance
        self.custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            ACCEPTANCE_PLURAL,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "NodeAcceptance",
                "metadata": {"name": name},
                "spec": {"nodeName": name},
            },
        )
        # 2. the pending taint (already there when the node registered with it)
        taints = [t.to_dict() for t in node.spec.taints or []]
        if not any(t["key"] == PENDING_TAINT_KEY for t in taints):
            taints.append({"key": PENDING_TAINT_KEY, "value": "true", "effect": "NoSchedule"})
        self.core.patch_node(name, {"spec": {"taints": _taint_bodies(taints)}})
        # 3. the probe pod
        gpus = (node.status.allocatable or {}).get(GPU_RESOURCE, "0")
        body: Any = self.pod(name, gpus)
        self.core.create_namespaced_pod(self.namespace, body)

    def pod(self, node: str, gpus: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"floor-{node}-1", "labels": {POD_LABEL: "true"}},
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "activeDeadlineSeconds": 900,
                "tolerations": [
                    {"key": PENDING_TAINT_KEY, "operator": "Exists"},
                    {"key": QUARANTINE_TAINT_KEY, "operator": "Exists"},
                ],
                "containers": [
                    {
                        "name": "probe",
                        "image": self.image,
                        "command": ["gpuaccept", "probe", "--termination-log"],
                        "args": ["/dev/termination-log"],
                        "env": [
                            {
                                "name": "NODE_NAME",
                                "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                            }
                        ],
                        "resources": {"limits": {GPU_RESOURCE: gpus}},
                    }
                ],
            },
        }

    def finish(self, name: str, pod_name: str) -> None:
        # 4. read the result
        pod: Any = self.core.read_namespaced_pod(pod_name, self.namespace)
        message = ""
        for status in pod.status.container_statuses or []:
            if status.state is not None and status.state.terminated is not None:
                message = status.state.terminated.message or ""
        report: ProbeReport | None
        try:
            report = decode_termination_message(message)
            if report.node_name != name:
                raise ValueError(f"report is for node {report.node_name!r}")
            reasons = judge(report, self.policy)
        except ValueError as error:
            report = None
            reasons = [Reason(check="probe", reason="ProbeError", message=str(error)[:512])]
        quarantined = bool(reasons)
        # 5. delete the pod
        self.core.delete_namespaced_pod(pod_name, self.namespace, grace_period_seconds=0)
        # 6. untaint and label
        node = self.nodes[name]
        keep = [
            t.to_dict()
            for t in node.spec.taints or []
            if t.key not in (PENDING_TAINT_KEY, QUARANTINE_TAINT_KEY)
        ]
        if quarantined:
            keep.append({"key": QUARANTINE_TAINT_KEY, "value": "true", "effect": "NoSchedule"})
        verdict = "quarantined" if quarantined else "accepted"
        self.core.patch_node(
            name,
            {
                "metadata": {"labels": {ACCEPTANCE_LABEL: verdict}},
                "spec": {"taints": _taint_bodies(keep)},
            },
        )
        stamp = now()
        reason = reasons[0].reason if reasons else "ProbePassed"
        message = "; ".join(f"{r.check}: {r.message}" for r in reasons)[:1024]
        if quarantined:
            # 8. the node condition, 9. the Event
            condition = {
                "type": NODE_CONDITION_TYPE,
                "status": "False",
                "reason": reason,
                "message": message,
                "lastTransitionTime": stamp,
                "lastHeartbeatTime": stamp,
            }
            self.core.patch_node_status(name, {"status": {"conditions": [condition]}})
            event: Any = self.event(name, reason, message, stamp)
            self.core.create_namespaced_event("default", event)
        # 7. the status
        status = NodeAcceptanceStatus(
            phase=Phase.QUARANTINED if quarantined else Phase.ACCEPTED,
            reason=reason,
            message=message or None,
            reasons=reasons,
            checks=[
                CheckSummary(check=r.check, status=r.status, message=r.message)
                for r in (report.results if report else [])
            ],
            attempts=1,
            probe_pod=pod_name,
            last_probe_time=datetime.now(UTC),
            probed_boot_id=report.boot_id if report else None,
            report=report,
        )
        self.custom.patch_cluster_custom_object_status(
            GROUP, VERSION, ACCEPTANCE_PLURAL, name, {"status": status.to_wire()}
        )
        with self.lock:
            self.decided += 1

    def event(self, node: str, reason: str, message: str, stamp: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{node}.", "namespace": "default"},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
            "reason": reason,
            "message": message or reason,
            "type": "Warning",
            "source": {"component": "gpuaccept-floor"},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }

    # -- lifetime ----------------------------------------------------------

    def run(self) -> None:
        threads = [
            threading.Thread(
                target=self.watch_forever,
                args=(self.core.list_node, self.on_node),
                kwargs={"label_selector": self.selector},
                daemon=True,
                name="watch-nodes",
            ),
            threading.Thread(
                target=self.watch_forever,
                args=(self.core.list_namespaced_pod, self.on_pod),
                kwargs={"namespace": self.namespace, "label_selector": f"{POD_LABEL}=true"},
                daemon=True,
                name="watch-pods",
            ),
        ]
        for thread in threads:
            thread.start()
        while not self.stop.is_set() and all(t.is_alive() for t in threads):
            self.stop.wait(0.5)
        self.pool.shutdown(wait=False, cancel_futures=True)


def _taint_bodies(taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Taints as the API wants them (snake_case dicts from the client → camelCase)."""
    out = []
    for taint in taints:
        body = {"key": taint["key"], "effect": taint["effect"]}
        if taint.get("value") is not None:
            body["value"] = taint["value"]
        added = taint.get("time_added") or taint.get("timeAdded")
        if added is not None:
            body["timeAdded"] = added if isinstance(added, str) else added.isoformat()
        out.append(body)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", default="gpuaccept-bench")
    parser.add_argument("--image", default="gpuaccept-probe:bench")
    parser.add_argument("--selector", default=f"{GPU_PRESENT_LABEL}=true")
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args(argv)
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=args.kubeconfig
    )
    api.configuration.connection_pool_maxsize = args.workers + 4
    api.rest_client = type(api.rest_client)(api.configuration)  # pool size takes effect
    floor = Floor(api, args.namespace, args.image, args.selector, args.workers)

    def stop(_signum: int, _frame: object) -> None:
        floor.stop.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    started = time.monotonic()
    floor.run()
    print(
        f"floor: decided={floor.decided} failures={floor.failures} "
        f"elapsed={time.monotonic() - started:.1f}s",
        file=sys.stderr,
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
