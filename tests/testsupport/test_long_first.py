"""The long tests head every xdist worker's first slice (gpuaccept.testsupport.long_first),
and the split it assumes is the one pytest-xdist's worksteal scheduler makes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from xdist.scheduler.worksteal import WorkStealingScheduling

from gpuaccept.testsupport.long_first import long_first, slices


def is_long(name: str) -> bool:
    return name.startswith("L")


def heads(order: list[str], workers: int) -> list[list[str]]:
    """Each worker's first slice of ``order``, split as worksteal splits it."""
    out, start = [], 0
    for size in slices(len(order), workers):
        out.append(order[start : start + size])
        start += size
    return out


def test_every_worker_starts_on_its_share_of_the_long_tests() -> None:
    items = [f"s{i}" for i in range(20)] + ["L0", "L1"] + [f"t{i}" for i in range(9)] + ["L2"]
    order = long_first(items, is_long, 4)
    assert sorted(order) == sorted(items)  # nothing lost, nothing twice
    first = heads(order, 4)
    assert [part[0] for part in first] == ["L0", "L1", "L2", first[3][0]]
    assert not is_long(first[3][0])
    assert [i for i in order if not is_long(i)] == [i for i in items if not is_long(i)]


def test_more_long_tests_than_workers_are_dealt_round_robin() -> None:
    items = [f"L{i}" for i in range(6)] + [f"s{i}" for i in range(30)]
    first = heads(long_first(items, is_long, 4), 4)
    assert [[i for i in part if is_long(i)] for part in first] == [
        ["L0", "L4"],
        ["L1", "L5"],
        ["L2"],
        ["L3"],
    ]
    assert all(not is_long(i) for part in first for i in part[2:])


def test_one_worker_runs_the_long_tests_first() -> None:
    items = ["s0", "L0", "s1", "L1"]
    assert long_first(items, is_long, 1) == ["L0", "L1", "s0", "s1"]


@pytest.mark.parametrize(("count", "workers"), [(4080, 4), (31, 4), (10, 3), (7, 2)])
def test_the_split_is_worksteals_own(count: int, workers: int) -> None:
    """xdist's scheduler itself, fed a collection of ``count``: the sizes of the first
    chunks it sends are :func:`slices` (if xdist changes its split, this fails)."""
    sent: list[int] = []

    class Node:  # the part of xdist's WorkerController its scheduler uses
        shutting_down = False
        gateway = SimpleNamespace(id="gw")

        def send_runtest_some(self, indices: list[int]) -> None:
            sent.append(len(indices))

    config = pytest.Config.fromdictargs({"tx": [f"{workers}*popen"]}, [])
    scheduler = WorkStealingScheduling(config)
    names = [f"t{i}" for i in range(count)]
    for _ in range(workers):
        node = Node()
        scheduler.add_node(node)  # type: ignore[arg-type]
        scheduler.add_node_collection(node, names)  # type: ignore[arg-type]
    scheduler.schedule()
    assert sent == slices(count, workers)


def test_under_xdist_the_marked_tests_run_first_on_each_worker(tmp_path: Path) -> None:
    """A real ``pytest -n 2 --dist worksteal`` of a file whose two long tests come last:
    each worker's first test is one of them."""
    (tmp_path / "conftest.py").write_text(
        'pytest_plugins = ["gpuaccept.testsupport.pytest_plugin"]\n'
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    long: minutes\n")
    body = "".join(f"def test_short_{i}():\n    pass\n\n" for i in range(10))
    body += "import pytest\n\n"
    body += "".join(f"@pytest.mark.long\ndef test_long_{i}():\n    pass\n\n" for i in range(2))
    (tmp_path / "test_order.py").write_text(body)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "worksteal", "-v", "-p",
         "no:cacheprovider", "test_order.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    firsts: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("[gw") and " PASSED " in line:
            worker = line.split("]")[0].lstrip("[")
            firsts.setdefault(worker, line.rsplit("::", 1)[1].split()[0])
    assert sorted(firsts.values()) == ["test_long_0", "test_long_1"], proc.stdout


def test_the_long_tests_of_one_file_are_dealt_one_file_at_a_time() -> None:
    items = ["La1", "La2", "La3", "s0", "Lb1", "s1", "Lc1", "Lc2"] + [f"t{i}" for i in range(40)]
    first = heads(long_first(items, is_long, 4, group=lambda name: name[:2]), 4)
    assert [[i for i in part if is_long(i)] for part in first] == [
        ["La1", "Lc2"],
        ["Lb1", "La3"],
        ["Lc1"],
        ["La2"],
    ]
