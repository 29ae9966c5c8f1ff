"""gpu_numa and infiniband_ports: the sysfs readers against a fixture tree shaped as a
real two-socket host (tests/fixtures/sysfs-topology), the real backend over it, the
simulated profiles, and table tests of both judges (full and condensed forms)."""

import sys
import types
from pathlib import Path

import pytest
from probe_scenarios import FIXTURES, PROFILES, fault, probe
from pydantic import JsonValue

from gpuaccept.checks.gpu_numa import SPEC as GPU_NUMA
from gpuaccept.checks.infiniband_ports import SPEC as INFINIBAND
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.hardware.infiniband import (
    parse_port_state,
    parse_rate,
    read_infiniband,
)
from gpuaccept.probe.hardware.real import RealBackend
from gpuaccept.probe.hardware.sysfs import SysfsError
from gpuaccept.probe.hardware.topology import read_host_topology
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.runner import run_check

TOPOLOGY = FIXTURES / "sysfs-topology"
SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


def policy(**sections: dict[str, object]) -> ProbePolicy:
    return ProbePolicy.model_validate(sections)


# --- the kernel's formats ----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4: ACTIVE\n", "ACTIVE"),
        ("2: INIT", "INIT"),
        ("5: LinkUp\n", "LinkUp"),
        ("7: Phy Test", "Phy Test"),
    ],
)
def test_port_state_format(text: str, expected: str) -> None:
    assert parse_port_state(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("400 Gb/sec (4X NDR)\n", 400.0),
        ("200 Gb/sec (2X NDR)", 200.0),
        ("2.5 Gb/sec (1X SDR)", 2.5),
        ("100 Gb/sec (4X EDR)", 100.0),
    ],
)
def test_rate_format(text: str, expected: float) -> None:
    assert parse_rate(text) == expected


@pytest.mark.parametrize("text", ["ACTIVE", "", "fast"])
def test_bad_formats_are_errors(text: str) -> None:
    with pytest.raises(SysfsError):
        parse_port_state(text)
    with pytest.raises(SysfsError):
        parse_rate(text)


def test_reads_infiniband_fixture() -> None:
    view = read_infiniband(TOPOLOGY)
    assert view.netns_mode == "shared"
    assert [(h.name, h.fw_ver, h.board_id) for h in view.hcas] == [
        ("mlx5_0", "28.39.1002", "MT_0000000838"),
        ("mlx5_1", "22.39.1002", "MT_0000000359"),
    ]
    ports = [p for h in view.hcas for p in h.ports]
    assert [(p.name, p.state, p.phys_state, p.rate_gbps, p.link_layer, p.up) for p in ports] == [
        ("mlx5_0/1", "ACTIVE", "LinkUp", 400.0, "InfiniBand", True),
        ("mlx5_1/1", "ACTIVE", "LinkUp", 100.0, "Ethernet", True),
        ("mlx5_1/2", "DOWN", "Disabled", 40.0, "Ethernet", False),
    ]
    assert ports[0].link_downed == 0


def test_no_infiniband_and_no_ib_core(tmp_path: Path) -> None:
    view = read_infiniband(tmp_path)
    assert view.hcas == ()
    assert view.netns_mode == "unknown"


def test_reads_host_topology_fixture() -> None:
    topology = read_host_topology(TOPOLOGY)
    assert topology.cpu_socket == {0: 0, 1: 0, 2: 1, 3: 1}
    assert (topology.sockets, topology.numa_nodes) == (2, 2)
    assert topology.socket_of(frozenset({0, 1})) == 0
    assert topology.socket_of(frozenset({0, 1, 2, 3})) is None  # numa_node -1: every CPU


# --- the real backend over the fixture tree ---------------------------------


class FakeNVMLError(Exception):
    pass


def fake_nvml() -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVMLError = FakeNVMLError  # type: ignore[attr-defined]
    bus_ids = ["00000000:1B:00.0", "00000000:43:00.0"]
    functions: dict[str, object] = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": lambda h: f"GPU-{h}",
        "nvmlDeviceGetPciInfo": lambda h: types.SimpleNamespace(busId=bus_ids[h]),
    }
    for name, fn in functions.items():
        setattr(m, name, fn)
    return m


def real_backend(monkeypatch: pytest.MonkeyPatch) -> RealBackend:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    return RealBackend(sysfs_root=TOPOLOGY, proc_root=FIXTURES / "proc")


