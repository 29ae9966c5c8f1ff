"""The operator's requests per loop and phase (issue 41), from the audit log.

Every request the operator makes names its origin in its User-Agent (operator/kube.py:
``gpuaccept-operator (LOOP/PHASE)``), which kube-apiserver's audit log records;
kopf's list and watch streams name themselves ``kopf/VERSION``. :func:`accounting`
sums an identity's requests (:class:`bench.audit.RequestCounts`) by loop and phase,
per unit of work: per node for the join, per node and window in service, per
completed re-verification for the re-verification phase. Every loop of :data:`LOOPS`
is in it, with no requests when it made none, so a missing loop is seen;
``other`` holds the operator's requests that no loop named (none is expected:
:func:`problems`). docs/benchmarks.md says which requests are above the floor and
the guarantee each one buys.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench.audit import RequestCounts
from gpuaccept.operator.kube import NODE_LOOPS, ORIGIN_OTHER, ORIGINS

WATCHES = "kopf"  # the operator's list+watch streams (kopf's own client)
# Every loop of the operator: the watches, a node's reconcile by what it is doing
# (kube.NODE_LOOPS), the re-verification's lists (under ``reverify``), the policy
# status, the two leases, the relist checks, and ``other``.
LOOPS = (
    WATCHES,
    *NODE_LOOPS,
    *sorted({origin.split("/", 1)[0] for origin in ORIGINS} - set(NODE_LOOPS) - {ORIGIN_OTHER}),
    ORIGIN_OTHER,
)
ALL_PHASES = "-"  # the phase of a loop that has none (the watches, the leases)


def _per(count: float, units: float) -> float:
    return round(count / units, 3) if units else 0.0


def accounting(counts: RequestCounts, units: float, unit: str) -> dict[str, Any]:
    """``{"unit", "units", "loops": {loop: {"requests", "per_unit", "phases": {phase:
    {"requests", "per_unit", "by_call": {call: per unit}}}}}}``, every loop of
    :data:`LOOPS` present."""
    loops: dict[str, dict[str, Any]] = {
        loop: {"requests": 0, "per_unit": 0.0, "phases": {}} for loop in LOOPS
    }
    for origin, calls in sorted(counts.by_origin.items()):
        loop, _, phase = origin.partition("/")
        entry = loops.setdefault(loop, {"requests": 0, "per_unit": 0.0, "phases": {}})
        total = sum(calls.values())
        entry["requests"] += total
        entry["phases"][phase or ALL_PHASES] = {
            "requests": total,
            "per_unit": _per(total, units),
            "by_call": {call: _per(n, units) for call, n in sorted(calls.items())},
        }
    for entry in loops.values():
        entry["per_unit"] = _per(entry["requests"], units)
    return {"unit": unit, "units": units, "loops": loops}


def by_call(account: dict[str, Any]) -> Counter[str]:
    """Requests per unit by call, over every loop."""
    total: Counter[str] = Counter()
    for entry in account["loops"].values():
        for phase in entry["phases"].values():
            for call, per in phase["by_call"].items():
                total[call] += per
    return total


def above_floor(account: dict[str, Any], floor: dict[str, float]) -> dict[str, float]:
    """The calls the operator makes more of per unit than the floor (``floor``: call →
    requests per unit), and by how many."""
    made = by_call(account)
    return {
        call: round(made[call] - floor.get(call, 0.0), 3)
        for call in sorted(made)
        if made[call] - floor.get(call, 0.0) >= 0.005
    }


def problems(account: dict[str, Any], required: tuple[str, ...] = ()) -> list[str]:
    """What is wrong with an account: a loop of :data:`LOOPS` missing, a ``required``
    loop that made no request, requests no loop named."""
    loops = account.get("loops") or {}
    found = [f"no accounting for the loop {loop}" for loop in LOOPS if loop not in loops]
    found += [
        f"the loop {loop} made no request"
        for loop in required
        if loop in loops and not loops[loop]["requests"]
    ]
    other = (loops.get(ORIGIN_OTHER) or {}).get("requests", 0)
    if other:
        calls = (loops[ORIGIN_OTHER]["phases"].get(ALL_PHASES) or {}).get("by_call", {})
        found.append(f"{other} requests named no loop: {calls}")
    return found


def lines(account: dict[str, Any], title: str) -> list[str]:
    """The account as text: one line per loop and phase that made requests, then the
    loops that made none."""
    unit = account["unit"]
    out = [f"{title}: requests per {unit} by loop and phase ({account['units']:g} {unit}s)"]
    idle = []
    for loop, entry in account["loops"].items():
        if not entry["requests"]:
            idle.append(loop)
            continue
        for phase, row in entry["phases"].items():
            calls = ", ".join(f"{call} {per:g}" for call, per in row["by_call"].items())
            name = loop if phase == ALL_PHASES else f"{loop}/{phase}"
            out.append(f"  {name:<28} {row['per_unit']:>9.3f}  ({row['requests']}: {calls})")
    if idle:
        out.append(f"  no requests: {', '.join(idle)}")
    return out
