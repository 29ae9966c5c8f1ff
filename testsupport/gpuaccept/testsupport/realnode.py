"""A real node on the local control plane — test support, not shipped.

``make node-up`` / ``make node-down`` (docs/realnode.md) drive this module::

    python -m gpuaccept.testsupport.realnode up   [--node-dir .node] [--cluster-dir .cluster-node]
                                                  [--gpus 8] [--profile FILE] [--label K=V ...]
                                                  [--dra]
    python -m gpuaccept.testsupport.realnode down [--node-dir .node] [--cluster-dir .cluster-node]
    python -m gpuaccept.testsupport.realnode import-image --layout DIR --tag TAG --name NAME

``up`` makes a small but real cluster out of the local control plane
(:mod:`gpuaccept.testsupport.controlplane`, its own state directory, by default
``.cluster-node``, so that the stand-in tests' cluster never sees this node):

* kube-controller-manager and kube-scheduler (built from the same
  ``k8s.io/kubernetes`` as the apiserver, ``hack/node``), registered as
  attached processes of the control plane, so that Deployments get pods,
  pods get nodes, Services get EndpointSlices and namespaces get their
  ``default`` ServiceAccount and ``kube-root-ca.crt``;
* one node: containerd 2 (``hack/containerd``, CDI specs from the node
  directory) + runc (Debian's package), the CNI bridge plugin,
  the kubelet, and a FAKE device plugin that advertises ``--gpus`` devices of
  ``nvidia.com/gpu`` or, with ``--dra``, a FAKE DRA kubelet plugin that
  publishes them as devices of a ``gpu.nvidia.com`` ResourceSlice and prepares
  claims through CDI (plus the driver's DeviceClass, as NVIDIA's chart
  installs it) (:mod:`gpuaccept.testsupport.realnode_supervisor` runs them in
  their own mount namespace; :func:`switch` restarts the node in the other
  mode on the same control plane);
* the ``kubernetes`` Service reachable from pods: an iptables DNAT rule on the
  node's bridge sends 10.96.0.1:443 to the apiserver on 127.0.0.1, as
  kube-proxy would;
* the sandbox (pause) image built from k8s.io/kubernetes' ``pause.c`` and a
  static busybox image, imported into containerd (no registry is reachable).

``down`` stops the node (containers killed, mounts and cgroups gone), removes
the bridge and the DNAT rule, the Node object, the controllers, and the
control plane when ``up`` started it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from gpuaccept.testsupport import attached
from gpuaccept.testsupport.controlplane import (
    ControlPlane,
    ControlPlaneError,
    find_running,
    repo_root,
    start,
)
from gpuaccept.testsupport.oci_archive import (
    ImageFile,
    layout_digest,
    write_files_image,
    write_layout_image,
)
from gpuaccept.testsupport.realnode_config import (
    DEVICE_PLUGIN_DIR,
    SANDBOX_IMAGE,
    SERVICE_HOST,
    NodeLayout,
    NodeSettings,
    cni_config,
    containerd_config,
    kubelet_config,
    kubelet_kubeconfig,
)
from gpuaccept.testsupport.realnode_supervisor import HOST_MNTNS_ENV
from gpuaccept.testsupport.standin_dra import DRA_DRIVER, device_class_manifest

__all__ = [
    "BUSYBOX_IMAGE",
    "RealNode",
    "RealNodeError",
    "down",
    "ensure_layout_image",
    "import_archive",
    "import_layout_image",
    "node_slices",
    "switch",
    "up",
]

BUSYBOX_IMAGE = "localhost/gpuaccept/busybox:1"
KUBE_MODULE = "k8s.io/kubernetes"
SUPERVISOR = "realnode"  # its name in the control plane's attached/ directory
CONTROLLERS = ("kube-controller-manager", "kube-scheduler")
DNAT_COMMENT = "gpuaccept-realnode"
HOST_TOOLS = ("runc", "unshare", "iptables", "ip", "openssl", "gcc")
# containerd 2 and its shim and client, built from its Go module (make node-tools); named
# apart from Debian's containerd 1.6, which may be installed too.
CONTAINERD = "containerd2"
CONTAINERD_SHIM = "containerd2-shim-runc-v2"
CTR = "ctr2"
CNI_PLUGINS = ("bridge", "host-local", "loopback")


class RealNodeError(RuntimeError):
    """The node could not be set up, or stopped."""


@dataclass(frozen=True)
class RealNode:
    """A running node: its settings, its control plane and where its files are."""

    settings: NodeSettings
    control_plane: ControlPlane

    @property
    def layout(self) -> NodeLayout:
        return NodeLayout(self.settings.node_dir)

    def ctr(self, *args: str, input: bytes | None = None) -> str:
        cmd = [str(bin_dir() / CTR), "--address", str(self.layout.containerd_socket)]
        cmd += ["-n", "k8s.io", *args]
        done = subprocess.run(cmd, input=input, capture_output=True, check=False)
        if done.returncode != 0:
            raise RealNodeError(f"{' '.join(cmd)}: {done.stderr.decode().strip()}")
        return done.stdout.decode()

    def images(self) -> list[str]:
        return self.ctr("images", "ls", "-q").split()

    def set_profile(self, profile: Path) -> None:
        """The hardware profile the FAKE GPUs present to the next container that gets them."""
        install_profile(self.layout, profile)


# --- prerequisites and binaries ---------------------------------------------------


def bin_dir() -> Path:
    return repo_root() / ".bin"


def missing_prerequisites() -> list[str]:
    """What this machine lacks for a real node (empty: nothing)."""
    missing = [] if os.geteuid() == 0 else ["root (mounts, cgroups, network)"]
    missing += [f"{tool} on PATH" for tool in HOST_TOOLS if shutil.which(tool) is None]
    missing += [f"/usr/lib/cni/{p}" for p in CNI_PLUGINS if not Path("/usr/lib/cni", p).exists()]
    for name in (
        "kubelet",
        "kube-controller-manager",
        "kube-scheduler",
        "fakedeviceplugin",
        "fakedraplugin",
        "coredns",
        CONTAINERD,
        CONTAINERD_SHIM,
        CTR,
    ):
        if not (bin_dir() / name).exists():
            missing.append(f".bin/{name} (make node-tools)")
    if not Path("/bin/busybox").exists():
        missing.append("/bin/busybox (Debian's busybox-static)")
    return missing


def pause_source() -> Path:
    """``build/pause/linux/pause.c`` of the k8s.io/kubernetes module hack/node pins."""
    out = subprocess.run(
        [
            "go",
            "-C",
            str(repo_root() / "hack" / "node"),
            "list",
            "-m",
            "-f",
            "{{.Dir}}",
            KUBE_MODULE,
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/local/go/bin"},
    )
    return Path(out.stdout.strip()) / "build" / "pause" / "linux" / "pause.c"


def build_pause(out: Path) -> Path:
    """Compile pause.c as upstream does (``gcc -Os -Wall -Werror -static``)."""
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = ["gcc", "-Os", "-Wall", "-Werror", "-static", "-DVERSION=v3.10.2-gpuaccept"]
        subprocess.run([*cmd, "-o", str(out), str(pause_source())], check=True)
    return out


def busybox_files() -> list[ImageFile]:
    applets = subprocess.run(
        ["/bin/busybox", "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    files = [ImageFile("bin"), ImageFile("tmp", mode=0o1777), ImageFile("etc")]
    files += [ImageFile("bin/busybox", Path("/bin/busybox"))]
    files += [ImageFile(f"bin/{a}", link="busybox", mode=0o777) for a in applets if a != "busybox"]
    return files


# --- images -------------------------------------------------------------------------


def import_archive(node: RealNode, write: Any) -> None:
    """Stream an OCI archive (``write(out)`` writes it) into containerd's k8s.io namespace."""
    cmd = [str(bin_dir() / CTR), "--address", str(node.layout.containerd_socket), "-n", "k8s.io"]
    cmd += ["images", "import", "-"]
    with subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        stdin: IO[bytes] = proc.stdin  # type: ignore[assignment]
        try:
            write(stdin)
        finally:
            stdin.close()
        err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise RealNodeError(f"ctr images import failed: {err.strip()}")


