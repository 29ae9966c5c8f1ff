"""The real probe path over every capture of a real machine (tests/captures, issue 38).

The unchanged RealBackend, its NVML and sysfs readers, the checks' judges and the
verdict run on a pynvml stand-in and a sysfs tree built from each capture
(gpuaccept.testsupport.captures). With the default policy:

* a capture its owner called healthy is not quarantined;
* a capture of a known fault fails the matching check, for that fault;
* any other outcome is an entry of DIFFERENCES, with its cause and the issue item;
* every capture's replayed checks give the statuses recorded in OUTCOMES, so that a
  change of a rule or a reader that changes a real node's verdict shows here.
"""

import re
from pathlib import Path

import pytest

from gpuaccept.checks.registry import BY_NAME
from gpuaccept.probe.hardware.nvml_links import read_fabric, read_nvlink
from gpuaccept.probe.hardware.real import RealBackend
from gpuaccept.testsupport.captures import corpus, fake_nvml, replay, table
from gpuaccept.testsupport.captures.differences import DIFFERENCES, FAULT_EVIDENCE

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
FOLDERS = corpus.folders(CAPTURES)

# Every capture's replayed checks and the verdict (q: quarantined), as the replay gives them.
OUTCOMES: dict[str, tuple[bool, dict[str, str]]] = {
    "azhpc-diagnostics-73-v100-sxm2-nvlink-inactive": (False, {}),
    "azhpc-images-506-fabric-insufficient-resources": (False, {}),
    # R580's -q format (vGPU host, a top-level section nested by 8); no product name
    "cubecos-312-rtx-pro-6000-vgpu-host-r580": (False, {}),
    "dra-driver-626-fabric-unhealthy": (False, {}),
    "gpud-a10-r535-remapped-rows-pending": (
        True,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "fail",
        },
    ),
    "gpud-a10-vm-r550-normal": (
        False,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "pass",
        },
    ),
    "gpud-a100-sxm4-80gb-nvlink": (False, {}),
    "gpud-azure-a100-vm-ib-vf": (False, {"infiniband_ports": "warn"}),
    # ibstat prints no board_id: the firmware is not compared, and the check says so
    "gpud-h100-ib-cx7-bf3-all-active": (False, {"infiniband_ports": "warn"}),
    "gpud-h100-ib-cx7-cx6dx-all-active": (False, {"infiniband_ports": "warn"}),
    "gpud-h100-ib-three-ports-down": (False, {"infiniband_ports": "warn"}),
    "gpud-h100-ib-two-ports-down": (False, {"infiniband_ports": "warn"}),
    "gpud-h100-xid-119-gsp-timeout": (False, {}),
    "gpud-hgx-h100-r535-161-power-brake": (
        True,
        {
            "throttle_reasons": "fail",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "pass",
        },
    ),
    # unknown owner: GPU 2 shows HW power brake and SW thermal slowdown at capture time
    "gpud-hgx-h100-r535-183": (
        True,
        {
            "throttle_reasons": "fail",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "pass",
        },
    ),
    # unknown owners: GeForce cards with ECC off; the default policy requires ECC
    "gpud-rtx4090x8-r535-a": (
        True,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "fail",
        },
    ),
    "gpud-rtx4090x8-r535-b": (
        True,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "fail",
        },
    ),
    "gpud-rtx4090x8-r535-c": (
        True,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "fail",
        },
    ),
    "gpud-rtx4090x8-r535-d": (
        True,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "fail",
        },
    ),
    # unknown owner: no ECC (nvidia-smi prints ECC Mode N/A: NVML's NotSupported, answered
    # only by GPUs without ECC); the default policy requires ECC (38.C3: it passed unread)
    "gpud-titanv-r560": (
        True,
        {"throttle_reasons": "pass", "nvswitch_fabric": "pass", "memory_health": "fail"},
    ),
    "jan-183-rtx4090-riser-pcie-downgraded": (False, {}),
    "l4rz-v100-sxm2-c4130-power-brake": (True, {"throttle_reasons": "fail"}),
    # MIG with active instances: NVML answers NotSupported for the remapped rows and the
    # volatile counts; unjudged, so a warning, not a pass (38.C3)
    "netdata-a100-sxm4-40gb-mig-passthrough-r510": (
        False,
        {"throttle_reasons": "pass", "memory_health": "warn"},
    ),
    # unknown owner: no ECC, as gpud-titanv-r560
    "netdata-rtx3060-laptop-r515": (True, {"throttle_reasons": "pass", "memory_health": "fail"}),
    "netdata-rtx4090-r535": (
        True,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "fail",
        },
    ),
    "netdata-tesla-p100-passthrough-r510": (
        False,
        {"throttle_reasons": "pass", "memory_health": "pass"},
    ),
    "thamada-a40-x10-r550": (
        False,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "pass",
        },
    ),
    # unknown owner; GPU 1 shows a pending row remap (1 correctable row, Pending: Yes): it
    # needs a GPU reset, which the check asks for
    "thamada-a100-sxm4-x4-r555": (
        True,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "fail",
        },
    ),
    # unknown owner; GH200: the enforced limit (700 W) is below the requested and default
    # (900 W): another limiter holds it (NVML: the enforced limit is "after taking into
    # account all limiters", out-of-band included; NVIDIA's DGX user guide, Managing Power
    # Capping: VBIOS, nvidia-smi and SMBPBI, and "the PMU selects the most conservative").
    # gpu_config fails it as a capped limit, which it is (38.C4: whether a GH200 platform
    # caps its GPU by design is not known from this capture)
    "thamada-gh200-vm-r550": (
        True,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "fail",
            "memory_health": "warn",
        },
    ),
    "thamada-h100-nvl-x2-r550": (
        False,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "pass",
        },
    ),
    "thamada-h200-vm-r550": (
        False,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "pass",
        },
    ),
    "thamada-hgx-h100-r565": (
        False,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "pass",
        },
    ),
    "thamada-l40s-r550": (
        False,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "pass",
        },
    ),
    # R570's full -q (GPU Reset Status printed as deprecated); GeForce: no ECC
    "thamada-rtx5090-r570": (
        True,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "fail",
        },
    ),
    # Volta: page retirement (GPU 4: one single-bit page retired, none pending), no row
    # remapping; nothing fails
    "thamada-v100-sxm2-x8-r550": (
        False,
        {
            "throttle_reasons": "pass",
            "nvswitch_fabric": "pass",
            "gpu_config": "pass",
            "memory_health": "pass",
        },
    ),
}


