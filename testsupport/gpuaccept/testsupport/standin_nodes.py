"""The simulated GPU nodes of the kubelet stand-in (test support): :class:`SimNode`,
the Node status it registers (capacity, conditions, ``nodeInfo.bootID``), and
fleet files (:func:`load_fleet`)."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from gpuaccept.testsupport.standin_behaviours import (
    Behaviour,
    BehaviourHook,
    Complete,
    Hang,
    ImagePullFailure,
    RunProcess,
    SandboxFailure,
    StartFailure,
)

JSON = dict[str, Any]
KUBELET_VERSION = "v1.37.2-standin"
DEFAULT_GPUS = 8


@dataclass(frozen=True)
class GpuCounts:
    """What the node registers: status.capacity and status.allocatable nvidia.com/gpu,
    and the GPU feature discovery label nvidia.com/gpu.count (None: no label)."""

    capacity: int
    allocatable: int
    labelled: int | None
    # GPU feature discovery's nvidia.com/gpu.replicas under time-slicing or MPS sharing,
    # where the device plugin advertises each GPU this many times (None: not shared)
    replicas: int | None = None


@functools.cache
def profile_gpu_counts(
    profile: str,
) -> tuple[int | None, int | None, int | None, int | None]:
    """(capacity, allocatable, label, replicas) a hardware profile states for its node;
    nothing for a file that is not a hardware profile (some tests give a placeholder)."""
    from gpuaccept.probe.hardware.profile import load_profile  # noqa: PLC0415
    from gpuaccept.probe.inputs import InputError  # noqa: PLC0415

    try:
        node = load_profile(Path(profile)).node
    except InputError:
        return None, None, None, None
    return node.gpu_capacity, node.gpu_allocatable, node.gfd_gpu_count, node.gfd_gpu_replicas


@dataclass
class SimNode:
    """A simulated GPU node. ``profile``: the hardware-profile file for its probe pods."""

    name: str
    profile: str | None = None
    # nvidia.com/gpu capacity = allocatable = the nvidia.com/gpu.count label. None: the
    # profile's node counts where it states them, else 8.
    gpu_count: int | None = None
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    # Taints applied at registration only, like kubelet --register-with-taints:
    # [{"key": ..., "value": ..., "effect": "NoSchedule"}]
    taints: list[dict[str, str]] = field(default_factory=list)
    behaviour: Behaviour | BehaviourHook | None = None
    cpu: str = "96"
    memory: str = "2Ti"
    pods: str = "110"
    address: str | None = None
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    ready: bool = True
    # GPUs the device plugin has healthy now, when fewer than the Node status says
    # (a GPU failed after the status was posted): the kubelet admits pods against these.
    healthy_gpus: int | None = None
    # The hardware after acceptance: the profile of every probe pod after the first
    # (re-verification finds what changed; docs/profile-format.md).
    later_profile: str | None = None
    pods_run: int = 0
    # GPUs published through DRA by this driver (the stand-in's ResourceSlices,
    # testsupport/standin_dra.py; NVIDIA's is gpu.nvidia.com) instead of the device
    # plugin: no nvidia.com/gpu at all. None: the device plugin publishes them.
    dra_driver: str | None = None
    # The pool as first published: in this many slices, those numbered here left out
    # (an incomplete pool until KubeletStandIn.publish_pool publishes it whole).
    dra_slices: int = 1
    dra_left_out: tuple[int, ...] = ()

    @property
    def dra(self) -> bool:
        return self.dra_driver is not None

    def probe_profile(self) -> str | None:
        """The profile the next pod runs against (counts the pods run)."""
        self.pods_run += 1
        if self.later_profile is not None and self.pods_run > 1:
            return self.later_profile
        return self.profile

    def watch_profile(self) -> str | None:
        """The profile an in-service watch pod runs against: the node as it is now (its
        ``laterProfile`` once a probe has run), without counting the pod as a probe."""
        if self.later_profile is not None and self.pods_run >= 1:
            return self.later_profile
        return self.profile

    def gpu_counts(self) -> GpuCounts:
        """``gpu_count`` when set; else the profile's node counts where it states them
        (a device plugin that marked a GPU unhealthy: allocatable below capacity);
        else 8 for all three."""
        if self.gpu_count is not None:
            return GpuCounts(self.gpu_count, self.gpu_count, self.gpu_count)
        capacity = allocatable = labelled = replicas = None
        if self.profile:
            capacity, allocatable, labelled, replicas = profile_gpu_counts(self.profile)
        if capacity is None:
            return GpuCounts(DEFAULT_GPUS, DEFAULT_GPUS, DEFAULT_GPUS)
        allocatable = capacity if allocatable is None else allocatable
        return GpuCounts(capacity, allocatable, labelled, replicas)

    def node_labels(self) -> dict[str, str]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": self.gpu_product,
        }
        counts = self.gpu_counts()
        if counts.labelled is not None:
            labels["nvidia.com/gpu.count"] = str(counts.labelled)
        if counts.replicas is not None:
            # what GFD labels a shared node with (k8s-device-plugin README, "Shared
            # Access to GPUs"): the replicas per GPU
            labels["nvidia.com/gpu.replicas"] = str(counts.replicas)
        labels.update(self.labels)
        return labels


def timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_condition(ready: bool, reason: str | None = None, message: str | None = None) -> JSON:
    now = timestamp()
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": reason or ("KubeletReady" if ready else "KubeletNotReady"),
        "message": message
        or ("kubelet is posting ready status" if ready else "kubelet stand-in: node not ready"),
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def node_status(n: SimNode) -> JSON:
    now = timestamp()
    capacity = {
        "cpu": n.cpu,
        "memory": n.memory,
        "pods": n.pods,
        "ephemeral-storage": "1Ti",
    }
    counts = n.gpu_counts()
    pressure = [
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ]
    conditions: list[JSON] = [
        {
            "type": t,
            "status": "False",
            "reason": r,
            "message": m,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for t, r, m in pressure
    ]
    conditions.append(ready_condition(n.ready))
    gpus = {} if n.dra else {"nvidia.com/gpu": str(counts.capacity)}
    allocatable = {} if n.dra else {"nvidia.com/gpu": str(counts.allocatable)}
    return {
        "capacity": {**capacity, **gpus},
        "allocatable": {**capacity, **allocatable},
        "conditions": conditions,
        "addresses": [
            {"type": "InternalIP", "address": n.address or "127.0.0.1"},
            {"type": "Hostname", "address": n.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, n.name).hex,
            "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, n.name)),
            "bootID": n.boot_id,
            "kernelVersion": "6.8.0-standin",
            "osImage": "gpuaccept kubelet stand-in",
            "containerRuntimeVersion": "standin://1.0.0",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def behaviour_from_spec(spec: Any) -> Behaviour | None:
    if spec is None:
        return None
    if spec == "run":
        return RunProcess()
    if spec == "hang":
        return Hang()
    if isinstance(spec, dict) and "startError" in spec:
        return StartFailure(message=str((spec["startError"] or {}).get("message", "")))
    if isinstance(spec, dict) and "imagePull" in spec:
        return ImagePullFailure(**_message(spec["imagePull"]))
    if isinstance(spec, dict) and "sandbox" in spec:
        return SandboxFailure(**_message(spec["sandbox"]))
    if isinstance(spec, dict) and "complete" in spec:
        c = spec["complete"] or {}
        message = c.get("message", "")
        if "messageFile" in c:
            message = Path(c["messageFile"]).read_text()
        return Complete(
            exit_code=int(c.get("exitCode", 0)),
            message=message,
            delay_s=float(c.get("delaySeconds", 0)),
        )
    raise ValueError(
        f"unknown behaviour {spec!r} (run | hang | {{complete: {{...}}}} | "
        "{startError: {message}} | {imagePull: {message}} | {sandbox: {message}})"
    )


def _message(spec: Any) -> dict[str, str]:
    message = (spec or {}).get("message")
    return {"message": str(message)} if message else {}


def load_fleet(path: str | Path) -> list[SimNode]:
    """Read a fleet file::

    nodes:
      - name: gpu-a-1                 # one node ...
        profile: ../profiles/h100-healthy.yaml   # relative to this file
        gpuCount: 8                   # default: the profile's node counts, else 8
        gpuProduct: NVIDIA-H100-80GB-HBM3
        labels: {topology.kubernetes.io/zone: a}
        taints: [{key: gpuaccept.io/unverified, value: "true", effect: NoSchedule}]
        laterProfile: ../profiles/reverify/h100-sxm-8gpu-drifted.yaml  # probes after the first
        draDriver: gpu.nvidia.com     # its GPUs published in this DRA driver's ResourceSlices,
                                      # no nvidia.com/gpu (default: the device plugin's)
        behaviour: run                # run | hang | {complete: {exitCode, message, delaySeconds}}
                                      # | {startError: {message}} | {imagePull: {message}}
                                      # | {sandbox: {message}}
      - namePrefix: sim-gpu-          # ... or `count` nodes named sim-gpu-0000 ...
        count: 200
        profile: ../profiles/h100-healthy.yaml
    """
    p = Path(path)
    doc = yaml.safe_load(p.read_text()) or {}
    out: list[SimNode] = []
    for item in doc.get("nodes", []):
        prof = item.get("profile")
        profile = str((p.parent / prof).resolve()) if prof else None
        later = item.get("laterProfile")
        later_profile = str((p.parent / later).resolve()) if later else None
        names: list[str]
        if "count" in item:
            prefix = item.get("namePrefix", "sim-gpu-")
            count = int(item["count"])
            width = max(4, len(str(count - 1)))
            names = [f"{prefix}{i:0{width}d}" for i in range(count)]
        else:
            names = [item["name"]]
        for name in names:
            out.append(
                SimNode(
                    name=name,
                    profile=profile,
                    gpu_count=int(item["gpuCount"]) if "gpuCount" in item else None,
                    gpu_product=str(item.get("gpuProduct", "NVIDIA-H100-80GB-HBM3")),
                    labels={str(k): str(v) for k, v in (item.get("labels") or {}).items()},
                    taints=[
                        {str(k): str(v) for k, v in t.items()} for t in item.get("taints") or []
                    ],
                    behaviour=behaviour_from_spec(item.get("behaviour")),
                    later_profile=later_profile,
                    dra_driver=str(item["draDriver"]) if item.get("draDriver") else None,
                )
            )
    return out
