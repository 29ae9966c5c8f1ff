"""peer_bandwidth: judging (full and condensed forms), pairs text, the simulated node, and
the real backend's NVML and torch parts against fakes of pynvml and torch."""

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from probe_scenarios import HEALTHY, PROFILES, default_policy, fault, probe
from test_probe_real_backend import backend as real_backend
from test_probe_real_backend import fake_nvml as fake_nvml_module

from gpuaccept.checks.peer_bandwidth import (
    PeerBandwidthObserved,
    format_pairs,
    parse_pairs,
)
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import BY_NAME
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.hardware.peer_copies import PeerCopies, PeerCopyHungError, read_p2p_status
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.runner import hardware_summary, run_check

H100 = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=4)


def matrix(n: int, value: float, **pairs: float) -> list[list[float]]:
    rows = [[0.0 if s == d else value for d in range(n)] for s in range(n)]
    for key, gbps in pairs.items():
        s, d = (int(x) for x in key.removeprefix("p").split("_"))
        rows[s][d] = gbps
    return rows


def observed(
    n: int = 4,
    value: float = 380.0,
    path: str = "N",
    no_access: dict[str, str] | None = None,
    **pairs: float,
) -> PeerBandwidthObserved:
    return PeerBandwidthObserved(
        gpus=n,
        paths=["".join("-" if s == d else path for d in range(n)) for s in range(n)],
        gbps=matrix(n, value, **pairs),
        no_peer_access=no_access,
    )


@pytest.mark.parametrize(
    ("pairs", "text"),
    [
        ({(s, d) for s in range(4) for d in range(4) if s != d}, "*"),
        ({(3, o) for o in range(4) if o != 3} | {(o, 3) for o in range(4) if o != 3}, "3<>*"),
        ({(1, 2), (2, 1), (0, 3)}, "0>3,1<>2"),
        (set(), ""),
    ],
)
def test_pairs_text_round_trip(pairs: set[tuple[int, int]], text: str) -> None:
    assert format_pairs(pairs, 4) == text
    if text:
        assert parse_pairs(text, 4) == pairs


def test_bad_pairs_text_is_refused() -> None:
    with pytest.raises(ValueError, match="not a GPU pair"):
        parse_pairs("2-5", 8)


def test_single_gpu_passes_as_not_applicable_with_a_reason() -> None:
    profile = load_profile(HEALTHY)
    one = profile.model_copy(update={"gpus": profile.gpus.model_copy(update={"count": 1})})
    result = probe(one).result("peer_bandwidth")
    assert result is not None
    assert result.status is CheckStatus.PASS  # a node shape (no pair), not a skip
    assert result.message.startswith("not applicable: ")
    assert "at least 2 GPUs" in result.message


def test_the_weak_pair_fault_names_the_pair() -> None:
    result = probe(fault("p2p-weak-pair")).result("peer_bandwidth")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert result.message.startswith("GPU 2\u21925: 180 GB/s, 53 % below the node median 380")


def test_the_acs_fault_fails_by_the_host_staged_floor() -> None:
    result = probe(fault("p2p-disabled-acs")).result("peer_bandwidth")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert "GPU 0\u21921: 21.0 GB/s" in result.message
    assert "with peer access over PCIe, below the host-staged rate 26.8 GB/s" in result.message


def test_a_node_without_peer_access_copies_small_buffers_one_way() -> None:
    result = probe(PROFILES / "h100-pcie-8gpu-no-p2p.yaml").result("peer_bandwidth")
    assert result is not None
    assert result.status is CheckStatus.PASS, result.message
    assert isinstance(result.observed, dict)
    assert result.observed["stagedBytes"] == 32 << 20
    assert result.observed["bidirGBps"] == [[0.0] * 8] * 8  # staged pairs: one way only


def test_healthy_h100_reports_the_full_matrix() -> None:
    result = probe(HEALTHY, default_policy()).result("peer_bandwidth")
    assert result is not None
    assert result.status is CheckStatus.PASS
    assert isinstance(result.observed, dict)
    assert result.observed["paths"][0] == "-NNNNNNN"
    assert result.observed["gbps"][0][1] == 380.0
    assert result.observed["bidirGBps"][0][1] == 741.0  # 380 x 1.95


# --- the real backend's parts, against fakes ---------------------------------------------
class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def fake_nvml(
    statuses: dict[int, int] | None = None, error: int | None = None, error_on: int | None = None
) -> Any:
    """NVML's P2P status per capability index; ``error`` raised for every index, or only
    for ``error_on``."""

    def status(first: int, second: int, index: int) -> int:
        if error is not None and error_on in (None, index):
            raise FakeNVMLError(error)
        assert isinstance(index, int)  # pynvml's READ constant is a tuple: never pass it
        return (statuses or {}).get(index, 5)

    return types.SimpleNamespace(NVMLError=FakeNVMLError, nvmlDeviceGetP2PStatus=status)


