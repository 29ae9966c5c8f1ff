"""memory_health: its judge table (a row per branch,
with the policy section that decides it) and
its judge's other tests."""

import pytest
from judge_table import Case, assert_row, ids

from gpuaccept.checks import memory_health
from gpuaccept.checks.memory_health import SPEC as MEMORY
from gpuaccept.checks.memory_health import MemoryHealthObserved, MemoryHealthPolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

SUMMARY = HardwareSummary(gpu_count=8)


def mem(**fields: object) -> MemoryHealthObserved:
    return MemoryHealthObserved.model_validate({"gpus": 8, **fields})


@pytest.mark.parametrize(
    ("observed", "status", "message"),
    [
        (mem(), CheckStatus.PASS, "ECC and memory healthy on 8 GPUs"),
        (
            mem(remapPending="5", remappedRows={"5": [0, 2]}, aggregateUncorrected={"5": 2}),
            CheckStatus.FAIL,
            "GPU 5: row remap pending (0 correctable, 2 uncorrectable rows remapped; reset "
            "needed); GPU 5: 2 uncorrected ECC errors in the GPU's lifetime",
        ),
        (
            mem(remapFailed="3"),
            CheckStatus.FAIL,
            "GPU 3: row remapping failed (replace the GPU)",
        ),
        (
            mem(volatileUncorrected={"1": 2}),
            CheckStatus.FAIL,
            "GPU 1: 2 uncorrected ECC errors since the driver loaded",
        ),
        (mem(eccOff="4"), CheckStatus.FAIL, "GPU 4: ECC off"),
        (mem(eccPendingOff="0-7"), CheckStatus.FAIL, "GPUs 0-7: ECC off after the next reset"),
        (
            mem(retirePending="2", retiredPages={"2": 3}),
            CheckStatus.FAIL,
            "GPU 2: page retirement pending (reset needed)",
        ),
        (mem(retiredPages={"2": 61}), CheckStatus.FAIL, "GPU 2: 61 retired pages (replace)"),
        (mem(retiredPages={"2": 60}), CheckStatus.PASS, "ECC and memory healthy on 8 GPUs"),
        (
            mem(aggregateUncorrected={"2": 1}),
            CheckStatus.WARN,
            "GPU 2: 1 uncorrected ECC errors in the GPU's lifetime",
        ),
        (
            mem(eccUnsupported="0-7"),
            CheckStatus.FAIL,
            "GPUs 0-7: no ECC (NVML answers NotSupported for the ECC mode)",
        ),
        (
            mem(notRead={"eccMode": "GPU 6: NVML: Unknown Error"}),
            CheckStatus.ERROR,
            "eccMode not read: GPU 6: NVML: Unknown Error: ECC on is not shown",
        ),
        (
            mem(notRead={"volatileUncorrected": "GPUs 0-7: NotSupported"}),
            CheckStatus.WARN,
            "not judged: volatileUncorrected not read: GPUs 0-7: NotSupported",
        ),
        (
            mem(notRead={"remappedRows": "GPU 0: NotSupported, and no page retirement either"}),
            CheckStatus.WARN,
            "not judged: remappedRows not read: GPU 0: NotSupported, and no page retirement either",
        ),
    ],
)
def test_memory_judge(observed: MemoryHealthObserved, status: CheckStatus, message: str) -> None:
    judgement = memory_health.judge(observed, MemoryHealthPolicy(), SUMMARY)
    assert (judgement.status, judgement.message) == (status, message)
    condensed = memory_health.condense(observed)
    assert condensed.remapped_rows is None
    assert memory_health.judge(condensed, MemoryHealthPolicy(), SUMMARY).status is status


def test_memory_pending_gpus_with_the_same_rows_share_one_reason() -> None:
    observed = mem(remapPending="1-2,5", remappedRows={"1": [0, 1], "2": [0, 1], "5": [3, 0]})
    message = memory_health.judge(observed, MemoryHealthPolicy(), SUMMARY).message
    assert message == (
        "GPUs 1-2: row remap pending (0 correctable, 1 uncorrectable rows remapped; reset "
        "needed); GPU 5: row remap pending (3 correctable, 0 uncorrectable rows remapped; "
        "reset needed)"
    )


def test_memory_policy_relaxes_thresholds() -> None:
    observed = mem(volatileUncorrected={"1": 2}, eccOff="3", aggregateUncorrected={"1": 2})
    policy = MemoryHealthPolicy(
        require_ecc=False, max_volatile_uncorrected=2, warn_aggregate_uncorrected=5
    )
    assert memory_health.judge(observed, policy, SUMMARY).status is CheckStatus.PASS


def test_memory_nothing_read_is_never_a_pass() -> None:
    """Issue 38 C3: a GPU without ECC and without row remapping or page retirement
    (a TITAN V, a GeForce laptop GPU) answers NotSupported to every read: no
    evidence, so no pass, whatever the policy."""
    observed = mem(
        eccUnsupported="0-7",
        notRead={
            "volatileUncorrected": "GPUs 0-7: NotSupported",
            "aggregateUncorrected": "GPUs 0-7: NotSupported",
            "remappedRows": "GPUs 0-7: NotSupported, and no page retirement either",
        },
    )
    assert memory_health.judge(observed, MemoryHealthPolicy(), SUMMARY).status is CheckStatus.FAIL
    relaxed = memory_health.judge(observed, MemoryHealthPolicy(require_ecc=False), SUMMARY)
    assert relaxed.status is CheckStatus.WARN
    assert relaxed.message.startswith("not judged: GPUs 0-7: no ECC; volatileUncorrected")
    condensed = memory_health.condense(observed)
    assert memory_health.judge(condensed, MemoryHealthPolicy(), SUMMARY).status is CheckStatus.FAIL


def test_memory_unread_ecc_mode_is_only_noted_when_ecc_is_not_required() -> None:
    observed = mem(notRead={"eccMode": "GPU 6: NVML: Unknown Error"})
    judgement = memory_health.judge(observed, MemoryHealthPolicy(require_ecc=False), SUMMARY)
    assert judgement.status is CheckStatus.WARN


def test_memory_malformed_gpu_set_is_an_error_not_a_pass() -> None:
    with pytest.raises(ValueError, match="range"):
        memory_health.judge(mem(remapFailed="all"), MemoryHealthPolicy(), SUMMARY)


CASES = [
    Case("healthy", mem(), CheckStatus.PASS, "ECC and memory healthy on 8 GPUs", summary=SUMMARY),
    Case("ecc-off", mem(eccOff="4"), CheckStatus.FAIL, "GPU 4: ECC off", summary=SUMMARY),
    Case("volatile-uncorrected", mem(volatileUncorrected={"1": 2}), CheckStatus.FAIL,
         "GPU 1: 2 uncorrected ECC errors since the driver loaded", summary=SUMMARY),
    Case("lifetime-uncorrected-warns", mem(aggregateUncorrected={"2": 1}), CheckStatus.WARN,
         summary=SUMMARY),
    Case("retired-pages-at-the-limit", mem(retiredPages={"2": 60}), CheckStatus.PASS,
         summary=SUMMARY),
    Case("retired-pages-over", mem(retiredPages={"2": 61}), CheckStatus.FAIL,
         "GPU 2: 61 retired pages (replace)", summary=SUMMARY),
    Case("policy-allows-more-pages", mem(retiredPages={"2": 61}), CheckStatus.PASS,
         section={"maxRetiredPages": 100}, summary=SUMMARY),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(MEMORY, case)
