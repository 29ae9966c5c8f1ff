"""The local control plane (hack/controlplane): a real kube-apiserver + etcd.

Uses the session fixture ``control_plane`` (gpuaccept.testsupport.pytest_plugin),
except the lifecycle test, which runs its own instance in a temp dir so that
stopping it cannot disturb the shared one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from gpuaccept.testsupport import controlplane
from gpuaccept.testsupport.controlplane import ControlPlane
from gpuaccept.testsupport.processes import pid_alive

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def namespace(control_plane: ControlPlane) -> str:
    """A fresh namespace. It is not deleted: without kube-controller-manager's namespace
    controller a deleted namespace would stay Terminating forever anyway."""
    name = _unique("cp-test")
    with control_plane.api_client() as api:
        k8s.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


def test_readyz(control_plane: ControlPlane) -> None:
    assert control_plane.get_raw("/readyz") == "ok"
    out = control_plane.kubectl("get", "--raw", "/readyz").stdout
    assert out.strip() == "ok"


def test_server_version_is_the_pinned_release(control_plane: ControlPlane) -> None:
    out = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    gomod = (controlplane.repo_root() / "hack/controlplane/go.mod").read_text()
    pinned = next(
        line.split()[1]
        for line in gomod.splitlines()
        if line.strip().startswith("k8s.io/kubernetes ")
    )
    assert out["serverVersion"]["gitVersion"] == pinned
    assert out["clientVersion"]["gitVersion"] == pinned


def test_api_resources(control_plane: ControlPlane) -> None:
    names = set(control_plane.kubectl("api-resources", "-o", "name").stdout.split())
    for r in (
        "nodes",
        "pods",
        "events",
        "events.events.k8s.io",
        "leases.coordination.k8s.io",
        "customresourcedefinitions.apiextensions.k8s.io",
        "serviceaccounts",
        "clusterroles.rbac.authorization.k8s.io",
    ):
        assert r in names, f"{r} missing from api-resources: {sorted(names)}"


def test_crd_from_file_is_served_with_printer_columns(
    control_plane: ControlPlane, namespace: str
) -> None:
    kc = control_plane.kubectl
    kc("apply", "-f", str(FIXTURES / "widget-crd.yaml"))
    kc(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/widgets.test.gpuaccept.io",
    )
    widget = {
        "apiVersion": "test.gpuaccept.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w1", "namespace": namespace},
        "spec": {"size": 3, "color": "green", "notInSchema": "pruned"},
    }
    # kubectl validates strictly by default: the unknown field is refused ...
    strict = kc("apply", "-f", "-", input=json.dumps(widget), check=False)
    assert strict.returncode != 0
    assert 'unknown field "spec.notInSchema"' in strict.stderr
    # ... and without field validation the server prunes it (structural schema).
    kc("apply", "--validate=false", "-f", "-", input=json.dumps(widget))

    table = kc("get", "widgets", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "SIZE", "COLOR", "PHASE"]
    assert table[1].split()[:3] == ["w1", "3", "green"]

    got = json.loads(kc("get", "widget", "w1", "-n", namespace, "-o", "json").stdout)
    assert "notInSchema" not in got["spec"]
    # Schema validation rejects what the schema forbids.
    bad = dict(widget, metadata={"name": "w2", "namespace": namespace}, spec={"size": -1})
    proc = kc("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert proc.returncode != 0
    assert "spec.size" in proc.stderr

    # The status subresource is served: status is only written through it.
    with control_plane.api_client() as api:
        co = k8s.CustomObjectsApi(api)
        co.patch_namespaced_custom_object_status(
            "test.gpuaccept.io", "v1", namespace, "widgets", "w1", {"status": {"phase": "Shiny"}}
        )
    row = kc("get", "widget", "w1", "-n", namespace, "--no-headers").stdout.split()
    assert row[:4] == ["w1", "3", "green", "Shiny"]


def _create_sa(control_plane: ControlPlane, namespace: str, name: str) -> None:
    with control_plane.api_client() as api:
        k8s.CoreV1Api(api).create_namespaced_service_account(
            namespace, {"metadata": {"name": name}}
        )


def test_service_account_without_role_is_forbidden_via_impersonation(
    control_plane: ControlPlane, namespace: str
) -> None:
    _create_sa(control_plane, namespace, "nobody")
    with control_plane.api_client() as admin:
        k8s.CoreV1Api(admin).list_node()  # the admin may
    with control_plane.service_account_client(namespace, "nobody") as api:
        with pytest.raises(ApiException) as exc:
            k8s.CoreV1Api(api).list_node()
        assert exc.value.status == 403
        assert "Forbidden" in str(exc.value.reason) or "forbidden" in str(exc.value.body)
        assert f"system:serviceaccount:{namespace}:nobody" in str(exc.value.body)


def _whoami(api: k8s.ApiClient) -> dict[str, Any]:
    review = k8s.AuthenticationV1Api(api).create_self_subject_review({})
    user = review.status.user_info
    return {"username": user.username, "groups": list(user.groups or [])}


def test_service_account_token_from_token_request(
    control_plane: ControlPlane, namespace: str
) -> None:
    _create_sa(control_plane, namespace, "reader")
    token = control_plane.service_account_token(namespace, "reader")
    with control_plane.api_client(token=token) as api:
        me = _whoami(api)
        assert me["username"] == f"system:serviceaccount:{namespace}:reader"
        assert f"system:serviceaccounts:{namespace}" in me["groups"]
        with pytest.raises(ApiException) as exc:
            k8s.CoreV1Api(api).list_node()
        assert exc.value.status == 403

        # RBAC is evaluated, not a blanket deny: grant it and the same call works.
        role = _unique("node-reader")
        with control_plane.api_client() as admin:
            rbac = k8s.RbacAuthorizationV1Api(admin)
            rbac.create_cluster_role(
                {
                    "metadata": {"name": role},
                    "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
                }
            )
            rbac.create_cluster_role_binding(
                {
                    "metadata": {"name": role},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": role,
                    },
                    "subjects": [
                        {"kind": "ServiceAccount", "name": "reader", "namespace": namespace}
                    ],
                }
            )
        try:
            # The authorizer reads RBAC through an informer: a new binding counts
            # within moments, not at once, so wait for it (and fail if it never does).
            deadline = time.monotonic() + 30
            while True:
                try:
                    k8s.CoreV1Api(api).list_node()
                    break
                except ApiException as error:
                    if error.status != 403 or time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        finally:
            with control_plane.api_client() as admin:
                rbac = k8s.RbacAuthorizationV1Api(admin)
                rbac.delete_cluster_role_binding(role)
                rbac.delete_cluster_role(role)


def test_impersonating_a_user_with_groups(control_plane: ControlPlane) -> None:
    with control_plane.api_client(
        impersonate_user="alice", impersonate_groups=["team-a", "team-b"]
    ) as api:
        me = _whoami(api)
    assert me["username"] == "alice"
    assert {"team-a", "team-b"} <= set(me["groups"])
    with control_plane.api_client() as api:
        me = _whoami(api)
    assert me["username"] == "kubernetes-admin"
    assert "system:masters" in me["groups"]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    root = controlplane.repo_root()
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(root), "-f", "mk/cluster.mk", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_lifecycle_make_up_reuse_refuse_down(tmp_path: Path) -> None:
    """A separate instance in its own dir and ports: `make cluster-up` twice (the second
    reuses it), the Python API reuses it, --fail-if-running refuses, and `make cluster-down`
    leaves no process, no listening port and no state dir."""
    d = tmp_path / "cluster"
    up = _make("cluster-up", f"CLUSTER_DIR={d}")
    assert up.returncode == 0, up.stdout + up.stderr
    cp = controlplane.start(d)
    try:
        assert not cp.owned  # reused the one make started
        assert cp.kubeconfig.is_file()
        assert cp.get_raw("/readyz") == "ok"
        ports = [int(cp.state[k]) for k in ("apiserverPort", "etcdClientPort", "etcdPeerPort")]
        assert all(_listening(p) for p in ports)

        again = _make("cluster-up", f"CLUSTER_DIR={d}")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "already running" in again.stderr
        assert controlplane.start(d).pid == cp.pid

        proc = subprocess.run(
            [str(controlplane.controlplane_binary()), "up", "--fail-if-running", "--dir", str(d)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 3
        assert "already running" in proc.stderr
    finally:
        down = _make("cluster-down", f"CLUSTER_DIR={d}")
    assert down.returncode == 0, down.stdout + down.stderr
    assert not pid_alive(cp.pid)
    assert not any(_listening(p) for p in ports)
    assert not d.exists()
    # No process of that instance is left.
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and pid_alive(int(entry.name)):
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            assert str(d).encode() not in cmdline
    # Down with nothing running is a no-op, not an error.
    assert _make("cluster-down", f"CLUSTER_DIR={d}").returncode == 0


def _down_beside(
    d: Path, serving_args: list[str]
) -> tuple[subprocess.CompletedProcess[str], int, int]:
    """`controlplane down` on a state whose serving process is a stand-in (its own
    session, listening on the API server's port, ``serving_args`` on its command line)
    while this test's process holds the etcd client port. Returns the run and the two
    ports."""
    d.mkdir()
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen()
    listen = (
        "import socket, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "print(s.getsockname()[1], flush=True); time.sleep(600)"
    )
    serving = subprocess.Popen(
        ["python3", "-c", listen, *serving_args],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert serving.stdout is not None
        api_port = int(serving.stdout.readline())
        state = {
            "pid": serving.pid,
            "apiserverPort": api_port,
            "etcdClientPort": other.getsockname()[1],
            "etcdPeerPort": 0,
            "dir": str(d),
        }
        (d / "state.json").write_text(json.dumps(state))
        down = subprocess.run(
            [str(controlplane.controlplane_binary()), "down", "--dir", str(d), "--timeout", "10s"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        return down, api_port, other.getsockname()[1]
    finally:
        other.close()
        if serving.poll() is None:
            os.killpg(serving.pid, signal.SIGKILL)
        serving.wait(timeout=10)


def test_down_is_not_fooled_by_a_port_another_process_took(tmp_path: Path) -> None:
    """Once a control plane's ports are free, another process may take one at once (the
    tests start control planes side by side on ports the kernel picks): `down` then
    says so and succeeds."""
    down, api_port, taken = _down_beside(tmp_path / "cluster", ["serve"])
    assert down.returncode == 0, down.stdout + down.stderr
    assert "stopped control plane" in down.stdout
    assert f"port {taken} is listening again, held by another process group" in down.stdout
    assert not _listening(api_port)
    assert not (tmp_path / "cluster").exists()


def test_down_fails_while_its_own_process_group_holds_a_port(tmp_path: Path) -> None:
    """A port the control plane's own process group still holds after `down` is an
    error (here a process `down` does not take for the serving one: no ``serve`` on its
    command line, so it is not signalled)."""
    down, api_port, _ = _down_beside(tmp_path / "cluster", [])
    assert down.returncode == 1, down.stdout + down.stderr
    assert f"port {api_port} on 127.0.0.1 is still held by the control plane's process group" in (
        down.stderr
    )
    assert (tmp_path / "cluster").exists()
