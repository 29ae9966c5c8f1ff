"""throttle_reasons: its judge table (a row per branch,
with the policy section that decides it) and
its judge's other tests."""

import pytest
from judge_table import (
    Case,
    assert_row,
    condense_json,
    ids,
    judge_json,
)
from pydantic import JsonValue

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.throttle_reasons import SPEC as THROTTLE
from gpuaccept.checks.throttle_reasons import ThrottleReason, ThrottleReasonsPolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=2)


def policy(**sections: dict[str, object]) -> ProbePolicy:
    return ProbePolicy.model_validate(sections)


def judged(observed: JsonValue, policy: ThrottleReasonsPolicy | None = None) -> tuple[str, str]:
    j = THROTTLE.judge(THROTTLE.parse(observed), policy or ThrottleReasonsPolicy(), SUMMARY)
    return j.status.value, j.message


def test_throttle_reasons_policy_decides() -> None:
    observed: JsonValue = {"samples": 10, "reasons": {"sw_power_cap": [0, 1], "sync_boost": [2]}}
    default = judge_json(THROTTLE, observed, ProbePolicy(), SUMMARY)
    assert default.status is CheckStatus.PASS  # a GPU at its power limit: not judged
    assert "not judged: sw_power_cap, sync_boost" in default.message
    warned = policy(throttleReasons={"warnOn": [ThrottleReason.SW_POWER_CAP.value]})
    warning = judge_json(THROTTLE, observed, warned, SUMMARY)
    assert (warning.status, warning.message) == (CheckStatus.WARN, "sw_power_cap on GPUs 0, 1")
    raised = policy(throttleReasons={"failOn": [ThrottleReason.SW_POWER_CAP.value]})
    assert judge_json(THROTTLE, observed, raised, SUMMARY).status is CheckStatus.FAIL
    quiet = policy(throttleReasons={"warnOn": []})
    passed = judge_json(THROTTLE, observed, quiet, SUMMARY)
    assert passed.status is CheckStatus.PASS
    assert "not judged: sw_power_cap, sync_boost" in passed.message
    condensed = condense_json(THROTTLE, observed)
    assert condensed == {"samples": 10, "reasons": {"sw_power_cap": 2, "sync_boost": 1}}
    assert judge_json(THROTTLE, condensed, warned, SUMMARY).message == "sw_power_cap on 2 GPUs"


@pytest.mark.parametrize(
    ("fractions", "status"),
    [
        ({"hw_slowdown": [0.0, 0.1]}, "pass"),  # at the limit: not more than 10 %
        ({"hw_slowdown": [0.0, 0.11]}, "fail"),
        ({"hw_slowdown": [0.02, 0.0]}, "pass"),  # a P-state change: one sample or two
        ({"hw_thermal_slowdown": [0.9, 0.9]}, "fail"),
        ({"sw_power_cap": [1.0, 1.0]}, "pass"),  # at the power limit under a GEMM: normal
        ({"sw_thermal_slowdown": [0.5, 0.0]}, "warn"),
        ({"sw_thermal_slowdown": [0.05, 0.0]}, "pass"),
        ({"sync_boost": [1.0, 1.0]}, "pass"),  # not judged
    ],
)
def test_a_reason_counts_only_when_sustained(
    fractions: dict[str, list[float]], status: str
) -> None:
    observed: JsonValue = {"samples": 120, "warmupSamples": 20, "activeFraction": fractions}
    assert judged(observed)[0] == status


def test_the_fraction_is_a_policy_threshold_and_condensing_keeps_the_verdict() -> None:
    observed: JsonValue = {"samples": 120, "activeFraction": {"hw_slowdown": [0.0, 0.3, 0.05]}}
    assert judged(observed) == ("fail", "hw_slowdown 30% of samples on GPU 1")
    assert judged(observed, ThrottleReasonsPolicy(max_active_fraction=0.5))[0] == "pass"
    condensed = THROTTLE.condense(THROTTLE.parse(observed)).to_observed()
    assert condensed == {"samples": 120, "worst": {"hw_slowdown": [0.3, 1]}}
    assert judged(condensed) == ("fail", "hw_slowdown 30% of samples on GPU 1")
    assert judged(condensed, ThrottleReasonsPolicy(max_active_fraction=0.5))[0] == "pass"


def test_condensed_reports_of_earlier_probes_are_judged_the_same() -> None:
    """Before issue 13 the condensed form carried two maps instead of ``worst``."""
    earlier: JsonValue = {
        "samples": 120,
        "maxActiveFraction": {"hw_slowdown": 0.3},
        "worstGpu": {"hw_slowdown": 1},
    }
    assert judged(earlier) == ("fail", "hw_slowdown 30% of samples on GPU 1")


def test_a_lost_gpu_fails_by_name() -> None:
    observed: JsonValue = {"samples": 10, "activeFraction": {}, "failedGpus": {"3": "load: hung"}}
    assert judged(observed) == ("fail", "GPU 3 failed: load: hung")


def sampled(fractions: dict[str, list[float]]) -> JsonValue:
    return {"samples": 120, "warmupSamples": 20, "activeFraction": dict(fractions)}


CASES = [
    Case("none-active", sampled({}), CheckStatus.PASS, summary=SUMMARY),
    Case("hw-slowdown-at-the-limit", sampled({"hw_slowdown": [0.0, 0.1]}), CheckStatus.PASS,
         summary=SUMMARY),
    Case("hw-slowdown-sustained", sampled({"hw_slowdown": [0.0, 0.11]}), CheckStatus.FAIL,
         "hw_slowdown", summary=SUMMARY),
    Case("sw-power-cap-not-judged", sampled({"sw_power_cap": [1.0, 1.0]}), CheckStatus.PASS,
         "not judged: sw_power_cap", summary=SUMMARY),
    Case("policy-warns-on-sw-power-cap", sampled({"sw_power_cap": [0.5, 0.0]}),
         CheckStatus.WARN, "sw_power_cap", section={"warnOn": ["sw_power_cap"]},
         summary=SUMMARY),
    Case("sw-thermal-warns", sampled({"sw_thermal_slowdown": [0.5, 0.0]}), CheckStatus.WARN,
         "sw_thermal_slowdown", summary=SUMMARY),
    Case("sync-boost-not-judged", sampled({"sync_boost": [1.0, 1.0]}), CheckStatus.PASS,
         summary=SUMMARY),
    Case("policy-fails-on-sw-power-cap", sampled({"sw_power_cap": [0.5, 0.0]}),
         CheckStatus.FAIL, section={"failOn": ["sw_power_cap"]}, summary=SUMMARY),
    Case("policy-raises-the-fraction", sampled({"hw_slowdown": [0.0, 0.3]}), CheckStatus.PASS,
         section={"maxActiveFraction": 0.5}, summary=SUMMARY),
    Case("earlier-probe-reasons", {"samples": 10, "reasons": {"sw_thermal_slowdown": [0, 1]}},
         CheckStatus.WARN, "sw_thermal_slowdown on GPUs 0, 1", summary=SUMMARY),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(THROTTLE, case)