def import_layout_image(node: RealNode, layout: Path, tag: str, name: str) -> None:
    """Import ``layout:tag`` (an OCI layout, e.g. from build_image.py) as ``name``."""
    import_archive(node, lambda out: write_layout_image(out, layout, tag, name))


def image_digest(node: RealNode, name: str) -> str | None:
    """The manifest digest containerd has for ``name``, or None."""
    for line in node.ctr("images", "ls").splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] == name:
            return fields[2]
    return None


def ensure_layout_image(node: RealNode, layout: Path, tag: str, name: str) -> None:
    """Import ``layout:tag`` as ``name`` unless containerd has that very manifest."""
    if image_digest(node, name) != layout_digest(layout, tag):
        import_layout_image(node, layout, tag, name)


def import_base_images(node: RealNode) -> None:
    have = set(node.images())
    if SANDBOX_IMAGE not in have:
        pause = build_pause(node.layout.images_dir / "pause")
        files = [ImageFile("pause", pause)]
        import_archive(
            node,
            lambda out: write_files_image(
                out, SANDBOX_IMAGE, files, entrypoint=["/pause"], user="65535:65535"
            ),
        )
    if BUSYBOX_IMAGE not in have:
        files = busybox_files()
        import_archive(node, lambda out: write_files_image(out, BUSYBOX_IMAGE, files, cmd=["sh"]))


