"""Run-time layout facts that a static import graph cannot show.

The layers themselves are import-linter contracts (``.importlinter``, run by
``make lint``). These two tests check what only an import at run time shows:
the standard library's ``operator`` module is not shadowed by the namespace
package, and importing the operator pulls in no torch or NVML, not even
through a third-party dependency (import-linter sees only our own imports)."""

import subprocess
import sys
import sysconfig
from pathlib import Path


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
