"""Local Kubernetes control plane for tests — test support, not part of the shipped operator.

Drives the Go binary built from ``hack/controlplane`` (embedded etcd + upstream
kube-apiserver, see docs/controlplane.md)::

    cp = start()              # reuses a cluster from `make cluster-up` if one runs in .cluster/
    api = cp.api_client()     # admin (system:masters)
    sa = cp.api_client(impersonate_user="system:serviceaccount:ns:name")
    ...
    cp.stop()                 # only stops it if this call started it (cp.owned)

Binaries come from ``make -f mk/cluster.mk .bin/controlplane .bin/kubectl``
(a no-op when up to date). Set ``GPUACCEPT_CONTROLPLANE_BIN`` to use another
controlplane binary without make.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import urllib3
from kubernetes import client as k8s

__all__ = [
    "ControlPlane",
    "ControlPlaneError",
    "build_tools",
    "default_dir",
    "find_running",
    "repo_root",
    "start",
    "stop",
]

IMPERSONATE_USER = "Impersonate-User"
IMPERSONATE_GROUP = "Impersonate-Group"


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or stopped."""


def repo_root() -> Path:
    """The checkout: ``$GPUACCEPT_REPO_ROOT`` or the first parent holding hack/controlplane."""
    env = os.environ.get("GPUACCEPT_REPO_ROOT")
    if env:
        return Path(env).resolve()
    for parent in Path(__file__).resolve().parents:
        if (parent / "hack" / "controlplane" / "go.mod").is_file():
            return parent
    raise ControlPlaneError(
        "cannot find the repository root (no hack/controlplane/go.mod above "
        f"{__file__}); set GPUACCEPT_REPO_ROOT"
    )


def default_dir() -> Path:
    """State dir of the shared cluster: ``$GPUACCEPT_CLUSTER_DIR`` or ``<repo>/.cluster``."""
    env = os.environ.get("GPUACCEPT_CLUSTER_DIR")
    return Path(env).resolve() if env else repo_root() / ".cluster"


def bin_dir() -> Path:
    return repo_root() / ".bin"


def build_tools(targets: Sequence[str] = ("controlplane", "kubectl")) -> None:
    """Build ``.bin/<target>`` with make (fast no-op when up to date)."""
    if os.environ.get("GPUACCEPT_CONTROLPLANE_BIN"):
        return
    root = repo_root()
    make = shutil.which("make")
    if make is None:
        raise ControlPlaneError("`make` not found on PATH; needed to build hack/controlplane")
    cmd = [make, "--no-print-directory", "-C", str(root), "-f", "mk/cluster.mk"]
    cmd += [f".bin/{t}" for t in targets]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(
            f"building {', '.join(targets)} failed ({' '.join(cmd)}):\n{proc.stdout}{proc.stderr}"
        )


def controlplane_binary() -> Path:
    env = os.environ.get("GPUACCEPT_CONTROLPLANE_BIN")
    return Path(env) if env else bin_dir() / "controlplane"


class _MultiGroupRESTClient(k8s.rest.RESTClientObject):
    """A REST client that sends one ``Impersonate-Group`` header line per group.

    ``ApiClient.default_headers`` is a plain dict, so it cannot repeat a header;
    the apiserver reads each header line as one group (it does not split on
    commas). urllib3's HTTPHeaderDict can carry repeated headers.
    """

    def __init__(self, configuration: k8s.Configuration, groups: Sequence[str]) -> None:
        super().__init__(configuration)
        self._groups = tuple(groups)

    def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        hdrs = urllib3.HTTPHeaderDict(dict(headers or {}))
        hdrs.discard(IMPERSONATE_GROUP)
        for g in self._groups:
            hdrs.add(IMPERSONATE_GROUP, g)
        return cast(Any, super()).request(
            method,
            url,
            headers=hdrs,
            body=body,
            post_params=post_params,
            _request_timeout=_request_timeout,
        )


