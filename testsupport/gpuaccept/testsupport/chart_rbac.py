"""The Helm chart's RBAC on the local control plane — test support, not shipped.

The operator's integration tests run the operator *as the chart's ServiceAccount*,
so a verb missing from (or added to) ``charts/gpuaccept/templates/rbac.yaml``
shows up as a failing test, not as a day-one outage::

    from gpuaccept.testsupport.chart_rbac import apply_chart_rbac

    identity = apply_chart_rbac(control_plane, workdir=tmp_path)
    # identity.kubeconfig: a kubeconfig with a TokenRequest token for the
    #   operator's ServiceAccount (no client cert, no impersonation)
    # identity.namespace: the release namespace (probe pods go there)
    run_operator(kubeconfig=identity.kubeconfig, namespace=identity.namespace, ...)

``apply_crds`` applies every CRD the chart ships (crds/, generated from the
contract models) and waits until they are established.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from gpuaccept.operator.core.model import OperatorConfig

from gpuaccept.testsupport.controlplane import (
    ControlPlane,
    ControlPlaneError,
    bin_dir,
    build_tools,
    repo_root,
)

__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_RELEASE",
    "OPERATOR_TOKEN_SECONDS",
    "RBAC_KINDS",
    "ChartRelease",
    "OperatorIdentity",
    "apply_chart_rbac",
    "apply_crds",
    "apply_manifests",
    "chart_dir",
    "chart_version",
    "helm",
    "main",
    "operator_args",
    "operator_config",
    "operator_kubeconfig",
    "previous_and_next_chart",
    "release_token_kubeconfig",
    "remove_chart_rbac",
    "render_chart",
    "write_token_kubeconfig",
]

DEFAULT_RELEASE = "gpuaccept"
DEFAULT_NAMESPACE = "gpuaccept-system"
RBAC_KINDS = frozenset(
    {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
)

Manifest = dict[str, Any]
OPERATOR_TOKEN_SECONDS = 3600  # how long the operator's test kubeconfig stays valid


def chart_dir() -> Path:
    return repo_root() / "charts" / "gpuaccept"


def crds_dir() -> Path:
    return repo_root() / "crds"


def helm_binary() -> Path:
    exe = bin_dir() / "helm"
    if not exe.exists():
        build_tools(("helm",))
    return exe


def helm(
    *args: str,
    kubeconfig: Path | None = None,
    check: bool = True,
    timeout: float = 300,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``.bin/helm ARGS`` (built by mk/cluster.mk) with its state kept out of $HOME."""
    state = repo_root() / ".cache" / "helm"
    full_env = {
        **os.environ,
        "HELM_CACHE_HOME": str(state / "cache"),
        "HELM_CONFIG_HOME": str(state / "config"),
        "HELM_DATA_HOME": str(state / "data"),
        **(env or {}),
    }
    cmd = [str(helm_binary()), *args]
    if kubeconfig is not None:
        cmd += ["--kubeconfig", str(kubeconfig)]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=full_env, check=False
    )
    if check and proc.returncode != 0:
        raise ControlPlaneError(
            f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    return proc


@dataclass(frozen=True)
class ChartRelease:
    """A release of the chart: its name, its namespace and the values it is rendered with."""

    name: str = DEFAULT_RELEASE
    namespace: str = DEFAULT_NAMESPACE
    values_files: Sequence[Path] = ()
    set_values: Mapping[str, str] = field(default_factory=dict)

    def render(self, *, chart: Path | None = None, include_crds: bool = False) -> list[Manifest]:
        """``helm template`` the chart (default: this checkout's); the rendered objects
        (empty documents dropped)."""
        args = ["template", self.name, str(chart or chart_dir()), "--namespace", self.namespace]
        for path in self.values_files:
            args += ["--values", str(path)]
        for key, value in self.set_values.items():
            args += ["--set", f"{key}={value}"]
        if include_crds:
            args.append("--include-crds")
        out = helm(*args).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]