# --- PKI and files ----------------------------------------------------------------------


def write_kubelet_credentials(settings: NodeSettings, cp: ControlPlane) -> None:
    """A client certificate ``CN=system:node:NAME, O=system:nodes`` signed by the cluster CA."""
    layout = NodeLayout(settings.node_dir)
    if layout.kubelet_cert.exists():
        return
    layout.kubelet_cert.parent.mkdir(parents=True, exist_ok=True)
    key, csr = layout.kubelet_key, layout.kubelet_cert.with_suffix(".csr")
    subject = f"/O=system:nodes/CN=system:node:{settings.name}"
    openssl = ["openssl"]
    subprocess.run(
        [*openssl, "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key)],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [*openssl, "req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr)],
        check=True,
        capture_output=True,
    )
    ca = ["-CA", str(cp.ca_file), "-CAkey", str(cp.dir / "pki" / "ca.key"), "-CAcreateserial"]
    subprocess.run(
        [
            *openssl,
            "x509",
            "-req",
            "-in",
            str(csr),
            *ca,
            "-days",
            "30",
            "-out",
            str(layout.kubelet_cert),
        ],
        check=True,
        capture_output=True,
    )


def install_profile(layout: NodeLayout, profile: Path) -> None:
    """Copy ``profile`` to where the device plugin mounts it from (atomically)."""
    staged = layout.fake_gpu_profile.with_suffix(".new")
    shutil.copyfile(profile, staged)
    staged.replace(layout.fake_gpu_profile)


def resolv_conf(cluster_dns: str | None) -> str:
    if cluster_dns:
        return f"nameserver {cluster_dns}\n"
    host = Path("/etc/resolv.conf")
    return host.read_text() if host.exists() else ""


def kubelet_command(settings: NodeSettings, layout: NodeLayout) -> list[str]:
    cmd = [
        str(bin_dir() / "kubelet"),
        f"--config={layout.kubelet_config}",
        f"--kubeconfig={layout.kubelet_kubeconfig}",
        f"--root-dir={layout.kubelet_root}",
        f"--hostname-override={settings.name}",
        f"--node-ip={settings.gateway}",
        f"--cert-dir={layout.kubelet_root / 'pki'}",
        "--v=2",
    ]
    if settings.labels:
        cmd.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in settings.labels.items()))
    if settings.taints:
        cmd.append("--register-with-taints=" + ",".join(settings.taints))
    return cmd


def write_node_files(settings: NodeSettings, cp: ControlPlane, cluster_dns: str | None) -> None:
    layout = NodeLayout(settings.node_dir)
    for path in (
        layout.containerd_root,
        layout.cdi_dir,
        layout.cni_conf_dir,
        layout.pod_logs,
        layout.logs_dir,
    ):
        path.mkdir(parents=True, exist_ok=True)
    layout.containerd_config.write_text(containerd_config(layout, shim=bin_dir() / CONTAINERD_SHIM))
    (layout.cni_conf_dir / "10-gpuaccept.conflist").write_text(
        json.dumps(cni_config(settings, layout), indent=2) + "\n"
    )
    config = kubelet_config(settings, layout, client_ca=cp.ca_file, cluster_dns=cluster_dns)
    layout.kubelet_config.write_text(json.dumps(config, indent=2) + "\n")
    layout.kubelet_kubeconfig.write_text(
        json.dumps(kubelet_kubeconfig(cp.server, layout, cp.ca_file), indent=2) + "\n"
    )
    layout.resolv_conf.write_text(resolv_conf(cluster_dns))
    write_kubelet_credentials(settings, cp)
    if settings.profile is not None:
        install_profile(layout, settings.profile)
    plugin, plugin_command = gpu_plugin_command(settings, layout)
    state = {
        "settings": settings_to_json(settings),
        "server": cp.server,
        "containerd_socket": str(layout.containerd_socket),
        "commands": {
            "containerd": [str(bin_dir() / CONTAINERD), "--config", str(layout.containerd_config)],
            "kubelet": kubelet_command(settings, layout),
            plugin: plugin_command,
        },
    }
    layout.state_file.write_text(json.dumps(state, indent=2) + "\n")


