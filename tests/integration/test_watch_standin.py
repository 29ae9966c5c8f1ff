"""Watch pods on stand-in nodes, against the real kube-apiserver: a token-less pod that
requests no GPU runs ``gpuaccept probe watch`` from its node's profile and ends with
the watch report in its termination message."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from gpuaccept.contracts.probe_invocation import (
    FLAG_TERMINATION_LOG,
    FLAG_WINDOW,
    TERMINATION_LOG_PATH,
    WATCH_SUBCOMMAND,
)
from gpuaccept.contracts.watch_report import WatchEnd, decode_watch_message
from gpuaccept.testsupport.controlplane import ControlPlane
from gpuaccept.testsupport.kubelet_standin import KubeletStandIn, SimNode, StandInSettings

pytestmark = pytest.mark.integration

WAIT_S = 120  # an upper bound for one wait; not a timing assertion
ROOT = Path(__file__).resolve().parents[2]
INSERVICE = ROOT / "profiles" / "inservice"
HEALTHY = ROOT / "profiles" / "h100-sxm-8gpu-healthy.yaml"


@pytest.fixture(scope="module")
def suffix() -> str:
    return uuid.uuid4().hex[:6]


@pytest.fixture(scope="module")
def standin(control_plane: ControlPlane, suffix: str) -> Iterator[KubeletStandIn]:
    nodes = [
        SimNode(f"w-{suffix}-xid79", profile=str(INSERVICE / "xid79-after-acceptance.yaml")),
        SimNode(f"w-{suffix}-quiet", profile=str(INSERVICE / "quiet.yaml")),
        SimNode(
            f"w-{suffix}-later",
            profile=str(HEALTHY),
            later_profile=str(INSERVICE / "remap-pending.yaml"),
        ),
    ]
    # 1 simulated second = 0.01 s: a 60 s window takes well under a second
    s = KubeletStandIn(
        control_plane.configuration(),
        nodes=nodes,
        settings=StandInSettings(kill_grace_cap_s=2.0, sim_time_scale=0.01),
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
    ns = f"watch-{suffix}"
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_service_account(ns, {"metadata": {"name": "default"}})
    return ns


def watch_pod(name: str, node: str, window_s: int = 60) -> dict[str, Any]:
    """A watch pod as issue 23's design has it: no token, no GPU, no capabilities."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "watch",
                    "image": "gpuaccept/probe:test",
                    "command": ["gpuaccept", "probe", WATCH_SUBCOMMAND],
                    "args": [
                        FLAG_WINDOW,
                        str(window_s),
                        FLAG_TERMINATION_LOG,
                        TERMINATION_LOG_PATH,
                    ],
                    "env": [
                        {
                            "name": "NODE_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                        },
                        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                    ],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "terminationMessagePath": TERMINATION_LOG_PATH,
                }
            ],
        },
    }


def run_to_end(core: k8s.CoreV1Api, ns: str, pod: dict[str, Any]) -> k8s.V1Pod:
    core.create_namespaced_pod(ns, pod)
    name = pod["metadata"]["name"]
    w = watch.Watch()
    for ev in w.stream(
        core.list_namespaced_pod,
        ns,
        field_selector=f"metadata.name={name}",
        timeout_seconds=WAIT_S,
    ):
        obj = ev["object"]
        if obj.status is not None and obj.status.phase in ("Succeeded", "Failed"):
            w.stop()
            return obj
    raise AssertionError(f"pod {ns}/{name} did not end")


def terminated(pod: k8s.V1Pod) -> Any:
    return pod.status.container_statuses[0].state.terminated


def test_a_watch_pod_ends_early_on_xid_79_with_its_report(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    node = f"w-{suffix}-xid79"
    pod = run_to_end(core, namespace, watch_pod("w-xid79", node))
    state = terminated(pod)
    assert pod.status.phase == "Failed"  # exit 1: ended early
    report = decode_watch_message(state.message)
    assert (report.node_name, report.boot_id) == (node, standin.node(node).boot_id)
    assert report.simulated
    assert report.end_reason is WatchEnd.FATAL_XID
    assert [(x.gpu, x.xid) for x in report.xids] == [(3, 79)]
    assert report.gpus_lost() == 1


def test_a_quiet_window_succeeds_with_its_counts(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    pod = run_to_end(core, namespace, watch_pod("w-quiet", f"w-{suffix}-quiet"))
    assert pod.status.phase == "Succeeded"
    report = decode_watch_message(terminated(pod).message)
    assert (report.end_reason, report.watched_s, report.gpus_seen) == (WatchEnd.WINDOW, 60, 8)
    assert report.xids == []
    assert report.gpus[1].ecc_corrected == 3


def test_a_watch_pod_is_no_probe_for_the_later_profile(
    standin: KubeletStandIn, core: k8s.CoreV1Api, namespace: str, suffix: str
) -> None:
    """Before any probe the node is its first profile, however many watch pods ran."""
    node = f"w-{suffix}-later"
    for i in range(2):
        pod = run_to_end(core, namespace, watch_pod(f"w-later-{i}", node))
        report = decode_watch_message(terminated(pod).message)
        assert not any(g.remap_pending for g in report.gpus)
    assert standin.node(node).pods_run == 0
