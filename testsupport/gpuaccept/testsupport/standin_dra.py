"""The kubelet stand-in's DRA driver (test support): the ResourceSlices a
DRA-published node's GPUs appear in, shaped as NVIDIA's driver publishes them.

NVIDIA's driver (github.com/NVIDIA/k8s-dra-driver-gpu, now
kubernetes-sigs/dra-driver-nvidia-gpu; ``cmd/gpu-kubelet-plugin/deviceinfo.go``,
``GpuInfo.GetDevice``) publishes each whole GPU as a device named
``gpu-<minor>`` with the attributes ``type`` (``gpu``), ``uuid``,
``productName``, ``brand``, ``architecture``, ``cudaComputeCapability``,
``driverVersion``, ``cudaDriverVersion``, ``pcieBusID`` and a ``memory``
capacity, in a pool named after the node (``spec.nodeName`` set), driver
``gpu.nvidia.com``. The stand-in publishes those the profile states (count,
product name; the UUIDs the simulated probe reports) and ``index`` (older
releases of the driver published one), and can republish the pool under a new
generation, split it over several slices, leave a slice out (an incomplete
pool) or drop a device, and taint devices as the driver's health monitor does
(:func:`driver_taint`, :meth:`DraPublisher.set_taints`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from gpuaccept.probe.hardware.simulated import simulated_uuid

JSON = dict[str, Any]
DRA_DRIVER = "gpu.nvidia.com"
GROUP, VERSION, PLURAL = "resource.k8s.io", "v1", "resourceslices"
# The Xids NVIDIA's DRA driver skips as application errors (device_health.go,
# xidsToSkip): their taint has effect None; every other Xid's is NoSchedule.
DRIVER_SKIPPED_XIDS = frozenset({13, 31, 43, 45, 68, 109})


def driver_taint(event: str, xid: int | None = None, driver: str = DRA_DRIVER) -> JSON:
    """The device taint NVIDIA's driver sets for a health event (device_health.go,
    ``healthEventToTaint``): ``xid`` (value the code; NoSchedule, None for the Xids it
    skips), ``gpu-lost`` (NoSchedule), ``unmonitored`` (None). No timeAdded: the API
    server sets it."""
    if event == "xid":
        assert xid is not None
        effect = "None" if xid in DRIVER_SKIPPED_XIDS else "NoSchedule"
        return {"key": f"{driver}/xid", "value": str(xid), "effect": effect}
    if event == "gpu-lost":
        return {"key": f"{driver}/gpu-lost", "effect": "NoSchedule"}
    assert event == "unmonitored", event
    return {"key": f"{driver}/unmonitored", "effect": "None"}


@dataclass(frozen=True)
class DraGpu:
    index: int
    uuid: str
    product_name: str

    def device(self) -> JSON:
        return {
            "name": f"gpu-{self.index}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": self.uuid},
                "productName": {"string": self.product_name},
                "index": {"int": self.index},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }


def node_gpus(node_name: str, count: int, product_name: str) -> list[DraGpu]:
    """The node's GPUs as its DRA driver sees them: the simulated probe's UUIDs."""
    return [DraGpu(i, simulated_uuid(node_name, i), product_name) for i in range(count)]


def slice_manifests(
    node_name: str,
    gpus: Iterable[DraGpu],
    *,
    generation: int,
    slices: int = 1,
    driver: str = DRA_DRIVER,
) -> list[JSON]:
    """The pool's ``slices`` ResourceSlices at ``generation`` (devices dealt in order)."""
    devices = [gpu.device() for gpu in gpus]
    per = -(-len(devices) // slices) if devices else 0
    return [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-{driver}-g{generation}-{i}"},
            "spec": {
                "driver": driver,
                "nodeName": node_name,
                "pool": {
                    "name": node_name,
                    "generation": generation,
                    "resourceSliceCount": slices,
                },
                "devices": devices[i * per : (i + 1) * per],
            },
        }
        for i in range(slices)
    ]


class DraPublisher:
    """Publishes and withdraws the stand-in nodes' ResourceSlices through the API."""

    def __init__(self, api: k8s.ApiClient) -> None:
        self.custom = k8s.CustomObjectsApi(api)
        self._lock = threading.Lock()
        self._generations: dict[str, int] = {}  # node -> the pool's last generation

    def publish(
        self,
        node_name: str,
        gpus: Iterable[DraGpu],
        *,
        slices: int = 1,
        leave_out: Iterable[int] = (),
        driver: str = DRA_DRIVER,
    ) -> int:
        """Publish the pool under its next generation (``slices`` slices, those numbered
        in ``leave_out`` not created: an incomplete pool), then withdraw the older
        generations, as a driver does. Returns the generation."""
        with self._lock:
            generation = self._generations.get(node_name, 0) + 1
            self._generations[node_name] = generation
        skipped = set(leave_out)
        manifests = slice_manifests(
            node_name, gpus, generation=generation, slices=slices, driver=driver
        )
        for i, body in enumerate(manifests):
            if i not in skipped:
                self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        self.withdraw(node_name, below=generation)
        return generation

    def set_taints(self, node_name: str, taints: Mapping[str, Sequence[JSON]]) -> None:
        """Set the taints of the named devices (the others' stay) in the node's slices,
        updated in place under the same generation, as the driver's kubelet plugin
        helper does for a change in one slice; a taint the device already carries keeps
        its timeAdded (the helper's ``copyTaintTimeAdded``)."""
        listed = self.custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, field_selector=f"spec.nodeName={node_name}"
        )
        assert isinstance(listed, dict)
        for item in listed.get("items", []):
            devices = item["spec"].get("devices") or []
            if not any(d["name"] in taints for d in devices):
                continue
            for device in devices:
                if device["name"] in taints:
                    device["taints"] = [
                        _dated(t, device.get("taints") or []) for t in taints[device["name"]]
                    ]
            self.custom.replace_cluster_custom_object(
                GROUP, VERSION, PLURAL, item["metadata"]["name"], item
            )

    def withdraw(self, node_name: str, *, below: int | None = None) -> None:
        """Delete the node's slices (those of a generation below ``below`` only)."""
        listed = self.custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, field_selector=f"spec.nodeName={node_name}"
        )
        assert isinstance(listed, dict)
        for item in listed.get("items", []):
            if below is not None and item["spec"]["pool"]["generation"] >= below:
                continue
            try:
                self.custom.delete_cluster_custom_object(
                    GROUP, VERSION, PLURAL, item["metadata"]["name"]
                )
            except ApiException as error:
                if error.status != 404:
                    raise


def _dated(taint: JSON, before: Sequence[JSON]) -> JSON:
    """``taint`` with the timeAdded of the same taint (key, value, effect) in ``before``."""
    for old in before:
        same = all(old.get(k, "") == taint.get(k, "") for k in ("key", "value", "effect"))
        if same and "timeAdded" in old:
            return {**taint, "timeAdded": old["timeAdded"]}
    return dict(taint)