def render_chart(
    *,
    release: str = DEFAULT_RELEASE,
    namespace: str = DEFAULT_NAMESPACE,
    values_files: Sequence[Path] = (),
    set_values: Mapping[str, str] | None = None,
) -> list[Manifest]:
    """``helm template`` this checkout's chart as ``release`` in ``namespace``."""
    return ChartRelease(release, namespace, values_files, set_values or {}).render()


def apply_manifests(
    cp: ControlPlane, manifests: Iterable[Manifest], *, field_manager: str = "gpuaccept-tests"
) -> subprocess.CompletedProcess[str]:
    """Server-side apply ``manifests`` as the admin."""
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(manifests)})
    return cp.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        f"--field-manager={field_manager}",
        "-f",
        "-",
        input=body,
    )


def apply_crds(cp: ControlPlane, directory: Path | None = None) -> list[str]:
    """Apply every CRD in ``directory`` (default ``crds/``), wait until established.

    Returns the CRD names.
    """
    directory = directory or crds_dir()
    crds: list[Manifest] = []
    for path in sorted(directory.glob("*.yaml")):
        crds += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    apply_manifests(cp, crds)
    names = [str(crd["metadata"]["name"]) for crd in crds]
    cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names])
    return names


@dataclass(frozen=True)
class OperatorIdentity:
    """The operator's ServiceAccount as the chart renders it, on the control plane."""

    namespace: str
    service_account: str
    kubeconfig: Path
    token: str
    manifests: tuple[Manifest, ...]

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


