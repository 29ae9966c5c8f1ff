"""Trap cases for the report-trust rules: what the real probe writes on every shipped
profile (healthy, faulty, the fixtures: a lost GPU, a hung one, 16 GPUs with every
check failing, 64 GPUs) decodes strictly and is consistent with its node, in the full
form and as the termination message carries it. A rule that would refuse one of these
would hold a healthy node out, or turn a fault's quarantine into a probe error."""

from pathlib import Path

import pytest
from probe_scenarios import FIXTURES, PROFILES, default_policy, probe

from gpuaccept.checks.consistency import report_inconsistency
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.report import decode_termination_message
from gpuaccept.probe.compact import termination_message

SHIPPED = sorted(
    [
        *PROFILES.glob("*.yaml"),
        *(PROFILES / "faults").glob("*.yaml"),
        *(PROFILES / "fabric").glob("*.yaml"),
        *(FIXTURES / "profiles").glob("*.yaml"),
    ]
)


@pytest.mark.parametrize("profile", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_probes_report_is_strict_and_consistent_with_its_node(profile: Path) -> None:
    report = probe(profile)
    assert report_inconsistency(report) is None
    decoded = decode_termination_message(termination_message(report))
    assert report_inconsistency(decoded) is None
    assert decoded.summary == report.summary


@pytest.mark.parametrize("profile", sorted(PROFILES.glob("*.yaml")), ids=lambda p: p.stem)
def test_a_healthy_nodes_termination_message_still_accepts_it(profile: Path) -> None:
    """A passing result without its observed value is not accepted (nothing to judge
    again; only a one-GPU node's "not applicable" stands), so no healthy shipped
    profile may lose one to compaction, and each is accepted as the operator reads it."""
    decoded = decode_termination_message(termination_message(probe(profile)))
    verdict = evaluate(decoded, default_policy())
    assert verdict.accepted, verdict.message
