"""Strict readers of the other tools' outputs in a capture: ``ibstat``, ``ibstatus``,
``nvidia-smi nvlink -s``, the kernel log's Xid lines and lspci's link lines.

Formats (infiniband-diags ``ibstat.c`` and ``ibstatus``; nvidia-smi's nvlink
subcommand; the NVIDIA kernel module's ``NVRM: Xid (PCI:...): N, ...`` line;
pciutils' ``LnkCap:``/``LnkSta:``). Every line of an ibstat, ibstatus or nvlink
output is accounted for; an unknown one is an error naming the file and line.
"""

import re

from gpuaccept.testsupport.captures.model import (
    ABSENT,
    CaptureError,
    IbHcaCapture,
    IbPortCapture,
    PcieLinkStatus,
    Reading,
    XidLine,
)

_CA = re.compile(r"^CA '([A-Za-z0-9_]+)'$")
_PORT = re.compile(r"^Port ([0-9]+):$")
# infiniband-diags' own diagnostics (IBPANIC/IBWARN/IBERROR): printed where ibstat
# could not read a device it enumerated; kept as what the tool said
_DIAGNOSTIC = re.compile(r"^(ibpanic|ibwarn|iberror): ")
_FIELD = re.compile(r"^([A-Za-z][A-Za-z ]*[A-Za-z]):\s*(.*)$")
# ibstat's CA fields and port fields (ibstat.c ca_dump/port_dump)
_CA_FIELDS = {
    "CA type",
    "Number of ports",
    "Firmware version",
    "Hardware version",
    "Node GUID",
    "System image GUID",
}
_PORT_FIELDS = {
    "State",
    "Physical state",
    "Rate",
    "Base lid",
    "LMC",
    "SM lid",
    "Capability mask",
    "Port GUID",
    "Link layer",
}


