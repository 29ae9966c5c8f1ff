"""Repeat offenders and the remedy ladder: pure tables."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from world import T0

from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase, Reason
from gpuaccept.contracts.reverify import MAX_FENCE_HISTORY, GpuFence, RepeatOffenders
from gpuaccept.operator.core.ladder import Rung, reason_rung, remedy
from gpuaccept.operator.core.offenders import (
    fence_offence,
    repeat_fence,
    repeat_offence,
    with_fences,
    with_quarantine,
)

POLICY = RepeatOffenders()  # 3 within 7 days
NOW = T0 + timedelta(days=30)


def ago(days: float) -> datetime:
    return NOW - timedelta(days=days)


OFFENCES = {
    "two in a week: not yet": ([ago(1), ago(2)], None, False),
    "three in a week": ([ago(1), ago(2), ago(6)], None, True),
    "three, one older than the window": ([ago(1), ago(2), ago(8)], None, False),
    "three, released by a person after the second": (
        [ago(1), ago(2), ago(3)],
        ago(1.5),
        False,
    ),
    "three, released before all of them": (
        [ago(1), ago(2), ago(3)],
        ago(4),
        True,
    ),
}


@pytest.mark.parametrize(("quarantines", "released", "held"), OFFENCES.values(), ids=list(OFFENCES))
def test_repeat_offence(quarantines: list[datetime], released: datetime | None, held: bool) -> None:
    found = repeat_offence(quarantines, released, POLICY, NOW)
    assert (found is not None) is held
    if held:
        assert found
        assert "a person" in found


def test_off_never_holds() -> None:
    off = POLICY.model_copy(update={"enabled": False})
    assert repeat_offence([ago(1), ago(2), ago(3)], None, off, NOW) is None


def test_the_history_keeps_the_latest() -> None:
    history: list[datetime] = []
    for n in range(20):
        history = with_quarantine(history, ago(20 - n))
    assert len(history) == 16
    assert history[-1] == ago(1)


def reason(check: str, word: str, message: str = "") -> Reason:
    return Reason(check=check, reason=word, message=message)


RUNGS = {
    "a slow PCIe link: a person": (reason("pcie_link", "PcieLinkFailed"), Rung.NEEDS_PERSON),
    "drift: a person": (reason("gpu_compute", "BaselineDriftFailed"), Rung.NEEDS_PERSON),
    "a GPU missing: a reboot": (reason("gpu_count", "GpuCountFailed"), Rung.REBOOT_NODE),
    "driver/library mismatch: a reboot": (
        reason("driver_libraries", "DriverLibrariesFailed", "driver/library version mismatch"),
        Rung.REBOOT_NODE,
    ),
    "CUDA too old: a person": (
        reason("driver_libraries", "DriverLibrariesFailed", "supports CUDA 11.8"),
        Rung.NEEDS_PERSON,
    ),
    "a repeat offender: a person": (
        reason("repeat_offenders", "RepeatedQuarantine"),
        Rung.NEEDS_PERSON,
    ),
    "xid without a report: a person": (reason("xid_errors", "XidErrorsFailed"), Rung.NEEDS_PERSON),
}


@pytest.mark.parametrize(("why", "rung"), RUNGS.values(), ids=list(RUNGS))
def test_reason_rung(why: Reason, rung: Rung) -> None:
    assert reason_rung(why, None) == rung


def test_the_highest_rung_wins_and_only_quarantined_nodes_need_anything() -> None:
    reasons = [reason("gpu_count", "GpuCountFailed"), reason("pcie_link", "PcieLinkFailed")]
    st = NodeAcceptanceStatus(phase=Phase.QUARANTINED, reasons=reasons)
    assert remedy(st) == Rung.NEEDS_PERSON
    assert remedy(st.model_copy(update={"reasons": reasons[:1]})) == Rung.REBOOT_NODE
    assert remedy(st.model_copy(update={"phase": Phase.ACCEPTED})) == Rung.NONE
    assert remedy(st.model_copy(update={"phase": Phase.PENDING})) == Rung.NONE


PROFILE_RUNGS = {
    "recovery-action-reset": Rung.RESET_GPU,
    "reset-required-r560": Rung.RESET_GPU,
    "row-remap-pending": Rung.RESET_GPU,
    "row-remap-failed": Rung.NEEDS_PERSON,
    "ecc-disabled": Rung.NEEDS_PERSON,
    "gpu-missing": Rung.REBOOT_NODE,
    "pcie-x8": Rung.NEEDS_PERSON,
}


@pytest.mark.parametrize(("profile", "rung"), PROFILE_RUNGS.items(), ids=list(PROFILE_RUNGS))
def test_the_rung_of_each_fault_profile(profile: str, rung: Rung) -> None:
    """The real probe's report on a fault profile, judged under the default policy."""
    from world import REPO, probed, spec  # noqa: PLC0415

    from gpuaccept.operator.core.judge import judge  # noqa: PLC0415

    report = probed(REPO / "profiles" / "faults" / f"{profile}.yaml")
    verdict = judge(report, spec().probe)
    assert not verdict.accepted
    st = NodeAcceptanceStatus(phase=Phase.QUARANTINED, reasons=list(verdict.reasons), report=report)
    assert remedy(st) == rung


