"""Loopback pod addresses that no two kubelet stand-ins share — test support, not shipped.

A stand-in gives each pod its own loopback address, and the two pods of a fabric
pair listen there on the policy's rendezvous port (29500 by default). Two
stand-ins that counted from the same first address (one per pytest-xdist worker,
the demo's, the benchmark's) would hand the same address to pods that run at the
same time: the second pair's rendezvous would fail to bind, or meet the other
stand-in's pair. So each stand-in claims its own block, 127.B.0.0/16 for B in
1..254 (Linux routes all of 127.0.0.0/8 to the loopback), by an exclusive
``flock`` on ``<tmp>/gpuaccept-standin-addresses/B.lock`` that it holds until it
stops; the kernel drops the lock when the process ends, however it ends.
"""

from __future__ import annotations

import fcntl
import tempfile
import threading
from pathlib import Path
from typing import IO

BLOCKS = range(1, 255)
ADDRESSES_PER_BLOCK = 256 * 254 - 1  # 127.B.0.2 .. 127.B.255.254


def lock_dir() -> Path:
    return Path(tempfile.gettempdir()) / "gpuaccept-standin-addresses"


class AddressBlockError(RuntimeError):
    """Every block is claimed (254 stand-ins running at once)."""


class PodAddressBlock:
    """One claimed 127.B.0.0/16; :meth:`next` hands out its addresses in turn."""

    def __init__(self, directory: Path | None = None) -> None:
        folder = directory or lock_dir()
        folder.mkdir(parents=True, exist_ok=True)
        self.block, self._claim = _claim_block(folder)
        self._counter = 0
        self._lock = threading.Lock()

    def next(self) -> str:
        """The next address of the block, wrapping around after the last."""
        with self._lock:
            self._counter = self._counter % ADDRESSES_PER_BLOCK + 1
            i = self._counter
        return f"127.{self.block}.{i // 254}.{i % 254 + 1}"

    def release(self) -> None:
        """Give the block back (closing the file drops the lock)."""
        self._claim.close()


def _claim_block(folder: Path) -> tuple[int, IO[str]]:
    for block in BLOCKS:
        claim = (folder / f"{block}.lock").open("a")
        try:
            fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            claim.close()
            continue
        return block, claim
    raise AddressBlockError(f"all {len(BLOCKS)} loopback address blocks in {folder} are claimed")