def gpu_plugin_command(settings: NodeSettings, layout: NodeLayout) -> tuple[str, list[str]]:
    """The FAKE GPUs' plugin (its name in the supervisor, its command): the device
    plugin, or with ``settings.dra`` the DRA kubelet plugin (its sockets under the
    kubelet's root directory, its CDI specs in the directory containerd reads, the
    node's credentials: a node may publish its own ResourceSlices and read the
    claims of its pods, Node authorizer)."""
    profile = [f"--profile={layout.fake_gpu_profile}"] if settings.profile is not None else []
    if settings.dra:
        return "fakedraplugin", [
            str(bin_dir() / "fakedraplugin"),
            f"--kubeconfig={layout.kubelet_kubeconfig}",
            f"--node-name={settings.name}",
            f"--kubelet-dir={layout.kubelet_root}",
            f"--cdi-dir={layout.cdi_dir}",
            f"--driver={DRA_DRIVER}",
            f"--count={settings.gpu_count}",
            *profile,
        ]
    return "fakedeviceplugin", [
        str(bin_dir() / "fakedeviceplugin"),
        f"--plugin-dir={DEVICE_PLUGIN_DIR}",
        f"--count={settings.gpu_count}",
        *profile,
    ]


def settings_to_json(settings: NodeSettings) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in vars(settings).items():
        out[key] = str(value) if isinstance(value, Path) else value
    out["taints"] = list(settings.taints)
    return out


def settings_from_json(data: dict[str, Any]) -> NodeSettings:
    values: dict[str, Any] = dict(data)
    for key in ("node_dir", "cluster_dir", "profile"):
        values[key] = Path(values[key]) if values.get(key) is not None else None
    values["taints"] = tuple(values.get("taints", ()))
    return NodeSettings(**values)


# --- network ---------------------------------------------------------------------------


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check)


def setup_network(settings: NodeSettings, apiserver_port: int) -> None:
    """The bridge (so that route_localnet can be set before the first pod) and the DNAT."""
    bridge = settings.bridge
    if _run("ip", "link", "show", bridge, check=False).returncode != 0:
        _run("ip", "link", "add", bridge, "type", "bridge")
        prefix = settings.subnet.split("/")[1]
        _run("ip", "addr", "add", f"{settings.gateway}/{prefix}", "dev", bridge)
    _run("ip", "link", "set", bridge, "up")
    Path(f"/proc/sys/net/ipv4/conf/{bridge}/route_localnet").write_text("1\n")
    remove_dnat()
    _run(
        *("iptables", "-t", "nat", "-A", "PREROUTING", "-i", bridge, "-d", f"{SERVICE_HOST}/32"),
        *("-p", "tcp", "--dport", "443", "-m", "comment", "--comment", DNAT_COMMENT),
        *("-j", "DNAT", "--to-destination", f"127.0.0.1:{apiserver_port}"),
    )


def remove_dnat() -> None:
    rules = _run("iptables", "-t", "nat", "-S", "PREROUTING", check=False).stdout.splitlines()
    for rule in rules:
        if DNAT_COMMENT in rule and rule.startswith("-A "):
            _run("iptables", "-t", "nat", *("-D", *rule.split()[1:]), check=False)


# Chains the kubelet makes on start (kubelet_network_linux.go): iptables
# "canaries" and the rule that drops non-local traffic to 127.0.0.0/8.
KUBELET_CHAINS = {
    "mangle": ("KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"),
    "nat": ("KUBE-KUBELET-CANARY",),
    "filter": ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY"),
}


