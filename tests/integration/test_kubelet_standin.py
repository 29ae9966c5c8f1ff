"""The kubelet stand-in against the real kube-apiserver of the session control plane."""

from __future__ import annotations

import json
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from gpuaccept.testsupport.controlplane import ControlPlane
from gpuaccept.testsupport.kubelet_standin import (
    Complete,
    Hang,
    ImagePullFailure,
    KubeletStandIn,
    PodInfo,
    SandboxFailure,
    SimNode,
    StandInSettings,
    StartFailure,
    prepared_reports,
    truncate_termination_message,
)
from gpuaccept.testsupport.processes import pid_alive

pytestmark = pytest.mark.integration

WAIT_S = 120  # generous upper bound for any one wait; not a timing assertion
ROOT = Path(__file__).resolve().parents[2]
TOOLKIT_MISMATCH = (
    "failed to create containerd task: failed to create shim task: OCI runtime create "
    "failed: runc create failed: unable to start container process: error during container "
    "init: error running prestart hook #0: exit status 1, stdout: , stderr: Auto-detected "
    "mode as 'legacy'\nnvidia-container-cli: initialization error: nvml error: "
    "driver/library version mismatch: unknown"
)

# The container command used by most tests: writes "<argv[1]> <env...>" into the
# termination-message path given as argv[2] (the stand-in remaps it), exits argv[3].
WRITE_AND_EXIT = textwrap.dedent(
    """
    import os, sys
    msg = sys.argv[1].format(**os.environ)
    with open(sys.argv[2], "w") as f:
        f.write(msg)
    print("stdout line from", os.environ.get("POD_NAME"))
    sys.exit(int(sys.argv[3]))
    """
)


@pytest.fixture(scope="module")
def suffix() -> str:
    return uuid.uuid4().hex[:6]


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("profiles") / "h100-test.yaml"
    p.write_text("name: h100-test\ngpus: 8\n")
    return p


@pytest.fixture(scope="module")
def standin(control_plane: ControlPlane, suffix: str, profile: Path) -> Iterator[KubeletStandIn]:
    nodes = [
        SimNode(
            f"gpu-{suffix}-a",
            profile=str(profile),
            gpu_count=8,
            gpu_product="NVIDIA-H100-80GB-HBM3",
            taints=[{"key": "gpuaccept.io/unverified", "value": "true", "effect": "NoSchedule"}],
        ),
        SimNode(f"gpu-{suffix}-hang", profile=str(profile), behaviour=Hang()),
        SimNode(
            f"gpu-{suffix}-prepared",
            profile=str(profile),
            behaviour=prepared_reports(
                lambda node, boot: json.dumps({"node": node, "bootID": boot}), exit_code=0
            ),
        ),
        SimNode(f"gpu-{suffix}-garbage", behaviour=Complete(exit_code=0, message="\x00{{not json")),
        SimNode(f"gpu-{suffix}-reboot", profile=str(profile)),
    ]
    s = KubeletStandIn(
        control_plane.configuration(),
        nodes=nodes,
        settings=StandInSettings(kill_grace_cap_s=2.0, sim_time_scale=0.25),
    )
    s.start()
    yield s
    s.stop(delete_nodes=True)


@pytest.fixture(scope="module")
def core(control_plane: ControlPlane) -> Iterator[k8s.CoreV1Api]:
    with control_plane.api_client() as api:
        yield k8s.CoreV1Api(api)


@pytest.fixture(scope="module")
def namespace(core: k8s.CoreV1Api, suffix: str) -> str:
    ns = f"standin-{suffix}"
    core.create_namespace({"metadata": {"name": ns}})
    # No kube-controller-manager: nobody creates the "default" ServiceAccount,
    # and the ServiceAccount admission plugin requires it for pods.
    core.create_namespaced_service_account(ns, {"metadata": {"name": "default"}})
    return ns