@dataclass(frozen=True)
class ControlPlane:
    """A running control plane. ``owned``: started by this process (``stop()`` stops it)."""

    dir: Path
    server: str
    kubeconfig: Path
    pid: int
    owned: bool
    kubernetes_version: str = ""
    state: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # -- files ------------------------------------------------------------
    @property
    def ca_file(self) -> Path:
        return self.dir / "pki" / "ca.crt"

    @property
    def admin_cert_file(self) -> Path:
        return self.dir / "pki" / "admin.crt"

    @property
    def admin_key_file(self) -> Path:
        return self.dir / "pki" / "admin.key"

    @property
    def log_file(self) -> Path:
        return self.dir / "controlplane.log"

    # -- clients ----------------------------------------------------------
    def configuration(self, *, token: str | None = None) -> k8s.Configuration:
        """A client Configuration: admin client cert, or only ``token`` (Bearer) when given."""
        cfg = k8s.Configuration(host=self.server)
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.verify_ssl = True
        if token is None:
            cfg.cert_file = str(self.admin_cert_file)
            cfg.key_file = str(self.admin_key_file)
        else:
            cfg.api_key = {"BearerToken": token}
            cfg.api_key_prefix = {"BearerToken": "Bearer"}
        return cfg

    def api_client(
        self,
        *,
        impersonate_user: str | None = None,
        impersonate_groups: Sequence[str] = (),
        token: str | None = None,
    ) -> k8s.ApiClient:
        """A ``kubernetes.client.ApiClient``.

        Default: the admin (``kubernetes-admin``, group ``system:masters``).
        ``impersonate_user`` / ``impersonate_groups``: the admin acts as that
        identity via ``Impersonate-User`` / ``Impersonate-Group`` headers, so
        RBAC is evaluated for it. For a ServiceAccount pass
        ``system:serviceaccount:<ns>:<name>`` (the apiserver then adds the
        ``system:serviceaccounts[:<ns>]`` groups itself) or use
        :meth:`service_account_client`. ``token``: authenticate with this
        bearer token only (e.g. from TokenRequest), no client cert.
        """
        if impersonate_groups and not impersonate_user:
            raise ValueError("impersonate_groups needs impersonate_user")
        api = k8s.ApiClient(self.configuration(token=token))
        if impersonate_user:
            cast(Any, api).set_default_header(IMPERSONATE_USER, impersonate_user)
        if impersonate_groups:
            api.rest_client = _MultiGroupRESTClient(api.configuration, impersonate_groups)
        return api

    def service_account_client(self, namespace: str, name: str) -> k8s.ApiClient:
        """The admin impersonating ServiceAccount ``namespace/name``."""
        return self.api_client(impersonate_user=f"system:serviceaccount:{namespace}:{name}")

    def service_account_token(
        self, namespace: str, name: str, *, expiration_seconds: int = 3600
    ) -> str:
        """A bound token for ServiceAccount ``namespace/name`` via the TokenRequest API."""
        with self.api_client() as api:
            core = k8s.CoreV1Api(api)
            tr = core.create_namespaced_service_account_token(
                name,
                namespace,
                k8s.AuthenticationV1TokenRequest(
                    spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds)
                ),
            )
            token = tr.status.token if tr.status is not None else None
            if not isinstance(token, str):
                raise ControlPlaneError(f"TokenRequest for {namespace}/{name} returned no token")
            return token

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run ``.bin/kubectl --kubeconfig <this cluster> ARGS``; text output."""
        exe = bin_dir() / "kubectl"
        if not exe.exists():
            build_tools(("kubectl",))
        proc = subprocess.run(
            [str(exe), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            input=input,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
            )
        return proc

    def get_raw(self, path: str) -> str:
        """GET ``path`` as the admin, body as text (e.g. ``/readyz``)."""
        with self.api_client() as api:
            resp = api.rest_client.request("GET", self.server + path, headers={})
            resp.read()
            data = resp.data
            assert isinstance(data, bytes)
            if resp.status != 200:
                raise ControlPlaneError(f"GET {path}: {resp.status} {data!r}")
            return data.decode()

    def stop(self, *, force: bool = False) -> None:
        """Stop it and remove its state dir, if this process started it (or ``force``)."""
        if self.owned or force:
            stop(self.dir)


def _run_binary(args: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    exe = controlplane_binary()
    if not exe.exists():
        raise ControlPlaneError(f"{exe} does not exist; run `make cluster-tools`")
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _from_state(st: Mapping[str, Any], owned: bool) -> ControlPlane:
    return ControlPlane(
        dir=Path(st["dir"]),
        server=str(st["server"]),
        kubeconfig=Path(st["kubeconfig"]),
        pid=int(st["pid"]),
        owned=owned,
        kubernetes_version=str(st.get("kubernetesVersion", "")),
        state=dict(st),
    )


def find_running(directory: Path | str | None = None) -> ControlPlane | None:
    """The ready control plane in ``directory`` (default :func:`default_dir`), or None."""
    d = Path(directory).resolve() if directory else default_dir()
    if not (d / "state.json").exists() or not controlplane_binary().exists():
        return None
    proc = _run_binary(["status", "--json", "--dir", str(d)], timeout=30)
    if proc.returncode != 0:
        return None
    return _from_state(json.loads(proc.stdout), owned=False)


def start(
    directory: Path | str | None = None,
    *,
    build: bool = True,
    timeout: float = 180.0,
    port: int = 0,
    extra_apiserver_args: Sequence[str] = (),
) -> ControlPlane:
    """Start a control plane in ``directory`` (default ``<repo>/.cluster``) or reuse a running one.

    Returns when ``/readyz`` is ok and the default namespaces exist. The
    result's ``owned`` is False when an already running cluster was reused.
    """
    d = Path(directory).resolve() if directory else default_dir()
    if build:
        build_tools()
    args = ["up", "--json", "--dir", str(d), f"--timeout={int(timeout)}s", f"--port={port}"]
    args += [f"--apiserver-arg={a}" for a in extra_apiserver_args]
    proc = _run_binary(args, timeout=timeout + 30)
    if proc.returncode != 0:
        raise ControlPlaneError(
            f"controlplane up --dir {d} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise ControlPlaneError(f"controlplane up printed no state:\n{proc.stdout}{proc.stderr}")
    st = json.loads(lines[-1])
    return _from_state(st, owned=not st.get("reused", False))


def stop(directory: Path | str | None = None, *, timeout: float = 60.0) -> None:
    """Stop the control plane in ``directory`` and remove the directory."""
    d = Path(directory).resolve() if directory else default_dir()
    proc = _run_binary(["down", "--dir", str(d)], timeout=timeout)
    if proc.returncode != 0:
        raise ControlPlaneError(
            f"controlplane down --dir {d} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