def remove_kubelet_chains() -> None:
    """What the kubelet added to the host's iptables: jumps first, then the chains."""
    for tool in ("iptables", "ip6tables"):
        for table, chains in KUBELET_CHAINS.items():
            rules = _run(tool, "-t", table, "-S", check=False).stdout.splitlines()
            for rule in rules:
                words = rule.split()
                if rule.startswith("-A ") and words[-1] in chains and words[-2] == "-j":
                    _run(tool, "-t", table, "-D", *words[1:], check=False)
            for chain in chains:
                _run(tool, "-t", table, "-F", chain, check=False)
                _run(tool, "-t", table, "-X", chain, check=False)


def remove_network(settings: NodeSettings) -> None:
    remove_dnat()
    remove_kubelet_chains()
    _run("ip", "link", "del", settings.bridge, check=False)


# --- the cluster's controllers ----------------------------------------------------------


def controller_command(name: str, cp: ControlPlane) -> list[str]:
    kubeconfig = str(cp.kubeconfig)
    common = [f"--kubeconfig={kubeconfig}", "--leader-elect=false", "--secure-port=0"]
    if name == "kube-scheduler":
        return [str(bin_dir() / name), *common]
    return [
        str(bin_dir() / name),
        *common,
        f"--root-ca-file={cp.ca_file}",
        f"--service-account-private-key-file={cp.dir / 'pki' / 'sa.key'}",
        "--use-service-account-credentials=false",
        "--controllers=*",
    ]


def start_controllers(cp: ControlPlane, logs: Path) -> None:
    """kube-controller-manager and kube-scheduler, attached to the control plane (reused)."""
    running = {p.name for p in attached.attached(cp.dir) if p.running()}
    logs.mkdir(parents=True, exist_ok=True)
    for name in CONTROLLERS:
        if name in running:
            continue
        with (logs / f"{name}.log").open("ab") as out:
            process = subprocess.Popen(
                controller_command(name, cp),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        attached.register(cp.dir, name, process.pid)


# --- up / down -----------------------------------------------------------------------------


def supervisor_pid(cluster_dir: Path) -> int | None:
    for process in attached.attached(cluster_dir):
        if process.name == SUPERVISOR and process.running():
            return process.pid
    return None


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_supervisor(settings: NodeSettings, cp: ControlPlane) -> None:
    layout = NodeLayout(settings.node_dir)
    ready = settings.node_dir / "supervisor.ready"
    ready.unlink(missing_ok=True)
    cmd = ["unshare", "--mount", "--propagation", "private", "--"]
    cmd += [sys.executable, "-m", "gpuaccept.testsupport.realnode_supervisor", str(layout.root)]
    log = layout.logs_dir / "supervisor.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, HOST_MNTNS_ENV: os.readlink("/proc/self/ns/mnt")},
        )
    attached.register(cp.dir, SUPERVISOR, process.pid)
    deadline = time.monotonic() + 90
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RealNodeError(f"the node did not start; {log}:\n{_tail(log)}")
        time.sleep(0.3)


def node_slices(node: RealNode) -> list[dict[str, Any]]:
    """The node's ResourceSlices of the FAKE DRA driver, as the API server has them."""
    got = node.control_plane.kubectl(
        "get",
        "resourceslices",
        "--field-selector",
        f"spec.nodeName={node.settings.name},spec.driver={DRA_DRIVER}",
        "-o",
        "json",
        check=False,
    )
    return list(json.loads(got.stdout)["items"]) if got.returncode == 0 else []


def gpus_published(node: RealNode, status: dict[str, Any]) -> bool:
    """The node's FAKE GPUs are all published, the one way its mode says, and only that
    way: allocatable ``nvidia.com/gpu``, or the devices of its DRA pool."""
    want = node.settings.gpu_count
    plugin_gpus = status.get("allocatable", {}).get("nvidia.com/gpu")
    devices = sum(len(s["spec"].get("devices") or ()) for s in node_slices(node))
    if node.settings.dra:
        return plugin_gpus in (None, "0") and devices == want
    return plugin_gpus == str(want) and devices == 0