def _pod(name: str, node: str, args: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "probe",
                    "image": "gpuaccept/probe:test",
                    "command": ["python", "-c", WRITE_AND_EXIT],
                    "args": args,
                    "env": [
                        {
                            "name": "NODE_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                        },
                        {
                            "name": "POD_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        },
                        {"name": "GREETING", "value": "hello-$(NODE_NAME)"},
                    ],
                }
            ],
            **spec,
        },
    }


def _wait_pod(
    core: k8s.CoreV1Api,
    ns: str,
    name: str,
    done: Callable[[k8s.V1Pod], bool],
    timeout: int = WAIT_S,
) -> k8s.V1Pod:
    pod = core.read_namespaced_pod(name, ns)
    if done(pod):
        return pod
    w = watch.Watch()
    for ev in w.stream(
        core.list_namespaced_pod,
        ns,
        field_selector=f"metadata.name={name}",
        resource_version=pod.metadata.resource_version,
        timeout_seconds=timeout,
    ):
        obj = ev["object"]
        if ev["type"] != "DELETED" and done(obj):
            w.stop()
            return obj
    raise AssertionError(f"pod {ns}/{name} did not reach the expected state; last: {pod.status}")


def _wait_gone(core: k8s.CoreV1Api, ns: str, name: str, timeout: int = WAIT_S) -> None:
    try:
        pod = core.read_namespaced_pod(name, ns)
    except ApiException as e:
        if e.status == 404:
            return
        raise
    w = watch.Watch()
    for ev in w.stream(
        core.list_namespaced_pod,
        ns,
        field_selector=f"metadata.name={name}",
        resource_version=pod.metadata.resource_version,
        timeout_seconds=timeout,
    ):
        if ev["type"] == "DELETED":
            w.stop()
            return
    raise AssertionError(f"pod {ns}/{name} was not deleted")


def _terminal(pod: k8s.V1Pod) -> bool:
    return pod.status is not None and pod.status.phase in ("Succeeded", "Failed")


def _running(pod: k8s.V1Pod) -> bool:
    return pod.status is not None and pod.status.phase == "Running"


def test_registered_node_has_gpu_capacity(
    standin: KubeletStandIn, core: k8s.CoreV1Api, control_plane: ControlPlane, suffix: str
) -> None:
    name = f"gpu-{suffix}-a"
    node = core.read_node(name)
    assert node.status.capacity["nvidia.com/gpu"] == "8"
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    labels = node.metadata.labels
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert ready.status == "True"
    assert node.status.node_info.boot_id == standin.node(name).boot_id
    assert [(t.key, t.effect) for t in node.spec.taints or []] == [
        ("gpuaccept.io/unverified", "NoSchedule")
    ]
    # kubectl sees it too, with the extended resource.
    out = control_plane.kubectl(
        "get", "node", name, "-o", r"jsonpath={.status.capacity.nvidia\.com/gpu}"
    ).stdout
    assert out == "8"
    assert name in control_plane.kubectl("get", "nodes").stdout


def test_pod_succeeds_with_termination_message(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str, profile: Path
) -> None:
    node = f"gpu-{suffix}-a"
    core.create_namespaced_pod(
        namespace,
        _pod(
            "ok",
            node,
            [
                "report node={NODE_NAME} pod={POD_NAME} profile={GPUACCEPT_PROFILE} {GREETING}"
                " boot={GPUACCEPT_BOOT_ID}",
                "/dev/termination-log",
                "0",
            ],
        ),
    )
    pod = _wait_pod(core, namespace, "ok", _terminal)
    assert pod.status.phase == "Succeeded"
    assert pod.status.start_time is not None
    term = pod.status.container_statuses[0].state.terminated
    assert term.exit_code == 0
    assert term.reason == "Completed"
    boot = standin.node(node).boot_id
    assert term.message == f"report node={node} pod=ok profile={profile} hello-{node} boot={boot}"
    assert "stdout line from ok" in standin.pod_log(namespace, "ok")


