"""``gpuaccept``: one command, two components.

``gpuaccept probe`` runs the node agent; ``gpuaccept operator`` runs the
Kubernetes operator. Each subcommand imports only its own component, so the
operator never loads torch or NVML and the probe never loads kopf.

A package (``python -m gpuaccept.cli`` runs ``__main__``) so that import-linter
can place it: it sits above the probe and the operator (``.importlinter``), and
nothing imports it.
"""

import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "gpuaccept"

USAGE = """usage: gpuaccept {probe,operator,cleanup,crds,docs} [options]
       gpuaccept --version

  probe      measure this node and print a report (see: gpuaccept probe --help)
  operator   run the Kubernetes operator (see: gpuaccept operator --help)
  cleanup    remove what gpuaccept leaves in a cluster (dry run unless --yes)
  crds       print the CustomResourceDefinitions generated from the contract models
  docs       rewrite the docs' check tables from the check registry
             (crds and docs: build-time commands, from a source checkout)
"""

EXIT_USAGE = 2


def installed_version() -> str:
    """The installed distribution's version (package metadata: pyproject.toml's
    ``version`` as pip or an editable install recorded it)."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (no package metadata: gpuaccept is not installed, only on sys.path)"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        sys.stdout.write(USAGE)
        return 0 if args else EXIT_USAGE
    if args[0] in {"-V", "--version"}:
        sys.stdout.write(f"gpuaccept {installed_version()}\n")
        return 0
    command, rest = args[0], args[1:]
    if command == "probe":
        from gpuaccept.probe.cli import main as probe_main  # noqa: PLC0415 (lazy: one component only)

        return probe_main(rest)
    if command == "operator":
        from gpuaccept.operator.command import main as operator_main  # noqa: PLC0415 (lazy: one component only)

        return operator_main(rest)
    if command == "cleanup":
        from gpuaccept.operator.cleanup import main as cleanup_main  # noqa: PLC0415 (lazy: one component only)

        return cleanup_main(rest)
    if command in {"crds", "docs"}:
        return _generate(command, rest)
    sys.stderr.write(f"gpuaccept: unknown command {command!r}\n{USAGE}")
    return EXIT_USAGE


def _generate(command: str, rest: list[str]) -> int:
    """``crds``/``docs``: the generators in ``gpuaccept.checks.gen``, which the images
    leave out (nothing the probe or the operator runs needs them)."""
    try:
        if command == "crds":
            from gpuaccept.checks.gen.crds import main as generate  # noqa: PLC0415 (lazy: build time only)
        else:
            from gpuaccept.checks.gen.docs import main as generate  # noqa: PLC0415 (lazy: build time only)
    except ModuleNotFoundError as error:
        if not (error.name or "").startswith("gpuaccept.checks.gen"):
            raise
        sys.stderr.write(
            f"gpuaccept {command}: a build-time command; run it from a source checkout "
            f"(make {command})\n"
        )
        return EXIT_USAGE
    return generate(rest)
