"""Every shipped profile produces the verdict its ``expect`` field states."""

from pathlib import Path

import pytest
from probe_scenarios import DEFAULT_POLICY_FILE, REPO, probe

from gpuaccept.checks.verdict import evaluate
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.inputs import load_policy

PROFILES = sorted((REPO / "profiles").glob("**/*.yaml"))
FAULT_PROFILES = sorted((REPO / "profiles" / "faults").glob("*.yaml"))


def test_the_shipped_profiles_are_found() -> None:
    """The tests below iterate these lists; an empty one would check nothing."""
    assert FAULT_PROFILES
    assert len(PROFILES) > len(FAULT_PROFILES)


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_profile_produces_its_expected_verdict(path: Path) -> None:
    expect = load_profile(path).expect
    assert expect is not None, f"{path}: shipped profiles state their verdict (expect:)"
    policy = load_policy(DEFAULT_POLICY_FILE)
    verdict = evaluate(probe(path, policy), policy)
    assert verdict.accepted is expect.accepted, verdict.message
    if expect.warnings is not None:
        assert [w.check for w in verdict.warnings] == expect.warnings, verdict.message
    if not expect.accepted:
        assert (verdict.reasons[0].check, verdict.reasons[0].reason) == (
            expect.check,
            expect.reason,
        )


def test_fault_profiles_expect_a_failure() -> None:
    for path in FAULT_PROFILES:
        expect = load_profile(path).expect
        assert expect is not None
        assert not expect.accepted, path
