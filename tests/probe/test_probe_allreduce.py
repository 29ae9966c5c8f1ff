"""The all-reduce benchmark, run for real with gloo on 2 and 4 CPU processes.

It is the same code the probe runs with NCCL on GPUs (only the backend, the
device and the timer differ)."""

import pytest
from probe_scenarios import HEALTHY

from gpuaccept.checks.nccl_allreduce import SPEC as NCCL
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.hardware.allreduce import (
    AllreduceError,
    AllreduceTiming,
    bus_bandwidth,
    run_allreduce,
)
from gpuaccept.probe.hardware.base import AllreduceMeasurement
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.runner import run_check

SIZES = [4096, 65536, 1 << 20]


def test_bus_bandwidth_is_nccl_tests_definition() -> None:
    assert bus_bandwidth(100.0, 2) == 100.0
    assert bus_bandwidth(100.0, 4) == 150.0
    assert bus_bandwidth(100.0, 8) == 175.0
    assert bus_bandwidth(100.0, 1) == 0.0


@pytest.mark.torchdist
@pytest.mark.parametrize("ranks", [2, 4])
def test_gloo_allreduce_real_processes(ranks: int) -> None:
    m = run_allreduce(ranks, "gloo", SIZES, AllreduceTiming(iterations=3, warmup=1, timeout_s=120))
    assert m.backend == "gloo"
    assert m.source == "measured"
    assert m.ranks == ranks
    assert [size for size, *_ in m.sweep] == SIZES
    for size, seconds, algbw, busbw in m.sweep:
        assert seconds > 0
        assert algbw == pytest.approx(size / seconds / 1e9)
        assert busbw == pytest.approx(algbw * 2 * (ranks - 1) / ranks)
    assert m.busbw_gbps == m.sweep[-1][3] > 0


class _GlooNode(SimulatedBackend):
    """A simulated node whose all-reduce is the real gloo benchmark."""

    def __init__(self, ranks: int) -> None:
        profile = load_profile(HEALTHY)
        super().__init__(
            profile.model_copy(update={"gpus": profile.gpus.model_copy(update={"count": ranks})})
        )

    def allreduce(self, sizes: list[int], iterations: int, warmup: int) -> AllreduceMeasurement:
        timing = AllreduceTiming(iterations=iterations, warmup=warmup, timeout_s=120)
        return run_allreduce(len(self.gpus()), "gloo", sizes, timing)


@pytest.mark.torchdist
def test_nccl_allreduce_check_over_gloo() -> None:
    policy = ProbePolicy.model_validate(
        {"ncclAllreduce": {"maxMessageBytes": 262144, "iterations": 2, "warmupIterations": 1,
                           "minBusbwGBps": 0.000001}}
    )  # fmt: skip
    hardware = _GlooNode(2)
    try:
        result = run_check(
            NCCL, hardware, policy, ProbeContext(), HardwareSummary(gpu_count=2, gpu_model="cpu")
        )
    finally:
        hardware.close()
    assert result.status is CheckStatus.PASS, result.message
    assert isinstance(result.observed, dict)
    assert result.observed["backend"] == "gloo"
    assert result.observed["source"] == "measured"
    assert result.observed["ranks"] == 2
    assert result.observed["bytes"] == 262144
    sweep = result.observed["sweep"]
    assert isinstance(sweep, list)
    assert [s[0] for s in sweep if isinstance(s, list)] == [512 * 8**i for i in range(4)][
        -4:
    ] or sweep


@pytest.mark.torchdist
def test_worker_failure_is_reported_not_hung() -> None:
    with pytest.raises(AllreduceError, match="all-reduce worker"):
        run_allreduce(2, "mpi", [4096], AllreduceTiming(iterations=1, warmup=0, timeout_s=60))  # type: ignore[arg-type]


def test_bad_arguments() -> None:
    with pytest.raises(AllreduceError):
        run_allreduce(0, "gloo", SIZES)
    with pytest.raises(AllreduceError):
        run_allreduce(2, "gloo", [])
