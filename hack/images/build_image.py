"""Build a Dockerfile into an OCI image without Docker, and run its entrypoint.

The Dockerfiles stay the one source of truth: this script interprets the
instructions they use, on root filesystems made by ``debootstrap`` instead of
pulled base images, and packs the result with ``umoci``:

- ``FROM debian:<point release>-slim``: ``debootstrap --variant=minbase`` of
  that release's suite, made slim the way Debian's official images are (no
  docs, man pages or locales; bookworm-updates and bookworm-security in the
  sources) and checked against the tag (``/etc/debian_version``).
  ``FROM <earlier stage>`` starts from a copy of that stage.
- ``RUN`` runs in the stage's root filesystem (``unshare --mount`` plus
  ``chroot``, with ``/dev`` and ``/proc`` mounted and the host's resolver), with
  the stage's environment, working directory and user; ``COPY`` copies from
  the build context (minus ``.dockerignore``) or ``--from`` an earlier stage;
  ``ARG``, ``ENV``, ``WORKDIR``, ``USER``, ``LABEL``, ``EXPOSE``,
  ``ENTRYPOINT`` and ``CMD`` as Docker does. Any other instruction or flag is
  an error, so the Dockerfiles cannot drift from what this builds.
- The final stage is packed as one layer into an OCI layout with ``umoci``, its
  config taken from the instructions. ``check`` unpacks that image again and
  runs its entrypoint from the unpacked bundle's runtime config (user, env,
  working directory), on a read-only root with a tmpfs ``/tmp``, as the chart
  runs the containers.

Needs root, debootstrap and umoci (Debian packages). Usage::

    build_image.py build --dockerfile probes/Dockerfile --work DIR --tag probe
    build_image.py check --work DIR --tag probe -- probe --profile /opt/p.yaml
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEBIAN_MIRROR = "http://deb.debian.org/debian"
# Debian's point releases, by major version, and their suites.
DEBIAN_SUITES = {"12": "bookworm", "13": "trixie"}
DEBIAN_SLIM = re.compile(r"^debian:(?P<release>(?P<major>\d+)\.\d+)-slim$")
# What Debian's slim images leave out (their /etc/dpkg/dpkg.cfg.d/docker).
SLIM_DPKG_EXCLUDES = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
"""
# Debian's images' apt configuration (/etc/apt/apt.conf.d/docker-*): no package
# cache left behind by an install, no translations, compressed indexes.
APT_CLEAN = (
    '"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb '
    '/var/cache/apt/*.bin || true"'
)
SLIM_APT_CONF = {
    "docker-clean": f"DPkg::Post-Invoke {{ {APT_CLEAN}; }};\n"
    f"APT::Update::Post-Invoke {{ {APT_CLEAN}; }};\n"
    'Dir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n',
    "docker-no-languages": 'Acquire::Languages "none";\n',
    "docker-gzip-indexes": 'Acquire::GzipIndexes "true";\n',
    "docker-autoremove-suggests": 'Apt::AutoRemove::SuggestsImportant "false";\n',
}
SLIM_REMOVED = ("usr/share/groff", "usr/share/info", "usr/share/linda", "usr/share/lintian")
SLIM_EMPTIED = ("usr/share/locale", "usr/share/man")
# The environment of Debian's images.
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
SUPPORTED = {"ARG", "ENV", "WORKDIR", "RUN", "COPY", "USER", "LABEL", "EXPOSE"}
SUPPORTED |= {"ENTRYPOINT", "CMD", "FROM"}

ARG_REF = re.compile(r"\$\{(\w+)\}|\$(\w+)")
FLAG = re.compile(r"^--([a-z-]+)=(\S+)$")


# --- Parsing -------------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    args: str  # ARG references substituted
    flags: dict[str, str] = field(default_factory=dict)


@dataclass
class Stage:
    base: str
    alias: str | None
    instructions: list[Instruction] = field(default_factory=list)


@dataclass
class Dockerfile:
    args: dict[str, str]  # global ARGs, build arguments applied
    stages: list[Stage]


