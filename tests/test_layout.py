"""Layout facts that the import-linter contracts do not state.

The layers themselves are import-linter contracts (``.importlinter``, run by
``make lint``). Two tests here check what only an import at run time shows:
the standard library's ``operator`` module is not shadowed by the namespace
package, and importing the operator pulls in no torch or NVML, not even
through a third-party dependency (import-linter sees only our own imports).
The others hold shipped code to one module per file name, one class or type
per name, and no import cycle anywhere (issue 36)."""

import ast
import subprocess
import sys
import sysconfig
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]


def test_stdlib_operator_is_not_shadowed() -> None:
    code = "import operator, gpuaccept.operator; print(operator.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    ).stdout.strip()
    assert Path(out).parent == Path(sysconfig.get_paths()["stdlib"])


def test_operator_does_not_import_torch_or_nvml() -> None:
    code = (
        "import sys, gpuaccept.operator.command; "
        "bad = [m for m in ('torch', 'pynvml') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert out == ""


# The source roots that ship in the images (pyproject's wheel packages).
SHIPPED = tuple(REPO / root / "gpuaccept" for root in ("contracts", "checks", "probes", "operator"))
CHECKS = REPO / "checks" / "gpuaccept" / "checks"
MEASUREMENTS = REPO / "probes" / "gpuaccept" / "probe" / "measure"


def _modules(roots: tuple[Path, ...]) -> list[tuple[Path, str]]:
    """Every module under the roots, with its path inside its root (``probe/cli.py``)."""
    return sorted(
        (path, str(path.relative_to(root))) for root in roots for path in root.rglob("*.py")
    )


def _shared_module_names(roots: tuple[Path, ...]) -> dict[str, list[str]]:
    """File names that more than one module has, each with its modules. Not counted:
    ``__init__.py``, and a check's measurement (``probe/measure/<check>.py``), which
    is named after its check (``checks/<check>.py``) because the probe finds it by
    that name (``gpuaccept.probe.measure.measurer``)."""
    paths: dict[str, list[tuple[Path, str]]] = {}
    for path, shown in _modules(roots):
        if path.name != "__init__.py":
            paths.setdefault(path.name, []).append((path, shown))
    return {
        name: [shown for _path, shown in found]
        for name, found in paths.items()
        if len(found) > 1 and sorted(path.parent for path, _ in found) != [CHECKS, MEASUREMENTS]
    }


def _defined_types(tree: ast.Module) -> list[str]:
    """The public classes and type aliases (``X = Literal[...]``, ``X: TypeAlias = ...``)
    a module defines at its top level. A private name (``_Facts``) is the module's own,
    never imported, so it is not counted."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if ast.unparse(node.annotation).endswith("TypeAlias"):
                names.append(node.target.id)
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Subscript)
            and ast.unparse(node.value.value) in {"Literal", "typing.Literal"}
        ):
            names.append(node.targets[0].id)
    return [name for name in names if not name.startswith("_")]


def _shared_type_names(roots: tuple[Path, ...]) -> dict[str, list[str]]:
    """Class and type alias names that more than one module defines, with the modules."""
    where: dict[str, list[str]] = {}
    for path, shown in _modules(roots):
        for name in _defined_types(ast.parse(path.read_text(encoding="utf-8"))):
            where.setdefault(name, []).append(shown)
    return {name: found for name, found in where.items() if len(found) > 1}


def test_no_two_shipped_modules_share_a_name() -> None:
    assert _shared_module_names(SHIPPED) == {}


def test_no_two_shipped_classes_or_type_aliases_share_a_name() -> None:
    assert _shared_type_names(SHIPPED) == {}


def test_the_name_rules_find_a_shared_name(tmp_path: Path) -> None:
    for package in ("a/gpuaccept/one", "b/gpuaccept/two"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / "policy.py").write_text(
            "from typing import Literal\nclass InService: ...\nPhase = Literal['a']\n"
            "class _Private: ...\n"
        )
    roots = (tmp_path / "a" / "gpuaccept", tmp_path / "b" / "gpuaccept")
    assert _shared_module_names(roots) == {"policy.py": ["one/policy.py", "two/policy.py"]}
    assert _shared_type_names(roots) == {
        "InService": ["one/policy.py", "two/policy.py"],
        "Phase": ["one/policy.py", "two/policy.py"],
    }


def test_shipped_code_has_no_import_cycle() -> None:
    """No module of the shipped packages reaches itself through its imports, counting
    every import: in a function and under ``if TYPE_CHECKING:`` as well (a cycle is
    not hidden by moving one of its imports there)."""
    graph = grimp.build_graph("gpuaccept", cache_dir=None)
    shipped = {m for m in graph.modules if not m.startswith("gpuaccept.testsupport")}
    cycles = []
    for importer in sorted(shipped):
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & shipped):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back:
                cycles.append(" -> ".join((importer, *back)))
    assert cycles == []