def write_token_kubeconfig(
    path: Path, *, server: str, ca_file: Path, token: str, user: str = "gpuaccept-operator"
) -> Path:
    """A kubeconfig that authenticates with ``token`` only."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "local", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "local", "user": user}}],
        "current-context": user,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def operator_service_account(manifests: Iterable[Manifest]) -> str:
    """The name of the ServiceAccount the operator Deployment runs as."""
    for obj in manifests:
        if obj.get("kind") == "Deployment":
            name = obj["spec"]["template"]["spec"].get("serviceAccountName")
            if name:
                return str(name)
    raise ControlPlaneError("the rendered chart has no Deployment with a serviceAccountName")


def apply_chart_rbac(
    cp: ControlPlane,
    *,
    workdir: Path,
    release: ChartRelease = ChartRelease(),
    transform: Callable[[list[Manifest]], list[Manifest]] | None = None,
    crds: bool = True,
) -> OperatorIdentity:
    """Render ``release``, apply its ServiceAccounts/ClusterRole/Role/bindings (and the
    CRDs) to ``cp``, and return a kubeconfig for the operator's ServiceAccount (its
    token valid for :data:`OPERATOR_TOKEN_SECONDS`).

    ``transform`` edits the rendered RBAC objects before they are applied (e.g. drop
    a verb, to prove a test fails without it). Only RBAC kinds are applied: the
    operator itself runs as a local process, not as the chart's Deployment.
    """
    if crds:
        apply_crds(cp)
    namespace = release.namespace
    rendered = release.render()
    sa_name = operator_service_account(rendered)
    rbac = [obj for obj in rendered if obj.get("kind") in RBAC_KINDS]
    if transform is not None:
        rbac = transform(rbac)
    cp.kubectl("create", "namespace", namespace, check=False)
    apply_manifests(cp, rbac)
    token = cp.service_account_token(namespace, sa_name, expiration_seconds=OPERATOR_TOKEN_SECONDS)
    kubeconfig = write_token_kubeconfig(
        workdir / f"{release.name}-{sa_name}.kubeconfig",
        server=cp.server,
        ca_file=cp.ca_file,
        token=token,
        user=f"{namespace}-{sa_name}",
    )
    return OperatorIdentity(
        namespace=namespace,
        service_account=sa_name,
        kubeconfig=kubeconfig,
        token=token,
        manifests=tuple(rbac),
    )


def remove_chart_rbac(cp: ControlPlane, identity: OperatorIdentity) -> None:
    """Delete what :func:`apply_chart_rbac` applied (not the CRDs, not the namespace)."""
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(identity.manifests)})
    cp.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=body)


def chart_version(chart: Path) -> str:
    return str(yaml.safe_load((chart / "Chart.yaml").read_text())["version"])


def previous_and_next_chart(workdir: Path) -> tuple[Path, Path, str]:
    """The previous released chart (from git history) and the current one.

    The previous chart is the newest commit whose Chart.yaml has another
    ``version``. While the chart has a single version (no earlier release yet),
    the current chart plays the previous one, and a copy with the patch
    version bumped plays the next: the upgrade path is still exercised.
    """
    root = repo_root()
    current = chart_dir()
    version = chart_version(current)
    log = subprocess.run(
        ["git", "-C", str(root), "log", "--format=%H", "--", "charts/gpuaccept/Chart.yaml"],
        capture_output=True,
        text=True,
        check=False,
    )
    for commit in log.stdout.split():
        shown = subprocess.run(
            ["git", "-C", str(root), "show", f"{commit}:charts/gpuaccept/Chart.yaml"],
            capture_output=True,
            text=True,
            check=False,
        )
        if shown.returncode != 0:
            continue
        old = str(yaml.safe_load(shown.stdout)["version"])
        if old != version:
            target = workdir / "previous"
            target.mkdir(parents=True)
            archive = subprocess.run(
                ["git", "-C", str(root), "archive", commit, "charts/gpuaccept"],
                capture_output=True,
                check=True,
            )
            subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
            return target / "charts" / "gpuaccept", current, f"git {commit[:12]} ({old})"
    bumped = workdir / "next" / "gpuaccept"
    shutil.copytree(current, bumped)
    chart_yaml = bumped / "Chart.yaml"
    major, minor, patch = (int(x) for x in re.split(r"[.+-]", version)[:3])
    chart_yaml.write_text(
        re.sub(
            r"^version: .*$",
            f"version: {major}.{minor}.{patch + 1}",
            chart_yaml.read_text(),
            flags=re.M,
        )
    )
    return current, bumped, f"current {version} (first release)"


_IDENTITIES: dict[tuple[str, str, str], OperatorIdentity] = {}


def operator_kubeconfig(cp: ControlPlane, *, namespace: str, lease: str, workdir: Path) -> Path:
    """A kubeconfig for the operator as the chart's ServiceAccount, for tests that
    start ``gpuaccept operator --namespace NAMESPACE --lease-name LEASE`` themselves.

    The chart is rendered with that Lease name (its Role allows get/update on that
    Lease only), under a release named after the Lease, so tests that use several
    Leases in one namespace each get an identity. Cached per (server, namespace,
    lease) for the process.
    """
    key = (cp.server, namespace, lease)
    cached = _IDENTITIES.get(key)
    if cached is None or not cached.kubeconfig.exists():
        release = f"rbac-{lease}"[:40].rstrip("-.")
        values = {
            "fullnameOverride": release,
            "operator.leaderElection.leaseName": lease,
            "defaultPolicy.enabled": "false",
        }
        cached = apply_chart_rbac(
            cp, workdir=workdir, release=ChartRelease(release, namespace, set_values=values)
        )
        _IDENTITIES[key] = cached
    return cached.kubeconfig


def operator_args(manifests: Iterable[Manifest]) -> list[str]:
    """The operator container's arguments as the chart renders them (after ``gpuaccept``)."""
    for obj in manifests:
        if obj.get("kind") == "Deployment":
            container = obj["spec"]["template"]["spec"]["containers"][0]
            return [str(arg) for arg in container.get("args", [])]
    raise ControlPlaneError("the rendered chart has no Deployment")


