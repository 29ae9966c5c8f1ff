"""A strict reader of ``nvidia-smi -q`` text.

The format (every driver branch from R418 to R580 prints it the same way): one
``key : value`` or ``section`` per line, nested by four spaces; a top-level
``GPU <bus id>`` line opens each GPU. A line that is neither is an error naming
the file and line, and so is an entry whose indent matches neither its parent's
children nor an open section's. Fragments (a README's quote, a ``grep -C3``) are read with
``fragment=True``: then a leading command line (``nvidia-smi -q``, ``# ...``,
``$ ...``), elision lines (``...``) and grep's ``--`` separators are allowed,
and the text may start indented (the section it quotes is nested).
"""

import re
from dataclasses import dataclass, field

from gpuaccept.testsupport.captures.model import CaptureError

INDENT = 4
_GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")
_KEY_VALUE = re.compile(r"^([^:]*[^:\s])\s*:(?: (.*))?$")
_ELISION = re.compile(r"^\s*\.{3,}\s*$")


@dataclass
class Entry:
    """One line: its key, its value (None for a section header) and what it nests."""

    key: str
    value: str | None
    line: int
    children: list["Entry"] = field(default_factory=list)
    child_indent: int = -1  # the indent of its children's lines

    def find(self, *path: str) -> "Entry | None":
        """The entry at ``path`` below this one (the first where a key repeats)."""
        node: Entry | None = self
        for key in path:
            assert node is not None
            node = next((c for c in node.children if c.key == key), None)
            if node is None:
                return None
        return node


@dataclass
class TextLog:
    top: Entry  # Timestamp, Driver Version, CUDA Version, Attached GPUs
    gpus: list[tuple[str | None, Entry]]  # (bus id from the GPU line, its entries)


def _is_command(line: str) -> bool:
    """A quoted command line: ``nvidia-smi -q``, ``# nvidia-smi ...``, ``[host ~]# ...``."""
    stripped = line.strip()
    return "nvidia-smi" in stripped and stripped.startswith(("#", "$", "[", "nvidia-smi"))


def _skipped(line: str, number: int, file: str, *, fragment: bool) -> bool:
    """Blank and banner lines; in a fragment, its command line, elisions and grep's ``--``."""
    if not line.strip() or line.strip("=") == "" or "NVSMI LOG" in line:
        return True
    if "\t" in line:
        raise CaptureError(file, f"line {number}", "a tab in nvidia-smi -q text")
    return fragment and bool(
        _ELISION.match(line) or line.strip() == "--" or (number == 1 and _is_command(line))
    )


def _entry(body: str, number: int, file: str) -> Entry:
    match = _KEY_VALUE.match(body)
    if match:
        return Entry(match.group(1), (match.group(2) or "").strip(), number)
    if ":" not in body:
        return Entry(body, None, number)
    raise CaptureError(file, f"line {number}", f"neither 'key : value' nor a section: {body!r}")


def parse(text: str, file: str, *, fragment: bool = False) -> TextLog:
    top = Entry("", None, 0)
    gpus: list[tuple[str | None, Entry]] = []
    stack: list[tuple[int, Entry]] = [(-1, top)]
    base: int | None = None
    lines = text.splitlines()
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip()
        if _skipped(line, number, file, fragment=fragment):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if base is None:
            base = indent if fragment else 0
        indent -= base
        if indent < 0 or indent % INDENT:
            raise CaptureError(file, f"line {number}", f"indent of {indent + base} spaces")
        body = line.strip()
        header = _GPU_HEADER.match(body)
        if header and indent == 0:
            gpu = Entry(body, header.group(1), number)
            gpus.append((header.group(1), gpu))
            stack = [(0, gpu)]
            continue
        entry = _entry(body, number, file)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not stack:
            raise CaptureError(file, f"line {number}", "nested outside any GPU")
        parent = stack[-1][1]
        # a section's first entry sets its children's indent (four more spaces, or eight
        # under R580's top-level "vGPU Driver Capability"); every sibling keeps it
        if parent.children and parent.child_indent != indent:
            raise CaptureError(
                file,
                f"line {number}",
                f"indent of {indent + base} spaces, its siblings' is {parent.child_indent + base}",
            )
        parent.child_indent = indent
        parent.children.append(entry)
        stack.append((indent, entry))
    if not fragment and not gpus:
        raise CaptureError(file, "GPU lines", "no 'GPU <bus id>' line: not nvidia-smi -q output")
    if fragment and not gpus:  # a fragment without a GPU line is one GPU's sections
        gpus.append((None, top))
        top = Entry("", None, 0)
    return TextLog(top=top, gpus=gpus)
