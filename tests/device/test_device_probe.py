"""The probe on real NVIDIA hardware: NVML, CUDA copies, the load, NCCL, the CLI.

Run by ``scripts/device-check.sh`` on a GPU host (``GPUACCEPT_DEVICE=1``);
deselected everywhere else. Works with one GPU or more.

Each test proves one claim of :data:`device_claims.CLAIMS`. What it shows is read
from NVML directly (``pynvml``), not from the probe's own code, so that the
probe's readings are checked against the driver: the evidence is recorded
(:func:`device_claims.record`) before the assertions, for the summary.
"""

import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest
from device_claims import ENV_EVIDENCE_DIR, checks_measured, probe_run_proven, record

from gpuaccept.checks.gpu_compute import GpuComputeObserved
from gpuaccept.checks.gpu_memory_bandwidth import GpuMemoryBandwidthObserved
from gpuaccept.checks.peer_bandwidth import PeerBandwidthObserved, parse_pairs
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import BY_NAME, CHECKS
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.report import CheckStatus, ProbeReport, decode_termination_message
from gpuaccept.probe import clocks
from gpuaccept.probe.hardware.allreduce import AllreduceTiming, run_allreduce
from gpuaccept.probe.hardware.base import GpuInfo
from gpuaccept.probe.hardware.real import RealBackend
from gpuaccept.probe.inputs import load_policy
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.measure.context import NodeGpuCounts
from gpuaccept.probe.measure.nccl_allreduce import sweep_sizes
from gpuaccept.probe.runner import hardware_summary, run_check

pytestmark = pytest.mark.device
REPO = Path(__file__).resolve().parents[2]
DEFAULT_POLICY = REPO / "policies" / "default-h100-h200.yaml"

GPU_IDLE_BIT = 0x1  # nvmlClocksEventReasonGpuIdle
BUSY_UTILISATION_PERCENT = 90
BUSY_SAMPLE_FRACTION = 0.8  # NVML's utilisation is over its own sample period; allow ramp
LINK_RATE_FRACTION = 0.6  # pinned copies reach about 80-90 % of a link's raw rate
CLOCK_FRACTION = 0.5  # an idle Hopper SM clock is about 345 of 1980 MHz; loaded, near max
SAMPLE_SECONDS = 3.0
SAMPLE_INTERVAL_S = 0.1
COPY_BYTES = 256 << 20

# Raw data rate per lane in GB/s after line encoding: 8b/10b to Gen2, 128b/130b from Gen3.
LANE_GBPS = {1: 0.25, 2: 0.5, 3: 8 * 128 / 130 / 8, 4: 16 * 128 / 130 / 8, 5: 32 * 128 / 130 / 8}
LANE_GBPS |= {6: 64 / 8, 7: 128 / 8}


def link_rate_gbps(generation: int, width: int) -> float:
    """The raw data rate of a PCIe link in one direction, GB/s (Gen5 x16: 63.0)."""
    return LANE_GBPS[generation] * width


@pytest.fixture(scope="module")
def hw() -> Iterator[RealBackend]:
    backend = RealBackend()
    assert backend.gpus(), backend.gpu_problem()
    yield backend
    backend.close()


def nvml_handle(gpu: GpuInfo) -> Any:
    """NVML's handle for ``gpu`` by its UUID or bus id, not by index order."""
    if gpu.uuid:
        return pynvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
    assert gpu.bus_id is not None, gpu
    return pynvml.nvmlDeviceGetHandleByPciBusId(gpu.bus_id)


