"""An InfiniBand port that trained below, or stays down beside, the same port of its
board's other HCAs fails, even where the rate reads the policy's minimum and no
port count is expected; the layouts real mlx5 nodes show pass."""

import pytest
from probe_scenarios import PROFILES, default_policy, fault, probe

from gpuaccept.checks.infiniband_ports import SPEC as IB
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.report import CheckStatus
from gpuaccept.probe.hardware.infiniband import parse_lanes, shares_pcie_switch
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend


@pytest.mark.parametrize(
    ("text", "lanes"),
    [
        ("400 Gb/sec (4X NDR)\n", (4, "NDR")),
        ("200 Gb/sec (2X NDR)\n", (2, "NDR")),
        ("200 Gb/sec (4X HDR)\n", (4, "HDR")),
        ("2.5 Gb/sec (1X SDR)\n", (1, "SDR")),
        ("100 Gb/sec\n", (None, None)),
    ],
)
def test_the_rate_file_names_width_and_speed(text: str, lanes: tuple[object, object]) -> None:
    assert parse_lanes(text) == lanes


@pytest.mark.parametrize(
    ("name", "port", "words"),
    [
        ("ib-ndr-2x-lanes", "mlx5_5/1 2X NDR", "a lane or speed fallback"),
        ("ib-ndr-hdr-fallback", "mlx5_5/1 4X HDR", "a lane or speed fallback"),
        ("ib-compute-port-down", "mlx5_5/1", "a dead cable"),
    ],
)
def test_the_false_accepts_fail(name: str, port: str, words: str) -> None:
    report = probe(fault(name))
    result = report.result("infiniband_ports")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert port in result.message
    assert words in result.message
    # the condensed form (the termination message's) judges the same
    assert result.observed is not None
    condensed = IB.condense(IB.parse(result.observed))
    section = default_policy().section(IB)
    assert IB.judge(condensed, section, report.summary).status is CheckStatus.FAIL


def test_ndr200_by_design_with_unused_second_ports_passes() -> None:
    verdict = evaluate(probe(PROFILES / "h100-sxm-8gpu-ib-ndr200-dual-port.yaml"), default_policy())
    assert verdict.accepted, verdict.message


def test_with_a_port_count_the_count_judges_a_down_port() -> None:
    report = probe(fault("ib-compute-port-down"))
    result = report.result("infiniband_ports")
    assert result is not None
    assert result.observed is not None
    counted = default_policy().model_copy(deep=True)
    section = counted.section(IB).model_copy(update={"expected_up_ports": 7})
    judged = IB.judge(IB.parse(result.observed), section, report.summary)
    assert judged.status is CheckStatus.PASS  # 7 of 7 expected up: the administrator's word


# --- mlx5's layout: one single-port device per port of a card (issue 37, items 3, 6, 18) ---


def test_mlx5_registers_each_port_of_a_card_as_its_own_device() -> None:
    """The simulator lays a dual-port card out as mlx5 does: two PCI functions of one
    card, two single-port devices with the card's board_id."""
    hardware = SimulatedBackend(load_profile(PROFILES / "h100-sxm-8gpu-ib-ndr200-dual-port.yaml"))
    try:
        view = hardware.infiniband()
    finally:
        hardware.close()
    assert len(view.hcas) == 16
    assert {len(hca.ports) for hca in view.hcas} == {1}
    first, second = view.hcas[:2]
    assert (first.board_id, second.board_id) == ("MT_0000001093", "MT_0000001093")
    assert (first.ports[0].function, second.ports[0].function) == (0, 1)
    assert first.pci_path is not None
    assert second.pci_path is not None
    assert first.pci_path[:-2] == second.pci_path[:-2]  # one card: .0 and .1
    assert (first.ports[0].state, second.ports[0].state) == ("ACTIVE", "DOWN")


