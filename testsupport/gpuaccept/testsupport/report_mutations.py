"""Mutations of a probe report that make it inconsistent with its node, built from the
check registry (a new check's result is mutated without a new list), for the property
tests and the fuzz run (``bench/fuzz_reports.py``).

Each mutation changes one part of one registered check's ``observed`` value so that
the report no longer describes the node, by construction, whatever the check:

* ``count``: an integer equal to the report's GPU count (every such integer in a
  result is a GPU count: GPUs, ranks, GPUs measured) set to another count;
* ``list``: a list with one entry per GPU (or a matrix row) one entry short or long;
* ``range``: a GPU range text (a value or a map key) that names only the report's
  GPUs made to name a GPU beyond them;
* ``index``: an integer GPU index in a field named for GPUs set past the last GPU;
* ``figure``: a positive measured figure (a JSON float, not a duration) made one no
  hardware gives.

The node that reads such a report must never be accepted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpuaccept.checks.gpu_ranges import RANGES, parse_gpus
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.spec import AnyCheckSpec
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.api import TERMINATION_MESSAGE_MAX_BYTES
from gpuaccept.contracts.report import ProbeReport, strict_json
from gpuaccept.operator.core.model import NodeView, PodView
from gpuaccept.operator.core.report_trust import outcome_problem, trusted_report

Path = tuple[str | int, ...]
DURATION = re.compile(r"(S|Seconds)$")  # seconds, not a hardware figure
# 0 here is "not read", no evidence (gpu_count: the PCI bus, the GFD label)
ZERO_IS_UNREAD = frozenset({"pciDevices", "labelled"})
# integers that can equal the GPU count without being one (a x16 link on 16 GPUs)
NOT_A_COUNT = frozenset({"width", "maxWidth", "minWidth"})
# lists whose length is not a GPU count (message sizes; the GPUs near one cpulist)
NOT_PER_GPU = frozenset({"sweep", "localCpulist"})
CPU_LISTS = frozenset({"list", "localCpulist"})  # CPUs as ranges, not GPUs
# lists of GPU indices (any length up to the count): a GPU beyond it, or one named twice
INDEX_LISTS = frozenset({"unpinned", "slowH2D", "slowD2H"})
GPU_INDEX_FIELD = re.compile(r"(Gpu|gpu|GPU)$")  # minSmClockGpu, worstGpu, gpu
FIGURE_FACTORS = (1e6, 1e308)


@dataclass(frozen=True)
class Mutation:
    check: str
    kind: str  # count | list | range | index | figure
    path: Path  # inside the result's observed value ("<key>" marks a map key)
    value: Any  # the new value (for a key: the new key text)

    def describe(self) -> str:
        where = ".".join(str(p) for p in self.path)
        return f"{self.check}.{where} ({self.kind}) -> {json.dumps(self.value)[:40]}"


def _is_gpu_range(text: str, gpus: int) -> bool:
    if not text or not RANGES.match(text):
        return False
    try:
        named = parse_gpus(text)
    except ValueError:
        return False
    return bool(named) and max(named) < gpus


def _leaves(value: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*path, f"<key>{key}"), key
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, (*path, i))


def _under(path: Path, names: frozenset[str]) -> bool:
    return any(part in names for part in path)


def _field(path: Path) -> str:
    named = [p for p in path if isinstance(p, str) and not p.startswith("<key>")]
    return named[-1] if named else ""


def _list_mutations(check: str, path: Path, value: list[Any], gpus: int) -> Iterator[Mutation]:
    """A list of GPU indices gets a GPU beyond the count and a GPU named twice; a
    per-GPU list one entry too few and one too many."""
    if _field(path) in INDEX_LISTS:
        yield Mutation(check, "index", path, [*value, gpus])
        if value:
            yield Mutation(check, "index", path, [*value, value[-1]])
    elif len(value) == gpus and gpus > 1 and not _under(path, NOT_PER_GPU):
        yield Mutation(check, "list", path, value[:-1])
        yield Mutation(check, "list", path, [*value, value[-1]])


def _for_leaf(check: str, path: Path, value: Any, gpus: int) -> Iterator[Mutation]:
    is_key = bool(path) and isinstance(path[-1], str) and path[-1].startswith("<key>")
    if isinstance(value, bool):
        return
    if isinstance(value, str) and _is_gpu_range(value, gpus) and not _under(path, CPU_LISTS):
        for text in (f"{value},{gpus}", f"0-{gpus * 2 - 1}", str(gpus + 7)):
            yield Mutation(check, "range", path, text)
    if is_key:
        return
    if isinstance(value, int) and value == gpus and gpus > 0 and not _under(path, NOT_A_COUNT):
        others = {0, 1, gpus - 1, gpus + 1, gpus * 2} - {gpus}
        if _field(path) in ZERO_IS_UNREAD:
            others.discard(0)
        for other in sorted(others):
            yield Mutation(check, "count", path, other)
    elif isinstance(value, int) and GPU_INDEX_FIELD.search(_field(path)) and 0 <= value < gpus:
        yield Mutation(check, "index", path, gpus + value)
    if isinstance(value, list):
        yield from _list_mutations(check, path, value, gpus)
    if isinstance(value, float) and value > 0 and not DURATION.search(_field(path)):
        for factor in FIGURE_FACTORS:
            yield Mutation(check, "figure", path, min(value * factor, 1e308))


def mutations(report: ProbeReport, checks: Sequence[AnyCheckSpec]) -> list[Mutation]:
    """Every mutation of every registered check's result in ``report``."""
    gpus = report.summary.gpu_count
    out: list[Mutation] = []
    for check in checks:
        result = report.result(check.name)
        if result is None or result.observed is None:
            continue
        for path, value in _leaves(result.observed):
            out.extend(_for_leaf(check.name, path, value, gpus))
    return out


