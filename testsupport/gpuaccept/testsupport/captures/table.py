"""docs/probe.md's table of the capture corpus, generated from tests/captures and the
replay (``make captures-table``; ``--check`` only reports a stale table, exit 1).

The section sits between ``<!-- BEGIN CAPTURES TABLE ... -->`` and
``<!-- END CAPTURES TABLE -->`` (not the ``BEGIN GENERATED`` markers of ``make docs``,
whose generator lives below the test support and cannot import it).
"""

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from gpuaccept.testsupport.captures import corpus, replay
from gpuaccept.testsupport.captures.differences import DIFFERENCES

DOC = "docs/probe.md"
_SECTION = re.compile(
    r"(?P<begin><!-- BEGIN CAPTURES TABLE[^>]*-->\n)(?P<body>.*?)"
    r"(?P<end><!-- END CAPTURES TABLE -->)",
    re.DOTALL,
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _expected(source: corpus.Source) -> str:
    if source.owner_state == "healthy":
        return "healthy: accepted"
    if source.owner_state == "fault":
        return f"{source.fault}: `{source.expect_check}` fails"
    return "unknown"


SHOWN = ("fail", "error", "warn")  # statuses named in the table; a warning is not a pass


def _got(outcome: replay.Outcome) -> str:
    shown = [n for n, r in outcome.results.items() if r.status.value in SHOWN]
    if not outcome.results:
        return "nothing replayable"
    verdict = "quarantined" if outcome.quarantined else "accepted"
    if outcome.verdict is None:
        verdict = "checks alone (no GPU in the capture)"
    named = ", ".join(f"`{n}` {outcome.results[n].status.value}" for n in shown)
    return f"{verdict}; {named}" if named else f"{verdict}; {len(outcome.results)} checks pass"


def _why(source: corpus.Source, outcome: replay.Outcome) -> str:
    difference = DIFFERENCES.get(source.folder.name)
    if difference is not None:
        return f"{difference[1]}: {difference[2]}"
    shown = [r for r in outcome.results.values() if r.status.value in SHOWN]
    if shown:
        return "; ".join(f"{r.check}: {r.message}" for r in shown)
    return f"{len(outcome.not_replayable)} checks not replayable (inputs absent or load)"


def render(root: Path) -> str:
    lines = [
        "| capture | platform | driver | owner said | expected | got | why |",
        "|---|---|---|---|---|---|---|",
    ]
    for folder in corpus.folders(root / "tests" / "captures"):
        source = corpus.read_source(folder)
        outcome = replay.replay(corpus.load(folder))
        cells = (
            f"[{folder.name}]({source.url})",
            source.platform,
            source.driver,
            source.owner_state,
            _expected(source),
            _got(outcome),
            _why(source, outcome),
        )
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def regenerate(text: str, root: Path) -> str:
    if not _SECTION.search(text):
        raise ValueError(f"{DOC} has no <!-- BEGIN CAPTURES TABLE --> section")
    table = render(root)
    return _SECTION.sub(lambda m: f"{m['begin']}{table}{m['end']}", text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=Path())
    parser.add_argument("--check", action="store_true", help="report a stale table, exit 1")
    args = parser.parse_args(argv)
    path = args.root / DOC
    text = path.read_text(encoding="utf-8")
    fresh = regenerate(text, args.root)
    if fresh == text:
        return 0
    if args.check:
        print(f"{DOC}: the capture table is stale: run `make captures-table`", file=sys.stderr)
        return 1
    path.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
