"""Generate the docs' check tables from the check registry.

A doc marks each generated section with a pair of comments::

    <!-- BEGIN GENERATED: checks-table (make docs) -->
    ...
    <!-- END GENERATED: checks-table -->

and ``gpuaccept docs`` (``make docs``) rewrites what lies between them from
:data:`gpuaccept.checks.registry.CHECKS`: the checks with their reasons, their
policy fields with defaults and descriptions (from each policy section model),
and the shape of their ``observed`` value (from each ``Observed`` model); and
the list of shipped hardware profiles from their own ``expect`` fields. A
new check appears in every table without editing a doc by hand;
``tests/contracts/test_docs_drift.py`` fails while the docs are stale.

``gpuaccept docs [--root DIR] [--check]`` rewrites the docs under DIR (default:
the current directory), or with ``--check`` only reports the stale ones (exit 1).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from gpuaccept.checks.budget import BUDGET_GPUS, SUITE_LIMIT_S, suite_budget, suite_seconds
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS
from gpuaccept.checks.spec import AnyCheckSpec
from gpuaccept.contracts.policy_fields import CheckSwitch

DOCS = (
    "docs/policy.md",
    "docs/probe.md",
    "docs/report-format.md",
    "docs/profile-format.md",
    "docs/runbook.md",
)
PROFILE_DIRS = ("profiles", "profiles/faults", "profiles/inservice")
DEFAULT_POLICY = "policies/default-h100-h200.yaml"

_SECTION = re.compile(
    r"(?P<begin><!-- BEGIN GENERATED: (?P<name>[a-z-]+)[^>]*-->\n)"
    r"(?P<body>.*?)"
    r"(?P<end><!-- END GENERATED: (?P=name) -->)",
    re.DOTALL,
)


class UnknownSectionError(ValueError):
    """A doc marks a generated section this module does not know."""


def _cell(text: str) -> str:
    """Table-cell text: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _wire_name(name: str, field: FieldInfo) -> str:
    return field.alias or name


def section_name(check: AnyCheckSpec) -> str:
    """The check's ``ProbePolicy`` section as it travels (``pcie_link`` → ``pcieLink``):
    the contract models' camelCase, from the check's name alone."""
    return to_camel(check.name)


def _json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    return value


def format_default(field: FieldInfo) -> str:
    """A policy field's default as a doc shows it (``unset`` for ``None``)."""
    default = field.get_default(call_default_factory=True)
    if default is None:
        return "unset"
    return f"`{json.dumps(_json(default), separators=(', ', ': '))}`"


def _own_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """The model's fields without the ``enabled``/``required`` switches every check has."""
    common = CheckSwitch.model_fields
    return {n: f for n, f in model.model_fields.items() if n not in common}


def checks_table(checks: Sequence[AnyCheckSpec] = CHECKS) -> str:
    """policy.md: one row per check, in the order the probe runs them."""
    rows = [
        "| check | policy section | fails with | passes when (default policy) |",
        "|-------|----------------|------------|------------------------------|",
    ]
    for check in checks:
        rows.append(
            f"| `{check.name}` ({_cell(check.title)}) | [`{section_name(check)}`]"
            f"(#{section_name(check).lower()}) | `{check.reason}` | {_cell(check.summary)} |"
        )
    return "\n".join(rows) + "\n"


def per_gpu_table(checks: Sequence[AnyCheckSpec] = CHECKS) -> str:
    """policy.md: whose each check's failures are, a GPU's or the node's, why and the
    source (each check's ``CheckSpec.ownership`` and ``failing_gpus``)."""
    rows = ["| check | whose | why | source |", "|-------|-------|-----|--------|"]
    for check in checks:
        whose = "GPU" if check.fencible else "node"
        why, source = _cell(check.ownership.why), _cell(check.ownership.source)
        rows.append(f"| `{check.name}` | {whose} | {why} | {source} |")
    return "\n".join(rows) + "\n"


