"""``scripts/device-check.sh`` where there is no GPU (issue 11 item 12).

What can run here does: the offline install of the probe's small dependencies
from a wheel folder into a host Python that lacks them, the "what is missing"
path, the usage error, a whole run on a host without a GPU (nothing proven, exit
1), the summary's decision table, and the type check of ``tests/device``. The
GPU steps themselves run only on a GPU host. shellcheck covers the script in
``tests/chart/test_shellcheck.py`` (every ``scripts/*.sh``).

The wheel folder is built offline from this environment's own installed
distributions (repacked as wheels), so no test touches the network.
"""

import json
import os
import re
import subprocess
import sys
import venv
import zipfile
from dataclasses import dataclass
from importlib.metadata import Distribution, distribution
from pathlib import Path
from typing import Any

import pytest
from device_claims import CLAIMS, build_summary
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "device-check.sh"

SMALL_DEPENDENCIES = ["pydantic", "nvidia-ml-py", "rich", "PyYAML", "pytest"]
NOT_TESTABLE = {
    "NVLink",
    "NVSwitch fabric",
    "GPU pair matrix",
    "multi-GPU all-reduce",
    "NUMA spread",
    "InfiniBand",
    "Xid injection",
    "8-GPU peers",
    "the two-node pair",
}


def _closure(names: list[str]) -> list[Distribution]:
    """The installed distributions ``names`` need, their own needs included."""
    seen: dict[str, Distribution] = {}
    todo = list(names)
    while todo:
        dist = distribution(todo.pop())
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _repack(dist: Distribution, folder: Path) -> Path:
    """An installed distribution as a wheel again (its files, as its RECORD lists them)."""
    wheel_meta = dist.read_text("WHEEL") or ""
    tag = re.search(r"^Tag: (\S+)$", wheel_meta, re.MULTILINE)
    assert tag is not None, dist.metadata["Name"]
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    path = folder / f"{name}-{dist.version}-{tag.group(1)}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as wheel:
        for file in dist.files or []:
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue
            wheel.write(Path(str(dist.locate_file(file))), str(file))
    return path


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wheels")
    for dist in _closure(SMALL_DEPENDENCIES):
        _repack(dist, folder)
    return folder


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python with pip and nothing else: a GPU host's Python without our dependencies."""
    where = tmp_path_factory.mktemp("host") / "venv"
    venv.EnvBuilder(with_pip=True, symlinks=True).create(where)
    python = where / "bin" / "python"
    probe = subprocess.run([python, "-c", "import pydantic"], capture_output=True, check=False)
    assert probe.returncode != 0, "the bare venv must lack pydantic"
    return python


@pytest.fixture(scope="module")
def fake_torch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a stand-in ``torch`` module (the host's torch is not carried)."""
    folder = tmp_path_factory.mktemp("torch")
    (folder / "torch").mkdir()
    (folder / "torch" / "__init__.py").write_text('__version__ = "0.0+stand-in"\n')
    return folder


def run_script(
    *args: str | Path, python: Path, wheels: Path, pythonpath: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUACCEPT_", "PYTHON", "OUT"))}
    env |= {"PYTHON": str(python), "DEVICE_WHEELS": str(wheels)}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
        check=False,
    )


def summary(outdir: Path) -> dict[str, Any]:
    data = json.loads((outdir / "summary.json").read_text())
    assert isinstance(data, dict)
    return data


def test_installs_the_missing_dependencies_offline_from_the_wheel_folder(
    tmp_path: Path, bare_python: Path, wheels: Path, fake_torch: Path
) -> None:
    out = tmp_path / "out"
    proc = run_script("--deps-only", out, python=bare_python, wheels=wheels, pythonpath=fake_torch)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"==> deps +ok .*installed offline from ", proc.stdout), proc.stdout
    for requirement in ("pydantic>=2.7,<3", "nvidia-ml-py>=12.535", "rich>=13.7", "PyYAML>=6.0"):
        assert requirement in proc.stdout
    result = summary(out)
    assert result["missing"] == []
    assert [s["step"] for s in result["steps"]] == ["machine", "deps"]
    assert result["mode"].startswith("deps-only")


def test_names_what_is_missing_without_wheels(
    tmp_path: Path, bare_python: Path, fake_torch: Path
) -> None:
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    out = tmp_path / "out"
    proc = run_script("--deps-only", out, python=bare_python, wheels=empty, pythonpath=fake_torch)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert f"no wheels in {empty}: run `make device-wheels`" in proc.stdout
    for line in (
        "missing: pydantic: pydantic>=2.7,<3",
        "missing: pynvml: nvidia-ml-py>=12.535",
        "missing: rich: rich>=13.7",
        "missing: yaml: PyYAML>=6.0",
        "missing: pytest: pytest>=8",
    ):
        assert line in proc.stdout, proc.stdout
    assert "missing: torch" not in proc.stdout
    result = summary(out)
    assert result["exit_code"] == 3
    assert not result["proven"]
    assert "pydantic>=2.7,<3" in result["missing"]
    assert {item["what"] for item in result["not_testable_on_one_gpu"]} == NOT_TESTABLE


