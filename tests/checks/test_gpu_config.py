"""gpu_config: its judge table (a row per branch,
with the policy section that decides it) and
its judge's other tests."""

import json
from typing import Any

import pytest
from judge_table import Case, assert_row, ids, status_and_message
from pydantic import JsonValue

from gpuaccept.checks.gpu_config import SPEC as GPU_CONFIG
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

H100 = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


judged = status_and_message  # H100 summary, the shipped policy


W700 = {"0-3": 700}


def config(**fields: Any) -> JsonValue:
    base: dict[str, Any] = {"gpus": 4, "powerLimitW": W700, "defaultPowerLimitW": W700}
    base.update(fields)
    return json.loads(json.dumps(base))


@pytest.mark.parametrize(
    ("observed", "status", "says"),
    [
        (config(), CheckStatus.PASS, "clocks under load not sampled"),
        (config(powerLimitW={"0-3": 500}), CheckStatus.FAIL, "power limit 500 W < default 700 W"),
        (config(powerLimitW={"0": 690, "1": 720, "2-3": 700}), CheckStatus.PASS, ""),
        (config(persistenceOff="1"), CheckStatus.FAIL, "persistence mode off on GPU 1"),
        (config(migEnabled="0"), CheckStatus.FAIL, "MIG enabled on GPU 0"),
        (config(migPending={"2": "enabled"}), CheckStatus.FAIL, "MIG enable pending"),
        (
            config(computeModes={"3": "exclusive_process"}),
            CheckStatus.FAIL,
            "compute mode exclusive_process on GPU 3",
        ),
        (
            config(loadSamples=120, appClocksFraction={"1": 1.0}, smClockFraction={"0-3": 0.9}),
            CheckStatus.FAIL,
            "applications_clocks_setting under load (clocks set or locked) on GPU 1",
        ),
        (
            config(loadSamples=120, smClockFraction={"0-1,3": 0.9, "2": 0.4}),
            CheckStatus.FAIL,
            "SM clock under load 40% of max < 50% on GPU 2",
        ),
        # a GPU held by a power or thermal reason: its clock is throttle_reasons' to judge
        (
            config(loadSamples=120, smClockFraction={"0-1,3": 0.9, "2": 0.4}, limited="2"),
            CheckStatus.PASS,
            "",
        ),
        (
            config(unsupported={"mig": "0-3"}, loadSamples=120, smClockFraction={"0-3": 1.0}),
            CheckStatus.PASS,
            "mig not supported on GPUs 0, 1, 2, 3",
        ),
    ],
)
def test_gpu_config_judge(observed: JsonValue, status: CheckStatus, says: str) -> None:
    got, message = judged(GPU_CONFIG, observed)
    assert got is status, message
    assert says in message


@pytest.mark.parametrize(
    ("section", "observed", "status"),
    [
        ({"migMode": "enabled"}, config(migEnabled="0-3"), CheckStatus.PASS),
        ({"migMode": "enabled"}, config(migEnabled="0-2"), CheckStatus.FAIL),
        ({"migMode": "any"}, config(migEnabled="0"), CheckStatus.PASS),
        ({"computeMode": "any"}, config(computeModes={"0": "prohibited"}), CheckStatus.PASS),
        ({"requirePersistence": False}, config(persistenceOff="0"), CheckStatus.PASS),
        ({"powerLimitTolerance": 0.3}, config(powerLimitW={"0-3": 500}), CheckStatus.PASS),
    ],
)
def test_gpu_config_follows_the_policy(
    section: dict[str, Any], observed: JsonValue, status: CheckStatus
) -> None:
    policy = ProbePolicy.model_validate({"gpuConfig": section})
    assert judged(GPU_CONFIG, observed, policy=policy)[0] is status


CASES = [
    Case("defaults", config(), CheckStatus.PASS, summary=H100, shipped=True),
    Case("power-capped", config(powerLimitW={"0-3": 500}), CheckStatus.FAIL,
         "power limit 500 W < default 700 W", summary=H100, shipped=True),
    Case("persistence-off", config(persistenceOff="1"), CheckStatus.FAIL,
         "persistence mode off on GPU 1", summary=H100, shipped=True),
    Case("mig-enabled", config(migEnabled="0"), CheckStatus.FAIL, "MIG enabled on GPU 0",
         summary=H100, shipped=True),
    Case("slow-sm-clock", config(loadSamples=120, smClockFraction={"0-1,3": 0.9, "2": 0.4}),
         CheckStatus.FAIL, "SM clock under load 40% of max < 50% on GPU 2", summary=H100,
         shipped=True),
    Case("policy-allows-persistence-off", config(persistenceOff="1"), CheckStatus.PASS,
         section={"requirePersistence": False}, summary=H100, shipped=True),
    # Off where nvidia-persistenced's socket is not reachable from the pod: NVML cannot
    # tell (a warning with the reason); Off with the socket reachable still fails
    Case("persistence-unknowable-without-socket",
         config(persistenceOff="1", persistencedSocket=False), CheckStatus.WARN,
         "nvidia-persistenced's socket is not reachable", summary=H100, shipped=True),
    Case("persistence-off-with-socket", config(persistenceOff="1", persistencedSocket=True),
         CheckStatus.FAIL, "persistence mode off on GPU 1", summary=H100, shipped=True),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(GPU_CONFIG, case)
