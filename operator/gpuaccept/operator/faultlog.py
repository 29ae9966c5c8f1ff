"""Repeated failures logged without flooding.

While the API server is down every worker pass, policy status pass and Lease
renewal fails, each once a second or more. :class:`FailureLog` turns that
into one line per failure kind: the first occurrence, then a reminder with a
count after 10 s, 20 s, 40 s, then every 60 s, and one line when the component
works again. :class:`FailureLog` decides (pure: the caller passes the clock);
:func:`log_failure` and :func:`log_recovery` log its lines. The first line of a
kind that is not an API or connection error keeps its traceback (a bug, not an
outage).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

FIRST_REMINDER_SECONDS = 10.0
MAX_REMINDER_SECONDS = 60.0


def is_outage(error: BaseException) -> bool:
    """An API or connection error: expected while the API server is away, no traceback."""
    return isinstance(error, ApiException | urllib3.exceptions.HTTPError | OSError)


def failure_kind(error: BaseException) -> str:
    """What makes two failures "the same": the error's type, and an API error's status."""
    if isinstance(error, ApiException):
        return f"API error {error.status}"
    return type(error).__name__


@dataclass
class _Streak:
    first: float  # when the kind first failed
    logged: float  # when a line was last logged for it
    count: int = 1  # failures so far
    count_logged: int = 1  # failures covered by the lines logged so far
    wait: float = FIRST_REMINDER_SECONDS  # until the next reminder


@dataclass(frozen=True)
class FailureLine:
    text: str
    first: bool  # the first line of this kind (the caller may add the traceback)


@dataclass
class FailureLog:
    """One line per failure kind with backoff, and a line on recovery, for one component."""

    component: str  # e.g. "reconcile", "leader election"
    max_wait: float = MAX_REMINDER_SECONDS
    _streaks: dict[str, _Streak] = field(default_factory=dict)

    def failure(self, kind: str, detail: str, now: float) -> FailureLine | None:
        """The line to log for a failure of ``kind`` at ``now``, or None (held back)."""
        streak = self._streaks.get(kind)
        if streak is None:
            self._streaks[kind] = _Streak(first=now, logged=now)
            return FailureLine(f"{self.component} failed: {kind}: {detail}", first=True)
        streak.count += 1
        if now - streak.logged < streak.wait:
            return None
        new = streak.count - streak.count_logged
        since = now - streak.first
        streak.logged, streak.count_logged = now, streak.count
        streak.wait = min(streak.wait * 2, self.max_wait)
        return FailureLine(
            f"{self.component} still failing: {kind}: {new} more failure(s), "
            f"{streak.count} in {since:.0f}s; last: {detail}",
            first=False,
        )

    def success(self, now: float) -> list[str]:
        """Lines for every kind that was failing and no longer is (then forgotten)."""
        lines = [
            f"{self.component} recovered: {kind} after {s.count} failure(s) in {now - s.first:.0f}s"
            for kind, s in sorted(self._streaks.items())
        ]
        self._streaks.clear()
        return lines

    @property
    def failing(self) -> bool:
        return bool(self._streaks)


def log_failure(
    logger: logging.Logger, failures: FailureLog, error: Exception, detail: str
) -> None:
    """Log ``error`` through ``failures``: outages as warnings, anything else as an error
    whose first line keeps the traceback."""
    line = failures.failure(failure_kind(error), detail[:500], time.monotonic())
    if line is None:
        return
    if is_outage(error):
        logger.warning("%s", line.text)
    else:
        logger.error("%s", line.text, exc_info=error if line.first else None)


def log_recovery(logger: logging.Logger, failures: FailureLog) -> None:
    """The component works again: one line per kind that was failing."""
    if failures.failing:
        for text in failures.success(time.monotonic()):
            logger.info("%s", text)