def _ids(folders: list[Path]) -> list[str]:
    return [f.name for f in folders]


def test_the_corpus_holds_twenty_machines_and_five_faults() -> None:
    sources = [corpus.read_source(f) for f in FOLDERS]
    assert len(sources) >= 20
    assert sum(s.owner_state == "fault" for s in sources) >= 5
    assert set(OUTCOMES) == {f.name for f in FOLDERS}, "every capture has a recorded outcome"
    assert set(DIFFERENCES) <= set(OUTCOMES)


@pytest.mark.parametrize("folder", FOLDERS, ids=_ids(FOLDERS))
def test_owner_word_holds_or_is_a_listed_difference(folder: Path) -> None:
    source = corpus.read_source(folder)
    outcome = replay.replay(corpus.load(folder))
    quarantined, statuses = OUTCOMES[folder.name]
    assert {n: r.status.value for n, r in outcome.results.items()} == statuses
    assert outcome.quarantined is quarantined
    assert not set(outcome.results) & set(outcome.not_replayable)
    difference = DIFFERENCES.get(folder.name)
    if source.owner_state == "healthy":
        assert outcome.quarantined is (difference is not None), difference
    if source.owner_state == "fault":
        assert source.expect_check in BY_NAME
        result = outcome.results.get(source.expect_check or "")
        evidence = FAULT_EVIDENCE[source.fault or ""]
        found = result is not None and result.status.value == "fail"
        found = found and re.search(evidence, result.message if result else "") is not None
        assert found is (difference is None), (result, difference)
    if difference is not None:
        check, _what, _why = difference
        assert check in outcome.results or check in outcome.not_replayable


def test_a_not_replayable_check_is_never_passed() -> None:
    outcome = replay.replay(corpus.load(CAPTURES / "gpud-hgx-h100-r535-161-power-brake"))
    assert "pcie_link" in outcome.not_replayable
    assert outcome.verdict is not None
    judged = {s.check for s in outcome.verdict.checks}
    assert judged == set(outcome.results)
    assert not judged & set(outcome.not_replayable)


def test_nvlink_reader_keeps_the_inactive_links_it_read() -> None:
    """Issue 37 item 2 on a real node's answer: links 3 and 5 of a V100 are inactive.
    One counter the capture cannot answer no longer makes the whole reading
    Unavailable: the link states stay, the counters it could not read are named."""
    capture = corpus.load(CAPTURES / "azhpc-diagnostics-73-v100-sxm2-nvlink-inactive")
    nvml = fake_nvml.module(capture)
    assert [nvml.nvmlDeviceGetNvLinkState(0, link) for link in range(6)] == [1, 1, 1, 0, 1, 0]
    links = read_nvlink(nvml, 0, 0)
    assert (links.count, links.active) == (6, (0, 1, 2, 4))
    assert links.not_read or links.not_supported