def nvml_sample(handle: Any) -> dict[str, int]:
    reasons = (  # the older name in nvidia-ml-py releases before 12.535
        getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    return {
        "utilisation_percent": int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
        "clock_event_reasons": int(reasons(handle)),
        "sm_mhz": int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        "link_generation": int(pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
        "link_width": int(pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
    }


def _uuid(text: str) -> str:
    """NVML's ``GPU-5b2c…`` and torch's ``5b2c…`` → ``5b2c…``."""
    return text.strip().lower().removeprefix("gpu-")


def test_nvml_enumerates_gpus(hw: RealBackend) -> None:
    torch = importlib.import_module("torch")  # the host's torch, only on a GPU host
    nvml_uuids = sorted(_uuid(g.uuid or "") for g in hw.gpus())
    cuda_uuids = sorted(
        _uuid(str(torch.cuda.get_device_properties(i).uuid))
        for i in range(torch.cuda.device_count())
    )
    names = [g.name for g in hw.gpus()]
    record(
        "test_nvml_enumerates_gpus",
        proven=nvml_uuids == cuda_uuids and all(names) and all(nvml_uuids),
        nvml=[
            {"index": g.index, "name": g.name, "bus": g.bus_id, "uuid": g.uuid} for g in hw.gpus()
        ],
        cuda_uuids=cuda_uuids,
    )
    assert all(names), names
    assert all(nvml_uuids), nvml_uuids
    assert nvml_uuids == cuda_uuids


def test_versions_agree(hw: RealBackend) -> None:
    v = hw.versions()
    nvml_driver = str(pynvml.nvmlSystemGetDriverVersion())
    proven = (
        v.kernel_module == nvml_driver
        and v.nvml_driver == nvml_driver
        and not v.nvml_mismatch
        and v.cuda_driver is not None
    )
    record(
        "test_versions_agree",
        proven=proven,
        kernel_module=v.kernel_module,
        nvml_driver=nvml_driver,
        cuda_driver=v.cuda_driver,
        # the probe image's, from the loaded libraries (reported, never judged)
        cuda_runtime=v.cuda_runtime,
        cuda_runtime_library=v.cuda_runtime_library,
        nccl=v.nccl,
        nccl_library=v.nccl_library,
    )
    assert v.kernel_module == nvml_driver
    assert v.nvml_driver == nvml_driver
    assert not v.nvml_mismatch
    assert v.cuda_driver is not None


def test_gpu_busy_while_link_sampled(hw: RealBackend) -> None:
    """The load the probe samples the link under really keeps every GPU busy."""
    handles = {g.index: nvml_handle(g) for g in hw.gpus()}
    samples: dict[int, list[dict[str, int]]] = {i: [] for i in handles}
    probe_links: dict[int, list[tuple[int, int]]] = {i: [] for i in handles}
    with hw.gpu_load():
        deadline = time.monotonic() + SAMPLE_SECONDS
        while time.monotonic() < deadline:
            for index, handle in handles.items():
                link = hw.pcie_link(index)  # what the probe reads ...
                probe_links[index].append((link.generation, link.width))
                samples[index].append(nvml_sample(handle))  # ... and what NVML says then
            time.sleep(SAMPLE_INTERVAL_S)
    per_gpu: dict[str, dict[str, Any]] = {}
    proven = True
    for index, rows in samples.items():
        busy = [r["utilisation_percent"] >= BUSY_UTILISATION_PERCENT for r in rows]
        idle_bit = [bool(r["clock_event_reasons"] & GPU_IDLE_BIT) for r in rows]
        ok = sum(busy) >= BUSY_SAMPLE_FRACTION * len(rows) and not any(idle_bit)
        proven = proven and ok and len(rows) >= 5
        per_gpu[str(index)] = {
            "samples": len(rows),
            "utilisation_median_percent": statistics.median(r["utilisation_percent"] for r in rows),
            "busy_samples": sum(busy),
            "gpu_idle_bit_samples": sum(idle_bit),
            "reasons_seen": sorted(
                {name for r in rows for name in clocks.decode(r["clock_event_reasons"])}
            ),
            "probe_links": sorted(set(probe_links[index])),
            "nvml_links": sorted({(r["link_generation"], r["link_width"]) for r in rows}),
        }
    record("test_gpu_busy_while_link_sampled", proven=proven, gpus=per_gpu)
    for gpu_key, facts in per_gpu.items():
        assert facts["samples"] >= 5, (gpu_key, facts)
        assert facts["gpu_idle_bit_samples"] == 0, (gpu_key, facts)
        assert facts["busy_samples"] >= BUSY_SAMPLE_FRACTION * facts["samples"], (gpu_key, facts)


def test_copy_bandwidth_near_link_rate(hw: RealBackend) -> None:
    per_gpu: dict[str, dict[str, Any]] = {}
    proven = True
    for gpu in hw.gpus():
        copy = hw.copy_bandwidth(gpu.index, COPY_BYTES)
        link = copy.link_under_load
        rate = link_rate_gbps(link.generation, link.width)
        floor = LINK_RATE_FRACTION * rate
        ok = all(floor <= bw <= rate * 1.02 for bw in (copy.h2d_gbps, copy.d2h_gbps))
        proven = proven and ok
        per_gpu[str(gpu.index)] = {
            "h2d_gbps": round(copy.h2d_gbps, 1),
            "d2h_gbps": round(copy.d2h_gbps, 1),
            "link_under_load": f"Gen{link.generation} x{link.width}",
            "link_max": f"Gen{link.max_generation} x{link.max_width}",
            "link_rate_gbps": round(rate, 1),
            "floor_gbps": round(floor, 1),
        }
    record("test_copy_bandwidth_near_link_rate", proven=proven, gpus=per_gpu)
    for index, facts in per_gpu.items():
        for direction in ("h2d_gbps", "d2h_gbps"):
            assert facts["floor_gbps"] <= facts[direction], (index, direction, facts)
            assert facts[direction] <= facts["link_rate_gbps"] * 1.02, (index, direction, facts)


def test_clocks_under_load(hw: RealBackend) -> None:
    handles = {g.index: nvml_handle(g) for g in hw.gpus()}
    idle = {i: nvml_sample(h)["sm_mhz"] for i, h in handles.items()}
    max_mhz = {
        i: int(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM))
        for i, h in handles.items()
    }
    loaded: dict[int, list[int]] = {i: [] for i in handles}
    masks: dict[int, set[str]] = {i: set() for i in handles}
    with hw.gpu_load():
        for _ in range(10):
            for index, handle in handles.items():
                loaded[index].append(nvml_sample(handle)["sm_mhz"])
                masks[index] |= set(clocks.decode(hw.clock_event_reasons(index)))
            time.sleep(SAMPLE_INTERVAL_S)
    per_gpu = {
        str(i): {
            "sm_mhz_before_load": idle[i],
            "sm_mhz_under_load_median": statistics.median(loaded[i]),
            "sm_mhz_max": max_mhz[i],
            "reasons_under_load (probe)": sorted(masks[i]),
        }
        for i in handles
    }
    proven = all(statistics.median(loaded[i]) >= CLOCK_FRACTION * max_mhz[i] > 0 for i in handles)
    record("test_clocks_under_load", proven=proven, gpus=per_gpu)
    for i in handles:
        assert max_mhz[i] > 0, per_gpu
        assert statistics.median(loaded[i]) >= CLOCK_FRACTION * max_mhz[i], per_gpu
        assert "gpu_idle" not in masks[i], per_gpu


def test_every_check_produces_a_result(hw: RealBackend) -> None:
    policy = ProbePolicy.model_validate({"throttleReasons": {"sampleSeconds": 2}})
    gpus = len(hw.gpus())
    context = ProbeContext(node_gpus=NodeGpuCounts(allocatable=gpus, capacity=gpus))
    summary = hardware_summary(hw)
    results = []
    # every registered check but the all-reduce, which has its own test below
    for check in (c for c in CHECKS if c.name != "nccl_allreduce"):
        result = run_check(check, hw, policy, context, summary)
        required = bool(getattr(policy.section(check), "required", True))
        results.append(
            {"check": check.name, "status": result.status.value, "required": required,
             "message": result.message}
        )  # fmt: skip
    # an error, or a required check's skip (it quarantines), did not measure the hardware
    unmeasured = checks_measured(results)
    record("test_every_check_produces_a_result", proven=not unmeasured, results=results)
    assert not unmeasured, unmeasured


THROUGHPUT_AGREEMENT = 0.15  # probe (CUDA events, sustained) vs host clock (short, warm)
HOST_MATMULS = 20
HOST_TRIADS = 50


def _host_timed(gpu: GpuInfo, hw: RealBackend) -> dict[str, float]:
    """bf16 matmul TFLOPS and triad GB/s of one GPU, timed on the host clock around a
    synchronize (not the probe's CUDA events): the independent figure to compare with."""
    torch = importlib.import_module("torch")
    device = torch.device("cuda", hw.cuda_ordinal(gpu.index))
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    out = torch.empty((n, n), device=device, dtype=torch.bfloat16)
    for _ in range(5):
        torch.matmul(a, b, out=out)
    torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(HOST_MATMULS):
        torch.matmul(a, b, out=out)
    torch.cuda.synchronize(device)
    tflops = 2 * n**3 * HOST_MATMULS / (time.perf_counter() - started) / 1e12
    del a, b, out
    count = (1 << 30) // 4
    x = torch.empty(count, device=device, dtype=torch.float32)
    y = torch.full((count,), 1.0, device=device, dtype=torch.float32)
    z = torch.full((count,), 2.0, device=device, dtype=torch.float32)
    torch.add(y, z, alpha=0.4, out=x)
    torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(HOST_TRIADS):
        torch.add(y, z, alpha=0.4, out=x)
    torch.cuda.synchronize(device)
    gbps = 3 * count * 4 * HOST_TRIADS / (time.perf_counter() - started) / 1e9
    del x, y, z
    torch.cuda.empty_cache()
    return {"bf16_tflops": round(tflops, 1), "triad_gbps": round(gbps, 1)}


def test_per_gpu_throughput_matches_host_timing(hw: RealBackend) -> None:
    policy = ProbePolicy.model_validate(
        {"throttleReasons": {"warmupSeconds": 2, "sampleSeconds": 3}}
    )
    context = ProbeContext()
    summary = hardware_summary(hw)
    results = {
        name: run_check(BY_NAME[name], hw, policy, context, summary)
        for name in ("throttle_reasons", "gpu_compute", "gpu_memory_bandwidth")
    }
    compute, memory = results["gpu_compute"], results["gpu_memory_bandwidth"]
    figures = GpuComputeObserved.model_validate(compute.observed)
    bandwidth = GpuMemoryBandwidthObserved.model_validate(memory.observed)
    gpus = hw.gpus()
    per_gpu = {}
    agree = True
    for gpu in gpus:
        host = _host_timed(gpu, hw)
        probe_figures = {
            "bf16_tflops": (figures.bf16_tflops or [0.0] * len(gpus))[gpu.index],
            "triad_gbps": (bandwidth.gbps or [0.0] * len(gpus))[gpu.index],
        }
        ratios = {k: probe_figures[k] / host[k] if host[k] else 0.0 for k in host}
        agree = agree and all(abs(r - 1) <= THROUGHPUT_AGREEMENT for r in ratios.values())
        per_gpu[str(gpu.index)] = {
            "probe": probe_figures,
            "host_timed": host,
            "ratio": {k: round(r, 3) for k, r in ratios.items()},
            "fp8_tflops": figures.fp8_tflops[gpu.index] if figures.fp8_tflops else None,
            "sm_clock_mhz": figures.sm_clock_mhz[gpu.index] if figures.sm_clock_mhz else None,
        }
    siblings_said = len(gpus) >= 2 or (  # two GPUs are judged against each other
        "no sibling comparison" in compute.message and "no sibling comparison" in memory.message
    )
    passed = compute.status is CheckStatus.PASS and memory.status is CheckStatus.PASS
    record(
        "test_per_gpu_throughput_matches_host_timing",
        proven=agree and siblings_said and passed,
        gpus=per_gpu,
        fp8_skipped=figures.fp8_skipped,
        messages={name: r.message for name, r in results.items()},
        durations_s={name: r.duration_s for name, r in results.items()},
    )
    assert passed, (compute.message, memory.message)
    assert siblings_said, (compute.message, memory.message)
    assert agree, per_gpu


def test_nccl_allreduce_on_real_gpus(hw: RealBackend) -> None:
    ranks = len(hw.gpus())
    max_bytes = 256 << 20
    m = run_allreduce(
        ranks, "nccl", sweep_sizes(max_bytes), AllreduceTiming(iterations=10, warmup=3)
    )
    sweep = [
        {"bytes": size, "us": round(seconds * 1e6, 1), "algbw": round(algbw, 1), "busbw": busbw}
        for size, seconds, algbw, busbw in m.sweep
    ]
    proven = (
        m.backend == "nccl"
        and m.sweep[-1][0] == max_bytes
        and all(seconds > 0 for _, seconds, _, _ in m.sweep)
    )
    record("test_nccl_allreduce_on_real_gpus", proven=proven, ranks=ranks, sweep=sweep)
    assert m.backend == "nccl"
    assert m.sweep[-1][0] == max_bytes
    assert all(seconds > 0 for _, seconds, _, _ in m.sweep), sweep


def test_peer_bandwidth_on_real_gpus(hw: RealBackend) -> None:
    """One GPU: skip with a reason. Two or more: the matrix, checked against CUDA's and
    NVML's own answers read here (NVML capability indices 0 = read, 2 = NVLink)."""
    torch = importlib.import_module("torch")  # the host's torch, only on a GPU host
    check = next(c for c in CHECKS if c.name == "peer_bandwidth")
    policy = ProbePolicy.model_validate({"peerBandwidth": {"bufferBytes": 64 << 20}})
    started = time.monotonic()
    result = run_check(check, hw, policy, ProbeContext(), hardware_summary(hw))
    seconds = round(time.monotonic() - started, 2)
    gpus = hw.gpus()
    if len(gpus) < 2:
        proven = result.status is CheckStatus.SKIP and "at least 2 GPUs" in result.message
        record("test_peer_bandwidth_on_real_gpus", proven=proven, gpus=len(gpus),
               status=result.status.value, message=result.message)  # fmt: skip
        assert proven, result
        return
    observed = PeerBandwidthObserved.model_validate(result.observed)
    matrix = observed.gbps or []
    cuda = {
        (s.index, d.index): bool(
            torch.cuda.can_device_access_peer(hw.cuda_ordinal(s.index), hw.cuda_ordinal(d.index))
        )
        for s in gpus
        for d in gpus
        if s.index != d.index
    }
    nvml = {
        f"{s.index}>{d.index}": [
            int(pynvml.nvmlDeviceGetP2PStatus(nvml_handle(s), nvml_handle(d), index))
            for index in (0, 2)
        ]
        for s in gpus
        for d in gpus
        if s.index != d.index
    }
    denied = {pair for pair, granted in cuda.items() if not granted}
    reported = {
        pair
        for text in (observed.no_peer_access or {}).values()
        for pair in parse_pairs(text, observed.gpus)
    }
    measured = bool(matrix) and all(matrix[s][d] > 0 for s, d in cuda)
    proven = measured and denied == reported
    record("test_peer_bandwidth_on_real_gpus", proven=proven, gpus=len(gpus), seconds=seconds,
           status=result.status.value, message=result.message, gbps=matrix,
           bidir=observed.bidir_gbps, paths=observed.paths, nvml_read_nvlink=nvml,
           cuda_denied=sorted(denied))  # fmt: skip
    assert measured, matrix
    assert denied == reported, (denied, reported)


def _probe_outputs(tmp_path: Path) -> Path:
    directory = os.environ.get(ENV_EVIDENCE_DIR)
    return Path(directory) if directory else tmp_path


def test_gpuaccept_probe_on_real_hardware(tmp_path: Path) -> None:
    """The CLI as the pod runs it: its exit code is its verdict, never a crash."""
    out = _probe_outputs(tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "probe-termination-log"
    log.unlink(missing_ok=True)
    gpus = len(RealBackend().gpus())
    env = {**os.environ, "GPUACCEPT_EXPECTED_GPUS": str(gpus)}
    env.pop("GPUACCEPT_PROFILE", None)
    env.pop("GPUACCEPT_POLICY", None)
    proc = subprocess.run(
        [sys.executable, "-m", "gpuaccept.cli", "probe", "--policy", str(DEFAULT_POLICY),
         "--output", "json", "--termination-log", str(log)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=200, check=False,
    )  # fmt: skip
    (out / "probe.json").write_text(proc.stdout)
    (out / "probe.stderr").write_text(proc.stderr)
    print(proc.stderr, file=sys.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1), proc.stderr
    report = ProbeReport.model_validate_json(proc.stdout)
    verdict = evaluate(report, load_policy(DEFAULT_POLICY))
    compact = decode_termination_message(log.read_text())
    statuses = {r.check: r.status.value for r in report.results}
    errors = {r.check: r.message for r in report.results if r.status is CheckStatus.ERROR}
    reasons = [f"{r.reason} ({r.check})" for r in verdict.reasons]
    # the device machines are healthy: a quarantine there is a false one
    expect = os.environ.get("GPUACCEPT_DEVICE_EXPECT", "accepted")
    verdict_proven = probe_run_proven(accepted=verdict.accepted, reasons=reasons, expect=expect)
    record(
        "test_gpuaccept_probe_on_real_hardware",
        proven=(
            report.hardware.value == "real"
            and report.summary.gpu_count == gpus
            and not errors
            and (proc.returncode == 0) == verdict.accepted
            and verdict_proven
            and compact.node_name == report.node_name
        ),
        expect=expect,
        exit_code=proc.returncode,
        accepted=verdict.accepted,
        reasons=[f"{r.reason} ({r.check})" for r in verdict.reasons],
        summary=json.loads(report.summary.model_dump_json(by_alias=True, exclude_none=True)),
        results=[
            {"check": r.check, "status": r.status.value, "s": r.duration_s, "message": r.message}
            for r in report.results
        ],
    )
    assert report.hardware.value == "real"
    assert report.summary.gpu_count == gpus
    assert not errors, errors
    assert (proc.returncode == 0) == verdict.accepted, (proc.returncode, verdict.reasons)
    assert verdict_proven, (expect, reasons, statuses)
    assert "probe" not in statuses, statuses  # a failure report, not a measurement
    assert compact.node_name == report.node_name
    assert {r.check: r.status.value for r in compact.results} == statuses
