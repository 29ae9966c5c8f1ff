"""ResourceSlices as the operator keeps them: the view of a ``resource.k8s.io/v1``
slice (NVIDIA's driver's attributes), the index that keeps only the configured
drivers' slices under their node, and ``--dra-driver``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpuaccept.operator.cache import index_resource_slice
from gpuaccept.operator.core.model import DeviceTaintView, DraDevice
from gpuaccept.operator.options import OptionError, dra_drivers
from gpuaccept.operator.views import resource_slice_view

DRIVERS = frozenset({"gpu.nvidia.com"})


def nvidia_slice(**spec: Any) -> dict[str, Any]:
    """A slice shaped as NVIDIA's DRA driver publishes one (its deviceinfo.go)."""
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "gpu-1-gpu.nvidia.com-abcde", "resourceVersion": "42"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "gpu-1",
            "pool": {"name": "gpu-1", "generation": 3, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "uuid": {"string": "GPU-0f6f8f8e-1d2b-4c3a-9e8f-000000000000"},
                        "productName": {"string": "NVIDIA H100 80GB HBM3"},
                        "driverVersion": {"version": "570.124.6"},
                        "index": {"int": 0},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
            ],
        },
    }
    body["spec"].update(spec)
    return body


def test_the_view_reads_pool_and_nvidia_attributes() -> None:
    view = resource_slice_view(nvidia_slice())
    assert (view.driver, view.pool, view.generation, view.slice_count, view.node_name) == (
        "gpu.nvidia.com",
        "gpu-1",
        3,
        1,
        "gpu-1",
    )
    assert view.devices == (
        DraDevice(
            "gpu-0",
            uuid="GPU-0f6f8f8e-1d2b-4c3a-9e8f-000000000000",
            product_name="NVIDIA H100 80GB HBM3",
            index=0,
            kind="gpu",
        ),
    )


BAD = {
    "devices not a list": {"devices": "x"},
    "a device without a name": {"devices": [{"attributes": {}}]},
    "attributes not a mapping": {"devices": [{"name": "gpu-0", "attributes": []}]},
    "pool not a mapping": {"pool": "gpu-1"},
    "generation not a number": {"pool": {"name": "p", "generation": "x"}},
}


@pytest.mark.parametrize("spec", BAD.values(), ids=BAD)
def test_a_malformed_slice_reads_as_absent_fields_never_raises(spec: dict[str, Any]) -> None:
    view = resource_slice_view(nvidia_slice(**spec))
    assert view.driver == "gpu.nvidia.com"
    assert all(d.name for d in view.devices)


def test_the_index_keeps_configured_drivers_only_under_their_node() -> None:
    assert list(index_resource_slice(nvidia_slice(), DRIVERS)) == ["gpu-1"]
    assert index_resource_slice(nvidia_slice(driver="other.example.com"), DRIVERS) == {}
    # A slice that names no node is the node's when its pool is named after the node.
    pooled = nvidia_slice()
    del pooled["spec"]["nodeName"]
    assert list(index_resource_slice(pooled, DRIVERS)) == ["gpu-1"]


def test_the_dra_driver_flag() -> None:
    assert dra_drivers("gpu.nvidia.com, example.com,gpu.nvidia.com") == (
        "gpu.nvidia.com",
        "example.com",
    )
    assert dra_drivers("") == ()
    with pytest.raises(OptionError, match="--dra-driver: 'Bad_Name'"):
        dra_drivers("Bad_Name")


def test_the_view_reads_the_driver_s_device_taints() -> None:
    """KEP-5055 device taints as NVIDIA's driver sets them (device_health.go) and the API
    server dates them (timeAdded); one without a key, or not a mapping, is left out."""
    body = nvidia_slice()
    body["spec"]["devices"][0]["taints"] = [
        {
            "key": "gpu.nvidia.com/xid",
            "value": "79",
            "effect": "NoSchedule",
            "timeAdded": "2026-12-01T12:00:05Z",
        },
        {"key": "gpu.nvidia.com/unmonitored", "effect": "None"},
        {"value": "no key"},
        "not a taint",
    ]
    (device,) = resource_slice_view(body).devices
    assert device.taints == (
        DeviceTaintView(
            "gpu.nvidia.com/xid", "79", "NoSchedule", datetime(2026, 12, 1, 12, 0, 5, tzinfo=UTC)
        ),
        DeviceTaintView("gpu.nvidia.com/unmonitored", "", "None", None),
    )


def test_the_view_reads_a_mig_device_s_parent_gpu() -> None:
    """A MIG device as NVIDIA's driver publishes it (kubernetes-sigs/dra-driver-nvidia-gpu,
    cmd/gpu-kubelet-plugin/mig.go ``CommonAttributesMig``): type ``mig``, its own uuid,
    and ``parentUUID``, the GPU it was cut from."""
    mig = {
        "name": "gpu-0-mig-1g10gb-19-0",
        "attributes": {
            "type": {"string": "mig"},
            "uuid": {"string": "MIG-1f6f8f8e-1d2b-4c3a-9e8f-000000000000"},
            "parentUUID": {"string": "GPU-0f6f8f8e-1d2b-4c3a-9e8f-000000000000"},
            "profile": {"string": "1g.10gb"},
        },
    }
    (device,) = resource_slice_view(nvidia_slice(devices=[mig])).devices
    assert (device.kind, device.uuid, device.parent_uuid) == (
        "mig",
        "MIG-1f6f8f8e-1d2b-4c3a-9e8f-000000000000",
        "GPU-0f6f8f8e-1d2b-4c3a-9e8f-000000000000",
    )