@pytest.mark.parametrize(
    "name",
    [
        "h100-sxm-8gpu-ib-ndr200-dual-port",  # each card's second function uncabled
        "h100-sxm-8gpu-ib-dual-port-cx7-one-cabled",
        "h100-sxm-8gpu-ib-storage-hdr100",  # a storage HCA at HDR100, on a root port
        "h100-sxm-8gpu-ib-sm-sweep",  # INIT until the subnet manager's sweep
        "h100-sxm-8gpu-ib-sriov-vfs",  # VF ports DOWN
    ],
)
def test_healthy_layouts_pass(name: str) -> None:
    report = probe(PROFILES / f"{name}.yaml")
    result = report.result("infiniband_ports")
    assert result is not None
    assert result.status is CheckStatus.PASS, result.message


def test_a_replacement_card_with_another_psid_is_compared_with_the_rails() -> None:
    report = probe(fault("ib-replacement-card-2x"))
    result = report.result("infiniband_ports")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert "mlx5_5/1 2X NDR" in result.message
    assert "a lane or speed fallback" in result.message


def test_the_storage_hca_is_outside_the_rate_floor_unless_the_scope_says_every() -> None:
    path = PROFILES / "h100-sxm-8gpu-ib-storage-hdr100.yaml"
    every = default_policy().model_copy(deep=True)
    section = every.section(IB).model_copy(update={"rate_scope": "every"})
    report = probe(path)
    result = report.result("infiniband_ports")
    assert result is not None
    assert result.observed is not None
    judged = IB.judge(IB.parse(result.observed), section, report.summary)
    assert judged.status is CheckStatus.FAIL
    assert "rate 100 < 200 Gb/s (mlx5_8/1)" in judged.message


def test_a_storage_hca_on_a_gpu_switch_is_a_compute_hca() -> None:
    """Locality decides, not the PSID: the same HDR100 card behind a GPU's switch fails."""
    profile = load_profile(PROFILES / "h100-sxm-8gpu-ib-storage-hdr100.yaml")
    assert profile.infiniband is not None
    groups = list(profile.infiniband.hcas)
    groups[1] = groups[1].model_copy(update={"pcie": "gpuSwitch"})
    moved = profile.model_copy(
        update={"infiniband": profile.infiniband.model_copy(update={"hcas": groups})}
    )
    result = probe(moved).result("infiniband_ports")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert "rate 100 < 200 Gb/s (mlx5_8/1)" in result.message


def test_without_the_wait_the_sweep_would_fail() -> None:
    policy = default_policy().model_copy(deep=True)
    policy = policy.model_copy(
        update={
            "infiniband_ports": policy.section(IB).model_copy(update={"not_active_wait_seconds": 0})
        }
    )
    result = probe(PROFILES / "h100-sxm-8gpu-ib-sm-sweep.yaml", policy).result("infiniband_ports")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert "LinkUp but not ACTIVE" in result.message


def test_virtual_functions_are_counted_and_left_out() -> None:
    hardware = SimulatedBackend(load_profile(PROFILES / "h100-sxm-8gpu-ib-sriov-vfs.yaml"))
    try:
        view = hardware.infiniband()
    finally:
        hardware.close()
    assert [hca.name for hca in view.hcas] == [f"mlx5_{i}" for i in range(8)]
    assert view.virtual_functions == tuple(f"mlx5_{i}" for i in range(8, 24))


@pytest.mark.parametrize(
    ("hca", "gpu", "local"),
    [
        # one switch (PIX): below one root port, one more bridge in common
        (
            "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:02.0/0000:19:00.0",
            "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0",
            True,
        ),
        # one root port, no switch (PHB): not local
        (
            "/sys/devices/pci0000:15/0000:15:01.0/0000:19:00.0",
            "/sys/devices/pci0000:15/0000:15:03.0/0000:18:00.0",
            False,
        ),
        # another socket (SYS)
        (
            "/sys/devices/pci0000:97/0000:97:01.0/0000:98:00.0",
            "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:18:00.0",
            False,
        ),
        # a VM's flat bus: every device on the root bus
        ("/sys/devices/pci0000:00/0000:00:05.0", "/sys/devices/pci0000:00/0000:00:04.0", False),
    ],
)
def test_pcie_switch_locality(hca: str, gpu: str, local: bool) -> None:
    assert shares_pcie_switch(hca, gpu) is local
