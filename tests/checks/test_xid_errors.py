"""xid_errors: its judge table (a row per branch,
with the policy section that decides it) and
its judge's other tests."""

import pytest
from judge_table import Case, assert_row, ids

from gpuaccept.checks import xid_errors
from gpuaccept.checks.xid_errors import SPEC as XID
from gpuaccept.checks.xid_errors import XidErrorsObserved, XidErrorsPolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

SUMMARY = HardwareSummary(gpu_count=8)


def xid(**fields: object) -> XidErrorsObserved:
    return XidErrorsObserved.model_validate({"watched": "0-7", "listenedS": 80.0, **fields})


@pytest.mark.parametrize(
    ("observed", "status", "message"),
    [
        (xid(), CheckStatus.PASS, "no critical Xid on GPUs 0-7 in 80 s under load"),
        (
            xid(
                events=[{"gpu": 5, "xid": 79, "atS": 41.5, "during": "nccl_allreduce"}],
                xids={"5": [79]},
            ),
            CheckStatus.FAIL,
            "GPU 5: Xid 79 (GPU fallen off the bus: reboot the node; reseat or replace if it "
            "recurs) during nccl_allreduce",
        ),
        (
            xid(xids={"2": [94]}),
            CheckStatus.FAIL,
            "GPU 2: Xid 94 (contained ECC error: reset the GPU when convenient)",
        ),
        (
            xid(xids={"2": [92]}),
            CheckStatus.WARN,
            "GPU 2: Xid 92 (high single-bit ECC rate: watch it; no action unless it persists)",
        ),
        (
            xid(xids={"0-1": [13, 43]}),
            CheckStatus.PASS,
            "no critical Xid on GPUs 0-7 in 80 s under load; not judged: Xid 13, 43",
        ),
        (
            xid(recoveryAction={"gpu_reset": "3"}),
            CheckStatus.FAIL,
            "GPU 3: recovery action gpu_reset",
        ),
        (
            xid(recoveryAction={"recover_imex_domain": "0-7"}),
            CheckStatus.WARN,
            "GPUs 0-7: recovery action recover_imex_domain",
        ),
        (
            xid(xids={"-1": [48]}),
            CheckStatus.FAIL,
            "an unknown GPU: Xid 48 (double-bit ECC error: reset the GPU; replace it if it recurs)",
        ),
        (
            xid(
                notRead={
                    "recoveryAction": "GPUs 0-7: driver 550.54.15: no recovery action "
                    "field before R570"
                }
            ),
            CheckStatus.PASS,
            "no critical Xid on GPUs 0-7 in 80 s under load; recoveryAction not read: GPUs 0-7: "
            "driver 550.54.15: no recovery action field before R570",
        ),
    ],
)
def test_xid_judge(observed: XidErrorsObserved, status: CheckStatus, message: str) -> None:
    judgement = xid_errors.judge(observed, XidErrorsPolicy(), SUMMARY)
    assert (judgement.status, judgement.message) == (status, message)
    condensed = xid_errors.condense(observed)
    assert condensed.events is None
    assert xid_errors.judge(condensed, XidErrorsPolicy(), SUMMARY).status is status


def test_xid_policy_moves_a_code_between_lists() -> None:
    observed = xid(xids={"4": [13]})
    policy = XidErrorsPolicy(fail_on=[13], warn_on=[])
    assert xid_errors.judge(observed, policy, SUMMARY).status is CheckStatus.FAIL
    relaxed = XidErrorsPolicy(fail_on=[], warn_on=[92])
    assert xid_errors.judge(xid(xids={"5": [79]}), relaxed, SUMMARY).status is CheckStatus.PASS


def test_xid_malformed_gpu_set_is_an_error_not_a_pass() -> None:
    with pytest.raises(ValueError, match="range"):
        xid_errors.judge(xid(xids={"GPU five": [13]}), XidErrorsPolicy(), SUMMARY)


CASES = [
    Case("quiet", xid(), CheckStatus.PASS, "no critical Xid on GPUs 0-7", summary=SUMMARY),
    Case("fallen-off-the-bus", xid(xids={"5": [79]}), CheckStatus.FAIL, "GPU 5: Xid 79",
         summary=SUMMARY),
    Case("high-single-bit-rate-warns", xid(xids={"2": [92]}), CheckStatus.WARN,
         "GPU 2: Xid 92", summary=SUMMARY),
    Case("recovery-action", xid(recoveryAction={"gpu_reset": "3"}), CheckStatus.FAIL,
         "GPU 3: recovery action gpu_reset", summary=SUMMARY),
    Case("policy-fails-on-13", xid(xids={"4": [13]}), CheckStatus.FAIL,
         section={"failOn": [13], "warnOn": []}, summary=SUMMARY),
    Case("policy-ignores-79", xid(xids={"5": [79]}), CheckStatus.PASS,
         section={"failOn": [], "warnOn": [92]}, summary=SUMMARY),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(XID, case)