def wait_node_ready(node: RealNode, timeout_s: float) -> dict[str, Any]:
    """The Node object once Ready with its FAKE GPUs allocatable (published)."""
    deadline = time.monotonic() + timeout_s
    want = f"{node.settings.gpu_count} {'DRA devices' if node.settings.dra else 'nvidia.com/gpu'}"
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        got = node.control_plane.kubectl(
            "get", "node", node.settings.name, "-o", "json", check=False
        )
        if got.returncode == 0:
            last = json.loads(got.stdout)
            ready = [c for c in last["status"].get("conditions", []) if c["type"] == "Ready"]
            if ready and ready[0]["status"] == "True" and gpus_published(node, last["status"]):
                return last
        if supervisor_pid(node.settings.cluster_dir) is None:
            break
        time.sleep(1)
    log = node.layout.logs_dir / "kubelet.log"
    raise RealNodeError(
        f"node {node.settings.name} not Ready with {want} within {timeout_s:.0f}s "
        f"(last status: {json.dumps(last.get('status', {}).get('conditions', []))}); "
        f"{log}:\n{_tail(log)}"
    )


def apiserver_args(settings: NodeSettings) -> list[str]:
    """``kubectl logs``/``exec``: the apiserver dials the kubelet at the node's
    InternalIP (the bridge's address; the kubelet refuses a loopback node IP) with
    the admin client certificate (the kubelet's x509 authentication trusts the
    cluster CA)."""
    pki = settings.cluster_dir.resolve() / "pki"
    return [
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-client-certificate={pki / 'admin.crt'}",
        f"--kubelet-client-key={pki / 'admin.key'}",
    ]


def corefile(settings: NodeSettings, kubeconfig: Path) -> str:
    """CoreDNS on the bridge's address: cluster.local from the API, the rest upstream."""
    return "\n".join(
        [
            ".:53 {",
            f"    bind {settings.gateway}",
            "    errors",
            "    kubernetes cluster.local in-addr.arpa ip6.arpa {",
            f"        kubeconfig {kubeconfig}",
            "        pods insecure",
            "        fallthrough in-addr.arpa ip6.arpa",
            "    }",
            "    forward . /etc/resolv.conf",
            "}",
            "",
        ]
    )


