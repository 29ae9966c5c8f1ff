"""``--help`` that shows every option's default: one formatter for every
``gpuaccept`` command (probe, probe fabric, operator, cleanup, the kubectl plugin)."""

import argparse
import copy

SHOWN_LATER = ("default", "%(default)")


def _worth_showing(default: object) -> bool:
    """A default a reader learns something from: not unset, off, or empty."""
    if default is None or default is argparse.SUPPRESS or default is False:
        return False
    return default not in ("", [], {}, ())


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help, also to an option without help,
    unless the help already names its default."""

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and action.option_strings and _worth_showing(action.default):
            action = copy.copy(action)
            action.help = "(default: %(default)s)"
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            not action.option_strings
            or not _worth_showing(action.default)
            or any(word in text.lower() for word in SHOWN_LATER)
        ):
            return text
        default = str(action.default).replace("%", "%%")
        return f"{text.strip()} (default: {default})".strip()
