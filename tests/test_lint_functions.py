"""scripts/lint_functions.py, the length and complexity limits ``make lint`` holds shipped
code to (issue 36): a function over either limit fails it, one at the limit does not."""

import ast
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "lint_functions.py"


@pytest.fixture(scope="module")
def lint() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lint_functions", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _function_of_lines(name: str, lines: int) -> str:
    """A function ``lines`` long, def line included, of complexity 1."""
    body = "".join(f"    x{n} = {n}\n" for n in range(lines - 2))
    return f"def {name}() -> None:\n{body}    return None\n"


def _function_of_complexity(name: str, score: int) -> str:
    body = "".join(f"    if a == {n}:\n        return {n}\n" for n in range(score - 1))
    return f"def {name}(a: int) -> int:\n{body}    return -1\n"


def _run(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "module.py").write_text(source)
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, check=False
    )


def test_a_61_line_function_fails_and_a_60_line_one_passes(tmp_path: Path) -> None:
    result = _run(tmp_path, _function_of_lines("fits", 60) + _function_of_lines("too_long", 61))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'module.py'}:61: too_long is 61 lines long (at most 60)"
    ]


def test_complexity_16_fails_and_15_passes(tmp_path: Path) -> None:
    source = _function_of_complexity("fits", 15) + _function_of_complexity("branchy", 16)
    result = _run(tmp_path, source)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'module.py'}:31: branchy has complexity 16 (at most 15)"
    ]


def test_complexity_counts_as_radon_does(lint: ModuleType) -> None:
    source = textwrap.dedent(
        """
        def f(xs, y):
            assert xs                                  # 1
            try:
                z = [x for x in xs if x if x > 1]      # 1 + 2
            except ValueError:                         # 1
                z = []
            except KeyError:                           # 1
                z = []
            else:                                      # 1
                pass
            for x in xs:                               # 1
                pass
            else:                                      # 1
                pass
            while y and z or xs:                       # 1, and: 1, or: 1
                y = 1 if y else 2                      # 1
            match y:
                case 1:                                # 1
                    pass
                case 2:                                # 1
                    pass
                case _:
                    pass
            return z
        """
    )
    function = next(node for _name, node in lint.functions(ast.parse(source)))
    assert lint.complexity(function) == 1 + 15  # radon cc: f - C (16)


def test_a_nested_function_is_measured_on_its_own(tmp_path: Path) -> None:
    inner = textwrap.indent(_function_of_complexity("inner", 16), "    ")
    source = f"def outer(a: int) -> int:\n{inner}    return inner(a)\n"
    result = _run(tmp_path, source)
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'module.py'}:2: outer.inner has complexity 16 (at most 15)"
    ]


def test_the_shipped_roots_keep_the_limits() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert (result.returncode, result.stdout) == (0, "")
