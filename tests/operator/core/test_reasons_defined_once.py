"""Each reason word of the operator's pure core (a module-level ``REASON_*``
constant) is defined in one module; the others import it. Two definitions can
drift apart, and a status written under one would no longer match the other."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import gpuaccept.operator.core

CORE = Path(gpuaccept.operator.core.__file__).parent


def test_each_reason_is_defined_in_one_module() -> None:
    defined: dict[str, list[str]] = defaultdict(list)
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id.startswith("REASON_"):
                    defined[target.id].append(str(path.relative_to(CORE)))
    assert defined  # the scan sees the core's reasons
    twice = {name: where for name, where in defined.items() if len(where) > 1}
    assert twice == {}
