"""Issue 38 item 4: the simulator against real machines. Every capture of
tests/captures has a twin profile in tests/capture-profiles/ that claims the same
platform; the unchanged RealBackend on the capture's replay and the SimulatedBackend
on the profile give the same readings (every measuring function's answer, field by
field, wherever the capture holds it) and the same replayed checks (status and
observed values).

Where the profile format cannot express what a capture shows, the reading is an
entry of FORMAT_GAPS (the capture, the field, what the capture shows, what the
simulation gives, and why), and the test asserts that very difference, so a change
of the format that closes a gap fails here until the entry goes.
"""

from pathlib import Path
from typing import Any

import pytest

from gpuaccept.testsupport.captures import corpus, replay, twin
from gpuaccept.testsupport.captures.model import Missing, NodeCapture

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
FOLDERS = corpus.folders(CAPTURES)

BOND_NAMES = (
    "the format names HCAs mlx5_0, mlx5_1, ... in order; a real node names a RoCE LAG "
    "bond mlx5_bond_0 (here a BlueField-3's two ports, whose mlx5_2 and mlx5_3 the bond "
    "took), so its names skip numbers"
)
# (capture, reading) → (the capture's reading, the simulation's, why the format cannot
# say it)
FORMAT_GAPS: dict[tuple[str, str], tuple[Any, Any, str]] = {
    ("netdata-a100-sxm4-40gb-mig-passthrough-r510", "gpu0.volatile_uncorrected"): (
        None,
        0,
        "ECC on with MIG enabled: the capture prints the GPU's volatile uncorrectable "
        "counts N/A (NotSupported) and its aggregate ones as numbers; the format's ECC "
        "counters are numbers whenever ECC is on",
    ),
    ("gpud-h100-ib-cx7-bf3-all-active", "ib.names"): (
        (
            "mlx5_0",
            "mlx5_1",
            "mlx5_4",
            "mlx5_5",
            "mlx5_6",
            "mlx5_7",
            "mlx5_8",
            "mlx5_9",
            "mlx5_bond_0",
        ),
        tuple(f"mlx5_{n}" for n in range(9)),
        BOND_NAMES,
    ),
}
# the capture's SM clock is 0 MHz on every GPU (P8, idle), which the format's
# smClockLoadMHz (at least 1) cannot say
FORMAT_GAPS.update(
    {
        ("thamada-a40-x10-r550", f"gpu{n}.sm_clock_mhz.loaded"): (
            0,
            1,
            "gpus.smClockLoadMHz is at least 1: the format cannot say the 0 MHz SM clock "
            "NVML answered for an idle A40 at P8",
        )
        for n in range(10)
    }
)

NO_BOARD_ID = (
    "the capture (ibstat) holds no board_id (PSID); the format requires one "
    "(infiniband.hcas.boardId, default MT_0000000838), so the simulation groups the HCAs "
    "under it where the replay, with no board_id, compares no firmware and says so "
    "(notRead.firmware: a warning, not a verdict)"
)
# (capture, check) → (the observed keys that differ, or "status", and why). The port
# fields no capture tool prints (the error counters and the board; the lanes where only
# ibstat's number is held) are left out of the comparison first (_held_ports).
CHECK_GAPS: dict[tuple[str, str], tuple[frozenset[str], str]] = {
    ("gpud-azure-a100-vm-ib-vf", "infiniband_ports"): (
        frozenset({"firmware", "notRead", "status"}),
        NO_BOARD_ID,
    ),
    ("gpud-h100-ib-cx7-bf3-all-active", "infiniband_ports"): (
        frozenset({"firmware", "notRead", "status", "oddFirmware", "ports"}),
        NO_BOARD_ID + "; and " + BOND_NAMES + " (the ports' names)",
    ),
    ("gpud-h100-ib-cx7-cx6dx-all-active", "infiniband_ports"): (
        frozenset({"firmware", "notRead", "status", "oddFirmware", "layers"}),
        NO_BOARD_ID + ": one PSID makes the ConnectX-6 Dx's 100 Gb/s ports 'behind' the "
        "ConnectX-7's 400",
    ),
    ("gpud-h100-ib-three-ports-down", "infiniband_ports"): (
        frozenset({"firmware", "notRead", "status", "oddFirmware"}),
        NO_BOARD_ID,
    ),
    ("gpud-h100-ib-two-ports-down", "infiniband_ports"): (
        frozenset({"firmware", "notRead", "status", "oddFirmware", "layers"}),
        NO_BOARD_ID + " (as gpud-h100-ib-cx7-cx6dx-all-active)",
    ),
    ("netdata-a100-sxm4-40gb-mig-passthrough-r510", "memory_health"): (
        frozenset({"notRead"}),
        "the volatile counts' NotSupported (FORMAT_GAPS)",
    ),
    ("thamada-a40-x10-r550", "throttle_reasons"): (
        frozenset({"smClockMHz"}),
        "the capture's 0 MHz SM clocks, which the format cannot say (FORMAT_GAPS)",
    ),
    ("l4rz-v100-sxm2-c4130-power-brake", "throttle_reasons"): (
        frozenset({"smClockMHz", "smClockMaxMHz"}),
        "not the format: the quoted -q holds the SM clock but not its maximum, which "
        "RealBackend reads with it, so the replay records no clocks; the format's "
        "smClockMaxMHz always answers",
    ),
}
# what no capture tool prints of an InfiniBand port (sysfs has them on a real node)
# (the PCI function and whether a GPU shares its PCIe switch come from the device link)
UNHELD_PORT_FIELDS = ("linkDowned", "symbolError", "board", "function", "gpuLocal")


