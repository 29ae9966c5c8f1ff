"""The kubelet stand-in checked against the real kubelet (issue 27, docs/controlplane.md).

Each behaviour the stand-in emulates runs as the same pod twice: on a stand-in
node (the ``control_plane`` cluster, processes on this machine) and on the real
node (``real_node``: kubelet 1.37, containerd, runc, the busybox image). The
operator reads probe pods through ``gpuaccept.operator.views.pod_view``; the
test compares what that function returns on both, every distinct view in the
order the watch delivered it, minus names, times and IPs
(``pod_observation.comparable``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
from kubernetes import client as k8s
from pod_observation import Observation, PodSpec, ended, observe, watch_pod

from gpuaccept.operator.core.model import PodView
from gpuaccept.testsupport.controlplane import ControlPlane
from gpuaccept.testsupport.kubelet_standin import ImagePullFailure, KubeletStandIn, SimNode
from gpuaccept.testsupport.realnode import BUSYBOX_IMAGE, RealNode

pytestmark = pytest.mark.realnode

GPUS = 8
STANDIN_NODE = "cmp-standin"
# 500 numbered lines, 5000 bytes: over the kubelet's 4096-byte message limit.
LONG_MESSAGE = (
    "i=0; while [ $i -lt 500 ]; do printf '%09d\\n' $i; i=$((i+1)); done > /dev/termination-log"
)
# 100 lines of 31 bytes on stdout: over both FallbackToLogsOnError limits (80 lines, 2048 bytes).
LONG_OUTPUT = (
    "i=0; while [ $i -lt 100 ]; do printf 'output line %04d of the probe\\n' $i; i=$((i+1)); done"
)
# What the real kubelet says when an image cannot be pulled from an unreachable registry.
MISSING_IMAGE = "localhost:1/gpuaccept/missing:1"


@dataclass(frozen=True)
class Cluster:
    """One side of the comparison: where pods go and what runs them."""

    api: k8s.CoreV1Api
    namespace: str
    node: str
    standin: KubeletStandIn | None = None

    def run(self, spec: PodSpec, until: Callable[[PodView], bool]) -> Observation:
        name = f"cmp-{uuid.uuid4().hex[:8]}"
        manifest = spec.manifest(name, self.node, BUSYBOX_IMAGE)
        return observe(self.api, self.namespace, manifest, until=until)


def _namespace(api: k8s.CoreV1Api, *, with_default_sa: bool) -> str:
    name = f"cmp-{uuid.uuid4().hex[:6]}"
    api.create_namespace({"metadata": {"name": name}})
    if with_default_sa:  # no ServiceAccount controller on the stand-in's control plane
        api.create_namespaced_service_account(name, {"metadata": {"name": "default"}})
    return name


@pytest.fixture(scope="module")
def standin(control_plane: ControlPlane) -> Iterator[Cluster]:
    api = k8s.CoreV1Api(control_plane.api_client())
    node = SimNode(name=STANDIN_NODE, gpu_count=GPUS)
    with KubeletStandIn(control_plane.configuration(), nodes=[node]) as s:
        yield Cluster(api, _namespace(api, with_default_sa=True), STANDIN_NODE, s)
        s.stop(delete_nodes=True)


@pytest.fixture(scope="module")
def kubelet(real_node: RealNode) -> Iterator[Cluster]:
    api = k8s.CoreV1Api(real_node.control_plane.api_client())
    namespace = _namespace(api, with_default_sa=False)
    yield Cluster(api, namespace, real_node.settings.name)
    api.delete_namespace(namespace)


def _sh(script: str) -> tuple[str, ...]:
    return ("sh", "-c", script)


# What the operator acts on while a pod runs and ends (core/phases/probing.py,
# core/phases/startfailure.py). Not compared: waiting reasons before the pod ends (the
# kubelet's ContainerCreating, which the stand-in does not write; the operator
# only reads it at the deadline), times, names and IPs (pod_observation.comparable).
STEP_FIELDS = (
    "phase", "deleting", "terminated", "exit_code", "reason", "message",
    "pod_reason", "pod_message", "container_reason",
)  # fmt: skip


def steps(views: tuple[PodView, ...]) -> list[dict[str, Any]]:
    """The views projected on STEP_FIELDS, each change once."""
    out: list[dict[str, Any]] = []
    for view in views:
        step = {name: getattr(view, name) for name in STEP_FIELDS}
        if not out or out[-1] != step:
            out.append(step)
    return out


def _differences(a: Observation, b: Observation) -> str:
    lines = [f"steps: stand-in {steps(a.views)}", f"       kubelet  {steps(b.views)}"]
    for field in PodView.__dataclass_fields__:
        left, right = getattr(a.final, field), getattr(b.final, field)
        if left != right:
            lines.append(f"final.{field}: stand-in {left!r}\n    kubelet  {right!r}")
    return "\n".join(lines)


def assert_same(a: Observation, b: Observation) -> None:
    assert (steps(a.views), a.final) == (steps(b.views), b.final), _differences(a, b)


# --- pod phases and the termination message --------------------------------------------

ENDED_CASES = {
    "succeeded": PodSpec(_sh("printf 'all good' > /dev/termination-log")),
    "failed": PodSpec(_sh("printf 'it broke' > /dev/termination-log; exit 3")),
    "no-message": PodSpec(_sh("exit 1")),
    "message-over-4096-bytes": PodSpec(_sh(LONG_MESSAGE + "; exit 1")),
    "fallback-to-logs": PodSpec(
        _sh(LONG_OUTPUT + "; exit 2"), message_policy="FallbackToLogsOnError"
    ),
    "fallback-not-on-success": PodSpec(_sh(LONG_OUTPUT), message_policy="FallbackToLogsOnError"),
    "start-error": PodSpec(("/no/such/probe", "--flag")),
}


@pytest.mark.parametrize("case", sorted(ENDED_CASES))
def test_pod_ends_alike(standin: Cluster, kubelet: Cluster, case: str) -> None:
    spec = ENDED_CASES[case]
    assert_same(standin.run(spec, ended), kubelet.run(spec, ended))


def test_deadline_alike(standin: Cluster, kubelet: Cluster) -> None:
    """activeDeadlineSeconds: a container that does not handle SIGTERM (as the probe,
    a Python process, does not) is killed after the grace period."""
    spec = PodSpec(("sleep", "600"), deadline_s=3, grace_s=2)
    assert_same(standin.run(spec, ended), kubelet.run(spec, ended))


def test_image_pull_failure_alike(standin: Cluster, kubelet: Cluster) -> None:
    """An image that cannot be pulled: waiting until the deadline, then Failed."""
    assert standin.standin is not None
    seen = kubelet.run(
        PodSpec(("true",), image=MISSING_IMAGE, pull_policy="IfNotPresent", deadline_s=15), ended
    )
    pulled = [v for v in seen.views if v.waiting_reason == "ErrImagePull"]
    assert pulled, seen.views
    standin.standin.set_behaviour(STANDIN_NODE, ImagePullFailure(str(pulled[0].waiting_message)))
    try:
        emulated = standin.run(
            PodSpec(("true",), image=MISSING_IMAGE, pull_policy="IfNotPresent", deadline_s=15),
            ended,
        )
    finally:
        standin.standin.set_behaviour(STANDIN_NODE, None)
    # The kubelet alternates ErrImagePull and ImagePullBackOff while it retries; the
    # stand-in stays in ErrImagePull. The operator treats both alike (core/phases/waiting.py).
    assert_same(emulated, replace(seen, views=_pull_failures_alike(seen.views)))


def _pull_failures_alike(views: tuple[PodView, ...]) -> tuple[PodView, ...]:
    """The kubelet alternates ErrImagePull and ImagePullBackOff (with a back-off
    message) while it retries; the stand-in stays in ErrImagePull with the first
    message. The operator reads both as an unavailable image (core/phases/startfailure.py)."""
    out: list[PodView] = []
    first = next((v.waiting_message for v in views if v.waiting_reason == "ErrImagePull"), None)
    for view in views:
        alike = view
        if view.waiting_reason == "ImagePullBackOff":
            alike = replace(view, waiting_reason="ErrImagePull", waiting_message=first)
        if not out or out[-1] != alike:
            out.append(alike)
    return tuple(out)


# --- admission when the GPUs are taken --------------------------------------------------


def _holding_all_gpus(cluster: Cluster) -> Iterator[None]:
    hog = PodSpec(("sleep", "600"), gpus=GPUS, grace_s=0)
    name = f"hog-{uuid.uuid4().hex[:6]}"
    cluster.api.create_namespaced_pod(
        cluster.namespace, hog.manifest(name, cluster.node, BUSYBOX_IMAGE)
    )
    watch_pod(
        cluster.api,
        cluster.namespace,
        name,
        until=lambda v: v.phase == "Running",
    )
    yield
    cluster.api.delete_namespaced_pod(name, cluster.namespace, grace_period_seconds=0)


def test_admission_refused_when_gpus_taken(standin: Cluster, kubelet: Cluster) -> None:
    observations: list[Observation] = []
    for cluster in (standin, kubelet):
        holding = _holding_all_gpus(cluster)
        next(holding)
        try:
            observations.append(cluster.run(PodSpec(("true",), gpus=1), ended))
        finally:
            next(holding, None)
    assert_same(*observations)


# --- admission: node affinity -------------------------------------------------------------


def test_node_affinity_refused_alike(standin: Cluster, kubelet: Cluster) -> None:
    """A pod pinned by nodeName whose required node affinity its node does not match
    (a node without kubernetes.io/hostname, which every kubelet sets): the kubelet's
    predicate admission rejects it before any container starts, reason NodeAffinity
    (pkg/kubelet/lifecycle/predicate.go). Every pod the operator creates requires its
    reach this way (core/podspec.py node_affinity, docs/security.md)."""
    spec = PodSpec(("true",), absent_labels=("kubernetes.io/hostname",))
    assert_same(standin.run(spec, ended), kubelet.run(spec, ended))


# --- deletion and grace ---------------------------------------------------------------------

DELETION_CASES = {
    # A shell that exits on SIGTERM: the final status comes before the pod goes.
    "handles-sigterm": PodSpec(_sh("trap 'exit 0' TERM; sleep 600 & wait"), grace_s=30),
    # No SIGTERM handler (a container's PID 1 ignores it): killed after the grace period.
    "ignores-sigterm": PodSpec(("sleep", "600"), grace_s=3),
}


TRAP_SET_S = 3.0  # time for a started shell to reach its `trap`; not a timing check


def _delete_running(cluster: Cluster, spec: PodSpec) -> tuple[PodView, ...]:
    """Run the pod, delete it once Running, and watch it go."""
    name = f"del-{uuid.uuid4().hex[:6]}"
    manifest = spec.manifest(name, cluster.node, BUSYBOX_IMAGE)
    started = observe(
        cluster.api, cluster.namespace, manifest, until=lambda v: v.phase == "Running"
    )
    # Running comes when the process starts, before the shell has set its trap: a
    # SIGTERM before that finds no handler (on both sides) and the case turns into
    # "ignores-sigterm" (seen on the stand-in on a loaded machine).
    time.sleep(TRAP_SET_S)
    cluster.api.delete_namespaced_pod(name, cluster.namespace)
    gone = watch_pod(cluster.api, cluster.namespace, name, until=lambda v: False)
    assert gone.deleted
    return started.views + gone.views


@pytest.mark.parametrize("case", sorted(DELETION_CASES))
def test_deletion_alike(standin: Cluster, kubelet: Cluster, case: str) -> None:
    spec = DELETION_CASES[case]
    a, b = _delete_running(standin, spec), _delete_running(kubelet, spec)
    assert steps(a) == steps(b), f"stand-in {steps(a)}\nkubelet  {steps(b)}"
