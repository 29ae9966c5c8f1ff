"""The capture corpus (``tests/captures/<machine>/``): each folder's ``source.yaml``,
read strictly, and its files, each read by the parser its name says.

File names: ``nvidia-smi-q.txt`` (complete ``-q``), ``nvidia-smi-q.fragment*.txt`` and
``nvidia-smi-q.grep.txt`` (quoted parts of ``-q``), ``nvidia-smi-q-x.xml``,
``nvidia-smi-nvlink-s[.fragment].txt``, ``ibstat.txt``, ``ibstatus.txt``,
``dmesg.txt``, ``lspci-vvv[-nvidia|-mellanox|.fragment].txt``, and
``sys-class-infiniband.txt`` (``scripts/capture-node.sh``'s listing: each HCA's
board_id, which ibstat does not print). Kept for people and not read by the replay (no
replayed check takes its input from them): ``nvidia-smi-topo-m.txt``,
``cpupower-frequency-info.txt``, ``numactl-H.txt``. Any other file is an error.
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from gpuaccept.testsupport.captures import nvsmi_readings, nvsmi_text, tools
from gpuaccept.testsupport.captures.model import (
    ABSENT,
    CaptureError,
    GpuCapture,
    IbHcaCapture,
    Missing,
    NodeCapture,
)

OwnerState = Literal["healthy", "fault", "unknown"]
_FILE_KINDS = (
    (re.compile(r"^nvidia-smi-q\.txt$"), "q"),
    (re.compile(r"^nvidia-smi-q\.(fragment(-[0-9]+)?|grep)\.txt$"), "q-fragment"),
    (re.compile(r"^nvidia-smi-q-x\.xml$"), "q-x"),
    (re.compile(r"^nvidia-smi-nvlink-s\.txt$"), "nvlink"),
    (re.compile(r"^nvidia-smi-nvlink-s\.fragment\.txt$"), "nvlink-fragment"),
    (re.compile(r"^ibstat\.txt$"), "ibstat"),
    (re.compile(r"^ibstatus\.txt$"), "ibstatus"),
    (re.compile(r"^dmesg\.txt$"), "dmesg"),
    (re.compile(r"^lspci-vvv(-nvidia|-mellanox|\.fragment)?\.txt$"), "lspci"),
    (re.compile(r"^sys-class-infiniband\.txt$"), "sys-ib"),
    (re.compile(r"^(nvidia-smi-topo-m|cpupower-frequency-info|numactl-H)\.txt$"), "kept"),
)
_ORDER = [
    "q",
    "q-x",
    "q-fragment",
    "nvlink",
    "nvlink-fragment",
    "ibstat",
    "ibstatus",
    "dmesg",
    "lspci",
    "sys-ib",
    "kept",
]


@dataclass(frozen=True)
class Source:
    folder: Path
    url: str
    platform: str
    driver: str
    captured: str
    owner_state: OwnerState
    fault: str | None
    expect_check: str | None
    owner_words: str
    files: dict[str, str]
    masked: tuple[str, ...]


def _require(data: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = data.get(key)
    if not isinstance(value, kind):
        raise CaptureError(where, key, f"missing or not a {kind.__name__}")
    return value


def read_source(folder: Path) -> Source:
    where = str(folder / "source.yaml")
    try:
        data = yaml.safe_load((folder / "source.yaml").read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise CaptureError(where, "file", str(exc)) from exc
    if not isinstance(data, dict):
        raise CaptureError(where, "file", "not a mapping")
    source = _require(data, "source", dict, where)
    url = _require(source, "url", str, where)
    if not url.startswith("https://github.com/"):
        raise CaptureError(where, "source.url", f"{url!r} is not a GitHub address")
    owner = _require(data, "owner_said", dict, where)
    state = _require(owner, "state", str, where)
    if state not in ("healthy", "fault", "unknown"):
        raise CaptureError(where, "owner_said.state", f"{state!r}: healthy, fault or unknown")
    fault = owner.get("fault")
    expect = data.get("expect_check")
    if (state == "fault") != (isinstance(fault, str) and isinstance(expect, str)):
        raise CaptureError(where, "owner_said.fault", "a fault names its fault and expect_check")
    files = _require(data, "files", dict, where)
    present = {p.name for p in folder.iterdir() if p.name != "source.yaml"}
    if set(files) != present:
        raise CaptureError(
            where, "files", f"lists {sorted(files)}, the folder holds {sorted(present)}"
        )
    masked = _require(data, "masked", list, where)
    return Source(
        folder=folder,
        url=url,
        platform=_require(data, "platform", str, where),
        driver=_require(data, "driver", str, where),
        captured=_require(data, "captured", str, where),
        owner_state=state,
        fault=fault if isinstance(fault, str) else None,
        expect_check=expect if isinstance(expect, str) else None,
        owner_words=_require(owner, "words", str, where),
        files={str(k): str(v) for k, v in files.items()},
        masked=tuple(str(m) for m in masked),
    )


def _kind(name: str, folder: Path) -> str:
    for pattern, kind in _FILE_KINDS:
        if pattern.match(name):
            return kind
    raise CaptureError(str(folder / name), "file name", "no parser reads a file of this name")


def load(folder: Path) -> NodeCapture:
    """Parses every file of ``folder`` into one :class:`NodeCapture`."""
    capture = NodeCapture(name=folder.name)
    files = sorted(
        (p for p in folder.iterdir() if p.name != "source.yaml"),
        key=lambda p: (_ORDER.index(_kind(p.name, folder)), p.name),
    )
    for path in files:
        kind, text, file = _kind(path.name, folder), path.read_text(), str(path)
        if kind == "q":
            log = nvsmi_text.parse(text, file)
            nvsmi_readings.node_from_text(capture, log, file, complete=True)
        elif kind == "q-fragment":
            log = nvsmi_text.parse(text, file, fragment=True)
            nvsmi_readings.node_from_text(capture, log, file, complete=False)
        elif kind == "q-x":
            nvsmi_readings.node_from_xml(capture, text, file)
        elif kind in ("nvlink", "nvlink-fragment"):
            _add_nvlink(
                capture, tools.parse_nvlink_status(text, file, fragment=kind != "nvlink"), file
            )
        elif kind == "ibstat":
            capture.infiniband = tools.parse_ibstat(text, file)
        elif kind == "ibstatus":  # read after ibstat (_ORDER)
            hcas = _ibstat(capture, file, "ibstatus")
            capture.infiniband = tools.ibstatus_rates(hcas, tools.parse_ibstatus(text, file), file)
        elif kind == "sys-ib":
            hcas = _ibstat(capture, file, "board_id")
            boards = tools.parse_sys_infiniband(text, file)
            capture.infiniband = tools.with_boards(hcas, boards, file)
        elif kind == "dmesg":
            capture.xids = tools.parse_kernel_log(text, file)
        elif kind == "lspci":
            known = () if isinstance(capture.pcie_status, Missing) else capture.pcie_status
            capture.pcie_status = known + tuple(tools.parse_lspci_links(text, file)) or ABSENT
    return capture


def _ibstat(capture: NodeCapture, file: str, field: str) -> tuple[IbHcaCapture, ...]:
    """The HCAs ibstat gave, which ``file`` adds ``field`` to; an error without them."""
    if isinstance(capture.infiniband, Missing):
        raise CaptureError(file, field, "read only beside ibstat")
    return capture.infiniband


def _add_nvlink(
    capture: NodeCapture, gpus: list[tuple[int, str, tuple[bool, ...]]], file: str
) -> None:
    if capture.gpus and len(capture.gpus) != len(gpus):
        raise CaptureError(file, "GPU lines", f"{len(gpus)} GPUs beside {len(capture.gpus)} in -q")
    for position, (_index, name, links) in enumerate(gpus):
        if not capture.gpus or position >= len(capture.gpus):
            capture.gpus.append(GpuCapture(name=name))
        gpu = capture.gpus[position]
        if gpu.name is not ABSENT and gpu.name != name:
            raise CaptureError(file, f"GPU {position}", f"{name!r} here, {gpu.name!r} in -q")
        gpu.nvlink_active = links


def folders(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir())
