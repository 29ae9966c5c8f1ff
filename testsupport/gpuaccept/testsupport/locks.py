"""The project's lock files (requirements/*.txt, written by `make lock` with uv),
read into plain data: one :class:`LockedPackage` per requirement line.

A lock line is ``name==version [; marker] \\`` followed by ``--hash=sha256:...``
lines and ``# via ...`` annotations (uv's ``--annotation-style split``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
LOCK_DIR = ROOT / "requirements"
PINS = LOCK_DIR / "pins.txt"

_REQUIREMENT = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)"
    r"\s*(?:;\s*(?P<marker>[^\\]+?))?\s*\\?$"
)
_HASH = re.compile(r"^\s+--hash=(?P<hash>sha256:[0-9a-f]{64})\s*\\?$")
_VIA = re.compile(r"^\s+#\s+(?:via\b)?\s*(?P<source>.*)$")


@dataclass(frozen=True)
class LockedPackage:
    """One requirement line of a lock: an exact version, its marker, its hashes."""

    name: str  # canonical (PEP 503)
    version: str
    marker: str | None
    hashes: tuple[str, ...]
    via: tuple[str, ...] = field(default=())

    def applies(self) -> bool:
        """Whether this interpreter and platform install it."""
        return self.marker is None or Marker(self.marker).evaluate()

    @property
    def direct(self) -> bool:
        """Required by the project itself (not only by another package)."""
        return any(source.startswith("gpuaccept") for source in self.via)


class LockFormatError(ValueError):
    pass


@dataclass
class _Entry:
    name: str
    version: str
    marker: str | None
    hashes: list[str] = field(default_factory=list)
    via: list[str] = field(default_factory=list)

    def frozen(self) -> LockedPackage:
        return LockedPackage(
            self.name, self.version, self.marker, tuple(self.hashes), tuple(self.via)
        )


def read_lock(path: Path) -> list[LockedPackage]:
    """Every requirement of a lock file, in file order (one per name and marker)."""
    entries: list[_Entry] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        if match := _REQUIREMENT.match(line):
            marker = match["marker"].strip() if match["marker"] else None
            entries.append(_Entry(canonicalize_name(match["name"]), match["version"], marker))
        elif entries and (hashed := _HASH.match(line)):
            entries[-1].hashes.append(hashed["hash"])
        elif entries and (via := _VIA.match(line)):
            if via["source"].strip():
                entries[-1].via.append(via["source"].strip())
        elif not line.startswith("#"):
            raise LockFormatError(f"{path}:{number}: not a pinned requirement: {line!r}")
    return [entry.frozen() for entry in entries]


def versions(packages: list[LockedPackage]) -> dict[str, str]:
    """name -> version of the packages this interpreter and platform install."""
    return {p.name: p.version for p in packages if p.applies()}