def test_a_host_without_torch_still_runs_the_nvml_only_claims(
    tmp_path: Path, bare_python: Path, wheels: Path
) -> None:
    """torch gates only the claims that load the GPUs (issue 37, item 20): a host
    without it is told so, and the NVML-only claims are not held back."""
    out = tmp_path / "out"
    proc = run_script("--deps-only", out, python=bare_python, wheels=wheels)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "missing: torch: torch (a CUDA build; not carried: the host must have it)" in (
        proc.stdout
    )
    assert "only the NVML-only claims run" in proc.stdout
    assert summary(out)["torch"].startswith("missing")


def test_without_a_gpu_nothing_is_proven_and_the_exit_code_says_so(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_script(out, python=Path(sys.executable), wheels=tmp_path / "none")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"==> gpu +failed .*no usable GPU", proc.stdout), proc.stdout
    assert re.search(r"==> claims +skipped", proc.stdout), proc.stdout
    for what in NOT_TESTABLE:
        assert f"not tested on one GPU: {what} (" in proc.stdout
    result = summary(out)
    assert result["exit_code"] == 1
    assert not result["proven"]
    assert [c["claim"] for c in result["claims"]] == [c.name for c in CLAIMS]
    assert all(not c["proven"] and c["test_outcome"] == "not run" for c in result["claims"])
    assert [s["step"] for s in result["steps"]] == ["machine", "deps", "gpu", "claims"]
    # what the run ran in is recorded (issue 37, item 20): gvisor, vm or bare metal
    assert re.match(r"^(gvisor|vm|bare metal)", result["sandbox"]), result


def test_bad_usage_exits_2(tmp_path: Path) -> None:
    proc = run_script("--bogus", python=Path(sys.executable), wheels=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: scripts/device-check.sh")


# --- the summary's decision: a claim is proven only by a passed test with its evidence ----


def _junit(outcomes: dict[str, str]) -> str:
    cases = []
    for name, outcome in outcomes.items():
        inner = {
            "passed": "",
            "failed": '<failure message="x"/>',
            "error": '<error message="x"/>',
            "skipped": '<skipped message="x"/>',
        }[outcome]
        cases.append(f'<testcase classname="tests.device.test_device_probe" name="{name}">'
                     f"{inner}</testcase>")  # fmt: skip
    return f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>'


ALL_PASSED = {c.test: "passed" for c in CLAIMS}


@dataclass(frozen=True)
class SummaryCase:
    outcomes: dict[str, str] | None  # None: no JUnit file, nothing ran
    evidence_proven: bool
    script_exit: int
    expect_proven: bool
    expect_exit: int


SUMMARY_CASES = {
    "all proven": SummaryCase(ALL_PASSED, True, 0, True, 0),
    "a step failed": SummaryCase(ALL_PASSED, True, 1, True, 1),
    "a test failed": SummaryCase(
        {**ALL_PASSED, "test_clocks_under_load": "failed"}, True, 0, False, 1
    ),
    "a test skipped": SummaryCase(
        {**ALL_PASSED, "test_clocks_under_load": "skipped"}, True, 0, False, 1
    ),
    "a test not run": SummaryCase(
        {k: v for k, v in ALL_PASSED.items() if k != "test_nccl_allreduce_on_real_gpus"},
        True,
        0,
        False,
        1,
    ),
    "passed, evidence says not": SummaryCase(ALL_PASSED, False, 0, False, 1),
    "nothing ran": SummaryCase(None, True, 0, False, 1),
}


@pytest.mark.parametrize("name", SUMMARY_CASES)
def test_summary_decision(tmp_path: Path, name: str) -> None:
    case = SUMMARY_CASES[name]
    if case.outcomes is not None:
        (tmp_path / "device-tests.xml").write_text(_junit(case.outcomes))
    (tmp_path / "evidence").mkdir()
    for claim in CLAIMS:
        payload = {"test": claim.test, "proven": case.evidence_proven, "evidence": {"x": 1}}
        (tmp_path / "evidence" / f"{claim.test}.json").write_text(json.dumps(payload))
    result = build_summary(tmp_path, case.script_exit, {"commit": "abc"})
    assert result["proven"] is case.expect_proven
    assert result["exit_code"] == case.expect_exit
    assert result["commit"] == "abc"


def test_parametrized_cases_count_as_passed_only_when_all_passed(tmp_path: Path) -> None:
    cases = {**ALL_PASSED, "test_versions_agree[a]": "passed", "test_versions_agree[b]": "failed"}
    (tmp_path / "device-tests.xml").write_text(_junit(cases))
    (tmp_path / "evidence").mkdir()
    for claim in CLAIMS:
        payload = {"test": claim.test, "proven": True, "evidence": {}}
        (tmp_path / "evidence" / f"{claim.test}.json").write_text(json.dumps(payload))
    result = build_summary(tmp_path, 0, {})
    assert not result["proven"]


def test_the_device_tests_type_check() -> None:
    env = {**os.environ, "MYPYPATH": "tests/device"}
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "tests/device"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
