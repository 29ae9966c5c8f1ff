"""Every function of the operator's pure core stays small: at most 60 lines and a
cyclomatic complexity of at most 15, counted the way radon counts it (1, plus one
per if/elif, conditional expression, loop, loop else, except and try else, each
extra operand of and/or, each comprehension and its ifs, each assert and each
match case but the wildcard). Nested functions are counted on their own."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import gpuaccept.operator.core

CORE = Path(gpuaccept.operator.core.__file__).parent
MAX_LINES = 60
MAX_COMPLEXITY = 15
Function = ast.FunctionDef | ast.AsyncFunctionDef


def _own_nodes(function: Function) -> Iterator[ast.AST]:
    """The nodes of ``function``'s body, not those of functions defined in it."""
    nested = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    stack: list[ast.AST] = [n for n in function.body if not isinstance(n, nested)]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, nested))


def _match_cases(node: ast.Match) -> int:
    wildcard = any(
        isinstance(c.pattern, ast.MatchAs) and c.pattern.pattern is None for c in node.cases
    )
    return max(0, len(node.cases) - wildcard)


DECISIONS = {
    ast.If: lambda _n: 1,
    ast.IfExp: lambda _n: 1,
    ast.Assert: lambda _n: 1,
    ast.For: lambda n: 1 + bool(n.orelse),
    ast.AsyncFor: lambda n: 1 + bool(n.orelse),
    ast.While: lambda n: 1 + bool(n.orelse),
    ast.Try: lambda n: len(n.handlers) + bool(n.orelse),
    ast.TryStar: lambda n: len(n.handlers) + bool(n.orelse),
    ast.BoolOp: lambda n: len(n.values) - 1,
    ast.comprehension: lambda n: 1 + len(n.ifs),
    ast.Match: _match_cases,
}
"""The decision points a node adds, by its type."""


def _decisions(node: ast.AST) -> int:
    count = DECISIONS.get(type(node))
    return count(node) if count is not None else 0


def complexity(function: Function) -> int:
    return 1 + sum(_decisions(node) for node in _own_nodes(function))


def _functions() -> Iterator[tuple[str, Function]]:
    for path in sorted(CORE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield f"{path.relative_to(CORE.parent)}:{node.lineno} {node.name}", node


FUNCTIONS = dict(_functions())


def test_the_core_has_functions_to_measure() -> None:
    assert len(FUNCTIONS) > 100


@pytest.mark.parametrize("where", sorted(FUNCTIONS))
def test_a_core_function_is_short_and_simple(where: str) -> None:
    function = FUNCTIONS[where]
    lines = (function.end_lineno or function.lineno) - function.lineno + 1
    assert lines <= MAX_LINES, f"{where}: {lines} lines (at most {MAX_LINES})"
    assert complexity(function) <= MAX_COMPLEXITY, (
        f"{where}: cyclomatic complexity {complexity(function)} (at most {MAX_COMPLEXITY})"
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f():\n    return 1\n", 1),
        ("def f(a, b):\n    if a and b or a:\n        pass\n    elif b:\n        pass\n", 5),
        ("def f(xs):\n    for x in xs:\n        pass\n    else:\n        pass\n", 3),
        (
            "def f():\n    try:\n        pass\n    except A:\n        pass\n"
            "    except B:\n        pass\n    else:\n        pass\n",
            4,
        ),
        ("def f(xs):\n    return [x for x in xs if x if x] or (1 if xs else 2)\n", 6),
        (
            "def f(x):\n    match x:\n        case 1:\n            pass\n"
            "        case _:\n            pass\n",
            2,
        ),
        ("def f():\n    def g(x):\n        if x:\n            pass\n    return g\n", 1),
    ],
    ids=["straight", "if elif and or", "for else", "try", "comprehension", "match", "nested"],
)
def test_complexity_counts_as_radon_does(source: str, expected: int) -> None:
    (function,) = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]
    assert complexity(function) == expected