@pytest.mark.parametrize(
    ("statuses", "word"),
    [
        ({2: 0, 0: 0}, "nvlink"),  # NVLink capability OK
        ({2: 5, 0: 0}, "ok"),  # PCIe read OK
        ({2: 5, 0: 1}, "chipset_not_supported"),
        ({2: 5, 0: 3}, "ioh_topology_not_supported"),
        ({2: 5, 0: 4}, "disabled_by_regkey"),
        ({2: 5, 0: 42}, "unknown"),
    ],
)
def test_nvml_p2p_status_words(statuses: dict[int, int], word: str) -> None:
    assert read_p2p_status(fake_nvml(statuses), 0, 1, 0) == word


def test_nvml_error_is_unknown_and_a_lost_gpu_is_named() -> None:
    assert read_p2p_status(fake_nvml(error=3), 0, 1, 0) == "unknown"
    # an error on the NVLink index alone does not hide the read capability's answer
    assert read_p2p_status(fake_nvml({0: 0}, error=3, error_on=2), 0, 1, 0) == "ok"
    assert read_p2p_status(fake_nvml({0: 1}, error=3, error_on=2), 0, 1, 0) == (
        "chipset_not_supported"
    )
    with pytest.raises(Exception, match="GPU 4"):
        read_p2p_status(fake_nvml(error=15), 4, 1, 4)  # NVML_ERROR_GPU_IS_LOST


class FakeTorch:
    """Enough of torch.cuda to see which streams are current when a copy is enqueued."""

    uint8 = "uint8"

    def __init__(
        self,
        elapsed_ms: float = 10.0,
        completes: bool = True,
        raises: set[tuple[int, int]] | None = None,
    ) -> None:
        self.raises = raises or set()  # (src, dst) CUDA ordinals whose copy_ raises
        self.current: dict[int, str] = {}
        self.copies: list[tuple[int, int, dict[int, str]]] = []
        self.recorded: list[str] = []
        fake = self
        self.elapsed_ms, self.completes = elapsed_ms, completes
        self.count = 0

        class Stream:
            def __init__(self, device: Any) -> None:
                fake.count += 1
                self.device, self.name = device.index, f"s{fake.count}@{device.index}"

            def wait_event(self, event: Any) -> None:
                fake.recorded.append(f"{self.name} waits")

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                pass

            def record(self, stream: Any) -> None:
                fake.recorded.append(f"record on {stream.name}")

            def query(self) -> bool:
                return fake.completes

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, other: Any) -> float:
                return fake.elapsed_ms

        @contextmanager
        def stream(s: Any) -> Iterator[None]:
            before = fake.current.get(s.device)
            fake.current[s.device] = s.name
            try:
                yield
            finally:
                fake.current[s.device] = before or "default"

        self.cuda = types.SimpleNamespace(Stream=Stream, Event=Event, stream=stream)

    def device(self, _kind: str, index: int) -> Any:
        return types.SimpleNamespace(index=index)

    def empty(self, nbytes: int, dtype: str, device: Any) -> Any:
        fake = self
        on = device.index

        class Buffer:
            index = on

            def copy_(self, source: Any, non_blocking: bool = False) -> None:
                if (source.index, self.index) in fake.raises:  # as C10_CUDA_CHECK raises
                    raise RuntimeError("CUDA error: peer mapping resources exhausted")
                fake.copies.append((source.index, self.index, dict(fake.current)))

        return Buffer()


def test_one_way_copies_run_on_the_source_stream_and_time_with_events() -> None:
    torch = FakeTorch(elapsed_ms=10.0)
    gbps = PeerCopies(torch, 1 << 28, 60).one_way(0, 1, iterations=10, warmup=2)
    assert gbps == pytest.approx((1 << 28) * 10 / 0.010 / 1e9)
    assert len(torch.copies) == 12
    src, dst, current = torch.copies[-1]
    assert (src, dst) == (0, 1)
    assert current[0].endswith("@0")  # its own streams, not the default ones
    assert current[1].endswith("@1")


def test_both_ways_give_each_direction_its_own_streams() -> None:
    torch = FakeTorch(elapsed_ms=20.0)
    gbps = PeerCopies(torch, 1 << 28, 60).both_ways(0, 1, iterations=10, warmup=0)
    assert gbps == pytest.approx(2 * (1 << 28) * 10 / 0.020 / 1e9)
    forward = [c for (s, d, c) in torch.copies if (s, d) == (0, 1)]
    backward = [c for (s, d, c) in torch.copies if (s, d) == (1, 0)]
    assert len(forward) == len(backward) == 10
    # the streams current on each device differ between the directions: torch's
    # cross-device barriers cannot tie one direction to the other
    assert forward[0][0] != backward[0][0]
    assert forward[0][1] != backward[0][1]