def logical_lines(text: str) -> list[str]:
    """Instructions with line continuations joined and comments dropped."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1].rstrip() + " "
            continue
        lines.append((current + stripped).strip())
        current = ""
    if current:
        lines.append(current.strip())
    return lines


def expand(text: str, scope: dict[str, str]) -> str:
    """``${NAME}``/``$NAME`` replaced by the values in scope; others kept."""
    return ARG_REF.sub(lambda m: scope.get(m[1] or m[2], m[0]), text)


def split_flags(rest: str) -> tuple[dict[str, str], str]:
    """Leading ``--name=value`` flags of an instruction, and the rest."""
    flags: dict[str, str] = {}
    words = rest.split(" ")
    while words and (match := FLAG.match(words[0])):
        flags[match[1]] = match[2]
        words.pop(0)
    return flags, " ".join(words).strip()


def parse(text: str, build_args: dict[str, str] | None = None) -> Dockerfile:
    """Global ARGs and build stages, as a build with ``build_args`` sees them.

    FROM sees the global ARGs; a stage sees the ARGs it declares (``ARG NAME``
    takes the global value), and its instructions are recorded with those
    substituted (a RUN sees them as environment variables: the same result).
    """
    overrides = build_args or {}
    args: dict[str, str] = {}
    scope: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical_lines(text):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "ARG":
            name, eq, default = rest.partition("=")
            name = name.strip()
            if not stages:
                args[name] = overrides.get(name, default.strip().strip('"'))
                continue
            value = overrides.get(name, expand(default.strip().strip('"'), scope)) if eq else None
            value = args.get(name) if value is None else value
            if value is not None:
                scope[name] = value
            stages[-1].instructions.append(Instruction(keyword, rest))
        elif keyword == "FROM":
            parts = rest.split()
            alias = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=expand(parts[0], args), alias=alias))
            scope = {}
        elif stages:
            flags, body = split_flags(rest)
            stages[-1].instructions.append(Instruction(keyword, expand(body, scope), flags))
    return Dockerfile(args=args, stages=stages)


def external_bases(stages: Sequence[Stage]) -> list[str]:
    aliases = {s.alias for s in stages if s.alias}
    return [s.base for s in stages if s.base not in aliases]


def problems(dockerfile: Dockerfile) -> list[str]:
    """What this builder cannot build as Docker would (empty: it can)."""
    found: list[str] = []
    aliases: set[str] = set()
    for stage in dockerfile.stages:
        match = DEBIAN_SLIM.match(stage.base)
        if stage.base not in aliases and not (match and match["major"] in DEBIAN_SUITES):
            found.append(f"FROM {stage.base}: only debian:<point release>-slim or a stage")
        for instruction in stage.instructions:
            if instruction.keyword not in SUPPORTED:
                found.append(f"{instruction.keyword}: instruction not supported")
            flags = set(instruction.flags)
            if flags - {"from"} or (flags and instruction.keyword != "COPY"):
                found.append(f"{instruction.keyword} {instruction.flags}: flag not supported")
            source = instruction.flags.get("from")
            if source is not None and source not in aliases:
                found.append(f"COPY --from={source}: not an earlier stage")
        aliases |= {stage.alias} if stage.alias else set()
    return found


def key_values(text: str) -> dict[str, str]:
    """``KEY=value KEY2="value 2"`` (ENV, LABEL) as a dict."""
    pairs: dict[str, str] = {}
    for word in shlex.split(text):
        key, eq, value = word.partition("=")
        if not eq:
            raise ValueError(f"expected KEY=value, got {word!r} in {text!r}")
        pairs[key] = value
    return pairs


def exec_form(text: str) -> list[str]:
    """ENTRYPOINT/CMD in exec (JSON) form; the shell form is refused."""
    value = json.loads(text)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"ENTRYPOINT/CMD must be a JSON list of strings: {text}")
    return [str(v) for v in value]


# --- The image config the instructions describe ---------------------------------


@dataclass
class ImageConfig:
    env: dict[str, str] = field(default_factory=lambda: dict(BASE_ENV))
    workdir: str = "/"
    user: str = "0:0"
    labels: dict[str, str] = field(default_factory=dict)
    ports: list[str] = field(default_factory=list)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)

    def apply(self, instruction: Instruction) -> bool:
        """Record a config instruction; False when it is not one."""
        keyword, args = instruction.keyword, instruction.args
        if keyword == "ENV":
            for key, value in key_values(args).items():
                self.env[key] = expand(value, self.env)
        elif keyword == "WORKDIR":
            self.workdir = os.path.join(self.workdir, expand(args, self.env))
        elif keyword == "USER":
            self.user = args if ":" in args else f"{args}:{args}"
        elif keyword == "LABEL":
            self.labels.update(key_values(args))
        elif keyword == "EXPOSE":
            self.ports += [p if "/" in p else f"{p}/tcp" for p in args.split()]
        elif keyword == "ENTRYPOINT":
            self.entrypoint = exec_form(args)
        elif keyword == "CMD":
            self.cmd = exec_form(args)
        else:
            return keyword == "ARG"
        return True


# --- Root filesystems --------------------------------------------------------------


def sh(argv: Sequence[str | Path], env: dict[str, str] | None = None) -> None:
    print("+", shlex.join(str(a) for a in argv), file=sys.stderr, flush=True)
    subprocess.run([str(a) for a in argv], check=True, env=env)


def debian_base(image: str, cache: Path) -> Path:
    """A slim debootstrap root filesystem for ``debian:<release>-slim`` (cached)."""
    match = DEBIAN_SLIM.match(image)
    if not match or match["major"] not in DEBIAN_SUITES:
        raise ValueError(f"unsupported base image {image!r}: use debian:<point release>-slim")
    suite = DEBIAN_SUITES[match["major"]]
    root = cache / f"debian-{suite}-slim"
    if not (root / ".complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        sh(["debootstrap", "--variant=minbase", suite, root, DEBIAN_MIRROR])
        make_slim(root, suite)
        (root / ".complete").touch()
    release = (root / "etc/debian_version").read_text().strip()
    if release != match["release"]:
        raise ValueError(f"{image}: {DEBIAN_MIRROR} serves Debian {release}; update the tag")
    return root


def make_slim(root: Path, suite: str) -> None:
    (root / "etc/dpkg/dpkg.cfg.d/docker").write_text(SLIM_DPKG_EXCLUDES)
    for name, text in SLIM_APT_CONF.items():
        (root / "etc/apt/apt.conf.d" / name).write_text(text)
    (root / "etc/apt/sources.list").write_text(
        f"deb {DEBIAN_MIRROR} {suite} main\n"
        f"deb {DEBIAN_MIRROR} {suite}-updates main\n"
        f"deb {DEBIAN_MIRROR}-security {suite}-security main\n"
    )
    for path in SLIM_REMOVED:
        shutil.rmtree(root / path, ignore_errors=True)
    for path in SLIM_EMPTIED:
        for child in (root / path).glob("*"):
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    for doc in (root / "usr/share/doc").glob("*/*"):
        if doc.name != "copyright":
            shutil.rmtree(doc) if doc.is_dir() and not doc.is_symlink() else doc.unlink()
    for cached in (root / "var/cache/apt").rglob("*"):
        if cached.is_file() and (cached.suffix in {".deb", ".bin"}):
            cached.unlink()
    shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
    (root / "var/lib/apt/lists/partial").mkdir(parents=True)


# Mount /dev, /proc and the host's resolver into the root, then chroot as a user.
# A RUN also gets the build machine's CA bundle, if any (BUILD_CA), at
# /run/build-ca.crt for this RUN only (like `docker build --secret`): for a
# network whose TLS is intercepted. The image never contains it.
BUILD_CA_PATH = "/run/build-ca.crt"
CHROOT = (
    'r=$1; u=$2; shift 2; touch "$r/etc/resolv.conf" && '
    'mount --rbind /dev "$r/dev" && mount -t proc proc "$r/proc" && '
    'mount --bind /etc/resolv.conf "$r/etc/resolv.conf" && '
    'if [ -n "$BUILD_CA" ]; then touch "$r/run/build-ca.crt" && '
    'mount --bind "$BUILD_CA" "$r/run/build-ca.crt"; fi && '
    'exec chroot --userspec="$u" "$r" "$@"'
)
CA_ENV = ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
# A read-only root with a tmpfs /tmp (readOnlyRootFilesystem + the chart's emptyDir).
CHROOT_READ_ONLY = (
    'r=$1; u=$2; shift 2; mount --bind "$r" "$r" && mount -o remount,bind,ro "$r" && '
    'mount -t tmpfs -o mode=1777 tmpfs "$r/tmp" && '
    'mount --rbind /dev "$r/dev" && mount -t proc proc "$r/proc" && '
    'exec chroot --userspec="$u" "$r" "$@"'
)


@dataclass
class Process:
    """What runs in a root filesystem: a RUN, or a container's entrypoint."""

    argv: list[str]
    user: str
    env: dict[str, str]
    workdir: str


