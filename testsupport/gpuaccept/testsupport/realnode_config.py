"""What the local real node is made of, as files — test support, not shipped.

Pure functions from :class:`NodeSettings` to the configuration files of the
node's parts (docs/realnode.md): containerd 2's ``config.toml`` (CRI plugin,
runc, the locally built sandbox image, CDI specs from the node directory), the
CNI network (one bridge, host-local addresses), the kubelet's
``KubeletConfiguration`` and kubeconfig. Every path lives under the node
directory, so that a node is removed with its directory and never touches
``/var/lib/kubelet``, ``/var/lib/containerd`` or ``/etc/cdi``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DEVICE_PLUGIN_DIR",
    "SANDBOX_IMAGE",
    "SERVICE_HOST",
    "NodeLayout",
    "NodeSettings",
    "cni_config",
    "containerd_config",
    "kubelet_config",
    "kubelet_kubeconfig",
]

# The sandbox ("pause") image: built here from k8s.io/kubernetes' build/pause/linux/pause.c
# (the version kubeadm pins for this Kubernetes release), never pulled.
SANDBOX_IMAGE = "localhost/gpuaccept/pause:3.10.2"
# The ClusterIP of the `kubernetes` Service (first address of the apiserver's
# --service-cluster-ip-range): what in-cluster clients dial on port 443.
SERVICE_HOST = "10.96.0.1"
# Fixed in the kubelet (pluginapi.DevicePluginPath), whatever its --root-dir.
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
# The kubelet refuses cgroup v1 unless told otherwise (failCgroupV1, Kubernetes >= 1.35).
# Sysctls the kubelet sets on start when they differ (protectKernelDefaults false):
# container_manager_linux.go setupKernelTunables. The node runs in its own mount
# namespace where these files read as the kubelet wants, so the host keeps its values.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": 1,
    "vm/panic_on_oom": 0,
    "kernel/panic": 10,
    "kernel/panic_on_oops": 1,
    "kernel/keys/root_maxkeys": 1000000,
    "kernel/keys/root_maxbytes": 25000000,
}

# containerd 2 refuses a shim socket directory longer than this (core/runtime/v2/socket_linux.go:
# a unix socket's path has 108 bytes, the socket's own name takes the rest).
SHIM_SOCKET_DIR_MAX = 42
# Plugins the node has no use for. NRI would listen on /var/run/nri/nri.sock on the host
# (the CRI plugin runs without it: "NRI service not found, NRI support disabled").
CONTAINERD_DISABLED_PLUGINS = (
    "io.containerd.nri.v1.nri",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.erofs",
    "io.containerd.snapshotter.v1.blockfile",
    "io.containerd.tracing.processor.v1.otlp",
    "io.containerd.internal.v1.tracing",
)


@dataclass(frozen=True)
class NodeSettings:
    """One node: its name, its FAKE GPUs and where it keeps its state."""

    node_dir: Path
    cluster_dir: Path
    name: str = "gpuaccept-node"
    gpu_count: int = 8
    profile: Path | None = None  # the hardware profile the FAKE GPUs present (GPUACCEPT_PROFILE)
    # How the FAKE GPUs are published: False, the FAKE device plugin (nvidia.com/gpu);
    # True, the FAKE DRA driver (gpu.nvidia.com ResourceSlices, claims through CDI).
    dra: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[str, ...] = ()  # kubelet --register-with-taints entries, key=value:Effect
    bridge: str = "gpuacc0"
    subnet: str = "10.244.0.0/24"
    kubelet_port: int = 10250
    kubelet_healthz_port: int = 10248
    max_pods: int = 32

    @property
    def gateway(self) -> str:
        """The bridge's own address: the subnet's first host address."""
        base, _ = self.subnet.split("/")
        octets = base.split(".")
        return ".".join([*octets[:3], str(int(octets[3]) + 1)])


@dataclass(frozen=True)
class NodeLayout:
    """Where each part of the node keeps its files, under ``root``."""

    root: Path

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd/config.toml"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd/root"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd/state"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd.sock"

    @property
    def shim_socket_dir(self) -> Path:
        return self.root / "containerd/s"

    @property
    def cdi_dir(self) -> Path:
        """CDI specs (``*.json``, ``*.yaml``) that containerd reads: the node's own /etc/cdi."""
        return self.root / "cdi"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni/net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni/ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet-config.json"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def kubelet_cert(self) -> Path:
        return self.root / "pki/kubelet-client.crt"

    @property
    def kubelet_key(self) -> Path:
        return self.root / "pki/kubelet-client.key"

    @property
    def fake_gpu_profile(self) -> Path:
        return self.root / "fake-gpu-profile.yaml"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def resolv_conf(self) -> Path:
        return self.root / "resolv.conf"

    @property
    def sysctl_dir(self) -> Path:
        return self.root / "sysctl"

    @property
    def images_dir(self) -> Path:
        return self.root / "images"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"