# ------------------------------------------------ repeated fences of one GPU (issue 40 item 5)
A, B = "GPU-aaaa", "GPU-bbbb"


def fences(*entries: tuple[str, float]) -> list[GpuFence]:
    return [GpuFence(uuid=uuid, time=ago(days)) for uuid, days in entries]


FENCE_OFFENCES = {
    "fenced once before: the second fence is a fence": ((A,), fences((A, 1)), None, False),
    "fenced twice before: the third escalates": ((A,), fences((A, 1), (A, 2)), None, True),
    "one of them older than the window": ((A,), fences((A, 1), (A, 8)), None, False),
    "released by a person after the first": ((A,), fences((A, 1), (A, 3)), ago(2), False),
    "released before both": ((A,), fences((A, 1), (A, 3)), ago(4), True),
    "another GPU's fences are its own": ((A,), fences((B, 1), (B, 2)), None, False),
    "two GPUs at once, one of them a repeat offender": (
        (B, A),
        fences((A, 1), (A, 2), (B, 3)),
        None,
        True,
    ),
}


@pytest.mark.parametrize(
    ("uuids", "history", "released", "escalates"),
    FENCE_OFFENCES.values(),
    ids=list(FENCE_OFFENCES),
)
def test_repeat_fence(
    uuids: tuple[str, ...], history: list[GpuFence], released: datetime | None, escalates: bool
) -> None:
    """The repeat-offender rule per GPU: its ``count``-th fence within the window, after
    the last release, quarantines the node instead."""
    found = repeat_fence(uuids, history, released, POLICY, NOW)
    assert (found is not None) is escalates
    if found is not None:
        assert f"GPU {A} fenced 3 times within 7 days" in found
        assert "the node is quarantined" in found


def test_a_repeat_fence_is_off_with_the_rule() -> None:
    off = POLICY.model_copy(update={"enabled": False})
    assert repeat_fence((A,), fences((A, 1), (A, 2)), None, off, NOW) is None


@pytest.mark.parametrize(
    ("history", "released", "held"),
    [
        (fences((A, 1), (A, 2), (A, 3)), None, True),  # its third fence escalated
        (fences((A, 1), (A, 2), (B, 3)), None, False),
        (fences((A, 1), (A, 2), (A, 3)), ago(0.5), False),  # a person released it since
    ],
)
def test_fence_offence_keeps_the_node_until_a_person_releases_it(
    history: list[GpuFence], released: datetime | None, held: bool
) -> None:
    found = fence_offence(history, released, POLICY, NOW)
    assert (found is not None) is held
    if found is not None:
        assert "a person must look at it and release it" in found


def test_the_fence_history_keeps_the_latest() -> None:
    history: list[GpuFence] = []
    for n in range(40):
        history = with_fences(history, (A, B) if n % 2 else (A,), ago(40 - n))
    assert len(history) == MAX_FENCE_HISTORY
    assert history[-1].time == ago(1)
