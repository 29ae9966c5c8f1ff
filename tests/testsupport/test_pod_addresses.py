"""Two kubelet stand-ins never hand out the same pod address (fabric pairs listen on
their pod's address and the policy's rendezvous port), in one process or many."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuaccept.testsupport.pod_addresses import (
    ADDRESSES_PER_BLOCK,
    AddressBlockError,
    PodAddressBlock,
)


def test_two_stand_ins_in_one_process_get_disjoint_blocks(tmp_path: Path) -> None:
    first, second = PodAddressBlock(tmp_path), PodAddressBlock(tmp_path)
    try:
        assert first.block != second.block
        a = {first.next() for _ in range(300)}
        b = {second.next() for _ in range(300)}
        assert len(a) == len(b) == 300
        assert not a & b
        assert "127.0.0.1" not in a | b
    finally:
        first.release()
        second.release()


def test_a_block_held_by_another_process_is_not_claimed(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from pathlib import Path;"
         "from gpuaccept.testsupport.pod_addresses import PodAddressBlock;"
         "b = PodAddressBlock(Path(sys.argv[1])); print(b.block, flush=True); sys.stdin.read()",
         str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        held = int(holder.stdout.readline())
        mine = PodAddressBlock(tmp_path)
        assert mine.block != held
        mine.release()
    finally:
        holder.communicate("", timeout=30)  # it ends: the kernel drops its lock
    again = PodAddressBlock(tmp_path)
    assert again.block == held  # the lowest free block again
    again.release()


def test_a_released_block_is_claimed_again_and_addresses_wrap(tmp_path: Path) -> None:
    block = PodAddressBlock(tmp_path)
    first = block.next()
    assert first == f"127.{block.block}.0.2"
    for _ in range(ADDRESSES_PER_BLOCK - 1):
        last = block.next()
    assert last == f"127.{block.block}.255.254"
    assert block.next() == first
    number = block.block
    block.release()
    again = PodAddressBlock(tmp_path)
    assert again.block == number
    again.release()


def test_every_block_claimed_is_an_error_not_a_shared_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gpuaccept.testsupport.pod_addresses.BLOCKS", range(1, 3))
    held = [PodAddressBlock(tmp_path), PodAddressBlock(tmp_path)]
    with pytest.raises(AddressBlockError, match="all 2 loopback address blocks"):
        PodAddressBlock(tmp_path)
    for block in held:
        block.release()
