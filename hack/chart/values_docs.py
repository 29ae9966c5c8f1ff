"""Writes the values table of charts/gpuaccept/README.md from the comments of
charts/gpuaccept/values.yaml (in the manner of helm-docs): the comment lines right
above a key are its description.

- A key whose value is a non-empty map and that has a comment of its own is one
  row with its whole default, or, when keys inside it have comments too, a row
  without a default before theirs; a map without a comment is walked into.
- Every other key (a scalar, a list, an empty map) is one row.
- Section lines (``# --- ... ---``) and a comment followed by a blank line
  describe no key.

The table sits between ``<!-- BEGIN GENERATED: values -->`` and
``<!-- END GENERATED: values -->``.

    python3 hack/chart/values_docs.py          rewrite the table
    python3 hack/chart/values_docs.py --check  exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpuaccept"
BEGIN = "<!-- BEGIN GENERATED: values -->"
END = "<!-- END GENERATED: values -->"

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+|\"[^\"]+\"):(?:\s|$)")
_COMMENT = re.compile(r"^ *# ?(?P<text>.*)$")


@dataclass(frozen=True)
class ValueDoc:
    path: str
    default: Any
    description: str


def _lookup(values: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        values = values[part]
    return values


def _keys(text: str) -> list[tuple[tuple[str, ...], str]]:
    """(path, comment right above it) of every map key of a values.yaml, in file order."""
    keys: list[tuple[tuple[str, ...], str]] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing maps
    comments: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            comments = []
        elif comment := _COMMENT.match(line):
            text_ = comment["text"].strip()
            comments = [] if text_.startswith("---") else [*comments, text_]
        elif key := _KEY.match(line):
            indent = len(key["indent"])
            while stack and stack[-1][0] >= indent:
                stack.pop()
            path = (*(k for _, k in stack), key["key"].strip('"'))
            stack.append((indent, path[-1]))
            keys.append((path, " ".join(comments)))
            comments = []
        else:  # a list item or a continuation line
            comments = []
    return keys


def value_docs(text: str) -> list[ValueDoc]:
    """One row per documented key of a values.yaml, in file order."""
    values = yaml.safe_load(text)
    keys = _keys(text)
    commented = {path for path, comment in keys if comment}
    rows: list[ValueDoc] = []
    whole: list[tuple[str, ...]] = []  # maps documented as one row (not walked into)
    for path, comment in keys:
        if any(path[: len(w)] == w for w in whole):
            continue
        default = _lookup(values, path)
        if isinstance(default, dict) and default:
            if not comment:
                continue  # walked into
            if any(p[: len(path)] == path and p != path for p in commented):
                rows.append(ValueDoc(".".join(path), None, comment))  # a section: walked into
                continue
            whole.append(path)
        rows.append(ValueDoc(".".join(path), default, comment))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(rows: list[ValueDoc]) -> str:
    lines = ["| Key | Default | Description |", "| --- | --- | --- |"]
    for row in rows:
        default = "" if row.default is None else f"`{_cell(json.dumps(row.default))}`"
        lines.append(f"| `{row.path}` | {default} | {_cell(row.description)} |")
    return "\n".join(lines)


def rendered(readme: str, values_text: str) -> str:
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    generated = (
        "\n<!-- hack/chart/values_docs.py from values.yaml's comments; "
        "make chart-docs rewrites it -->\n" + table(value_docs(values_text)) + "\n"
    )
    return head + BEGIN + generated + END + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when stale")
    parser.add_argument("--chart", type=Path, default=CHART)
    args = parser.parse_args(argv)
    readme_path = args.chart / "README.md"
    current = readme_path.read_text()
    wanted = rendered(current, (args.chart / "values.yaml").read_text())
    if args.check:
        if current != wanted:
            print(f"{readme_path}: the values table is stale; run make chart-docs")
            return 1
        return 0
    if current != wanted:
        readme_path.write_text(wanted)
        print(f"wrote {readme_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
