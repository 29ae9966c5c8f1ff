"""The background loops' one skeleton (runtime): the fabric passes
(:mod:`.fabricloop`), the re-verification lists (:mod:`.reverifyloop`) and the
policy statuses (:mod:`.policystatus`) each run :func:`run_loop`.

A loop waits for the cache's first sync, then, pass after pass: its turn
(``wait_turn``: whether to run a pass now, e.g. after a poke or a timeout), the
pass, then its pause (``pause``, given the pass's result, None when it failed or
did not run). A pass that raises is logged one line per kind of failure with
backoff, and its recovery once (:mod:`.faultlog`); the loop goes on. Cancelling
the task stops it (the cancellation is never taken for a failure).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gpuaccept.operator.faultlog import FailureLog, log_failure, log_recovery

log = logging.getLogger("gpuaccept.operator")

Result = TypeVar("Result")


async def guarded(failures: FailureLog, one_pass: Callable[[], Awaitable[Result]]) -> Result | None:
    """``one_pass``'s result; None when it raised (logged in ``failures``)."""
    try:
        result = await one_pass()
    except asyncio.CancelledError:
        raise
    except Exception as error:  # one line per kind, with backoff (faultlog)
        log_failure(log, failures, error, str(error))
        return None
    log_recovery(log, failures)
    return result


async def _always() -> bool:
    return True


async def run_loop(
    synced: asyncio.Event,
    failures: FailureLog,
    one_pass: Callable[[], Awaitable[Result]],
    pause: Callable[[Result | None], Awaitable[None]],
    *,
    wait_turn: Callable[[], Awaitable[bool]] = _always,
) -> None:
    """Pass after pass, once ``synced`` is set, until the task is cancelled."""
    await synced.wait()
    while True:
        result = await guarded(failures, one_pass) if await wait_turn() else None
        await pause(result)


def every(interval: float) -> Callable[[object], Awaitable[None]]:
    """The pause of a loop that runs a pass every ``interval`` seconds."""

    async def pause(_result: object) -> None:
        await asyncio.sleep(interval)

    return pause