class _IbstatReader:
    """ibstat's lines, one CA and one port at a time."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.hcas: list[IbHcaCapture] = []
        self.ca: str | None = None
        self.ca_fields: dict[str, str] = {}
        self.ports: list[IbPortCapture] = []
        self.port: int | None = None
        self.port_fields: dict[str, str] = {}

    def close_port(self, number: int) -> None:
        if self.port is None:
            return
        fields = self.port_fields
        missing = {"State", "Physical state", "Rate", "Link layer"} - set(fields)
        if missing:
            raise CaptureError(
                self.file, f"line {number}", f"port {self.ca}/{self.port} lacks {sorted(missing)}"
            )
        try:
            rate = float(fields["Rate"])
        except ValueError as exc:
            raise CaptureError(self.file, f"{self.ca}/{self.port} Rate", str(exc)) from exc
        self.ports.append(
            IbPortCapture(
                hca=self.ca or "",
                port=self.port,
                state=fields["State"],
                phys_state=fields["Physical state"],
                rate_gbps=rate,
                rate_text=ABSENT,
                link_layer=fields["Link layer"],
            )
        )
        self.port, self.port_fields = None, {}

    def close_ca(self, number: int) -> None:
        self.close_port(number)
        if self.ca is None:
            return
        declared = int(self.ca_fields.get("Number of ports", "-1"))
        if declared != len(self.ports):
            raise CaptureError(
                self.file,
                f"line {number}",
                f"{self.ca} says {declared} ports, lists {len(self.ports)}",
            )
        self.hcas.append(
            IbHcaCapture(
                name=self.ca,
                ca_type=self.ca_fields.get("CA type", ABSENT),
                fw_ver=self.ca_fields.get("Firmware version", ABSENT),
                ports=tuple(self.ports),
            )
        )
        self.ca, self.ca_fields, self.ports = None, {}, []

    def line(self, number: int, line: str) -> None:
        if _DIAGNOSTIC.match(line):
            self.close_ca(number)
            return
        if match := _CA.match(line):
            self.close_ca(number)
            self.ca = match.group(1)
            return
        if self.ca is None:
            raise CaptureError(self.file, f"line {number}", f"outside any CA: {line!r}")
        if match := _PORT.match(line):
            self.close_port(number)
            self.port = int(match.group(1))
            return
        field = _FIELD.match(line)
        if field is None:
            raise CaptureError(self.file, f"line {number}", f"not 'Field: value': {line!r}")
        key, value = field.group(1), field.group(2).strip()
        if self.port is None and key in _CA_FIELDS:
            self.ca_fields[key] = value
        elif self.port is not None and key in _PORT_FIELDS:
            self.port_fields[key] = value
        else:
            raise CaptureError(self.file, f"line {number}", f"unknown field {key!r}")


def parse_ibstat(text: str, file: str) -> tuple[IbHcaCapture, ...]:
    reader = _IbstatReader(file)
    lines = text.splitlines()
    for number, raw in enumerate(lines, start=1):
        if raw.strip():
            reader.line(number, raw.strip())
    reader.close_ca(len(lines))
    if not reader.hcas:
        raise CaptureError(file, "CA lines", "no CA: not ibstat output")
    return tuple(reader.hcas)


_IBSTATUS_HEAD = re.compile(r"^Infiniband device '([A-Za-z0-9_]+)' port ([0-9]+) status:$")
_IBSTATUS_FIELDS = {
    "default gid",
    "base lid",
    "sm lid",
    "state",
    "phys state",
    "rate",
    "link_layer",
}


def parse_ibstatus(text: str, file: str) -> dict[tuple[str, int], dict[str, str]]:
    """(hca, port) → ibstatus's fields (its ``rate`` is the sysfs rate text)."""
    ports: dict[tuple[str, int], dict[str, str]] = {}
    current: dict[str, str] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if match := _IBSTATUS_HEAD.match(line):
            current = ports.setdefault((match.group(1), int(match.group(2))), {})
            continue
        key, sep, value = line.partition(":")
        if current is None or not sep or key.strip() not in _IBSTATUS_FIELDS:
            raise CaptureError(file, f"line {number}", f"unknown line {line!r}")
        current[key.strip()] = value.strip()
    if not ports:
        raise CaptureError(file, "device lines", "no device: not ibstatus output")
    return ports


_NVLINK_GPU = re.compile(r"^GPU ([0-9]+): (.+) \(UUID: (.+)\)$")
_NVLINK_LINK = re.compile(r"^Link ([0-9]+): (?:([0-9.]+) GB/s|<inactive>)$")
_ELISION = re.compile(r"^\.{3,}$")


def parse_nvlink_status(
    text: str, file: str, *, fragment: bool = False
) -> list[tuple[int, str, tuple[bool, ...]]]:
    """(GPU index, name, per link: active?) per GPU of ``nvidia-smi nvlink -s``."""
    gpus: list[tuple[int, str, list[bool]]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if fragment and (_ELISION.match(line) or (number == 1 and line.startswith("nvidia-smi"))):
            continue
        if match := _NVLINK_GPU.match(line):
            gpus.append((int(match.group(1)), match.group(2), []))
            continue
        link = _NVLINK_LINK.match(line)
        if link is None or not gpus:
            raise CaptureError(file, f"line {number}", f"unknown line {line!r}")
        links = gpus[-1][2]
        if int(link.group(1)) != len(links):
            raise CaptureError(file, f"line {number}", f"link {link.group(1)} out of order")
        links.append(link.group(2) is not None)
    if not gpus:
        raise CaptureError(file, "GPU lines", "no GPU: not nvidia-smi nvlink -s output")
    return [(index, name, tuple(links)) for index, name, links in gpus]


_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): ([0-9]+), (.*)$")


def parse_kernel_log(text: str, file: str) -> tuple[XidLine, ...]:
    found = tuple(
        XidLine(match.group(1).lower(), int(match.group(2)), match.group(3))
        for match in map(_XID.search, text.splitlines())
        if match
    )
    if not found and "NVRM:" not in text:
        raise CaptureError(file, "NVRM lines", "no NVIDIA kernel module line: not its kernel log")
    return found