def runbook_reasons(checks: Sequence[AnyCheckSpec] = CHECKS) -> str:
    """runbook.md: each check's reasons, what they mean and the usual fix
    (from each check's ``RunbookEntry``)."""
    rows = ["| reason | meaning | usual fix |", "|---|---|---|"]
    for check in checks:
        entry = check.runbook
        rows.append(f"| `{check.reason}` | {_cell(entry.meaning)} | {_cell(entry.fix)} |")
        if entry.warning_meaning is not None:
            fix = _cell(entry.warning_fix or entry.fix)
            rows.append(f"| `{check.warning_reason}` | {_cell(entry.warning_meaning)} | {fix} |")
    return "\n".join(rows) + "\n"


def policy_fields(checks: Sequence[AnyCheckSpec] = CHECKS) -> str:
    """policy.md: every check's own policy fields, with defaults and descriptions."""
    rows = [
        "| field | default | description |",
        "|-------|---------|-------------|",
    ]
    for check in checks:
        for name, field in _own_fields(check.policy_model).items():
            path = f"{section_name(check)}.{_wire_name(name, field)}"
            description = _cell(field.description or "")
            rows.append(f"| `{path}` | {format_default(field)} | {description} |")
    return "\n".join(rows) + "\n"


def probe_checks(checks: Sequence[AnyCheckSpec] = CHECKS) -> str:
    """probe.md: the checks in the order they run."""
    rows = [
        "| check | title | passes when (default policy) | reason when it fails |",
        "|-------|-------|------------------------------|----------------------|",
    ]
    for check in checks:
        rows.append(
            f"| `{check.name}` | {_cell(check.title)} | {_cell(check.summary)} | `{check.reason}` |"
        )
    return "\n".join(rows) + "\n"


