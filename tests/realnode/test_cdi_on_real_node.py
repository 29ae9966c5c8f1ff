"""The real node's runtime honours CDI (docs/realnode.md): a device that a device
plugin names as a CDI device reaches the container with the edits of its spec.

A second FAKE device plugin (``fakedeviceplugin -cdi``) advertises one device of
``gpuaccept.io/cdi-test`` and answers Allocate with the CDI device
``gpuaccept.io/cdi-test=FAKE-GPU-0`` (``ContainerAllocateResponse.CDIDevices``, no
environment variable or mount of its own). The test writes the spec for that kind
into the node's CDI directory (``.node/cdi``, containerd's ``cdi_spec_dirs``): an
environment variable of the device, one of the whole spec and a read-only bind
mount of a file, each carrying a value made for this run. The pod that gets the
device writes what it sees to its termination message; only containerd applying
the spec puts those values there (containerd 1.6, which has no CDI, fails this).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from pod_observation import PodSpec, ended, observe

from gpuaccept.testsupport.realnode import BUSYBOX_IMAGE, RealNode, bin_dir
from gpuaccept.testsupport.realnode_config import NodeLayout

pytestmark = pytest.mark.realnode

KIND = "gpuaccept.io/cdi-test"  # CDI vendor/class, and the extended resource's name
DEVICE = "FAKE-GPU-0"  # the plugin's first device ID, its CDI device name too
MOUNT_PATH = "/etc/gpuaccept-cdi/payload"
REGISTER_WITHIN_S = 60.0  # the kubelet's device manager reporting the resource; not a timing check


def cdi_spec(token: str, payload: Path) -> dict[str, object]:
    """A CDI spec (tags.cncf.io/container-device-interface, version 0.6.0) for KIND."""
    return {
        "cdiVersion": "0.6.0",
        "kind": KIND,
        "devices": [
            {
                "name": DEVICE,
                "containerEdits": {
                    "env": [f"GPUACCEPT_CDI_DEVICE={DEVICE}-{token}"],
                    "mounts": [
                        {
                            "hostPath": str(payload),
                            "containerPath": MOUNT_PATH,
                            "options": ["ro", "bind"],
                        }
                    ],
                },
            }
        ],
        "containerEdits": {"env": [f"GPUACCEPT_CDI_SPEC={token}"]},
    }


def _allocatable(api: k8s.CoreV1Api, node: str) -> str | None:
    status = api.read_node(node).status
    allocatable: dict[str, str] = status.allocatable or {}
    return allocatable.get(KIND)


@pytest.fixture
def cdi_device(real_node: RealNode) -> Iterator[str]:
    """The spec in the node's CDI directory and a plugin advertising its device; the
    token the spec's edits carry."""
    layout = NodeLayout(real_node.settings.node_dir)
    token = uuid.uuid4().hex
    work = layout.root / "cdi-test"
    work.mkdir(exist_ok=True)
    payload = work / "payload"
    payload.write_text(f"payload-{token}\n")
    spec_file = layout.cdi_dir / "gpuaccept-cdi-test.json"
    spec_file.write_text(json.dumps(cdi_spec(token, payload), indent=2) + "\n")
    log = (layout.logs_dir / "fakedeviceplugin-cdi-test.log").open("ab")
    plugin = subprocess.Popen(
        [
            str(bin_dir() / "fakedeviceplugin"),
            f"--plugin-dir={layout.root / 'device-plugins'}",
            f"--resource={KIND}",
            "--count=1",
            "--socket=gpuaccept-cdi-test.sock",
            f"--cdi={KIND}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        api = k8s.CoreV1Api(real_node.control_plane.api_client())
        deadline = time.monotonic() + REGISTER_WITHIN_S
        while _allocatable(api, real_node.settings.name) != "1":
            assert plugin.poll() is None, "the CDI test device plugin exited"
            assert time.monotonic() < deadline, f"{KIND} not allocatable on the node"
            time.sleep(1)
        yield token
    finally:
        plugin.terminate()
        plugin.wait(timeout=30)
        log.close()
        spec_file.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def namespace(real_node: RealNode) -> Iterator[str]:
    api = k8s.CoreV1Api(real_node.control_plane.api_client())
    name = f"cdi-{uuid.uuid4().hex[:6]}"
    api.create_namespace({"metadata": {"name": name}})
    yield name
    api.delete_namespace(name)


def test_a_cdi_device_gets_its_specs_edits(
    real_node: RealNode, cdi_device: str, namespace: str
) -> None:
    token = cdi_device
    script = f'echo "$GPUACCEPT_CDI_SPEC $GPUACCEPT_CDI_DEVICE $(cat {MOUNT_PATH})"'
    spec = PodSpec(command=("sh", "-c", f"{script} > /dev/termination-log"))
    manifest = spec.manifest(f"cdi-{token[:8]}", real_node.settings.name, BUSYBOX_IMAGE)
    manifest["spec"]["containers"][0]["resources"] = {"limits": {KIND: "1"}}
    api = k8s.CoreV1Api(real_node.control_plane.api_client())
    seen = observe(api, namespace, manifest, until=ended).final
    assert (seen.phase, seen.exit_code) == ("Succeeded", 0), seen
    assert seen.message == f"{token} {DEVICE}-{token} payload-{token}\n"