def test_a_simulated_probe_is_told_its_time_scale(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    """A node with a profile: its probe takes the profile's durations x the scale."""
    node = f"gpu-{suffix}-a"
    args = ["scale={GPUACCEPT_SIM_TIME_SCALE}", "/dev/termination-log", "0"]
    core.create_namespaced_pod(namespace, _pod("scaled", node, args))
    pod = _wait_pod(core, namespace, "scaled", _terminal)
    assert pod.status.container_statuses[0].state.terminated.message == "scale=0.25"


def test_prepared_reports_last_their_wall_time_scaled() -> None:
    info = PodInfo("ns", "p", "uid", "node", "boot", None, {})
    scaled = prepared_reports(lambda n, b: json.dumps({"wallS": 52.8}), time_scale=0.5)
    no_wall = prepared_reports(lambda n, b: "\x00{{not json", time_scale=0.5)
    fixed = prepared_reports(lambda n, b: json.dumps({"wallS": 52.8}), delay_s=2.0)
    assert scaled(info) == Complete(message='{"wallS": 52.8}', delay_s=26.4)
    assert no_wall(info) == Complete(message="\x00{{not json", delay_s=0.0)
    assert fixed(info) == Complete(message='{"wallS": 52.8}', delay_s=2.0)


def test_nonzero_exit_fails(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    core.create_namespaced_pod(
        namespace, _pod("exit3", f"gpu-{suffix}-a", ["broken", "/dev/termination-log", "3"])
    )
    pod = _wait_pod(core, namespace, "exit3", _terminal)
    assert pod.status.phase == "Failed"
    term = pod.status.container_statuses[0].state.terminated
    assert (term.exit_code, term.reason, term.message) == (3, "Error", "broken")


def test_long_message_keeps_last_4096_bytes(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    msg = "A" * 1000 + "B" * 4000 + "END"
    core.create_namespaced_pod(
        namespace, _pod("long", f"gpu-{suffix}-a", [msg, "/dev/termination-log", "0"])
    )
    pod = _wait_pod(core, namespace, "long", _terminal)
    got = pod.status.container_statuses[0].state.terminated.message
    assert len(got) == 4096
    assert got == msg[-4096:]
    assert truncate_termination_message(msg.encode()) == got


def test_fallback_to_logs_on_error(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    body = _pod("fallback", f"gpu-{suffix}-a", [])
    c = body["spec"]["containers"][0]
    c["command"] = [
        "python",
        "-c",
        "import sys; print('\\n'.join(f'line {i}' for i in range(200))); sys.exit(2)",
    ]
    c["terminationMessagePolicy"] = "FallbackToLogsOnError"
    core.create_namespaced_pod(namespace, body)
    pod = _wait_pod(core, namespace, "fallback", _terminal)
    term = pod.status.container_statuses[0].state.terminated
    assert term.exit_code == 2
    lines = term.message.splitlines()
    assert len(lines) == 80
    assert lines[-1] == "line 199"


def test_missing_executable_is_a_start_error(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    body = _pod("noexe", f"gpu-{suffix}-a", [])
    body["spec"]["containers"][0]["command"] = ["no-such-binary-gpuaccept"]
    core.create_namespaced_pod(namespace, body)
    pod = _wait_pod(core, namespace, "noexe", _terminal)
    term = pod.status.container_statuses[0].state.terminated
    assert pod.status.phase == "Failed"
    assert (term.exit_code, term.reason) == (128, "StartError")


def test_active_deadline_kills_and_fails(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    body = _pod("slow", f"gpu-{suffix}-a", [], activeDeadlineSeconds=2)
    body["spec"]["containers"][0]["command"] = ["python", "-c", "import time; time.sleep(600)"]
    core.create_namespaced_pod(namespace, body)
    pod = _wait_pod(core, namespace, "slow", _running)
    pids = standin.process_ids(namespace, "slow")
    assert pids, "the stand-in started no process"
    pod = _wait_pod(core, namespace, "slow", _terminal)
    assert pod.status.phase == "Failed"
    assert pod.status.reason == "DeadlineExceeded"
    # No SIGTERM handler (Python's default): a container's PID 1 ignores SIGTERM, so
    # the runtime's SIGKILL after the grace period ends it (tests/realnode compares).
    assert pod.status.container_statuses[0].state.terminated.exit_code == 137
    assert not any(pid_alive(p) for p in pids.values())


def test_a_kill_sends_sigterm_to_a_process_that_handles_it(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    body = _pod("handler", f"gpu-{suffix}-a", [], activeDeadlineSeconds=2)
    handles = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))"
    body["spec"]["containers"][0]["command"] = ["python", "-c", f"{handles}; time.sleep(600)"]
    core.create_namespaced_pod(namespace, body)
    pod = _wait_pod(core, namespace, "handler", _terminal)
    assert pod.status.reason == "DeadlineExceeded"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 7


def test_gpus_held_by_a_running_pod_refuse_the_next(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    name = f"gpu-{suffix}-held"
    standin.add_node(SimNode(name, gpu_count=8))
    holder = _pod("holder", name, [])
    holder["spec"]["containers"][0]["command"] = ["python", "-c", "import time; time.sleep(600)"]
    holder["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    core.create_namespaced_pod(namespace, holder)
    _wait_pod(core, namespace, "holder", _running)
    late = _pod("late", name, ["x", "/dev/termination-log", "0"])
    late["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    core.create_namespaced_pod(namespace, late)
    pod = _wait_pod(core, namespace, "late", _terminal)
    assert (pod.status.phase, pod.status.reason) == ("Failed", "UnexpectedAdmissionError")
    assert pod.status.message == (
        "Pod was rejected: Allocate failed due to requested number of devices unavailable "
        "for nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected"
    )
    core.delete_namespaced_pod("holder", namespace)
    _wait_gone(core, namespace, "holder")
    after = _pod("after", name, ["x", "/dev/termination-log", "0"])
    after["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    core.create_namespaced_pod(namespace, after)
    assert _wait_pod(core, namespace, "after", _terminal).status.phase == "Succeeded"


def test_hang_override_hits_the_deadline(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    core.create_namespaced_pod(
        namespace,
        _pod(
            "hang",
            f"gpu-{suffix}-hang",
            ["x", "/dev/termination-log", "0"],
            activeDeadlineSeconds=1,
        ),
    )
    pod = _wait_pod(core, namespace, "hang", _terminal)
    assert pod.status.phase == "Failed"
    assert pod.status.reason == "DeadlineExceeded"


def test_deletion_kills_the_process_and_finalizes(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    body = _pod("victim", f"gpu-{suffix}-a", [])
    body["spec"]["containers"][0]["command"] = ["python", "-c", "import time; time.sleep(600)"]
    body["spec"]["terminationGracePeriodSeconds"] = 30
    core.create_namespaced_pod(namespace, body)
    _wait_pod(core, namespace, "victim", _running)
    pids = standin.process_ids(namespace, "victim")
    assert pids
    assert all(pid_alive(p) for p in pids.values())
    core.delete_namespaced_pod("victim", namespace)  # graceful: the stand-in must finish it
    _wait_gone(core, namespace, "victim")
    assert not any(pid_alive(p) for p in pids.values())


def test_prepared_report_without_a_process(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    node = f"gpu-{suffix}-prepared"
    core.create_namespaced_pod(
        namespace, _pod("prepared", node, ["x", "/dev/termination-log", "7"])
    )
    pod = _wait_pod(core, namespace, "prepared", _terminal)
    assert pod.status.phase == "Succeeded"  # the prepared exit code (0), not the args' 7
    msg = json.loads(pod.status.container_statuses[0].state.terminated.message)
    assert msg == {"node": node, "bootID": standin.node(node).boot_id}


def test_garbage_message_override(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    core.create_namespaced_pod(namespace, _pod("garbage", f"gpu-{suffix}-garbage", []))
    pod = _wait_pod(core, namespace, "garbage", _terminal)
    assert pod.status.container_statuses[0].state.terminated.message == "\x00{{not json"


def test_reboot_new_boot_id_and_ready_toggle(
    standin: KubeletStandIn, core: k8s.CoreV1Api, suffix: str
) -> None:
    name = f"gpu-{suffix}-reboot"
    before = core.read_node(name)
    old_boot = before.status.node_info.boot_id
    new_boot = standin.reboot(name, down_s=0.5)
    assert new_boot != old_boot
    # Replay the node's changes since before the reboot from the watch cache.
    seen: list[tuple[str, str]] = []
    w = watch.Watch()
    for ev in w.stream(
        core.list_node,
        field_selector=f"metadata.name={name}",
        resource_version=before.metadata.resource_version,
        timeout_seconds=30,
    ):
        n = ev["object"]
        ready = next(c.status for c in n.status.conditions if c.type == "Ready")
        seen.append((ready, n.status.node_info.boot_id))
        if (ready, n.status.node_info.boot_id) == ("True", new_boot):
            w.stop()
    assert ("False", old_boot) in seen
    assert seen[-1] == ("True", new_boot)


def test_reboot_kills_running_pods(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    name = f"gpu-{suffix}-reboot"
    body = _pod("on-reboot", name, [])
    body["spec"]["containers"][0]["command"] = ["python", "-c", "import time; time.sleep(600)"]
    core.create_namespaced_pod(namespace, body)
    _wait_pod(core, namespace, "on-reboot", _running)
    pids = standin.process_ids(namespace, "on-reboot")
    assert pids
    standin.reboot(name)
    pod = _wait_pod(core, namespace, "on-reboot", _terminal)
    assert pod.status.phase == "Failed"
    term = pod.status.container_statuses[0].state.terminated
    assert (term.exit_code, term.reason) == (137, "ContainerStatusUnknown")
    assert not any(pid_alive(p) for p in pids.values())


def test_hundreds_of_nodes_with_prepared_reports(
    control_plane: ControlPlane, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    count = 200
    nodes = [SimNode(f"sim-{suffix}-{i:04d}") for i in range(count)]
    s = KubeletStandIn(
        control_plane.configuration(),
        nodes=nodes,
        default_behaviour=prepared_reports(lambda n, b: f"{n}/{b}"),
    )
    s.start()
    try:
        names = {n.name for n in nodes}
        listed = {
            n.metadata.name
            for n in core.list_node(label_selector="nvidia.com/gpu.present=true").items
        }
        assert names <= listed

        done: dict[str, str] = {}
        finished = threading.Event()
        rv = core.list_namespaced_pod(namespace, limit=1).metadata.resource_version

        def collect() -> None:
            w = watch.Watch()
            for ev in w.stream(
                core.list_namespaced_pod,
                namespace,
                resource_version=rv,
                label_selector=f"scale={suffix}",
                timeout_seconds=WAIT_S,
            ):
                p = ev["object"]
                if _terminal(p):
                    done[p.spec.node_name] = p.status.container_statuses[0].state.terminated.message
                    if len(done) == count:
                        w.stop()
            finished.set()

        t = threading.Thread(target=collect, daemon=True)
        t.start()
        for i, n in enumerate(nodes):
            body = _pod(f"scale-{i:04d}", n.name, [])
            body["metadata"]["labels"] = {"scale": suffix}
            core.create_namespaced_pod(namespace, body)
        finished.wait(WAIT_S + 10)
        assert len(done) == count
        assert all(done[n.name] == f"{n.name}/{s.node(n.name).boot_id}" for n in nodes)
    finally:
        s.stop(delete_nodes=True)
    remaining = core.list_node(label_selector="nvidia.com/gpu.present=true").items
    assert not names & {n.metadata.name for n in remaining}


# ---------------------------------------------------------------- GPU counts and start failures


def test_capacity_allocatable_and_label_come_from_the_profile(
    standin: KubeletStandIn, core: k8s.CoreV1Api, suffix: str
) -> None:
    name = f"gpu-{suffix}-sick"
    standin.add_node(SimNode(name, profile=str(ROOT / "profiles/faults/gpu-missing.yaml")))
    node = core.read_node(name)
    assert node.status.capacity["nvidia.com/gpu"] == "8"
    assert node.status.allocatable["nvidia.com/gpu"] == "7"  # one GPU unhealthy
    assert node.metadata.labels["nvidia.com/gpu.count"] == "8"


def test_too_few_gpus_for_a_pinned_pod_is_rejected_by_the_kubelet(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    name = f"gpu-{suffix}-fewer"
    standin.add_node(SimNode(name, gpu_count=8, healthy_gpus=7))
    body = _pod("want8", name, ["x", "/dev/termination-log", "0"])
    body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    core.create_namespaced_pod(namespace, body)
    pod = _wait_pod(core, namespace, "want8", _terminal)
    assert (pod.status.phase, pod.status.reason) == ("Failed", "UnexpectedAdmissionError")
    assert pod.status.message == (
        "Pod was rejected: Allocate failed due to requested number of devices unavailable "
        "for nvidia.com/gpu. Requested: 8, Available: 7, which is unexpected"
    )
    assert not pod.status.container_statuses


CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"


def _requiring(pod: dict[str, Any], *requirements: dict[str, Any]) -> dict[str, Any]:
    term = {"matchExpressions": list(requirements)}
    pod["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]}}
    }  # fmt: skip
    return pod


def test_a_pinned_pod_whose_node_affinity_the_node_does_not_match_is_rejected(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    """As the kubelet's predicate admission does (pkg/kubelet/lifecycle/predicate.go):
    nodeName bypasses the scheduler, not the node-affinity filter. The Node's labels
    are read when the pod is admitted: a label added through the API counts."""
    name = f"gpu-{suffix}-cp"
    standin.add_node(SimNode(name, gpu_count=8, labels={CONTROL_PLANE_ROLE: ""}))
    not_control_plane = {"key": CONTROL_PLANE_ROLE, "operator": "DoesNotExist"}
    gpu_node = {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
    args = ["x", "/dev/termination-log", "0"]
    core.create_namespaced_pod(
        namespace, _requiring(_pod("cp-refused", name, args), gpu_node, not_control_plane)
    )
    pod = _wait_pod(core, namespace, "cp-refused", _terminal)
    assert (pod.status.phase, pod.status.reason) == ("Failed", "NodeAffinity")
    assert pod.status.message == (
        "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node "
        "affinity/selector"
    )
    assert not pod.status.container_statuses
    # The same node without the role label (taken off through the API): admitted.
    core.patch_node(name, {"metadata": {"labels": {CONTROL_PLANE_ROLE: None}}})
    core.create_namespaced_pod(
        namespace, _requiring(_pod("cp-gone", name, args), gpu_node, not_control_plane)
    )
    assert _wait_pod(core, namespace, "cp-gone", _terminal).status.phase == "Succeeded"
    # A nodeSelector is checked the same way.
    selected = _pod("selector", name, args, nodeSelector={"pool": "a"})
    core.create_namespaced_pod(namespace, selected)
    assert _wait_pod(core, namespace, "selector", _terminal).status.reason == "NodeAffinity"


def test_a_pod_that_names_its_node_passes_a_noschedule_taint_not_a_noexecute_one(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    """Issue 42 item 7, as the kubelet admits a bound pod (pkg/kubelet/lifecycle/
    predicate.go generalFilter: only NoExecute taints are checked there). A tenant
    pod that names an unprobed node runs under a NoSchedule pending taint, and is
    rejected under a NoExecute one; the probe's toleration (the key, Exists, any
    effect: core/podspec.py) admits the probe under either."""
    args = ["x", "/dev/termination-log", "0"]
    probe_toleration = [{"key": "gpuaccept.io/pending", "operator": "Exists"}]
    outcomes = {}
    for effect in ("NoSchedule", "NoExecute"):
        name = f"gpu-{suffix}-{effect.lower()}"
        standin.add_node(
            SimNode(
                name,
                gpu_count=8,
                taints=[{"key": "gpuaccept.io/pending", "value": "true", "effect": effect}],
            )
        )
        tenant, probe = f"tenant-{effect.lower()}", f"probe-{effect.lower()}"
        core.create_namespaced_pod(namespace, _pod(tenant, name, args))
        core.create_namespaced_pod(namespace, _pod(probe, name, args, tolerations=probe_toleration))
        outcomes[effect] = (
            _wait_pod(core, namespace, tenant, _terminal).status,
            _wait_pod(core, namespace, probe, _terminal).status,
        )
    tenant_status, probe_status = outcomes["NoSchedule"]
    assert (tenant_status.phase, probe_status.phase) == ("Succeeded", "Succeeded")
    tenant_status, probe_status = outcomes["NoExecute"]
    assert (tenant_status.phase, tenant_status.reason) == ("Failed", "TaintToleration")
    assert tenant_status.message == (
        "Pod was rejected: Predicate TaintToleration failed: node(s) had taints that the pod "
        "didn't tolerate"
    )
    assert not tenant_status.container_statuses
    assert probe_status.phase == "Succeeded"


def test_a_toolkit_start_error(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    name = f"gpu-{suffix}-toolkit"
    standin.add_node(SimNode(name, behaviour=StartFailure(TOOLKIT_MISMATCH)))
    core.create_namespaced_pod(namespace, _pod("toolkit", name, []))
    pod = _wait_pod(core, namespace, "toolkit", _terminal)
    term = pod.status.container_statuses[0].state.terminated
    assert pod.status.phase == "Failed"
    assert (term.exit_code, term.reason) == (128, "StartError")
    assert term.message.endswith("driver/library version mismatch: unknown")


def _waiting(reason: str) -> Callable[[k8s.V1Pod], bool]:
    def check(pod: k8s.V1Pod) -> bool:
        statuses = pod.status.container_statuses or []
        return bool(statuses) and getattr(statuses[0].state.waiting, "reason", None) == reason

    return check


def test_an_image_that_cannot_be_pulled(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    name = f"gpu-{suffix}-pull"
    standin.add_node(SimNode(name, behaviour=ImagePullFailure()))
    core.create_namespaced_pod(namespace, _pod("pull", name, [], activeDeadlineSeconds=2))
    pod = _wait_pod(core, namespace, "pull", _waiting("ErrImagePull"))
    assert pod.status.phase == "Pending"
    pod = _wait_pod(core, namespace, "pull", _terminal)
    assert pod.status.reason == "DeadlineExceeded"


def test_a_sandbox_that_cannot_be_created(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    name = f"gpu-{suffix}-sandbox"
    standin.add_node(SimNode(name, behaviour=SandboxFailure()))
    core.create_namespaced_pod(namespace, _pod("sandbox", name, [], activeDeadlineSeconds=2))
    _wait_pod(core, namespace, "sandbox", _waiting("ContainerCreating"))
    pod = _wait_pod(core, namespace, "sandbox", _terminal)
    # the container never ran: it stays waiting in the terminal status
    assert pod.status.reason == "DeadlineExceeded"
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    events = core.list_namespaced_event(
        namespace, field_selector="involvedObject.name=sandbox"
    ).items
    assert [e.reason for e in events] == ["FailedCreatePodSandBox"]
    assert 'no runtime for "nvidia" is configured' in events[0].message
