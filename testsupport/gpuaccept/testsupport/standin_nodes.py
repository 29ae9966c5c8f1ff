"""The simulated GPU nodes of the kubelet stand-in (test support): :class:`SimNode`,
the Node status it registers (capacity, conditions, ``nodeInfo.bootID``), and
fleet files (:func:`load_fleet`)."""

from __future__ import annotations

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
    RunProcess,
)

JSON = dict[str, Any]
KUBELET_VERSION = "v1.37.2-standin"


@dataclass
class SimNode:
    """A simulated GPU node. ``profile``: the hardware-profile file for its probe pods."""

    name: str
    profile: str | None = None
    gpu_count: int = 8
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

    def node_labels(self) -> dict[str, str]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": self.gpu_product,
            "nvidia.com/gpu.count": str(self.gpu_count),
        }
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
        "nvidia.com/gpu": str(n.gpu_count),
    }
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
    return {
        "capacity": capacity,
        "allocatable": dict(capacity),
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
    raise ValueError(f"unknown behaviour {spec!r} (run | hang | {{complete: {{...}}}})")


def load_fleet(path: str | Path) -> list[SimNode]:
    """Read a fleet file::

    nodes:
      - name: gpu-a-1                 # one node ...
        profile: ../profiles/h100-healthy.yaml   # relative to this file
        gpuCount: 8
        gpuProduct: NVIDIA-H100-80GB-HBM3
        labels: {topology.kubernetes.io/zone: a}
        taints: [{key: gpuaccept.io/unverified, value: "true", effect: NoSchedule}]
        behaviour: run                # run | hang | {complete: {exitCode, message, delaySeconds}}
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
                    gpu_count=int(item.get("gpuCount", 8)),
                    gpu_product=str(item.get("gpuProduct", "NVIDIA-H100-80GB-HBM3")),
                    labels={str(k): str(v) for k, v in (item.get("labels") or {}).items()},
                    taints=[
                        {str(k): str(v) for k, v in t.items()} for t in item.get("taints") or []
                    ],
                    behaviour=behaviour_from_spec(item.get("behaviour")),
                )
            )
    return out