def test_a_copy_that_never_completes_hits_its_deadline() -> None:
    with pytest.raises(PeerCopyHungError):
        PeerCopies(FakeTorch(completes=False), 1 << 20, 0.01).one_way(0, 1, 1, 0)


def test_the_real_backend_measures_every_pair_with_fakes(monkeypatch: pytest.MonkeyPatch) -> None:
    """RealBackend against fake pynvml and torch: NVML's word and CUDA's peer access per
    ordered pair, CUDA devices found by UUID (here in reverse order), one copy per
    ordered pair and one two-way copy per unordered pair."""
    nvml = fake_nvml_module()
    # NVLink between 0 and 1 one way only: 1 -> 0 is PCIe read OK
    nvml.nvmlDeviceGetP2PStatus = lambda a, b, index: 0 if index == 0 or (a, b) == (0, 1) else 5  # type: ignore[attr-defined]
    torch = FakeTorch(elapsed_ms=10.0)
    torch.__version__ = "fake"  # type: ignore[attr-defined]
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 2
    # CUDA ordinal 0 is NVML's GPU 1 (UUIDs without the "GPU-" prefix, as torch prints them)
    torch.cuda.get_device_properties = lambda i: types.SimpleNamespace(uuid=str(1 - i))
    torch.cuda.can_device_access_peer = lambda a, b: (a, b) != (0, 1)  # CUDA ordinals
    monkeypatch.setitem(sys.modules, "torch", torch)
    hw = real_backend(monkeypatch, nvml)
    policy = ProbePolicy.model_validate(
        {"peerBandwidth": {"iterations": 10, "warmupIterations": 2}}
    )
    result = run_check(BY_NAME["peer_bandwidth"], hw, policy, ProbeContext(), hardware_summary(hw))
    hw.close()
    raw = (1 << 28) * 10 / 0.010 / 1e9
    gbps, staged = round(raw, 1), round(raw / 8, 1)  # 32 MiB copies without peer access
    assert result.observed == {
        "gpus": 2,
        "bytes": 1 << 28,
        "paths": ["-N", "P-"],
        "gbps": [[0.0, gbps], [staged, 0.0]],
        "bidirGBps": [[0.0, 0.0], [0.0, 0.0]],  # a pair staged one way: not timed both ways
        "stagedBytes": 32 << 20,
        # NVML GPU 1 -> 0 is CUDA ordinal 0 -> 1, where CUDA grants no peer access
        "noPeerAccess": {"ok": "1>0"},
    }
    assert result.status is CheckStatus.FAIL  # NVML says P2P works there: nvml rule
    assert "no peer access on 1>0 (NVML: P2P supported" in result.message
    ordered = {(s, d) for s, d, _current in torch.copies}
    assert ordered == {(0, 1), (1, 0)}  # CUDA ordinals
    assert len(torch.copies) == 2 * 12  # one way per ordered pair, no two-way pass


def test_a_pair_whose_copy_raises_is_that_pairs_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Enabling peer access (torch: cudaDeviceEnablePeerAccess under C10_CUDA_CHECK) can
    raise for one pair, e.g. cudaErrorTooManyPeers past 8 peers without NVSwitch: the
    other pairs are still measured and the check fails naming the pair, not errors."""
    nvml = fake_nvml_module()
    nvml.nvmlDeviceGetP2PStatus = lambda a, b, index: 0  # type: ignore[attr-defined]
    torch = FakeTorch(elapsed_ms=10.0, raises={(0, 1)})
    torch.__version__ = "fake"  # type: ignore[attr-defined]
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 2
    torch.cuda.get_device_properties = lambda i: types.SimpleNamespace(uuid=str(i))
    torch.cuda.can_device_access_peer = lambda a, b: True
    monkeypatch.setitem(sys.modules, "torch", torch)
    hw = real_backend(monkeypatch, nvml)
    result = run_check(
        BY_NAME["peer_bandwidth"], hw, ProbePolicy(), ProbeContext(), hardware_summary(hw)
    )
    hw.close()
    assert result.status is CheckStatus.FAIL, result.message
    # 0 -> 1 one way, then the two-way pass of 0<>1: on 2 GPUs every pair ("*")
    assert result.observed["failedPairs"] == {
        "RuntimeError: CUDA error: peer mapping resources exhausted": "*"
    }
    assert result.observed["gbps"][1][0] > 0  # 1 -> 0 one way: measured
    assert "peer copy failed on *: RuntimeError: CUDA error: peer mapping" in result.message