def test_a_check_without_a_replay_rule_is_not_replayable() -> None:
    capture = corpus.load(CAPTURES / "gpud-a10-vm-r550-normal")
    assert replay.missing_inputs("a_check_added_later", capture) == (
        "no replay rule for the check 'a_check_added_later'"
    )


@pytest.mark.parametrize(
    ("name", "status", "conditions"),
    [
        ("dra-driver-626-fabric-unhealthy", 0, ("unhealthy",)),
        ("azhpc-images-506-fabric-insufficient-resources", 23, ()),
    ],
)
def test_fabric_reader_on_quoted_faults(
    name: str, status: int, conditions: tuple[str, ...]
) -> None:
    capture = corpus.load(CAPTURES / name)
    fabric = read_fabric(fake_nvml.module(capture), 0, 0)
    assert (fabric.state, fabric.status, fabric.conditions) == ("completed", status, conditions)


@pytest.mark.parametrize(
    "name", ["gpud-hgx-h100-r535-183", "thamada-hgx-h100-r565", "thamada-h200-vm-r550"]
)
def test_a_capture_without_the_pci_bus_does_not_say_the_bus_has_no_nvswitch(name: str) -> None:
    """No capture lists the PCI bus: the replay's /sys has none. An unread bus is not a
    bus without NVSwitches (which would make an HGX H100/H200 a 4-GPU board whose fabric
    is recorded, never judged): the model class decides, and the fabric is judged."""
    outcome = replay.replay(corpus.load(CAPTURES / name))
    fabric = outcome.results["nvswitch_fabric"]
    assert outcome.verdict is not None
    assert fabric.message.endswith("on the NVSwitch fabric, healthy (v1)") or (
        fabric.message.endswith("on the NVSwitch fabric, healthy (v2)")
    ), fabric.message


def test_the_table_shows_a_warning_as_a_warning() -> None:
    """A check that warned (here memory_health: NotSupported parts, not judged) is named
    with its message, never counted among the checks that pass."""
    row = next(
        line
        for line in table.render(CAPTURES.parents[1]).splitlines()
        if "[netdata-a100-sxm4-40gb-mig-passthrough-r510]" in line
    )
    assert "accepted; `memory_health` warn" in row
    assert "memory_health: not judged: remappedRows not read" in row


def test_docs_table_is_the_corpus() -> None:
    root = CAPTURES.parents[1]
    text = (root / table.DOC).read_text(encoding="utf-8")
    assert table.regenerate(text, root) == text, "run `make captures-table`"


@pytest.mark.parametrize(
    ("name", "nvml_max", "device_max", "probe_max"),
    [
        # a Gen4 RTX 4090 in a Gen5 host (Host Max 5): NVML's Max is the card's 4
        ("gpud-rtx4090x8-r535-b", 4, 4, 4),
        # the same card in a Gen3 host (max_host_link_gen 3): NVML's Max is 3, and the
        # probe holds the link to it (the GPU's own 4 is recorded as its device max)
        ("netdata-rtx4090-r535", 3, 4, 3),
    ],
)
def test_pcie_maximum_the_real_backend_takes(
    name: str, nvml_max: int, device_max: int, probe_max: int, tmp_path: Path
) -> None:
    """Issue 37 item 8 on real nodes: nvmlDeviceGetMaxPcieLinkGeneration is the lower of
    the device's and the host's maxima (nvidia-smi prints Max = min(Device Max, Host
    Max) in both captures). RealBackend.pcie_link holds the generation to NVML's (the
    slot's) maximum and records the GPU's own apart, so a Gen4 card in a Gen3 server
    is not held to Gen4, which its slot cannot give."""
    capture = corpus.load(CAPTURES / name)
    gpu = capture.gpus[0]
    assert (gpu.pcie_gen_max, gpu.pcie_gen_device_max) == (nvml_max, device_max)
    sysfs, proc = replay.build_tree(capture, tmp_path)
    with replay.installed(fake_nvml.module(capture)):
        hardware = RealBackend(sysfs_root=sysfs, proc_root=proc, persistenced_sockets=())
        try:
            link = hardware.pcie_link(0)
            assert (link.max_generation, link.device_max_generation) == (probe_max, device_max)
        finally:
            hardware.close()
