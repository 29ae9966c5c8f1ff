"""The capture parsers (gpuaccept.testsupport.captures) are strict: every capture of
tests/captures reads, and bad input is an error naming the file, the line or field,
and why. The pynvml stand-in answers N/A with NotSupported and what the capture
lacks with NoData, as a driver would not answer a value it does not have."""

import re
import shutil
from pathlib import Path

import pynvml
import pytest

from gpuaccept.testsupport.captures import corpus, fake_nvml, nvsmi_readings, nvsmi_text, tools
from gpuaccept.testsupport.captures.model import ABSENT, DEPRECATED, CaptureError, NodeCapture

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
FOLDERS = corpus.folders(CAPTURES)
A10 = CAPTURES / "gpud-a10-r535-remapped-rows-pending"


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_every_capture_reads(folder: Path) -> None:
    source = corpus.read_source(folder)
    capture = corpus.load(folder)
    assert source.files
    assert (
        capture.gpus
        or capture.infiniband is not ABSENT
        or capture.xids is not ABSENT
        or (capture.pcie_status is not ABSENT)
    )


def test_identifiers_are_masked() -> None:
    uuid = re.compile(r"(GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
    serial = re.compile(r"(Serial Number\s*:\s*|<serial>|Board Serial Number: )([0-9]{6,})")
    guid = re.compile(r"GUID:\s*(0x[0-9a-f]{16})")
    for path in CAPTURES.glob("*/*"):
        if path.name == "source.yaml":
            continue
        text = path.read_text()
        for match in uuid.finditer(text):
            assert match.group(0)[4:].startswith("00000000-0000-0000-0000-"), (path, match)
        for match in serial.finditer(text):
            assert set(match.group(2)) == {"0"}, (path, match)
        for match in guid.finditer(text):
            assert int(match.group(1), 16) < 0x10000, (path, match)


def _text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


HEADER = ["Driver Version : 535.1", "Attached GPUs : 1", "GPU 00000000:01:00.0"]


@pytest.mark.parametrize(
    ("lines", "where", "reason"),
    [
        ([*HEADER, "    Product Name : X", "\tHW Slowdown : Active"], "line 5", "a tab"),
        ([*HEADER, "      Product Name : X"], "line 4", "indent of 6 spaces"),
        ([*HEADER, "    : 5"], "line 4", "neither 'key : value' nor a section"),
        (
            [*HEADER, "    PCI", "            Bus : 0x01", "        Id : 0x02"],
            "line 6",
            "siblings'",
        ),
        (["Driver Version : 535.1", "    Product Name : X"], "GPU lines", "no 'GPU <bus id>'"),
    ],
)
def test_text_parser_names_the_line(lines: list[str], where: str, reason: str) -> None:
    with pytest.raises(CaptureError, match=reason) as caught:
        nvsmi_text.parse(_text(lines), "q.txt")
    assert (caught.value.file, caught.value.where) == ("q.txt", where)


def test_a_value_the_probe_reads_must_parse() -> None:
    lines = [
        *HEADER,
        "    PCI",
        "        GPU Link Info",
        "            Link Width",
        "                Max : sixteen",
    ]
    log = nvsmi_text.parse(_text(lines), "q.txt")
    with pytest.raises(CaptureError, match="Link Width Max: cannot read 'sixteen'"):
        nvsmi_readings.node_from_text(NodeCapture("x"), log, "q.txt", complete=True)


def test_a_complete_capture_lists_every_attached_gpu() -> None:
    lines = ["Attached GPUs : 2", "GPU 00000000:01:00.0", "    Product Name : X"]
    log = nvsmi_text.parse(_text(lines), "q.txt")
    with pytest.raises(CaptureError, match="2 but 1 GPU sections"):
        nvsmi_readings.node_from_text(NodeCapture("x"), log, "q.txt", complete=True)


def test_xml_gpu_count_and_root_are_checked() -> None:
    xml = "<nvidia_smi_log><driver_version>535</driver_version><attached_gpus>2</attached_gpus>"
    xml += '<gpu id="00000000:01:00.0"/></nvidia_smi_log>'
    with pytest.raises(CaptureError, match="2 but 1 <gpu> elements"):
        nvsmi_readings.node_from_xml(NodeCapture("x"), xml, "q.xml")
    with pytest.raises(CaptureError, match="not <nvidia_smi_log>"):
        nvsmi_readings.node_from_xml(NodeCapture("x"), "<log/>", "q.xml")


IBSTAT = [
    "CA 'mlx5_0'",
    "\tCA type: MT4129",
    "\tNumber of ports: 1",
    "\tPort 1:",
    "\t\tState: Active",
    "\t\tPhysical state: LinkUp",
    "\t\tRate: 400",
    "\t\tLink layer: InfiniBand",
]


def test_ibstat_reads_and_rejects() -> None:
    (hca,) = tools.parse_ibstat(_text(IBSTAT), "ibstat.txt")
    assert (hca.name, hca.ports[0].state, hca.ports[0].rate_gbps) == ("mlx5_0", "Active", 400.0)
    with pytest.raises(CaptureError, match="line 9: unknown field 'Speed'"):
        tools.parse_ibstat(_text([*IBSTAT, "\t\tSpeed: NDR"]), "ibstat.txt")
    two = [line.replace("ports: 1", "ports: 2") for line in IBSTAT]
    with pytest.raises(CaptureError, match="mlx5_0 says 2 ports, lists 1"):
        tools.parse_ibstat(_text(two), "ibstat.txt")


def test_nvlink_status_rejects_an_unknown_line() -> None:
    text = _text(["GPU 0: NVIDIA A100 (UUID: GPU-x)", "\t Link 0: 25 GB/s", "\t Link 1: off"])
    with pytest.raises(CaptureError, match="line 3: unknown line 'Link 1: off'"):
        tools.parse_nvlink_status(text, "nvlink.txt")


def test_source_yaml_is_strict(tmp_path: Path) -> None:
    folder = tmp_path / "a10"
    shutil.copytree(A10, folder)
    (folder / "extra.txt").write_text("x\n")
    with pytest.raises(CaptureError, match="files"):
        corpus.read_source(folder)
    (folder / "extra.txt").unlink()
    source = (folder / "source.yaml").read_text()
    (folder / "source.yaml").write_text(source.replace("  state: fault\n", "  state: sick\n"))
    with pytest.raises(CaptureError, match="healthy, fault or unknown"):
        corpus.read_source(folder)


def test_a_file_no_parser_reads_is_an_error(tmp_path: Path) -> None:
    folder = tmp_path / "a10"
    shutil.copytree(A10, folder)
    (folder / "nvidia-smi.txt").write_text("x\n")
    with pytest.raises(CaptureError, match="no parser reads a file of this name"):
        corpus.load(folder)


def test_stand_in_answers_not_available_and_absent_as_nvml_errors() -> None:
    capture = corpus.load(A10)
    nvml = fake_nvml.module(capture)
    assert nvml.nvmlDeviceGetRemappedRows(0) == (0, 4, 1, 0)
    with pytest.raises(pynvml.NVMLError) as not_supported:  # Fabric State : N/A
        nvml.nvmlDeviceGetGpuFabricInfo(0, None)
    assert not_supported.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(pynvml.NVMLError) as no_data:  # -q does not print NVLink links
        nvml.nvmlDeviceGetNvLinkState(0, 0)
    assert no_data.value.value == pynvml.NVML_ERROR_NO_DATA
    (count,) = nvml.nvmlDeviceGetFieldValues(0, [91])
    assert count.nvmlReturn == pynvml.NVML_ERROR_NO_DATA


def test_r570_prints_the_reset_status_fields_as_deprecated() -> None:
    """R570's -q prints "GPU Reset Status: Reset Required: Requested functionality has
    been deprecated" (nvmlErrorString of NVML_ERROR_DEPRECATED): a real driver's line,
    read as NVML's Deprecated answer, beside the GPU Recovery Action that replaced it."""
    capture = corpus.load(CAPTURES / "thamada-rtx5090-r570")
    (gpu,) = capture.gpus
    assert gpu.reset_required is DEPRECATED
    assert gpu.drain_and_reset is DEPRECATED
    with pytest.raises(pynvml.NVMLError) as deprecated:
        fake_nvml.answer(gpu.reset_required)
    assert deprecated.value.value == pynvml.NVML_ERROR_DEPRECATED
    lines = [*HEADER, "    GPU Reset Status", "        Reset Required : Deprecated"]
    log = nvsmi_text.parse(_text(lines), "q.txt")
    with pytest.raises(CaptureError, match="Reset Required: cannot read 'Deprecated'"):
        nvsmi_readings.node_from_text(NodeCapture("x"), log, "q.txt", complete=True)


def test_the_sysfs_listing_gives_each_hca_its_board_id() -> None:
    text = (
        "mlx5_0/1 | 4: ACTIVE | 5: LinkUp | 400 Gb/sec (4X NDR) | InfiniBand "
        "| board_id MT_0000000838 | fw_ver 28.39.1002\n"
        "mlx5_1/1 | 1: DOWN | 3: Disabled | 10 Gb/sec (4X SDR) | InfiniBand "
        "| board_id  | fw_ver 28.39.1002\n"
    )
    assert tools.parse_sys_infiniband(text, "sys-class-infiniband.txt") == {
        "mlx5_0": "MT_0000000838"
    }
    with pytest.raises(CaptureError, match=r"sys-class-infiniband\.txt: line 1"):
        tools.parse_sys_infiniband("mlx5_0 up\n", "sys-class-infiniband.txt")
