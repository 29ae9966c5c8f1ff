"""gpu_count on a DRA node: the UUIDs the pool publishes (what the operator passes,
GPUACCEPT_EXPECTED_GPU_UUIDS) against the GPUs NVML sees (issue 39, part 4)."""

from __future__ import annotations

import dataclasses

import pytest
from probe_scenarios import HEALTHY

from gpuaccept.checks.gpu_count import GpuCountObserved, GpuCountPolicy
from gpuaccept.contracts.probe_invocation import ENV_EXPECTED_GPU_UUIDS
from gpuaccept.probe.cli import main
from gpuaccept.probe.hardware.base import GpuInfo
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.measure.context import NodeGpuCounts, ProbeContext
from gpuaccept.probe.measure.gpu_count import measure

UUIDS = tuple(f"GPU-{i:08x}-0000-0000-0000-000000000000" for i in range(8))


class WithUuids(SimulatedBackend):
    """The simulated node, its GPUs with UUIDs as NVML gives them (None: not given)."""

    def __init__(self, uuids: list[str | None]) -> None:
        super().__init__(load_profile(HEALTHY))
        self.uuids = uuids

    def gpus(self) -> list[GpuInfo]:
        return [
            dataclasses.replace(gpu, uuid=self.uuids[gpu.index])
            for gpu in super().gpus()
            if gpu.index < len(self.uuids)
        ]


def _measure(seen: list[str | None], published: tuple[str, ...] | None) -> GpuCountObserved:
    node = NodeGpuCounts(allocatable=8, capacity=8, published_uuids=published)
    return measure(WithUuids(seen), GpuCountPolicy(), ProbeContext(node_gpus=node))


def test_the_pools_gpus_are_the_gpus_nvml_sees() -> None:
    observed = _measure(list(UUIDS), UUIDS)
    assert (observed.published, observed.uuids_compared) == (8, True)
    assert observed.missing is None
    assert observed.unpublished is None


def test_a_published_gpu_nvml_does_not_see_and_one_it_sees_unpublished() -> None:
    seen: list[str | None] = [*UUIDS[:7], "GPU-ffffffff-0000-0000-0000-000000000000"]
    observed = _measure(seen, UUIDS)
    assert observed.missing == [UUIDS[7]]
    assert observed.unpublished == ["GPU-ffffffff-0000-0000-0000-000000000000"]


def test_without_uuids_from_nvml_nothing_is_compared() -> None:
    observed = _measure([None] * 8, UUIDS)
    assert (observed.published, observed.uuids_compared) == (8, False)
    assert observed.missing is None


def test_a_device_plugin_node_passes_no_uuids() -> None:
    observed = _measure(list(UUIDS), None)
    assert (observed.published, observed.uuids_compared) == (None, None)


@pytest.mark.parametrize("text", ["not-a-uuid", f"{UUIDS[0]},{UUIDS[0]}"])
def test_a_bad_uuid_list_is_bad_input(
    text: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ENV_EXPECTED_GPU_UUIDS, text)
    assert main(["--profile", str(HEALTHY)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert ENV_EXPECTED_GPU_UUIDS in err[0]