def in_root(root: Path, process: Process, script: str) -> list[str]:
    """The command line that runs ``process`` in ``root`` (its own mount namespace)."""
    pairs = [f"{k}={v}" for k, v in process.env.items()]
    inner = ["/usr/bin/env", "-i", *pairs, "/bin/sh", "-c", 'cd "$1" && shift && exec "$@"']
    return [
        *("unshare", "--mount", "--propagation", "private", "--fork", "--"),
        *("sh", "-c", script, "sh", str(root), process.user, *inner),
        *("sh", process.workdir, *process.argv),
    ]


def ignore_regex(pattern: str) -> str:
    """A .dockerignore pattern as a regex: ``**/`` any directories, ``*``/``?`` within one."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        else:
            char = pattern[i]
            out += {"*": "[^/]*", "?": "[^/]"}.get(char, re.escape(char))
            i += 1
    return out + r"\Z"


def ignored(relative: str, patterns: Sequence[str]) -> bool:
    """Whether .dockerignore ``patterns`` exclude this context path (or a parent)."""
    parts = relative.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    regexes = [re.compile(ignore_regex(p)) for p in patterns]
    return any(r.match(c) for r in regexes for c in candidates)


def dockerignore(context: Path) -> list[str]:
    path = context / ".dockerignore"
    lines = path.read_text().splitlines() if path.exists() else []
    patterns = [ln.strip().strip("/") for ln in lines if ln.strip() and not ln.startswith("#")]
    if any(p.startswith("!") for p in patterns):
        raise ValueError(".dockerignore exceptions (!) are not supported")
    return patterns


def context_files(context: Path, source: str, patterns: Sequence[str]) -> Iterable[Path]:
    top = context / source.rstrip("/")
    files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if not p.is_dir())
    for file in files:
        if not ignored(file.relative_to(context).as_posix(), patterns):
            yield file


def copy_in(
    root: Path, instruction: Instruction, config: ImageConfig, stages: dict[str, Path]
) -> None:
    """COPY: from the build context (minus .dockerignore) or an earlier stage."""
    *sources, dest = shlex.split(instruction.args)
    target = root / os.path.join(config.workdir, dest).lstrip("/")
    if "from" in instruction.flags:
        stage_root = stages[instruction.flags["from"]]
        for source in sources:
            target.parent.mkdir(parents=True, exist_ok=True)
            sh(["cp", "-a", "--no-target-directory", stage_root / source.lstrip("/"), target])
        return
    context = Path.cwd()
    patterns = dockerignore(context)
    for source in sources:
        base = context / source.rstrip("/")
        for file in context_files(context, source, patterns):
            if base.is_file():
                out = target / file.name if dest.endswith("/") else target
            else:
                out = target / file.relative_to(base)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, out, follow_symlinks=False)


def run_instruction(root: Path, command: str, config: ImageConfig, build_ca: Path | None) -> None:
    """RUN: ``/bin/sh -c`` in the root, as the stage's user, with its environment."""
    env = dict(config.env)
    host_env = dict(os.environ)
    if build_ca:
        env |= dict.fromkeys(CA_ENV, BUILD_CA_PATH)
        host_env["BUILD_CA"] = str(build_ca)
    else:
        host_env.pop("BUILD_CA", None)
    process = Process(["/bin/sh", "-c", command], config.user, env, config.workdir)
    sh(in_root(root, process, CHROOT), env=host_env)


