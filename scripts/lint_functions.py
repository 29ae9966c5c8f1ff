"""Every shipped function within 60 lines and a cyclomatic complexity of 15 (issue 36).

``make lint`` runs it over the four source roots that ship in the images (contracts,
checks, probes, operator). A function's length is its lines from ``def`` to its last
line (decorators not counted, its docstring and comments counted). Its complexity is
counted as radon counts it (radon.visitors.ComplexityVisitor): 1, plus one for each
``if``, ``elif``, conditional expression, loop (and a loop's ``else``), ``except``
(and a ``try``'s ``else``), ``assert``, comprehension ``for`` and ``if``, each
``and``/``or`` operand after the first, and each ``match`` case but a final ``_``.
A nested function is measured on its own, not as part of the one around it. (ruff's
C901, also on in ``make lint``, counts neither boolean operators nor comprehensions:
``throttle_reasons.measure`` was 11 to ruff and 45 here.)

    python scripts/lint_functions.py [ROOT ...]   # exit 1 and one line per offender
"""

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

MAX_LINES = 60
MAX_COMPLEXITY = 15
SHIPPED_ROOTS = ("contracts", "checks", "probes", "operator")

Function = ast.FunctionDef | ast.AsyncFunctionDef
_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _own_nodes(function: Function) -> Iterator[ast.AST]:
    """Every node of the function's body, not entering a nested function or class."""
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _NESTED_SCOPES):
            stack.extend(ast.iter_child_nodes(node))


def _decisions(node: ast.AST) -> int:
    if isinstance(node, ast.Try | ast.TryStar):
        return len(node.handlers) + bool(node.orelse)
    if isinstance(node, ast.BoolOp):
        return len(node.values) - 1
    if isinstance(node, ast.If | ast.IfExp | ast.Assert):
        return 1
    if isinstance(node, ast.For | ast.AsyncFor | ast.While):
        return 1 + bool(node.orelse)
    if isinstance(node, ast.comprehension):
        return 1 + len(node.ifs)
    if isinstance(node, ast.Match):
        wildcard = any(getattr(case.pattern, "pattern", False) is None for case in node.cases)
        return max(0, len(node.cases) - wildcard)
    return 0


def complexity(function: Function) -> int:
    """The function's cyclomatic complexity, counted as radon counts it."""
    return 1 + sum(_decisions(node) for node in _own_nodes(function))


def length(function: Function) -> int:
    """Lines from ``def`` to the function's last line."""
    return (function.end_lineno or function.lineno) - function.lineno + 1


def functions(tree: ast.Module) -> Iterator[tuple[str, Function]]:
    """Every function and method of a module, nested ones too, with its dotted name."""
    stack: list[tuple[str, ast.AST]] = [("", tree)]
    while stack:
        prefix, node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield prefix + child.name, child
                stack.append((f"{prefix}{child.name}.", child))
            elif isinstance(child, ast.ClassDef):
                stack.append((f"{prefix}{child.name}.", child))
            else:
                stack.append((prefix, child))


def offences(path: Path) -> Iterator[str]:
    """One line for each function of the file over either limit."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for name, function in sorted(functions(tree), key=lambda named: named[1].lineno):
        where = f"{path}:{function.lineno}: {name}"
        lines, score = length(function), complexity(function)
        if lines > MAX_LINES:
            yield f"{where} is {lines} lines long (at most {MAX_LINES})"
        if score > MAX_COMPLEXITY:
            yield f"{where} has complexity {score} (at most {MAX_COMPLEXITY})"


def main(argv: list[str]) -> int:
    roots = [Path(root) for root in (argv or SHIPPED_ROOTS)]
    found = [
        line for root in roots for path in sorted(root.rglob("*.py")) for line in offences(path)
    ]
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
