"""The lock files (requirements/*.txt, `make lock`) against pyproject.toml, against
each other, and against the venv these tests run in.

- every line pins one exact version with hashes (pip --require-hashes installs it);
- pyproject.toml and each lock agree: every dependency of the environment's
  extras is in its lock at a version its specifier allows, the lock names no
  direct dependency pyproject.toml has dropped, and requirements/pins.txt holds;
- the image locks have the dev venv's version of every package they share, so
  the tests run on the probe image's torch, CUDA libraries and NCCL;
- the running interpreter holds exactly the dev lock's versions (what
  `make venv` installs with `uv pip sync`), nothing more, nothing less.
"""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gpuaccept.testsupport.locks import (
    LOCK_DIR,
    PINS,
    ROOT,
    LockedPackage,
    LockFormatError,
    read_lock,
    versions,
)

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The environments the project ships or tests in: lock -> the extras it installs.
LOCKS = {
    "dev.txt": ("probe", "operator", "dev"),
    "operator.txt": ("operator",),
    "probe.txt": ("probe",),
}
# What a venv holds besides its lock: the project itself (editable) and the seed
# packages `python -m venv` puts there from the interpreter's own ensurepip.
NOT_LOCKED = {"gpuaccept", "pip", "setuptools"}


def lock(name: str) -> list[LockedPackage]:
    return read_lock(LOCK_DIR / name)


def requirements_of(extras: tuple[str, ...]) -> list[Requirement]:
    project = PYPROJECT["project"]
    texts = list(project["dependencies"])
    for extra in extras:
        texts += project["optional-dependencies"][extra]
    return [Requirement(text) for text in texts]


