"""The background loops' skeleton (runtime): nothing before the cache's first sync,
a failing pass logged and the loop going on, its recovery logged once, a
cancellation that stops the loop."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gpuaccept.operator.backgroundloop import guarded, run_loop
from gpuaccept.operator.faultlog import FailureLog


def test_a_failing_pass_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpuaccept.operator")
    results: list[int | None] = []
    outcomes = iter([RuntimeError("broken"), 1, 2])

    async def one_pass() -> int:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def pause(result: int | None) -> None:
        results.append(result)
        if len(results) == 3:
            raise asyncio.CancelledError

    async def main() -> None:
        synced = asyncio.Event()
        task = asyncio.create_task(run_loop(synced, FailureLog("test pass"), one_pass, pause))
        await asyncio.sleep(0.01)
        assert results == []  # not before the first sync
        synced.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert results == [None, 1, 2]
    lines = [r.getMessage() for r in caplog.records]
    assert sum("test pass" in line and "broken" in line for line in lines) == 1
    assert sum("test pass" in line and "recovered" in line for line in lines) == 1, lines


def test_a_pass_not_its_turn_does_not_run() -> None:
    ran: list[bool] = []
    turns = iter([False, True])

    async def one_pass() -> bool:
        ran.append(True)
        return True

    async def wait_turn() -> bool:
        return next(turns)

    paused: list[bool | None] = []

    async def pause(result: bool | None) -> None:
        paused.append(result)
        if len(paused) == 2:
            raise asyncio.CancelledError

    async def main() -> None:
        synced = asyncio.Event()
        synced.set()
        await run_loop(synced, FailureLog("x"), one_pass, pause, wait_turn=wait_turn)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())
    assert ran == [True]
    assert paused == [None, True]


def test_a_cancellation_is_not_a_failure() -> None:
    failures = FailureLog("x")

    async def one_pass() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(guarded(failures, one_pass))
    assert not failures.failing
