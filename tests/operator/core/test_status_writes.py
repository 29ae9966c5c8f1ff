"""Every change of a node's phase goes through the record layer (``record.py`` and
``transitions.py``): no other module of the operator's pure core sets a status's
``phase``, by keyword (``stamped(st, phase=...)``, ``update(phase=...)``), by a
``"phase"`` key in a dict literal, or by ``update["phase"] = ...``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import gpuaccept.operator.core

CORE = Path(gpuaccept.operator.core.__file__).parent
RECORD_LAYER = {CORE / "record.py", CORE / "transitions.py"}
# Not a status: the verdict history's own record of what was recorded.
NOT_A_STATUS = {"Recorded"}


def _callee(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _phase_writes(tree: ast.AST) -> Iterator[int]:
    """The lines of ``tree`` that set a ``phase``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _callee(node) not in NOT_A_STATUS:
            if any(k.arg == "phase" for k in node.keywords):
                yield node.lineno
        elif isinstance(node, ast.Dict):
            if any(isinstance(k, ast.Constant) and k.value == "phase" for k in node.keys):
                yield node.lineno
        elif isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.slice, ast.Constant)
                    and target.slice.value == "phase"
                ):
                    yield node.lineno


def test_the_scan_sees_each_kind_of_phase_write() -> None:
    source = (
        "a = ctx.stamped(st, phase=Phase.WAITING)\n"
        "b = st.model_copy(update={'phase': Phase.PENDING})\n"
        "update['phase'] = Phase.PROBING\n"
        "update.update(phase=Phase.PENDING)\n"
        "r = Recorded(phase=phase)\n"
        "c = st.phase == Phase.PROBING\n"
    )
    assert sorted(_phase_writes(ast.parse(source))) == [1, 2, 3, 4]


def test_only_the_record_layer_writes_a_phase() -> None:
    outside = [
        f"{path.relative_to(CORE)}:{line}"
        for path in sorted(CORE.rglob("*.py"))
        if path not in RECORD_LAYER
        for line in _phase_writes(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert outside == [], f"a phase written outside record.py and transitions.py: {outside}"