def pins() -> list[Requirement]:
    lines = (line.split("#", 1)[0].strip() for line in PINS.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def disagreements(packages: list[LockedPackage], required: list[Requirement]) -> list[str]:
    """Why a lock is not the resolution of these requirements (empty: it agrees)."""
    problems = []
    locked: dict[str, list[LockedPackage]] = {}
    for package in packages:
        locked.setdefault(package.name, []).append(package)
    wanted = {canonicalize_name(r.name): r for r in required}
    for name, requirement in wanted.items():
        if name not in locked:
            problems.append(f"{requirement} is not in the lock")
            continue
        for package in locked[name]:
            if not requirement.specifier.contains(package.version, prereleases=True):
                problems.append(f"{name}=={package.version} does not satisfy {requirement}")
    for package in packages:
        if package.direct and package.name not in wanted:
            problems.append(f"{package.name} is required by the project in the lock only")
    return problems


# --- the table of the comparison itself ------------------------------------------------


def _pkg(name: str, version: str, *, direct: bool = True) -> LockedPackage:
    via = ("gpuaccept (pyproject.toml)",) if direct else ("torch",)
    return LockedPackage(name, version, None, ("sha256:" + "0" * 64,), via)


@pytest.mark.parametrize(
    ("packages", "required", "problem"),
    [
        ([_pkg("torch", "2.10.0")], ["torch>=2.3,<2.11"], None),
        ([_pkg("torch", "2.15.0")], ["torch>=2.3,<2.11"], "does not satisfy"),
        ([], ["kopf>=1.37"], "is not in the lock"),
        ([_pkg("kopf", "1.45.2"), _pkg("rich", "15.0.0")], ["kopf"], "in the lock only"),
        ([_pkg("kopf", "1.45.2"), _pkg("idna", "3.2", direct=False)], ["kopf"], None),
    ],
)
def test_disagreements(
    packages: list[LockedPackage], required: list[str], problem: str | None
) -> None:
    found = disagreements(packages, [Requirement(r) for r in required])
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1
        assert problem in found[0]


def test_a_line_that_is_not_a_pin_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lock.txt"
    path.write_text("torch>=2.3 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    with pytest.raises(LockFormatError, match=r"lock\.txt:1: not a pinned requirement"):
        read_lock(path)


# --- the committed locks ----------------------------------------------------------------


@pytest.mark.parametrize("name", [*LOCKS, "uv.txt"])
def test_every_line_pins_a_version_with_hashes(name: str) -> None:
    packages = lock(name)
    assert packages, name
    for package in packages:
        assert package.hashes, f"requirements/{name}: {package.name} has no --hash"
    generated = (LOCK_DIR / name).read_text().splitlines()[:2]
    assert generated == [
        "# This file was autogenerated by uv via the following command:",
        "#    make lock",
    ], f"requirements/{name} was not written by `make lock`"


@pytest.mark.parametrize(("name", "extras"), LOCKS.items())
def test_lock_agrees_with_pyproject(name: str, extras: tuple[str, ...]) -> None:
    problems = disagreements(lock(name), requirements_of(extras))
    assert problems == [], f"requirements/{name} and pyproject.toml disagree (run `make lock`)"


@pytest.mark.parametrize("name", LOCKS)
def test_lock_holds_the_pins(name: str) -> None:
    locked = {p.name: p.version for p in lock(name)}
    for pin in pins():
        name_ = canonicalize_name(pin.name)
        if name_ in locked:
            assert pin.specifier.contains(locked[name_]), f"requirements/{name}: {pin}"
    if "probe" in LOCKS[name]:
        assert {"torch", "nvidia-ml-py"} <= locked.keys()


@pytest.mark.parametrize("name", ["operator.txt", "probe.txt"])
def test_image_locks_have_the_dev_versions(name: str) -> None:
    dev = {(p.name, p.marker): p.version for p in lock("dev.txt")}
    for package in lock(name):
        assert dev.get((package.name, package.marker)) == package.version, (
            f"requirements/{name}: {package.name}=={package.version} "
            f"({package.marker}) is not the dev lock's"
        )


def test_dev_venv_has_the_probe_images_torch_cuda_and_nccl() -> None:
    dev = {p.name: p.version for p in lock("dev.txt")}
    probe = {p.name: p.version for p in lock("probe.txt")}
    for package in ("torch", "nvidia-cuda-runtime-cu12", "nvidia-nccl-cu12", "nvidia-ml-py"):
        assert package in probe, package
        assert dev[package] == probe[package], package
    # CUDA 12.8: every driver the default policy admits (tests/images/test_dockerfiles.py).
    assert probe["nvidia-cuda-runtime-cu12"].startswith("12.8.")


def test_operator_lock_has_no_torch_cuda_or_nvml() -> None:
    names = {p.name for p in lock("operator.txt")}
    assert not {n for n in names if n in {"torch", "triton", "nvidia-ml-py"} or "cuda" in n}
    assert not {n for n in names if n.startswith("nvidia-")}


def test_uv_lock_is_the_dev_locks_uv() -> None:
    (uv,) = lock("uv.txt")
    assert {p.name: p.version for p in lock("dev.txt")}["uv"] == uv.version


# --- the venv these tests run in --------------------------------------------------------


def installed() -> dict[str, str]:
    return {canonicalize_name(d.metadata["Name"]): d.version for d in distributions()}


def test_running_venv_holds_exactly_the_dev_lock() -> None:
    """`make test` on a fresh clone runs on the locked versions and nothing else."""
    assert sys.prefix != sys.base_prefix, "not running in a virtual environment"
    expected = versions(lock("dev.txt"))
    present = {n: v for n, v in installed().items() if n not in NOT_LOCKED}
    wrong = {n: (v, expected[n]) for n, v in present.items() if n in expected and v != expected[n]}
    extra = sorted(present.keys() - expected.keys())
    missing = sorted(expected.keys() - present.keys())
    assert (wrong, extra, missing) == ({}, [], []), (
        f"the venv is not requirements/dev.txt (installed, locked): {wrong}; "
        f"not in the lock: {extra}; not installed: {missing} (run `make venv`)"
    )