def build_stage(
    stage: Stage, root: Path, stages: dict[str, Path], cache: Path, build_ca: Path | None
) -> ImageConfig:
    base = stages.get(stage.base) or debian_base(stage.base, cache)
    shutil.rmtree(root, ignore_errors=True)
    sh(["cp", "-a", base, root])
    (root / ".complete").unlink(missing_ok=True)
    config = ImageConfig()
    for instruction in stage.instructions:
        if instruction.keyword == "RUN":
            run_instruction(root, instruction.args, config, build_ca)
        elif instruction.keyword == "COPY":
            copy_in(root, instruction, config, stages)
        elif config.apply(instruction) and instruction.keyword == "WORKDIR":
            (root / config.workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
    return config


def clean_for_packing(root: Path) -> None:
    """What a container runtime provides: empty /dev, /proc, /sys, no resolver."""
    for mountpoint in ("dev", "proc", "sys"):
        for child in (root / mountpoint).iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    (root / "etc/resolv.conf").write_text("")
    (root / BUILD_CA_PATH.lstrip("/")).unlink(missing_ok=True)
    (root / "etc/hostname").write_text("")


# --- OCI ---------------------------------------------------------------------------


def oci_config_flags(config: ImageConfig) -> list[str]:
    flags = [f"--config.user={config.user}", f"--config.workingdir={config.workdir}"]
    flags += [f"--config.env={k}={v}" for k, v in config.env.items()]
    flags += [f"--config.label={k}={v}" for k, v in config.labels.items()]
    flags += [f"--config.exposedports={p}" for p in config.ports]
    flags += [f"--config.entrypoint={a}" for a in config.entrypoint]
    flags += [f"--config.cmd={a}" for a in config.cmd]
    return flags


def pack(root: Path, config: ImageConfig, layout: Path, tag: str) -> None:
    """The root filesystem as a one-layer OCI image ``layout:tag``."""
    image = f"{layout}:{tag}"
    if not (layout / "index.json").exists():
        sh(["umoci", "init", "--layout", layout])
    sh(["umoci", "new", "--image", image])
    bundle = layout.parent / f"{tag}-pack-bundle"
    shutil.rmtree(bundle, ignore_errors=True)
    sh(["umoci", "unpack", "--image", image, bundle])
    (bundle / "rootfs").rmdir()
    root.rename(bundle / "rootfs")
    try:
        sh(["umoci", "repack", "--image", image, bundle])
    finally:
        (bundle / "rootfs").rename(root)
    sh(["umoci", "config", "--image", image, *oci_config_flags(config)])
    sh(["umoci", "gc", "--layout", layout])
    shutil.rmtree(bundle)


def blob(layout: Path, digest: str) -> Any:
    """A JSON blob of an OCI layout, by digest."""
    algorithm, hex_digest = digest.split(":")
    return json.loads((layout / "blobs" / algorithm / hex_digest).read_text())


def manifest_digest(layout: Path, tag: str) -> str:
    index = json.loads((layout / "index.json").read_text())
    for descriptor in index["manifests"]:
        if descriptor.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
            return str(descriptor["digest"])
    raise LookupError(f"{tag} not in {layout}")


def manifest_of(layout: Path, tag: str) -> Any:
    return blob(layout, manifest_digest(layout, tag))


def du_bytes(path: Path) -> int:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


# --- Commands ----------------------------------------------------------------------


def build(
    dockerfile: Path, work: Path, tag: str, build_args: dict[str, str], build_ca: Path | None
) -> dict[str, object]:
    started = time.monotonic()
    parsed = parse(dockerfile.read_text(), build_args)
    if found := problems(parsed):
        raise ValueError(f"{dockerfile}: " + "; ".join(found))
    cache = work / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    stages: dict[str, Path] = {}
    config = ImageConfig()
    root = work / f"{tag}-stage"
    for index, stage in enumerate(parsed.stages):
        root = work / f"{tag}-stage{index}"
        config = build_stage(stage, root, stages, cache, build_ca)
        stages[stage.alias or str(index)] = root
    clean_for_packing(root)
    rootfs_bytes = du_bytes(root)
    built = time.monotonic()
    pack(root, config, work / "oci", tag)
    for stage_root in stages.values():
        shutil.rmtree(stage_root, ignore_errors=True)
    layers = manifest_of(work / "oci", tag)["layers"]
    return {
        "dockerfile": str(dockerfile),
        "args": parsed.args,
        "rootfs_bytes": rootfs_bytes,
        "compressed_layer_bytes": sum(int(layer["size"]) for layer in layers),
        "build_seconds": round(built - started),
        "pack_seconds": round(time.monotonic() - built),
    }


def check(work: Path, tag: str, args: Sequence[str], entrypoint: str | None = None) -> int:
    """Unpack ``tag`` and run its entrypoint with ``args`` as its runtime would.

    ``args`` replace the image's CMD (none: the CMD); ``entrypoint`` replaces
    its ENTRYPOINT. Files under WORK/TAG-files are copied into the unpacked
    root first (a profile to probe, say); the image is not changed.
    """
    bundle = work / f"{tag}-check-bundle"
    digest = manifest_digest(work / "oci", tag)
    marker = bundle / "unpacked-manifest"
    # Runs leave the root as it was (read-only, tmpfs /tmp): reuse the last unpack.
    if not marker.exists() or marker.read_text() != digest:
        shutil.rmtree(bundle, ignore_errors=True)
        sh(["umoci", "unpack", "--image", f"{work / 'oci'}:{tag}", bundle])
        marker.write_text(digest)
    extra = work / f"{tag}-files"
    if extra.is_dir():
        shutil.copytree(extra, bundle / "rootfs", dirs_exist_ok=True)
    spec = json.loads((bundle / "config.json").read_text())["process"]
    image = blob(work / "oci", manifest_of(work / "oci", tag)["config"]["digest"])
    argv = [entrypoint] if entrypoint else list(image["config"].get("Entrypoint", []))
    argv += args if args or entrypoint else image["config"].get("Cmd", [])
    env = dict(item.split("=", 1) for item in spec["env"])
    user = f"{spec['user']['uid']}:{spec['user']['gid']}"
    command = in_root(bundle / "rootfs", Process(argv, user, env, spec["cwd"]), CHROOT_READ_ONLY)
    print("+", shlex.join(argv), f"(as {user}, read-only root)", file=sys.stderr, flush=True)
    return subprocess.run(command, check=False).returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build_cmd = sub.add_parser("build", help="build a Dockerfile into WORK/oci:TAG")
    build_cmd.add_argument("--dockerfile", type=Path, required=True)
    build_cmd.add_argument("--build-arg", action="append", default=[], metavar="NAME=VALUE")
    build_cmd.add_argument(
        "--build-ca",
        type=Path,
        default=os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE") or None,
        help="CA bundle for the RUNs' downloads, never in the image (default: $PIP_CERT, "
        "then $SSL_CERT_FILE)",
    )
    check_cmd = sub.add_parser("check", help="run WORK/oci:TAG's entrypoint (args after --)")
    check_cmd.add_argument("--entrypoint", help="instead of the image's ENTRYPOINT")
    check_cmd.add_argument("args", nargs="*")
    for cmd in (build_cmd, check_cmd):
        cmd.add_argument("--work", type=Path, required=True)
        cmd.add_argument("--tag", required=True)
    options = parser.parse_args(argv)
    work = options.work.resolve()
    if options.command == "build":
        build_args = dict(a.split("=", 1) for a in options.build_arg)
        result = build(options.dockerfile, work, options.tag, build_args, options.build_ca)
        (work / f"{options.tag}.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
        return 0
    return check(work, options.tag, options.args, options.entrypoint)


if __name__ == "__main__":
    sys.exit(main())