_LNK = re.compile(
    r"^(LnkCap|LnkSta):\s+(?:Port #[0-9]+, )?Speed ([0-9.]+)GT/s(?: \([a-z]+\))?, "
    r"Width x([0-9]+)(?: \([a-z]+\))?"
)


def parse_lspci_links(text: str, file: str) -> tuple[PcieLinkStatus, ...]:
    """Each device's LnkCap/LnkSta speed and width, paired in order; none where lspci
    was not root (it prints ``Capabilities: <access denied>`` instead)."""
    caps: list[tuple[float, int]] = []
    stas: list[tuple[float, int]] = []
    for raw in text.splitlines():
        match = _LNK.match(raw.strip())
        if match:
            (caps if match.group(1) == "LnkCap" else stas).append(
                (float(match.group(2)), int(match.group(3)))
            )
    if not caps and not stas and "<access denied>" in text:
        return ()
    if not caps or len(caps) != len(stas):
        raise CaptureError(
            file, "LnkCap/LnkSta", f"{len(caps)} LnkCap and {len(stas)} LnkSta lines"
        )
    return tuple(PcieLinkStatus(c[0], c[1], s[0], s[1]) for c, s in zip(caps, stas, strict=True))


def ibstatus_rates(
    hcas: tuple[IbHcaCapture, ...], status: dict[tuple[str, int], dict[str, str]], file: str
) -> tuple[IbHcaCapture, ...]:
    """The ibstat ports with ibstatus's full rate text where it lists the same port."""
    out = []
    for hca in hcas:
        ports = []
        for port in hca.ports:
            rate: Reading[str] = ABSENT
            fields = status.get((hca.name, port.port))
            if fields is not None:
                rate = fields.get("rate", ABSENT)
            ports.append(
                IbPortCapture(
                    hca=port.hca,
                    port=port.port,
                    state=port.state,
                    phys_state=port.phys_state,
                    rate_gbps=port.rate_gbps,
                    rate_text=rate,
                    link_layer=port.link_layer,
                )
            )
        out.append(IbHcaCapture(hca.name, hca.ca_type, hca.fw_ver, tuple(ports), hca.board_id))
    if status and not any(p.rate_text is not ABSENT for h in out for p in h.ports):
        raise CaptureError(file, "devices", "ibstatus names no port that ibstat lists")
    return tuple(out)


# scripts/capture-node.sh's listing of /sys/class/infiniband, one line per port:
# "<hca>/<port> | <state> | <phys_state> | <rate> | <link_layer> | board_id <id> | fw_ver <v>"
_SYS_IB_LINE = re.compile(
    r"^(?P<hca>[^/\s|]+)/(?P<port>\d+) \|(?:[^|]*\|){4} board_id (?P<board>\S*) \| fw_ver \S*$"
)


def parse_sys_infiniband(text: str, file: str) -> dict[str, str]:
    """HCA name -> board_id from capture-node.sh's sysfs listing (empty: not readable)."""
    boards: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = _SYS_IB_LINE.match(line)
        if match is None:
            raise CaptureError(file, f"line {number}", "not a capture-node.sh port line")
        if match["board"]:
            boards[match["hca"]] = match["board"]
    return boards


def with_boards(
    hcas: tuple[IbHcaCapture, ...], boards: dict[str, str], file: str
) -> tuple[IbHcaCapture, ...]:
    """The ibstat HCAs with the board_id the sysfs listing gives each."""
    unknown = set(boards) - {h.name for h in hcas}
    if unknown:
        raise CaptureError(file, "hca", f"{sorted(unknown)[0]} is not in ibstat")
    return tuple(
        IbHcaCapture(h.name, h.ca_type, h.fw_ver, h.ports, boards.get(h.name, ABSENT)) for h in hcas
    )
