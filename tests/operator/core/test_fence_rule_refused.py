"""A DeviceTaintRule write the API server refuses (a 403 from RBAC, a 422 from an
admission policy such as Kyverno or Gatekeeper) makes fencing unavailable on the node
(issue 40 review): the node is quarantined as FencingUnavailable with the API's reason,
never left Accepted with its bad GPU schedulable and nothing recorded. The rule is
written before the status; the executor remembers the refusal as it remembers a
refused probe pod (NodeSnapshot.fence_rule_write_error)."""

from __future__ import annotations

import dataclasses

from world import REPO, World, make_report, probed, spec

from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.core.model import (
    DeviceTaintView,
    DraDevice,
    OperatorConfig,
    PolicyView,
    ResourceSliceView,
)
from gpuaccept.probe.hardware.simulated import simulated_uuid

DRIVER = "gpu.nvidia.com"
IDENTITY = {"node_name", "boot_id", "started_at", "finished_at"}
REMAP_PENDING = REPO / "profiles" / "faults" / "row-remap-pending.yaml"  # GPU 5
UUIDS = [simulated_uuid("gpu-0000", i) for i in range(8)]
DENIED = (
    '403 devicetaintrules.resource.k8s.io is forbidden: User "system:serviceaccount:'
    'gpuaccept-system:gpuaccept" cannot create resource "devicetaintrules"'
)


def pool(taints: dict[int, tuple[DeviceTaintView, ...]] | None = None) -> tuple[ResourceSliceView]:
    marks = taints or {}
    devices = tuple(
        DraDevice(f"gpu-{i}", uuid=UUIDS[i], kind="gpu", taints=marks.get(i, ())) for i in range(8)
    )
    return (ResourceSliceView("s", DRIVER, "gpu-1", 1, 1, "gpu-1", devices),)


def dra_world(**policy: object) -> World:
    world = World(
        resource_slices=pool(),
        policies=[PolicyView("default", 1, spec(fencing={"mode": "gpu"}, **policy))],
        config=OperatorConfig(accept_simulated_reports=True, device_taint_rules=True),
    )
    assert world.node is not None
    world.node = dataclasses.replace(world.node, gpus=0, gpu_capacity=0)
    return world


def test_a_refused_rule_after_a_probe_quarantines_the_node_with_the_api_s_reason() -> None:
    world = dra_world()
    world.refuse_fence_rule = DENIED
    world.settle()
    report = probed(REMAP_PENDING)
    world.finish_with_report(report.model_copy(update=make_report().model_dump(include=IDENTITY)))
    world.settle()
    st = world.status
    assert (st.phase, st.reason, st.fenced) == (Phase.QUARANTINED, "FencingUnavailable", None)
    assert "would fence GPU 5" in (st.message or "")
    assert "cannot create resource" in (st.message or "")
    assert world.fence_rules == {}
    assert [g.fenced for g in st.gpu_verdicts] == [False]
    assert not world.settle().actions  # a fixed point: no rule write asked again


def test_a_refused_rule_in_service_quarantines_the_node_not_left_accepted() -> None:
    """An Xid 79 on GPU 2 of an accepted node: before the fix the plan wrote the rule
    first, was refused, and retried for ever, the node Accepted with GPU 2 schedulable
    and nothing in its status."""
    section = {"enabled": True, "watchPods": False}
    world = dra_world(inService=section)
    world.settle()
    world.finish_with_report(make_report())
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    world.refuse_fence_rule = "422 admission webhook denied the request: rule not allowed"
    x79 = DeviceTaintView(f"{DRIVER}/xid", "79", "NoSchedule", world.now)
    world.resource_slices = pool({2: (x79,)})
    world.settle()
    world.advance(20)  # past correlation.settleSeconds
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.QUARANTINED, "FencingUnavailable")
    assert "would fence GPU 2" in (st.message or "")
    assert "admission webhook denied the request" in (st.message or "")
    assert world.fence_rules == {}


def test_a_write_that_goes_through_fences_as_before() -> None:
    world = dra_world()
    world.settle()
    report = probed(REMAP_PENDING)
    world.finish_with_report(report.model_copy(update=make_report().model_dump(include=IDENTITY)))
    world.settle()
    assert (world.status.phase, world.status.fenced) == (Phase.ACCEPTED, "1/8")
    assert world.fence_rule_write_error is None
