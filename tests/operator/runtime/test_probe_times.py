"""How long the probe took, as the status records it: the probe's own wall time
(``figures.probeWallS``, a printer column) and the probe container's run as the
kubelet saw it (``probePodSeconds``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from world import World, make_report

from gpuaccept.checks.gen import crds as crdgen
from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.views import container_run_seconds, pod_view


@pytest.mark.parametrize(
    ("terminated", "seconds"),
    [
        ({"startedAt": "2026-11-30T14:00:05Z", "finishedAt": "2026-11-30T14:00:59Z"}, 54),
        ({"startedAt": "2026-11-30T14:00:05Z"}, None),  # still running, or no finish
        ({"startedAt": "1970-01-01T00:00:00Z", "finishedAt": "2026-11-30T14:00:59Z"}, None),
        ({"startedAt": "yesterday", "finishedAt": "2026-11-30T14:00:59Z"}, None),
        ({"startedAt": "2026-11-30T14:01:00Z", "finishedAt": "2026-11-30T14:00:59Z"}, None),
        (None, None),
    ],
)
def test_the_containers_run_from_its_kubelet_timestamps(
    terminated: dict[str, Any] | None, seconds: int | None
) -> None:
    assert container_run_seconds(terminated) == seconds


def test_the_pod_view_carries_the_run() -> None:
    body = {
        "metadata": {"name": "p"},
        "status": {
            "containerStatuses": [
                {
                    "name": "probe",
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "startedAt": "2026-11-30T14:00:05Z",
                            "finishedAt": "2026-11-30T14:01:02Z",
                        }
                    },
                }
            ]
        },
    }
    assert pod_view(body).run_seconds == 57


def test_a_verdict_records_both_probe_times() -> None:
    world = World()
    world.settle()
    report = make_report()
    assert report.wall_s is not None
    world.finish_with_report(report)
    pod = world.current_pod()
    world.pods[pod.name] = dataclasses.replace(pod, run_seconds=58)
    world.settle()
    st = world.status
    assert st.phase is Phase.ACCEPTED
    assert st.figures is not None
    assert st.figures.probe_wall_s == report.wall_s
    assert st.probe_pod_seconds == 58


def test_kubectl_wide_shows_the_probe_wall_time() -> None:
    columns = crdgen.acceptance_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    wall = [c for c in columns if c["jsonPath"] == ".status.figures.probeWallS"]
    assert wall == [
        {
            "name": "Wall",
            "type": "number",
            "jsonPath": ".status.figures.probeWallS",
            "description": "Probe wall time, s: its process start to the end of its last check.",
            "priority": 1,
        }
    ]