def start_dns(settings: NodeSettings, cp: ControlPlane) -> None:
    """CoreDNS (hack/coredns) for the pods, attached to the control plane."""
    if any(p.name == "coredns" and p.running() for p in attached.attached(cp.dir)):
        return
    layout = NodeLayout(settings.node_dir)
    path = layout.root / "Corefile"
    path.write_text(corefile(settings, cp.kubeconfig))
    with (layout.logs_dir / "coredns.log").open("ab") as out:
        process = subprocess.Popen(
            [str(bin_dir() / "coredns"), "-conf", str(path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    attached.register(cp.dir, "coredns", process.pid)


def up(settings: NodeSettings, *, timeout_s: float = 180.0) -> RealNode:
    """Start (or reuse) the control plane, its controllers and the node; wait until Ready."""
    if missing := missing_prerequisites():
        raise RealNodeError("missing: " + "; ".join(missing) + " (see docs/realnode.md)")
    cp = start(settings.cluster_dir, build=False, extra_apiserver_args=apiserver_args(settings))
    node = RealNode(settings, cp)
    start_controllers(cp, settings.node_dir / "logs")
    # The bridge first: its address is the node's (the kubelet serves there).
    setup_network(settings, int(cp.state["apiserverPort"]))
    if supervisor_pid(cp.dir) is None:
        write_node_files(settings, cp, settings.gateway)
        start_supervisor(settings, cp)
    import_base_images(node)
    start_dns(settings, cp)
    if settings.dra:  # what NVIDIA's DRA driver chart installs with the driver
        cp.kubectl("apply", "-f", "-", input=json.dumps(device_class_manifest()))
    wait_node_ready(node, timeout_s)
    return node


def switch(node: RealNode, *, dra: bool, timeout_s: float = 180.0) -> RealNode:
    """The node in the other publishing mode (device plugin or DRA), on the same
    control plane and with the same containerd images: the node's processes stop, the
    Node object goes (with it the ResourceSlices it owns; a new registration carries no
    ``nvidia.com/gpu`` of the old mode), the kubelet's device and claim checkpoints
    go, and the node starts again with the other plugin."""
    if node.settings.dra == dra:
        return node
    settings = replace(node.settings, dra=dra)
    stop_supervisor(settings.cluster_dir)
    cp = node.control_plane
    cp.kubectl("delete", "node", settings.name, "--ignore-not-found", "--wait=true", check=False)
    cp.kubectl(
        "delete",
        "resourceslices",
        "--field-selector",
        f"spec.nodeName={settings.name}",
        "--ignore-not-found",
        check=False,
    )
    layout = NodeLayout(settings.node_dir)
    for checkpoint in (
        settings.node_dir / "device-plugins" / "kubelet_internal_checkpoint",
        layout.kubelet_root / "dra_manager_state",
    ):
        checkpoint.unlink(missing_ok=True)
    return up(settings, timeout_s=timeout_s)


def running(node_dir: Path, cluster_dir: Path) -> RealNode:
    """The node started by ``up`` in ``node_dir`` (its control plane must run)."""
    state = json.loads(NodeLayout(node_dir).state_file.read_text())
    cp = find_running(cluster_dir)
    if cp is None:
        raise RealNodeError(f"no control plane running in {cluster_dir}")
    return RealNode(settings_from_json(state["settings"]), cp)


def stop_supervisor(cluster_dir: Path, timeout_s: float = 90.0) -> None:
    pid = supervisor_pid(cluster_dir)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while supervisor_pid(cluster_dir) is not None:
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            break
        time.sleep(0.3)


def down(node_dir: Path, cluster_dir: Path, *, stop_control_plane: bool = True) -> None:
    """Stop the node, remove its network, Node object and files; then the cluster."""
    state_file = NodeLayout(node_dir).state_file
    settings = (
        settings_from_json(json.loads(state_file.read_text())["settings"])
        if state_file.exists()
        else NodeSettings(node_dir=node_dir, cluster_dir=cluster_dir)
    )
    stop_supervisor(cluster_dir)
    remove_network(settings)
    cp = find_running(cluster_dir)
    if cp is not None:
        cp.kubectl(
            "delete", "node", settings.name, "--ignore-not-found", "--wait=false", check=False
        )
        if stop_control_plane:
            cp.stop(force=True)  # also stops the attached controllers
        else:
            attached.stop_attached(cp.dir)
    for empty in (DEVICE_PLUGIN_DIR, DEVICE_PLUGIN_DIR.parent):  # made for the bind mount
        with contextlib.suppress(OSError):
            empty.rmdir()
    if node_dir.exists():
        shutil.rmtree(node_dir, ignore_errors=True)


# --- CLI ---------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="realnode", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    root = repo_root()
    for name in ("up", "down", "import-image", "status"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--node-dir", type=Path, default=root / ".node")
        cmd.add_argument("--cluster-dir", type=Path, default=root / ".cluster-node")
        if name == "up":
            cmd.add_argument("--name", default="gpuaccept-node")
            cmd.add_argument("--gpus", type=int, default=8)
            cmd.add_argument("--profile", type=Path)
            cmd.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
            cmd.add_argument("--taint", action="append", default=[], metavar="KEY=VALUE:EFFECT")
            cmd.add_argument(
                "--dra",
                action="store_true",
                help="publish the FAKE GPUs through the FAKE DRA driver, not the device plugin",
            )
        if name == "import-image":
            cmd.add_argument("--layout", type=Path, required=True)
            cmd.add_argument("--tag", required=True)
            cmd.add_argument("--name", required=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    node_dir, cluster_dir = args.node_dir.resolve(), args.cluster_dir.resolve()
    try:
        if args.command == "up":
            labels = dict(item.split("=", 1) for item in args.label)
            settings = NodeSettings(
                node_dir=node_dir,
                cluster_dir=cluster_dir,
                name=args.name,
                gpu_count=args.gpus,
                profile=args.profile.resolve() if args.profile else None,
                labels=labels,
                taints=tuple(args.taint),
                dra=args.dra,
            )
            node = up(settings)
            published = f"in {DRA_DRIVER} ResourceSlices" if settings.dra else "nvidia.com/gpu"
            print(f"node {settings.name} Ready with {settings.gpu_count} FAKE {published}")
            print(f"kubeconfig: {node.control_plane.kubeconfig}")
        elif args.command == "down":
            down(node_dir, cluster_dir)
        elif args.command == "import-image":
            import_layout_image(running(node_dir, cluster_dir), args.layout, args.tag, args.name)
        else:
            node = running(node_dir, cluster_dir)
            print("\n".join(node.images()))
    except (RealNodeError, ControlPlaneError, OSError, subprocess.CalledProcessError) as error:
        print(f"realnode: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
