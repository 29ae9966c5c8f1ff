"""The report-size guarantee: with EVERY registered check failing, on 8 and on 16
GPUs, the compact report fits the 4096-byte termination message, keeps every
check's verdict, and stays re-judgeable where it can.

The checks come from the registry, so a check added later is covered: its
fault must be added to ``tests/fixtures/profiles/h200-16gpu-everything-wrong.yaml``
(the test names the check that does not fail there).
"""

import json

import pytest
from probe_scenarios import WORST_16, default_policy, probe

from gpuaccept.checks.registry import CHECKS, get_check
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.api import TERMINATION_MESSAGE_MAX_BYTES
from gpuaccept.contracts.report import CheckStatus, ProbeReport, decode_termination_message
from gpuaccept.probe.compact import fit_report, termination_message
from gpuaccept.probe.hardware.profile import HardwareProfile, load_profile

LONG_NODE = "gpu-node-" + "x" * 244  # 253 characters, the longest node name
# The brief's aim for a condensed observed value with 16 GPUs all failing is 250 bytes;
# the ceiling for every registered check (throttle_reasons needs ~375 today).
CONDENSED_CEILING = 400
CONDENSED_AIM = 250
AIMED = ("xid_errors", "memory_health")


def worst_case(gpus: int) -> HardwareProfile:
    """The everything-wrong fixture cut to ``gpus`` GPUs."""
    full = load_profile(WORST_16)
    kept = {i: o for i, o in full.gpus.overrides.items() if i < gpus}
    return full.model_copy(
        update={"gpus": full.gpus.model_copy(update={"count": gpus, "overrides": kept})}
    )


def _report(gpus: int) -> ProbeReport:
    return probe(worst_case(gpus), node_name=LONG_NODE)


@pytest.mark.parametrize("gpus", [8, 16])
def test_every_registered_check_fails_in_the_worst_case(gpus: int) -> None:
    report = _report(gpus)
    assert report.summary.gpu_count == gpus
    not_failing = {
        r.check: f"{r.status}: {r.message}"
        for r in report.results
        if r.status is not CheckStatus.FAIL
    }
    missing = {c.name for c in CHECKS} - {r.check for r in report.results}
    assert not missing, f"not in the report: {missing}"
    assert not not_failing, f"add these checks' faults to {WORST_16.name}: {not_failing}"


@pytest.mark.parametrize("gpus", [8, 16])
def test_worst_case_fits_and_keeps_every_verdict(gpus: int) -> None:
    report = _report(gpus)
    message = termination_message(report)
    assert len(message.encode()) <= TERMINATION_MESSAGE_MAX_BYTES
    decoded = decode_termination_message(message)
    assert [r.check for r in decoded.results] == [c.name for c in CHECKS]
    policy = default_policy()
    full = [(r.check, r.reason) for r in evaluate(report, policy).reasons]
    compact = [(r.check, r.reason) for r in evaluate(decoded, policy).reasons]
    assert compact == full
    assert {check for check, _reason in full} == {c.name for c in CHECKS}


# On 16 GPUs with every check failing the largest observed values may be dropped
# (their results keep the probe's own `fail` and reason, which the test above shows).
@pytest.mark.parametrize("gpus", [8])
def test_worst_case_stays_rejudgeable(gpus: int) -> None:
    decoded = decode_termination_message(termination_message(_report(gpus)))
    assert [r.check for r in decoded.results if r.observed is None] == []


def test_condensed_observed_values_stay_small() -> None:
    report = _report(16)
    sizes = {}
    for result in report.results:
        check = get_check(result.check)
        assert check is not None
        assert result.observed is not None, result.check
        condensed = check.condense(check.parse(result.observed)).to_observed()
        sizes[result.check] = len(json.dumps(condensed, separators=(",", ":")))
    assert {c: n for c, n in sizes.items() if n > CONDENSED_CEILING} == {}
    assert {c: sizes[c] for c in AIMED if sizes[c] > CONDENSED_AIM} == {}


def test_fitting_drops_messages_before_observed_values() -> None:
    """When condensed results with short messages do not fit, the messages of
    re-judgeable results go first (re-judging writes them again), not the
    observed values."""
    report = _report(8)
    silent = report.model_copy(
        update={
            "results": [
                r.model_copy(
                    update={
                        "observed": condensed(r.check, r.observed),
                        "expected": None,
                        "message": "",
                    }
                )
                for r in report.results
            ]
        }
    )
    limit = silent.compact_size()  # condensed and silent fits exactly; with messages it does not
    assert any(r.message for r in report.results)  # so with any message it does not fit
    fitted = fit_report(report, limit=limit)
    assert fitted.compact_size() <= limit
    assert all(r.observed is not None for r in fitted.results)
    assert all(r.message == "" for r in fitted.results)


def condensed(name: str, observed: object) -> object:
    check = get_check(name)
    assert check is not None
    return check.condense(check.parse(observed)).to_observed()
