"""The one drift test: every generated file is what ``make generate`` writes
(hack/generate.py, every generator in the order their inputs need), and every
generator of mk/*.mk is one of its steps."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuaccept.checks.gen import crds as crdgen
from gpuaccept.checks.gen import default_policy
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack"))
import generate  # noqa: E402


def test_every_generated_file_is_what_make_generate_writes() -> None:
    done = subprocess.run(
        [sys.executable, "hack/generate.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def make_targets() -> set[str]:
    files = [ROOT / "Makefile", *sorted((ROOT / "mk").glob("*.mk"))]
    text = "".join(p.read_text(encoding="utf-8") for p in files)
    return set(re.findall(r"^([a-z][a-z0-9-]*):", text, re.M))


# Targets with a ``-check`` twin that write no committed file from the repository alone.
NOT_GENERATORS = {
    "generate": "itself",
    "bench": "bench-check: the benchmark's correctness check",
    "images": "images-check: builds and runs both images (root)",
    "lock": "the dependency locks resolve against PyPI (make lock; network)",
}


def test_every_generator_target_of_mk_is_a_step_of_make_generate() -> None:
    """A generator is a target with a ``-check`` twin; a new one left out of
    hack/generate.py would go stale unseen."""
    targets = make_targets()
    generators = {t for t in targets if f"{t}-check" in targets} - NOT_GENERATORS.keys()
    assert {"crds", "docs", "chart-docs", "captures-table"} <= generators
    steps = {step.target for step in generate.STEPS}
    assert generators <= steps, f"not in make generate: {sorted(generators - steps)}"
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^generate: venv\n\t\$\(PY\) hack/generate.py$", makefile, re.M)


def test_the_default_policy_is_each_checks_shipped_section_in_registry_order() -> None:
    text = (ROOT / default_policy.POLICY_FILE).read_text(encoding="utf-8")
    assert text == default_policy.render()
    assert text.startswith("# GENERATED")
    assert list(yaml.safe_load(text)) == [default_policy.section_name(c) for c in CHECKS]
    ProbePolicy.model_validate(yaml.safe_load(text))


def test_a_stale_default_policy_is_reported_and_written(tmp_path: Path) -> None:
    path = tmp_path / default_policy.POLICY_FILE
    path.parent.mkdir(parents=True)
    path.write_text(default_policy.render().replace("minWidth: 16", "minWidth: 8"))
    assert default_policy.main(["--root", str(tmp_path), "--check"]) == 1
    assert default_policy.main(["--root", str(tmp_path)]) == 0
    assert default_policy.main(["--root", str(tmp_path), "--check"]) == 0
    assert path.read_text() == default_policy.render()


def test_a_shipped_section_that_is_not_its_policy_section_stops_the_generator() -> None:
    pcie = next(c for c in CHECKS if c.name == "pcie_link")
    bad = type(pcie)(**{**pcie.__dict__, "shipped": "minWidth: sixteen\n"})
    with pytest.raises(default_policy.ShippedSectionError, match=r"^pcie_link: shipped section"):
        default_policy.render((bad,))


def test_stale_crds_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = ["--out", str(tmp_path)]
    assert crdgen.main([*out, "--check"]) == 1
    assert crdgen.main(out) == 0
    assert crdgen.main([*out, "--check"]) == 0
    (tmp_path / "extra.yaml").write_text("{}\n")
    assert crdgen.main([*out, "--check"]) == 1
    assert f"stale: {tmp_path} (run `make crds`)" in capsys.readouterr().err