def schema_type(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    """A short type name for a JSON-schema node: ``int``, ``[float]``, ``{str: int}``."""
    if "$ref" in schema:
        return schema_type(defs[str(schema["$ref"]).rsplit("/", 1)[-1]], defs)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        return " \\| ".join(schema_type(o, defs) for o in options)
    kind = schema.get("type")
    if kind == "array":
        if "prefixItems" in schema:
            return "[" + ", ".join(schema_type(i, defs) for i in schema["prefixItems"]) + "]"
        return f"[{schema_type(schema.get('items', {}), defs)}, …]"
    if kind == "object":
        values = schema.get("additionalProperties")
        value = schema_type(values, defs) if isinstance(values, Mapping) else "any"
        return f"{{str: {value}}}"
    names = {"integer": "int", "number": "float", "string": "str", "boolean": "bool"}
    if isinstance(kind, str):
        return names.get(kind, kind)
    return "any"


def observed_fields(check: AnyCheckSpec) -> str:
    """``"visible": int, "advertised"?: int`` for one check's ``Observed`` model."""
    schema = check.observed_model.model_json_schema(by_alias=True, mode="validation")
    defs = schema.get("$defs", {})
    required = set(schema.get("required", []))
    parts = []
    for name, sub in schema.get("properties", {}).items():
        optional = "" if name in required else "?"
        parts.append(f"`{name}`{optional}: {schema_type(sub, defs)}")
    return ", ".join(parts)


def observed_shapes(checks: Sequence[AnyCheckSpec] = CHECKS) -> str:
    """report-format.md: the fields of every check's ``observed`` value."""
    rows = [
        "| check | `observed` fields (`?`: may be absent) |",
        "|-------|----------------------------------------|",
    ]
    for check in checks:
        rows.append(f"| `{check.name}` | {observed_fields(check)} |")
    return "\n".join(rows) + "\n"


def _expected_verdict(expect: Mapping[str, Any] | None) -> str:
    if not expect:
        return "not stated"
    if expect.get("accepted"):
        return "accepted"
    return f"quarantined: `{expect.get('check')}` fails (`{expect.get('reason')}`)"


def shipped_profiles(root: Path) -> str:
    """profile-format.md: the shipped profiles, from their ``description`` and
    ``expect`` fields (the profiles are the data; the doc only lists them)."""
    rows = [
        "| profile | expected verdict (with `policies/default-h100-h200.yaml`) | description |",
        "|---------|----------------------------------------------------------|-------------|",
    ]
    for directory in PROFILE_DIRS:
        for path in sorted((root / directory).glob("*.yaml")):
            profile = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            name = path.relative_to(root).as_posix()
            verdict = _expected_verdict(profile.get("expect"))
            description = _cell(str(profile.get("description", "")))
            rows.append(f"| `{name}` | {verdict} | {description} |")
    return "\n".join(rows) + "\n"


def probe_budget(root: Path) -> str:
    """probe.md: the time budget of the default policy's suite, phase by phase
    (:func:`gpuaccept.checks.budget.suite_budget`, the figures the budget test sums)."""
    policy = ProbePolicy.model_validate(
        yaml.safe_load((root / DEFAULT_POLICY).read_text(encoding="utf-8"))
    )
    phases = suite_budget(policy)
    rows = [
        "| phase | check | budget | how derived | source |",
        "|-------|-------|-------:|-------------|--------|",
    ]
    for p in phases:
        check = f"`{p.check}`"
        rows.append(
            f"| {_cell(p.phase)} | {check} | {p.seconds:.1f} s | {_cell(p.derivation)} "
            f"| {_cell(p.source)} |"
        )
    total = suite_seconds(phases)
    rows.append(
        f"| **whole suite** | | **{total:.1f} s** | the sum; limit {SUITE_LIMIT_S:g} s "
        f"(`{DEFAULT_POLICY}`, {BUDGET_GPUS} GPUs) | |"
    )
    return "\n".join(rows) + "\n"


Generator = Callable[[Path], str]  # the repository root → the section's text


def check_sections(checks: Sequence[AnyCheckSpec] = CHECKS) -> str:
    """docs/policy.md's section of each check, from its ``CheckSpec.docs``."""
    return "\n".join(
        f"### `{section_name(check)}`\n\n{check.docs.strip(chr(10))}\n" for check in checks
    )


GENERATORS: dict[str, Generator] = {
    "checks-table": lambda _root: checks_table(),
    "per-gpu-table": lambda _root: per_gpu_table(),
    "policy-fields": lambda _root: policy_fields(),
    "probe-checks": lambda _root: probe_checks(),
    "observed-shapes": lambda _root: observed_shapes(),
    "shipped-profiles": shipped_profiles,
    "runbook-reasons": lambda _root: runbook_reasons(),
    "probe-budget": probe_budget,
    "check-sections": lambda _root: check_sections(),
}


def regenerate(
    text: str, root: Path = Path(), generators: Mapping[str, Generator] = GENERATORS
) -> str:
    """``text`` with every marked section rewritten (raises on an unknown section)."""

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in generators:
            raise UnknownSectionError(f"unknown generated section {name!r}")
        return f"{match['begin']}{generators[name](root)}{match['end']}"

    return _SECTION.sub(replace, text)


def stale_docs(root: Path, docs: Sequence[str] = DOCS) -> dict[str, str]:
    """Doc path → its regenerated text, for each doc whose generated sections are stale."""
    out: dict[str, str] = {}
    for doc in docs:
        text = (root / doc).read_text(encoding="utf-8")
        fresh = regenerate(text, root)
        if fresh != text:
            out[doc] = fresh
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpuaccept docs",
        description="Rewrite the docs' generated sections from the check registry.",
    )
    parser.add_argument("--root", type=Path, default=Path(), help="the repository root")
    parser.add_argument(
        "--check", action="store_true", help="only report stale docs (exit 1 if any)"
    )
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    stale = stale_docs(args.root)
    for doc, text in stale.items():
        if args.check:
            sys.stderr.write(f"stale: {doc} (run `make docs`)\n")
        else:
            (args.root / doc).write_text(text, encoding="utf-8")
            sys.stderr.write(f"wrote {doc}\n")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