def containerd_config(layout: NodeLayout, *, shim: Path, runc: str = "/usr/sbin/runc") -> str:
    """containerd 2.3+ ``config.toml`` (version 4, what ``containerd config default`` writes).

    ``restrict_oom_score_adj``: the kubelet asks for negative oom_score_adj (the
    sandbox: -998), which needs CAP_SYS_RESOURCE; this machine's bounding set
    lacks it, so containerd clamps to its own score (as for rootless nodes).
    CDI is always on in containerd 2 (``enable_cdi`` is gone,
    plugins/cri/runtime/plugin.go); its spec directory is the node's own.
    ``shim`` is run by path (``runtime_path``): a containerd 1.x shim on PATH is
    never taken for it; runc keeps its state under the node's state directory
    (the shim's default is ``/run/containerd/runc``). The shims' sockets go under
    the node directory when its path is short enough, otherwise to containerd's
    default ``/run/containerd/s`` (where containerd 1.6 always put them).
    """
    q = json.dumps  # TOML basic strings are JSON strings for the paths used here
    images = "plugins.'io.containerd.cri.v1.images'"
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    socket_dir = str(layout.shim_socket_dir)
    shim_manager = (
        ["[plugins.'io.containerd.shim.v1.manager']", f"  socket_dir = {q(socket_dir)}"]
        if len(socket_dir) <= SHIM_SOCKET_DIR_MAX
        else []
    )
    return "\n".join(
        [
            "version = 4",
            f"root = {q(str(layout.containerd_root))}",
            f"state = {q(str(layout.containerd_state))}",
            f"temp = {q(str(layout.root / 'containerd' / 'tmp'))}",
            "imports = []",
            "oom_score = 0",
            "disabled_plugins = [" + ", ".join(q(p) for p in CONTAINERD_DISABLED_PLUGINS) + "]",
            "[plugins.'io.containerd.server.v1.grpc']",
            f"  address = {q(str(layout.containerd_socket))}",
            "[plugins.'io.containerd.server.v1.ttrpc']",
            f"  address = {q(str(layout.containerd_socket) + '.ttrpc')}",
            "[plugins.'io.containerd.server.v1.debug']",
            '  address = ""',
            "[plugins.'io.containerd.internal.v1.opt']",
            f"  path = {q(str(layout.root / 'containerd' / 'opt'))}",
            *shim_manager,
            f"[{images}]",
            '  snapshotter = "overlayfs"',
            f"[{images}.pinned_images]",
            f"  sandbox = {q(SANDBOX_IMAGE)}",
            f"[{runtime}]",
            "  restrict_oom_score_adj = true",
            "  enable_selinux = false",
            "  disable_apparmor = true",
            "  netns_mounts_under_state_dir = true",
            f"  cdi_spec_dirs = [{q(str(layout.cdi_dir))}]",
            f"[{runtime}.containerd]",
            '  default_runtime_name = "runc"',
            f"[{runtime}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"  runtime_path = {q(str(shim))}",
            f"[{runtime}.containerd.runtimes.runc.options]",
            "  SystemdCgroup = false",
            f"  BinaryName = {q(runc)}",
            f"  Root = {q(str(layout.containerd_state / 'runc'))}",
            f"[{runtime}.cni]",
            '  bin_dirs = ["/usr/lib/cni"]',
            f"  conf_dir = {q(str(layout.cni_conf_dir))}",
            "",
        ]
    )


def cni_config(settings: NodeSettings, layout: NodeLayout) -> dict[str, Any]:
    """A bridge network with host-local addresses; the host is the pods' gateway."""
    return {
        "cniVersion": "1.0.0",
        "name": "gpuaccept-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": settings.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(layout.cni_ipam_dir),
                    "ranges": [[{"subnet": settings.subnet, "gateway": settings.gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            }
        ],
    }


def kubelet_config(
    settings: NodeSettings, layout: NodeLayout, *, client_ca: Path, cluster_dns: str | None
) -> dict[str, Any]:
    """The ``KubeletConfiguration``: cgroupfs on cgroup v1, everything under the node dir."""
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "address": settings.gateway,
        "port": settings.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": settings.kubelet_healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "podLogsDir": str(layout.pod_logs),
        "resolvConf": str(layout.resolv_conf),
        "clusterDomain": "cluster.local",
        "maxPods": settings.max_pods,
        "failSwapOn": False,
        "protectKernelDefaults": False,
        # A shared build machine: keep the kubelet from evicting or deleting
        # images because other work fills the disk.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 99,
        "imageGCLowThresholdPercent": 98,
        "nodeStatusUpdateFrequency": "10s",
        "serializeImagePulls": False,
    }
    if cluster_dns:
        config["clusterDNS"] = [cluster_dns]
    return config


def kubelet_kubeconfig(server: str, layout: NodeLayout, ca: Path) -> dict[str, Any]:
    """The kubelet's credentials: a client certificate for ``system:node:NAME``."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "local", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [
            {
                "name": "kubelet",
                "user": {
                    "client-certificate": str(layout.kubelet_cert),
                    "client-key": str(layout.kubelet_key),
                },
            }
        ],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "kubelet"}}],
        "current-context": "local",
    }
