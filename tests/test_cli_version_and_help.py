"""``gpuaccept --version`` and every command's ``--help`` showing its defaults."""

import argparse
import subprocess
import sys
from importlib.metadata import version

import pytest

from gpuaccept.cli import main
from gpuaccept.contracts.cli_help import DefaultsHelpFormatter
from gpuaccept.operator.cleanup import parser as cleanup_parser
from gpuaccept.operator.options import parser as operator_parser
from gpuaccept.probe.cli import build_parser as probe_parser
from gpuaccept.probe.fabric_cli import build_parser as fabric_parser


def test_version_prints_the_installed_distributions_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"gpuaccept {version('gpuaccept')}\n"


def test_version_in_a_subprocess_as_an_operator_would_type_it() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuaccept.cli", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("gpuaccept ")


PARSERS = {
    "probe": probe_parser,
    "probe fabric": fabric_parser,
    "operator": operator_parser,
    "cleanup": cleanup_parser,
}


def _shown(default: object) -> bool:
    return default not in (None, False, "", [], {}, argparse.SUPPRESS)


@pytest.mark.parametrize("name", PARSERS)
def test_help_shows_every_options_default(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # no line breaks inside a default (at its hyphens)
    parser = PARSERS[name]()
    assert parser.formatter_class is DefaultsHelpFormatter
    text = " ".join(parser.format_help().split())
    missing = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or not action.option_strings:
            continue
        if not _shown(action.default):
            continue
        own = (action.help or "").lower()
        if "default" in own:  # the help names the default in its own words
            continue
        if f"(default: {action.default})" not in text:
            missing.append(action.option_strings[0])
    assert missing == []