def _set(value: Any, path: Path, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(head, str) and head.startswith("<key>") and not rest:
        old = head.removeprefix("<key>")
        return {(new if k == old else k): v for k, v in value.items()}
    if isinstance(value, dict):
        return {k: (_set(v, rest, new) if k == head else v) for k, v in value.items()}
    return [(_set(v, rest, new) if i == head else v) for i, v in enumerate(value)]


def apply(report_json: dict[str, Any], mutation: Mutation) -> dict[str, Any]:
    """``report_json`` (a report's wire form) with ``mutation`` applied."""
    results = [
        {**r, "observed": _set(r["observed"], mutation.path, mutation.value)}
        if r["check"] == mutation.check
        else r
        for r in report_json["results"]
    ]
    return {**report_json, "results": results}


def operator_accepts(
    message: str, node: NodeView, policy: ProbePolicy, pod: PodView
) -> tuple[bool, str]:
    """Whether the operator accepts the node on a probe pod that ended with ``message``
    and the exit of an accepted run, through its own decision functions (as
    ``core.probing`` does: the report trusted, judged, held to how the pod ended). A
    message over the termination-message limit (a full form, which only a stored
    report carries past the probe) is decoded strictly and trusted as a stored one."""
    source: str | ProbeReport = message
    if len(message.encode()) > TERMINATION_MESSAGE_MAX_BYTES:  # a full form: as if stored
        strict_json(message)
        source = ProbeReport.model_validate_json(message, strict=True)
    report = trusted_report(source, node, accept_simulated=True, pod=pod)
    if not isinstance(report, ProbeReport):
        return False, f"{report.reason}: {report.message}"
    verdict = evaluate(report, policy)
    if not verdict.accepted:
        return False, verdict.message
    problem = outcome_problem(verdict, report, pod, node_gpus=max(node.gpus, node.gpu_capacity))
    if problem is not None:
        return False, f"{problem.reason}: {problem.message}"
    return True, "accepted"
