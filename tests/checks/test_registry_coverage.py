"""What the registry does not generate is checked against it, naming what is missing:
the default policy file has a section per registered check (its shipped thresholds,
each with its source), and no section of a check that is not registered."""

from pathlib import Path

import yaml

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS

REPO = Path(__file__).resolve().parents[2]
DEFAULT_POLICY = REPO / "policies" / "default-h100-h200.yaml"


def section_key(check: str) -> str:
    alias = ProbePolicy.model_fields[check].alias
    assert alias is not None, check
    return alias


def test_the_default_policy_has_a_section_for_every_registered_check() -> None:
    sections = yaml.safe_load(DEFAULT_POLICY.read_text(encoding="utf-8"))
    missing = [section_key(c.name) for c in CHECKS if section_key(c.name) not in sections]
    assert not missing, f"add these checks' sections to {DEFAULT_POLICY.name}: {missing}"
    unknown = set(sections) - {section_key(c.name) for c in CHECKS}
    assert not unknown, f"{DEFAULT_POLICY.name} has sections of no registered check: {unknown}"
