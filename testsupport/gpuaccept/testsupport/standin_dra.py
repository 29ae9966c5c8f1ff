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

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from gpuaccept.probe.hardware.simulated import simulated_uuid

log = logging.getLogger("gpuaccept.testsupport.standin_dra")
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


CLAIMS = "resourceclaims"


def device_class_manifest(name: str = DRA_DRIVER, driver: str = DRA_DRIVER) -> JSON:
    """The DeviceClass NVIDIA's DRA driver chart installs for whole GPUs
    (kubernetes-sigs/dra-driver-nvidia-gpu, deployments/helm/.../deviceclass-gpu.yaml):
    its driver's devices whose ``type`` attribute is ``gpu``."""
    expression = f"device.driver == '{driver}' && device.attributes['{driver}'].type == 'gpu'"
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def prepared_devices(claim: JSON, pod_uid: str, node_name: str) -> list[str] | None:
    """What a kubelet's DRA manager prepares for a pod from one of its claims: the
    devices allocated on ``node_name`` (the pool), once the claim is allocated and
    reserved for the pod (``status.reservedFor``); None until then."""
    status = claim.get("status") or {}
    allocation = status.get("allocation")
    reserved = {r.get("uid") for r in status.get("reservedFor") or ()}
    if allocation is None or pod_uid not in reserved:
        return None
    results = (allocation.get("devices") or {}).get("results") or ()
    return [str(r["device"]) for r in results if r.get("pool") == node_name]


# A GPU in MIG mode is published as these MIG devices (start of each placement) of
# profile 3g.40gb, GPU instance profile 9, instead of its own device.
MIG_PLACEMENTS = (0, 4)


@dataclass(frozen=True)
class DraGpu:
    index: int
    uuid: str
    product_name: str
    mig: bool = False  # in MIG mode: published as its MIG devices

    def devices(self) -> list[JSON]:
        """What NVIDIA's driver publishes for this GPU: its own device, or in MIG mode
        one device per MIG device, named ``gpu-<minor>-mig-<profile>-<profile id>-<start>``
        with attributes type ``mig``, its own uuid and ``parentUUID`` the GPU's
        (kubernetes-sigs/dra-driver-nvidia-gpu, cmd/gpu-kubelet-plugin/mig.go
        ``CommonAttributesMig``, ``ToCanonicalName``)."""
        if not self.mig:
            return [self.device()]
        return [
            {
                "name": f"gpu-{self.index}-mig-3g40gb-9-{start}",
                "attributes": {
                    "type": {"string": "mig"},
                    "uuid": {"string": f"MIG-{start}{self.uuid.removeprefix('GPU-')[1:]}"},
                    "parentUUID": {"string": self.uuid},
                    "profile": {"string": "3g.40gb"},
                    "productName": {"string": self.product_name},
                },
                "capacity": {"memory": {"value": "40Gi"}},
            }
            for start in MIG_PLACEMENTS
        ]

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


def device_uuid(node_name: str, device: str) -> str:
    """The UUID of the published device named ``gpu-<index>`` (:meth:`DraGpu.device`)."""
    return simulated_uuid(node_name, int(device.removeprefix("gpu-")))


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
    devices = [device for gpu in gpus for device in gpu.devices()]
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

    def claim(self, namespace: str, name: str) -> JSON | None:
        """A ResourceClaim as the API server has it now (None: not there)."""
        try:
            body = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, CLAIMS, name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        assert isinstance(body, dict)
        return body

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


DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"  # the scheduler adds it


class ClaimController:
    """What kube-controller-manager's resourceclaim controller does for claims that a
    pod names by name (pkg/controller/resourceclaim/controller.go ``syncClaim``), for a
    control plane that runs no controller manager: a ``reservedFor`` entry whose pod is
    gone (or is another object now) is dropped; a claim reserved for nobody is
    deallocated (``status.allocation`` cleared) and loses the scheduler's
    ``resource.kubernetes.io/delete-protection`` finalizer, so a deleted claim goes.
    Polls ``namespace`` every ``every`` seconds in its own thread."""

    def __init__(self, api: k8s.ApiClient, namespace: str, *, every: float = 0.5) -> None:
        self.custom = k8s.CustomObjectsApi(api)
        self.core = k8s.CoreV1Api(api)
        self.namespace = namespace
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="claim-controller", daemon=True)

    def __enter__(self) -> ClaimController:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.sync()
            except ApiException as error:  # a conflict or a claim gone meanwhile: next round
                log.debug("claim controller: %s", error)

    def _pod_uid(self, name: str) -> str | None:
        try:
            pod = self.core.read_namespaced_pod(name, self.namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return str(pod.metadata.uid) if pod.metadata is not None else None

    def sync(self) -> None:
        listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, CLAIMS)
        assert isinstance(listed, dict)
        for claim in listed.get("items", []):
            self._sync_claim(claim)

    def _sync_claim(self, claim: JSON) -> None:
        name = claim["metadata"]["name"]
        status = claim.get("status") or {}
        reserved = list(status.get("reservedFor") or [])
        live = [r for r in reserved if self._pod_uid(str(r.get("name"))) == r.get("uid")]
        if live:
            if live != reserved:
                claim["status"] = {**status, "reservedFor": live}
                self.custom.replace_namespaced_custom_object_status(
                    GROUP, VERSION, self.namespace, CLAIMS, name, claim
                )
            return
        if status.get("allocation") is not None or reserved:
            claim["status"] = {
                k: v for k, v in status.items() if k not in ("allocation", "reservedFor")
            }
            answer = self.custom.replace_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, CLAIMS, name, claim
            )
            assert isinstance(answer, dict)
            claim = answer
        finalizers = list(claim["metadata"].get("finalizers") or [])
        if DELETE_PROTECTION in finalizers:
            claim["metadata"]["finalizers"] = [f for f in finalizers if f != DELETE_PROTECTION]
            self.custom.replace_namespaced_custom_object(
                GROUP, VERSION, self.namespace, CLAIMS, name, claim
            )