def operator_config(manifests: Iterable[Manifest]) -> OperatorConfig:
    """The operator's configuration from the arguments the chart renders, built as
    ``gpuaccept operator`` builds it (its probe and fabric pod settings)."""
    from gpuaccept.operator.core.model import OperatorConfig  # noqa: PLC0415
    from gpuaccept.operator.options import (  # noqa: PLC0415
        base_node_selector,
        dra_device_class,
        dra_drivers,
        fabric_pods,
        owned_key_prefixes,
        parser,
        pod_annotations,
        pod_labels,
        probe_env,
        probe_resources,
        probe_tolerations,
    )

    args = parser().parse_args(operator_args(manifests)[1:])
    return OperatorConfig(
        namespace=args.namespace,
        probe_image=args.probe_image,
        probe_command=tuple(args.probe_command.split()),
        image_pull_policy=args.probe_image_pull_policy,
        pod_prefix=args.probe_pod_prefix,
        service_account=args.probe_service_account,
        runtime_class=args.probe_runtime_class or None,
        priority_class=args.probe_priority_class or None,
        extra_tolerations=probe_tolerations(args.probe_tolerations),
        resources=probe_resources(args.probe_resources),
        shm_size=args.probe_shm_size or None,
        default_timeout_seconds=args.probe_timeout,
        owned_key_prefixes=owned_key_prefixes(args.owned_key_prefixes),
        image_pull_secrets=tuple(dict.fromkeys(args.probe_image_pull_secrets)),
        fabric=fabric_pods(args.fabric_pods),
        pod_labels=pod_labels(args.probe_pod_labels),
        pod_annotations=pod_annotations(args.probe_pod_annotations),
        probe_env=probe_env(args.probe_env),
        base_node_selector=base_node_selector(
            args.node_selector, allow_control_plane=args.allow_control_plane_nodes
        ),
        allow_control_plane=args.allow_control_plane_nodes,
        dra_drivers=dra_drivers(args.dra_driver),
        dra_device_class=dra_device_class(args.dra_device_class),
    )


def release_token_kubeconfig(
    cp_kubeconfig: Path,
    *,
    namespace: str,
    service_account: str,
    out: Path,
    token_seconds: int = 3600,
) -> Path:
    """A token kubeconfig for an *installed* release's operator ServiceAccount."""
    admin = yaml.safe_load(cp_kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    request = json.dumps(
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": token_seconds},
        }
    )
    kubectl = bin_dir() / "kubectl"
    proc = subprocess.run(
        [
            str(kubectl), "--kubeconfig", str(cp_kubeconfig), "create", "--raw",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            "-f", "-",
        ],
        input=request, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise ControlPlaneError(f"TokenRequest for {namespace}/{service_account}: {proc.stderr}")
    token = json.loads(proc.stdout)["status"]["token"]
    ca_file = cluster.get("certificate-authority")
    if ca_file is not None and not Path(ca_file).is_absolute():
        cluster = {
            **cluster,
            "certificate-authority": str((cp_kubeconfig.parent / ca_file).resolve()),
        }
    user = f"{namespace}-{service_account}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "local", "user": user}}],
        "current-context": user,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    out.chmod(0o600)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gpuaccept.testsupport.chart_rbac {args,kubeconfig} ...`` (docs/install.md)."""
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="python -m gpuaccept.testsupport.chart_rbac",
        description="Run the operator locally as the chart's ServiceAccount.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    args_cmd = sub.add_parser(
        "args", help="print the operator's arguments as the chart renders them"
    )
    token_cmd = sub.add_parser(
        "kubeconfig", help="write a TokenRequest kubeconfig for an installed release's operator"
    )
    for cmd in (args_cmd, token_cmd):
        cmd.add_argument("--release", default=DEFAULT_RELEASE)
        cmd.add_argument("--namespace", default=DEFAULT_NAMESPACE)
        cmd.add_argument("-f", "--values", action="append", default=[], type=Path)
        cmd.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    token_cmd.add_argument("--kubeconfig", type=Path, required=True, help="admin kubeconfig")
    token_cmd.add_argument("--out", type=Path, required=True)
    token_cmd.add_argument("--token-seconds", type=int, default=3600)
    ns = parser.parse_args(argv)
    sets = dict(item.split("=", 1) for item in ns.set)
    rendered = ChartRelease(ns.release, ns.namespace, ns.values, sets).render()
    if ns.command == "args":
        # One argument per line: `mapfile -t ARGS < <(...)` keeps JSON values whole.
        print("\n".join(operator_args(rendered)))
        return 0
    path = release_token_kubeconfig(
        ns.kubeconfig,
        namespace=ns.namespace,
        service_account=operator_service_account(rendered),
        out=ns.out,
        token_seconds=ns.token_seconds,
    )
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