def _ids(folders: list[Path]) -> list[str]:
    return [f.name for f in folders]


def test_every_capture_has_a_twin_and_every_twin_a_capture() -> None:
    twins = {p.stem for p in twin.profile_path(CAPTURES, "x").parent.glob("*.yaml")}
    assert twins == {f.name for f in FOLDERS}


@pytest.mark.parametrize("folder", FOLDERS, ids=_ids(FOLDERS))
def test_twin_claims_the_capture_platform(folder: Path) -> None:
    capture = corpus.load(folder)
    profile = twin.load_twin(CAPTURES, folder.name)
    platform = corpus.read_source(folder).platform
    assert profile.description == f"Twin of capture {folder.name}: {platform}"
    names = {g.name for g in capture.gpus if not isinstance(g.name, Missing)}
    if names:
        assert names == {profile.gpus.model}
    if capture.complete_gpu_list:
        assert profile.gpus.count == len(capture.gpus)
    if isinstance(capture.driver, str):
        assert profile.driver.version == capture.driver


def _expected(name: str, real: dict[str, Any]) -> dict[str, Any]:
    """The simulation's readings as the format gaps make them."""
    expected = dict(real)
    for (capture, reading), (_shown, simulated, _why) in FORMAT_GAPS.items():
        if capture == name:
            expected[reading] = simulated
    return expected


@pytest.mark.parametrize("folder", FOLDERS, ids=_ids(FOLDERS))
def test_twin_readings_are_the_capture_readings(folder: Path) -> None:
    capture = corpus.load(folder)
    real = twin.real_readings(capture)
    simulated = twin.simulated_readings(twin.load_twin(CAPTURES, folder.name), capture)
    for (name, reading), (shown, _simulated, _why) in FORMAT_GAPS.items():
        if name == folder.name:
            assert real[reading] == shown, reading
    assert set(simulated) == set(real)
    differences = {
        k: (real[k], simulated[k])
        for k in sorted(real)
        if simulated[k] != _expected(folder.name, real)[k]
    }
    assert not differences


def _held_ports(observed: Any, capture: NodeCapture) -> Any:
    """``observed`` without the port fields the capture cannot hold."""
    if not isinstance(observed, dict) or not isinstance(observed.get("ports"), list):
        return observed
    texts = not isinstance(capture.infiniband, Missing) and all(
        isinstance(p.rate_text, str) for hca in capture.infiniband for p in hca.ports
    )
    unheld = UNHELD_PORT_FIELDS + (() if texts else ("lanes",))
    ports = [{k: v for k, v in port.items() if k not in unheld} for port in observed["ports"]]
    return {**observed, "ports": ports}


@pytest.mark.parametrize("folder", FOLDERS, ids=_ids(FOLDERS))
def test_twin_checks_are_the_replayed_checks(folder: Path) -> None:
    capture = corpus.load(folder)
    replayed = twin.replayed_checks(replay.replay(capture))
    simulated = twin.simulated_checks(twin.load_twin(CAPTURES, folder.name), list(replayed))
    assert set(simulated) == set(replayed)
    for check, (status, observed) in replayed.items():
        sim_status, sim_observed = simulated[check]
        real, sim = _held_ports(observed, capture) or {}, _held_ports(sim_observed, capture) or {}
        differing = {k for k in set(real) | set(sim) if real.get(k) != sim.get(k)}
        differing |= {"status"} if status != sim_status else set()
        expected, _why = CHECK_GAPS.get((folder.name, check), (frozenset(), ""))
        assert differing == expected, (check, {k: (real.get(k), sim.get(k)) for k in differing})


def test_every_gap_is_a_capture_of_the_corpus() -> None:
    names = {f.name for f in FOLDERS}
    assert {c for c, _ in FORMAT_GAPS} | {c for c, _ in CHECK_GAPS} <= names