def test_real_backend_gpu_numa(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = real_backend(monkeypatch)
    result = run_check(GPU_NUMA, hw, ProbePolicy(), ProbeContext(), SUMMARY)
    assert result.status is CheckStatus.FAIL
    assert result.observed == {
        "sockets": 2,
        "numaNodes": 2,
        "numaNode": [0, -1],
        "socket": [0, -1],
        "localCpulist": {"0-1": [0], "0-3": [1]},
    }
    assert result.message.startswith("GPU 1: no NUMA node (numa_node -1) on a 2-socket host")
    assert "proximity data (ACPI _PXM)" in result.message
    hw.close()


def test_real_backend_infiniband(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = real_backend(monkeypatch)
    ib = policy(
        infinibandPorts={"linkLayer": "InfiniBand", "expectedUpPorts": 1, "minRateGbps": 200}
    )
    result = run_check(INFINIBAND, hw, ib, ProbeContext(), SUMMARY)
    assert result.status is CheckStatus.PASS, result.message
    assert result.message == "1 InfiniBand port up on 2 HCAs, min 400 Gb/s"
    every = policy(infinibandPorts={"expectedUpPorts": 3})
    result = run_check(INFINIBAND, hw, every, ProbeContext(), SUMMARY)
    assert result.status is CheckStatus.FAIL
    assert result.message == "2 of 3 ports up (ACTIVE, LinkUp); down: (mlx5_1/2)"
    hw.close()


# --- the simulated profiles ---------------------------------------------------


def _result(
    profile: Path, check: str, probe_policy: ProbePolicy | None = None
) -> tuple[CheckStatus, str]:
    report = probe(profile, probe_policy)
    found = report.result(check)
    assert found is not None
    return found.status, found.message


def test_exclusive_netns_is_not_failed_for_hcas_the_pod_cannot_see() -> None:
    expects = policy(infinibandPorts={"expectedUpPorts": 8, "linkLayer": "InfiniBand"})
    status, message = _result(
        PROFILES / "h100-sxm-8gpu-rdma-exclusive.yaml", "infiniband_ports", expects
    )
    assert status is CheckStatus.PASS, message
    assert "exclusive RDMA netns: the pod sees 0 up InfiniBand ports of 8 expected" in message
    forced = policy(infinibandPorts={"expectedUpPorts": 8, "netnsMode": "shared"})
    status, message = _result(
        PROFILES / "h100-sxm-8gpu-rdma-exclusive.yaml", "infiniband_ports", forced
    )
    assert status is CheckStatus.FAIL
    assert message == "no InfiniBand/RoCE HCA in /sys/class/infiniband; 8 up expected"


def test_unused_storage_port_passes_a_count_of_eight() -> None:
    expects = policy(infinibandPorts={"expectedUpPorts": 8, "linkLayer": "InfiniBand"})
    status, message = _result(PROFILES / "h100-sxm-8gpu-ib-ndr.yaml", "infiniband_ports", expects)
    assert status is CheckStatus.PASS, message
    nine = policy(infinibandPorts={"expectedUpPorts": 9, "linkLayer": "InfiniBand"})
    status, message = _result(PROFILES / "h100-sxm-8gpu-ib-ndr.yaml", "infiniband_ports", nine)
    assert status is CheckStatus.FAIL
    assert message.startswith("8 of 9 InfiniBand ports up")


def test_ib_trap_warns_on_an_old_link_downed() -> None:
    status, message = _result(PROFILES / "h100-sxm-8gpu-ib-ndr.yaml", "infiniband_ports")
    assert status is CheckStatus.WARN
    assert message == "link_downed 1 >= 1 (mlx5_3/1)"


def test_node_without_hcas_fails_when_ports_are_expected() -> None:
    expects = policy(infinibandPorts={"expectedUpPorts": 8})
    status, message = _result(PROFILES / "h100-sxm-8gpu-healthy.yaml", "infiniband_ports", expects)
    assert status is CheckStatus.FAIL
    assert "no InfiniBand/RoCE HCA" in message
    status, _ = _result(PROFILES / "h100-sxm-8gpu-healthy.yaml", "infiniband_ports")
    assert status is CheckStatus.PASS


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("ib-port-init", "1 InfiniBand port LinkUp but not ACTIVE (mlx5_5/1 INIT)"),
        ("ib-rate-degraded", "InfiniBand ports rate 100 < 200 Gb/s (mlx5_2/1)"),
        (
            "ib-firmware-mixed",
            "firmware differs within a board (MT_0000000838: 28.36.1010 vs 28.39.1002): "
            "mlx5_7 28.36.1010",
        ),
        (
            "numa-off-two-socket",
            "GPUs 0, 1, 2, 3, 4, 5, 6, 7: no NUMA node (numa_node -1) on a 2-socket host; "
            "the kernel sees 1 NUMA node",
        ),
    ],
)
def test_fault_profiles_name_what_is_wrong(name: str, message: str) -> None:
    check = "gpu_numa" if name.startswith("numa") else "infiniband_ports"
    status, got = _result(fault(name), check)
    assert status is CheckStatus.FAIL
    assert got.startswith(message), got


# --- gpu_numa: the judge ---------------------------------------------------


def test_snc_host_spread_is_judged_per_socket() -> None:
    status, message = _result(PROFILES / "h100-sxm-8gpu-snc.yaml", "gpu_numa")
    assert status is CheckStatus.PASS
    assert message == "8 GPUs on NUMA nodes 0,1,2,3; 4+4 over 2 sockets"


# --- infiniband_ports: the judge -------------------------------------------


def port(name: str, **fields: JsonValue) -> dict[str, JsonValue]:
    """A healthy NDR port, with ``fields`` (wire names) changed."""
    healthy: dict[str, JsonValue] = {
        "port": name,
        "state": "ACTIVE",
        "physState": "LinkUp",
        "rateGbps": 400,
        "linkLayer": "InfiniBand",
        "linkDowned": 0,
        "symbolError": 0,
    }
    return {**healthy, **fields}


def test_simulated_gpu_without_proximity_data(tmp_path: Path) -> None:
    """numaNode -1 on a two-node host: numa_node -1 and local_cpulist every CPU, as
    the kernel shows a device without _PXM; the reason names the firmware."""
    text = (PROFILES / "h100-sxm-8gpu-two-socket.yaml").read_text()
    profile = tmp_path / "no-pxm.yaml"
    profile.write_text(text.replace("7: {numaNode: 1}", "7: {numaNode: -1}"))
    report = probe(profile)
    result = report.result("gpu_numa")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert isinstance(result.observed, dict)
    assert result.observed["numaNode"] == [0, 0, 0, 0, 1, 1, 1, -1]
    assert result.observed["localCpulist"] == {
        "0-55,112-167": [0, 1, 2, 3],
        "56-111,168-223": [4, 5, 6],
        "0-223": [7],
    }
    assert result.message.startswith("GPU 7: no NUMA node (numa_node -1) on a 2-socket host")
    assert "proximity data (ACPI _PXM)" in result.message
