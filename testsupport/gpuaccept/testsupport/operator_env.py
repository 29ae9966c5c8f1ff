"""The operator end to end, test support: ``gpuaccept operator`` as a subprocess under
the chart's RBAC, the kubelet stand-in running the real probe on simulated profiles,
and the helpers the integration tests share (polling, the Node's side of a phase).

Isolation on a shared control plane: every test gets its own policy whose
``nodeSelector`` matches only that test's nodes (a per-test label, ``SUITE_LABEL``);
the nodes set ``nvidia.com/gpu.present=false`` so that no other policy (e.g. a
chart's default one) claims them. No timing assertions: generous waits, clear
messages.

tests/integration/conftest.py makes :func:`operator_env` the module-scoped ``env``
fixture.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.api import (
    ACCEPTANCE_LABEL,
    ACCEPTANCE_PLURAL,
    GROUP,
    NODE_CONDITION_TYPE,
    PENDING_TAINT_KEY,
    POLICY_PLURAL,
    QUARANTINE_TAINT_KEY,
    VERSION,
)
from gpuaccept.operator.kube import EVENT_NAMESPACE, Kube
from gpuaccept.testsupport.chart_rbac import operator_kubeconfig
from gpuaccept.testsupport.controlplane import ControlPlane, repo_root
from gpuaccept.testsupport.crd_install import apply_crds
from gpuaccept.testsupport.kubelet_standin import Behaviour, BehaviourHook, KubeletStandIn, SimNode
from gpuaccept.testsupport.ports import free_ports
from gpuaccept.testsupport.standin_dra import DRA_DRIVER

ROOT = repo_root()
NAMESPACE = "gpuaccept-optest"
SUITE_LABEL = "gpuaccept.io/test-suite"
HEALTHY = str(ROOT / "profiles/h100-sxm-8gpu-healthy.yaml")
PENDING_TAINT = {"key": PENDING_TAINT_KEY, "effect": "NoSchedule"}
_suite_numbers = itertools.count()
OPERATORS: list[Operator] = []  # every operator started, for failure messages


def wait_for(what: str, check: Callable[[], Any], timeout: float = 120, every: float = 0.5) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except ApiException as error:
            last = f"API error {error.status}"
        if last:
            return last
        time.sleep(every)
    logs = "".join(f"\n--- operator {op.name} (tail) ---\n{op.log()[-3000:]}" for op in OPERATORS)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r}){logs}")


class Operator:
    """``gpuaccept operator`` as a subprocess, logging to a file."""

    def __init__(
        self, cp: ControlPlane, log_dir: Path, *, lease: str, name: str, namespace: str = NAMESPACE
    ) -> None:
        self.cp = cp
        self.lease = lease
        self.name = name
        self.namespace = namespace
        self.log_path = log_dir / f"operator-{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_port = self.health_port = 0
        OPERATORS.append(self)

    def kubeconfig(self) -> Path:
        """The chart's RBAC for this namespace and Lease (a missing verb fails the tests)."""
        workdir = self.log_path.parent
        return operator_kubeconfig(
            self.cp, namespace=self.namespace, lease=self.lease, workdir=workdir
        )

    def start(self, *extra: str, metrics_port: int = 0, health_port: int = 0) -> Operator:
        self.metrics_port, self.health_port = metrics_port, health_port
        args = [
            sys.executable,
            "-m",
            "gpuaccept.cli",
            "operator",
            "--kubeconfig",
            # The chart's ServiceAccount (TokenRequest), not the admin: issue 5.
            str(self.kubeconfig()),
            "--namespace",
            self.namespace,
            "--lease-name",
            self.lease,
            "--identity",
            self.name,
            "--metrics-port",
            str(metrics_port),
            "--health-port",
            str(health_port),
            "--workers",
            "4",
            "--status-interval",
            "1",
            "--lease-duration",
            "10",
            "--probe-image",
            "local/gpuaccept-probe:test",
            # The stand-in runs the real probe on simulated hardware profiles.
            "--accept-simulated-reports",
            # Only this module's nodes: other tests' nodes and policies on the
            # shared control plane are none of this operator's business.
            "--node-selector",
            SUITE_LABEL,
            # A node under the pending taint that no policy matches is reported soon.
            "--unmatched-grace",
            "2",
            *extra,
        ]
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        return self

    def kill(self) -> None:
        """SIGKILL: a crash, nothing cleaned up."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class Env:
    cp: ControlPlane
    api: k8s.ApiClient
    standin: KubeletStandIn
    log_dir: Path
    operator: Operator
    kube: Kube
    policies: list[str] = field(default_factory=list)

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api)

    # ---- objects
    def policy(self, suite: str, **spec: Any) -> str:
        name = f"optest-{suite}"
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeAcceptancePolicy",
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {SUITE_LABEL: suite},
                "probeRun": {"timeoutSeconds": 60, "retries": 1, "backoffSeconds": 1},
                "maxQuarantined": 100,
                **spec,
            },
        }
        self.kube.request("POST", f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}", body)
        self.policies.append(name)
        return name

    def nodes(
        self,
        suite: str,
        profiles: dict[str, str],
        *,
        taints: list[dict[str, str]] | None = None,
        behaviour: Behaviour | BehaviourHook | None = None,
    ) -> list[str]:
        """Register nodes ``<suite>-<key>`` with the given profiles (pending taint by default)."""
        sims = [
            SimNode(
                name=f"{suite}-{key}",
                profile=profile,
                labels={SUITE_LABEL: suite, "nvidia.com/gpu.present": "false"},
                taints=[PENDING_TAINT] if taints is None else taints,
                behaviour=behaviour,
            )
            for key, profile in profiles.items()
        ]
        self.standin.add_nodes(sims)
        return [s.name for s in sims]

    def dra_nodes(  # noqa: PLR0913 (each a separate knob of the simulated driver)
        self,
        suite: str,
        profiles: dict[str, str],
        *,
        driver: str = DRA_DRIVER,
        slices: int = 1,
        left_out: tuple[int, ...] = (),
        behaviour: Behaviour | BehaviourHook | None = None,
    ) -> list[str]:
        """Register nodes ``<suite>-<key>`` under the pending taint whose GPUs ``driver``
        publishes in ResourceSlices (``slices`` of them, those numbered in ``left_out``
        not yet), not as nvidia.com/gpu (testsupport/standin_dra.py); their pods do
        ``behaviour`` (None: run their commands)."""
        sims = [
            SimNode(
                name=f"{suite}-{key}",
                profile=profile,
                labels={SUITE_LABEL: suite, "nvidia.com/gpu.present": "false"},
                taints=[PENDING_TAINT],
                dra_driver=driver,
                dra_slices=slices,
                dra_left_out=left_out,
                behaviour=behaviour,
            )
            for key, profile in profiles.items()
        ]
        self.standin.add_nodes(sims)
        return [s.name for s in sims]

    def na(self, name: str) -> dict[str, Any] | None:
        return self.kube.get_na(name)

    def status(self, name: str) -> dict[str, Any]:
        return (self.na(name) or {}).get("status") or {}

    def node(self, name: str) -> dict[str, Any]:
        node = self.kube.get_node(name)
        assert node is not None, f"node {name} not found"
        return node

    def taint_keys(self, name: str) -> list[str]:
        return [t["key"] for t in self.node(name)["spec"].get("taints") or []]

    def pods(self, node: str) -> list[dict[str, Any]]:
        pods = self.kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
        return [p for p in pods if p["spec"].get("nodeName") == node]

    def events(self, name: str, kind: str) -> list[dict[str, Any]]:
        selector = f"involvedObject.name={name},involvedObject.kind={kind}"
        events = self.kube.request(
            "GET",
            f"/api/v1/namespaces/{EVENT_NAMESPACE}/events",
            query=[("fieldSelector", selector)],
        )
        return list(events["items"])

    def policy_status(self, name: str) -> dict[str, Any]:
        policy = self.kube.request("GET", f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}/{name}")
        return dict(policy.get("status") or {})

    def phase_of(self, names: list[str], phase: str) -> Callable[[], bool]:
        return lambda: all(self.status(n).get("phase") == phase for n in names)

    def wait_phase(self, names: list[str], phase: str, timeout: float = 120) -> None:
        wait_for(
            f"{names} to reach phase {phase}",
            lambda: self.phase_of(names, phase)() or None,
            timeout,
        )

    def describe(self, names: list[str]) -> str:
        return json.dumps({n: self.status(n) for n in names}, indent=1, default=str)[:4000]


def operator_ports() -> dict[str, int]:
    metrics_port, health_port = free_ports(2)
    return {"metrics_port": metrics_port, "health_port": health_port}


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), ""
    except OSError:
        return 0, ""


def suite_id(tag: str) -> str:
    return f"op{next(_suite_numbers)}{uuid.uuid4().hex[:4]}-{tag}"


def create_if_absent(kube: Kube, path: str, body: dict[str, Any]) -> None:
    try:
        kube.request("POST", path, body)
    except ApiException as error:
        if error.status != 409:
            raise


@contextlib.contextmanager
def operator_env(control_plane: ControlPlane, log_dir: Path) -> Iterator[Env]:
    """The CRDs, the namespace and probe ServiceAccount, a kubelet stand-in and one
    operator (``main``) logging under ``log_dir``; on exit everything the tests
    made is removed (their policies, NodeAcceptances, pods and nodes)."""
    api = control_plane.api_client()
    kube = Kube(control_plane.api_client())  # the operator's own thin adapter, raw JSON
    kube.api.user_agent = "gpuaccept-operator-tests"
    apply_crds(kube.api)
    core = k8s.CoreV1Api(api)
    create_if_absent(kube, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    create_if_absent(
        kube,
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
        {"metadata": {"name": "gpuaccept-probe"}},
    )
    standin = KubeletStandIn(control_plane.configuration(), workdir=log_dir / "standin").start()
    lease = f"optest-{uuid.uuid4().hex[:6]}"
    operator = Operator(control_plane, log_dir, lease=lease, name="main").start(**operator_ports())
    environment = Env(control_plane, api, standin, log_dir, operator, kube)
    try:
        yield environment
    finally:
        operator.stop()
        standin.stop(delete_nodes=True)
        for policy in environment.policies:
            with contextlib.suppress(ApiException):
                kube.request("DELETE", f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}/{policy}")
        for na in kube.request("GET", f"/apis/{GROUP}/{VERSION}/{ACCEPTANCE_PLURAL}")["items"]:
            if na["metadata"]["name"].startswith("op"):
                kube.delete_na(na["metadata"]["name"])
        with contextlib.suppress(ApiException):
            core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)
        if os.environ.get("GPUACCEPT_KEEP_LOGS"):
            print(f"operator logs in {log_dir}")


def node_shows(node: dict[str, Any], phase: str, reason: str | None) -> bool:
    """Whether the Node carries what ``phase`` means for it (taints, label, condition)."""
    taints = {t["key"]: t for t in node["spec"].get("taints") or []}
    label = (node["metadata"].get("labels") or {}).get(ACCEPTANCE_LABEL)
    conditions = {c["type"]: c for c in node["status"].get("conditions") or []}
    condition = conditions.get(NODE_CONDITION_TYPE) or {}
    if phase == "Accepted":
        return (
            PENDING_TAINT_KEY not in taints
            and QUARANTINE_TAINT_KEY not in taints
            and label == "accepted"
            and condition.get("status") == "True"
        )
    if phase == "Quarantined":
        return (
            taints.get(QUARANTINE_TAINT_KEY, {}).get("effect") == "NoSchedule"
            and PENDING_TAINT_KEY not in taints
            and label == "quarantined"
            and condition.get("status") == "False"
            and (reason is None or condition.get("reason") == reason)
        )
    if phase == "Pending":  # held, waiting for a pair, stalled: still out of service
        return PENDING_TAINT_KEY in taints and QUARANTINE_TAINT_KEY not in taints
    raise ValueError(f"no Node side for phase {phase!r}")


def wait_node_side(env: Env, name: str, phase: str, *, reason: str | None = None) -> dict[str, Any]:
    """The Node once it shows ``phase`` (Accepted, Quarantined, or Pending: held or
    waiting). The operator writes the NodeAcceptance status before it patches the Node,
    so every assertion on a Node's side after a phase goes through this wait."""
    node: dict[str, Any] = {}

    def shows() -> bool:
        nonlocal node
        node = env.node(name)
        return node_shows(node, phase, reason)

    wait_for(f"{name}'s Node to show {phase}", shows, 30)
    return node
