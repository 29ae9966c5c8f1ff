"""The real node's files and images, as pure functions make them (no root, no node:
these run in ``make unit``). docs/realnode.md says why each setting is there."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from gpuaccept.testsupport.oci_archive import (
    ImageFile,
    layout_digest,
    write_files_image,
    write_layout_image,
)
from gpuaccept.testsupport.realnode import (
    corefile,
    gpu_plugin_command,
    kubelet_command,
    settings_from_json,
    settings_to_json,
)
from gpuaccept.testsupport.realnode_config import (
    SANDBOX_IMAGE,
    NodeLayout,
    NodeSettings,
    cni_config,
    containerd_config,
    kubelet_config,
)
from gpuaccept.testsupport.realnode_supervisor import kubepods_cgroups, own_mount_namespace

NODE_DIR = Path("/work/x/.node")
SETTINGS = NodeSettings(node_dir=NODE_DIR, cluster_dir=Path("/work/x/.cluster-node"))
LAYOUT = NodeLayout(NODE_DIR)


def _paths(value: object) -> list[str]:
    """Every absolute path in a nested config."""
    if isinstance(value, dict):
        return [p for v in value.values() for p in _paths(v)]
    if isinstance(value, list):
        return [p for v in value for p in _paths(v)]
    if isinstance(value, str):
        text = value.removeprefix("unix://")
        return [text] if text.startswith("/") else []
    return []


SHIM = Path("/work/x/.bin/containerd2-shim-runc-v2")


def test_containerd_keeps_everything_under_the_node_dir() -> None:
    config = tomllib.loads(containerd_config(LAYOUT, shim=SHIM))
    assert config["version"] == 4
    assert config["imports"] == []  # never /etc/containerd/conf.d
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True  # no CAP_SYS_RESOURCE on this machine
    assert runtime["cdi_spec_dirs"] == [str(NODE_DIR / "cdi")]
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["runtime_path"] == str(SHIM)  # not a containerd 1.x shim on PATH
    assert runc["options"] == {
        "SystemdCgroup": False,
        "BinaryName": "/usr/sbin/runc",
        "Root": str(NODE_DIR / "containerd/state/runc"),  # not /run/containerd/runc
    }
    images = config["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == SANDBOX_IMAGE
    # NRI's socket would be /var/run/nri/nri.sock on the host.
    assert "io.containerd.nri.v1.nri" in config["disabled_plugins"]
    manager = config["plugins"]["io.containerd.shim.v1.manager"]
    assert manager["socket_dir"] == str(NODE_DIR / "containerd/s")
    allowed = ("/usr/lib/cni", "/usr/sbin/runc", str(SHIM))
    outside = [p for p in _paths(config) if not p.startswith(str(NODE_DIR)) and p not in allowed]
    assert outside == []


def test_shim_sockets_too_long_for_the_node_dir_go_to_containerds_default() -> None:
    """containerd 2 refuses a socket_dir over 42 characters (socket_linux.go)."""
    deep = NodeLayout(Path("/work/a-checkout-with-a-long-name/.node"))
    assert len(str(deep.shim_socket_dir)) > 42
    config = tomllib.loads(containerd_config(deep, shim=SHIM))
    assert "io.containerd.shim.v1.manager" not in config["plugins"]


def test_the_kubelet_runs_on_cgroup_v1_with_its_files_under_the_node_dir() -> None:
    config = kubelet_config(
        SETTINGS,
        LAYOUT,
        client_ca=Path("/work/x/.cluster-node/pki/ca.crt"),
        cluster_dns="10.244.0.1",
    )
    assert (config["failCgroupV1"], config["cgroupDriver"]) == (False, "cgroupfs")
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["address"] == SETTINGS.gateway == "10.244.0.1"
    assert config["clusterDNS"] == ["10.244.0.1"]
    assert all(p.startswith("/work/x/") for p in _paths(config))
    command = kubelet_command(SETTINGS, LAYOUT)
    assert f"--root-dir={NODE_DIR}/kubelet" in command
    assert f"--cert-dir={NODE_DIR}/kubelet/pki" in command  # else /var/lib/kubelet/pki
    assert "--node-ip=10.244.0.1" in command  # the kubelet refuses a loopback node IP


def test_pods_get_a_bridge_with_the_host_as_gateway() -> None:
    plugin = cni_config(SETTINGS, LAYOUT)["plugins"][0]
    assert (plugin["type"], plugin["bridge"], plugin["isGateway"]) == ("bridge", "gpuacc0", True)
    assert plugin["ipam"]["ranges"] == [[{"subnet": "10.244.0.0/24", "gateway": "10.244.0.1"}]]
    assert plugin["ipam"]["dataDir"] == f"{NODE_DIR}/cni/ipam"


def test_coredns_listens_on_the_bridge_and_serves_the_cluster_domain() -> None:
    text = corefile(SETTINGS, Path("/k/kubeconfig"))
    assert "bind 10.244.0.1" in text
    assert "kubernetes cluster.local" in text
    assert "kubeconfig /k/kubeconfig" in text


def test_settings_survive_the_state_file() -> None:
    settings = NodeSettings(
        node_dir=NODE_DIR,
        cluster_dir=Path("/c"),
        gpu_count=4,
        profile=Path("/p.yaml"),
        labels={"a": "b"},
        taints=("k=v:NoSchedule",),
        dra=True,
    )
    assert settings_from_json(json.loads(json.dumps(settings_to_json(settings)))) == settings


def test_the_gpus_are_published_by_one_plugin_the_mode_names() -> None:
    profile = Path("/p.yaml")
    name, command = gpu_plugin_command(replace(SETTINGS, profile=profile), LAYOUT)
    assert name == "fakedeviceplugin"
    assert "--plugin-dir=/var/lib/kubelet/device-plugins" in command
    assert f"--profile={LAYOUT.fake_gpu_profile}" in command

    name, command = gpu_plugin_command(replace(SETTINGS, profile=profile, dra=True), LAYOUT)
    assert name == "fakedraplugin"
    flags = dict(arg.removeprefix("--").split("=", 1) for arg in command[1:])
    assert flags == {
        # The node's own credentials: the Node authorizer lets it publish its slices.
        "kubeconfig": str(LAYOUT.kubelet_kubeconfig),
        "node-name": SETTINGS.name,
        # plugins_registry follows the kubelet's --root-dir (unlike device-plugins).
        "kubelet-dir": str(LAYOUT.kubelet_root),
        "cdi-dir": str(LAYOUT.cdi_dir),
        "driver": "gpu.nvidia.com",
        "count": "8",
        "profile": str(LAYOUT.fake_gpu_profile),
    }
    assert all(p.startswith(str(NODE_DIR)) for p in _paths(flags))


def _archive(files: list[ImageFile], name: str = "localhost/t/busy:1") -> tuple[bytes, str]:
    out = io.BytesIO()
    digest = write_files_image(out, name, files, cmd=["sh"])
    return out.getvalue(), digest


def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def test_an_image_archive_is_what_ctr_import_reads(tmp_path: Path) -> None:
    binary = tmp_path / "tool"
    binary.write_bytes(b"\x7fELF fake")
    files = [ImageFile("bin"), ImageFile("bin/tool", binary), ImageFile("bin/sh", link="tool")]
    archive, digest = _archive(files)
    members = _members(archive)
    index = json.loads(members["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "localhost/t/busy:1"
    assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
    assert entry["digest"] == digest
    for name, data in members.items():  # every blob is stored under its own digest
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    manifest = json.loads(members["blobs/sha256/" + digest.split(":")[1]])
    config = json.loads(members["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    layer = members["blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1]]
    raw = gzip.decompress(layer)
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(raw).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        assert {m.name: m.issym() for m in tar.getmembers()} == {
            "bin": False,
            "bin/sh": True,
            "bin/tool": False,
        }
    assert _archive(files)[1] == digest  # reproducible: same files, same digest


def test_one_tag_of_a_layout_is_repacked_with_only_its_blobs(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    tags = {}
    for tag in ("operator", "probe"):
        archive, digest = _archive([ImageFile(tag)], name=f"x/{tag}:1")
        for name, data in _members(archive).items():
            if name.startswith("blobs/"):
                (layout / name).write_bytes(data)
        tags[tag] = digest
    (layout / "index.json").write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "manifests": [
                    {"digest": d, "annotations": {"org.opencontainers.image.ref.name": t}}
                    for t, d in tags.items()
                ],
            }
        )
    )
    assert layout_digest(layout, "probe") == tags["probe"]
    out = io.BytesIO()
    assert (
        write_layout_image(out, layout, "probe", "localhost/gpuaccept/probe:e2e") == tags["probe"]
    )
    members = _members(out.getvalue())
    entry = json.loads(members["index.json"])["manifests"][0]
    assert entry["annotations"]["io.containerd.image.name"] == "localhost/gpuaccept/probe:e2e"
    assert len([n for n in members if n.startswith("blobs/")]) == 3  # manifest, config, layer
    with pytest.raises(LookupError):
        layout_digest(layout, "missing")


def test_kubepods_cgroups_are_removed_deepest_first(tmp_path: Path) -> None:
    for path in ("memory/kubepods/besteffort/pod1/c1", "pids/kubepods/pod2", "pids/other"):
        (tmp_path / path).mkdir(parents=True)
    found = kubepods_cgroups(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "memory/kubepods/besteffort/pod1/c1",
        "memory/kubepods/besteffort/pod1",
        "memory/kubepods/besteffort",
        "pids/kubepods/pod2",
        "memory/kubepods",
        "pids/kubepods",
    ]


def test_the_supervisor_never_kills_outside_its_own_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GPUACCEPT_HOST_MNTNS", raising=False)
    assert not own_mount_namespace()  # started without `realnode up`: refuses
    monkeypatch.setenv("GPUACCEPT_HOST_MNTNS", Path("/proc/self/ns/mnt").readlink().as_posix())
    assert not own_mount_namespace()  # the namespace it was started from
