"""An outage is logged as one line per failure kind with backoff, not a traceback a second."""

from __future__ import annotations

import logging

import pytest
import urllib3.exceptions
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from gpuaccept.operator.controller import Controller
from gpuaccept.operator.core import OperatorConfig
from gpuaccept.operator.core.judge import judge
from gpuaccept.operator.faultlog import (
    FailureLog,
    failure_kind,
    is_outage,
    log_failure,
    log_recovery,
)
from gpuaccept.operator.kube import Kube


def lines_over(seconds: int, log: FailureLog, kind: str = "API error 503") -> list[str]:
    """A failure every second for ``seconds``: the lines logged."""
    out = []
    for now in range(seconds):
        line = log.failure(kind, f"attempt {now}", float(now))
        if line is not None:
            out.append(line.text)
    return out


def test_a_three_minute_outage_is_a_handful_of_lines() -> None:
    lines = lines_over(180, FailureLog("reconcile"))
    # first, then after 10, 20 (30), 40 (70), then every 60 s (130) — not 180 tracebacks
    assert len(lines) == 5, lines
    assert lines[0] == "reconcile failed: API error 503: attempt 0"
    assert lines[1] == (
        "reconcile still failing: API error 503: 10 more failure(s), 11 in 10s; last: attempt 10"
    )
    assert lines[-1].startswith("reconcile still failing: API error 503: 60 more failure(s), 131")


def test_the_first_line_of_a_kind_is_marked_first() -> None:
    log = FailureLog("x")
    first = log.failure("KeyError", "'a'", 0.0)
    assert first is not None
    assert first.first
    again = log.failure("KeyError", "'a'", 100.0)
    assert again is not None
    assert not again.first


def test_each_kind_has_its_own_line_and_backoff() -> None:
    log = FailureLog("reconcile")
    assert log.failure("API error 503", "a", 0.0) is not None
    assert log.failure("MaxRetryError", "b", 0.5) is not None
    assert log.failure("API error 503", "a", 1.0) is None
    assert log.failure("MaxRetryError", "b", 1.5) is None


def test_recovery_is_one_line_per_kind_and_starts_over() -> None:
    log = FailureLog("leader election")
    lines_over(30, log, "API error 503")
    log.failure("MaxRetryError", "refused", 31.0)
    assert log.failing
    assert log.success(40.0) == [
        "leader election recovered: API error 503 after 30 failure(s) in 40s",
        "leader election recovered: MaxRetryError after 1 failure(s) in 9s",
    ]
    assert not log.failing
    assert log.success(41.0) == []
    line = log.failure("API error 503", "again", 50.0)
    assert line is not None
    assert line.first  # a new outage is announced again


@pytest.mark.parametrize(
    ("error", "kind", "outage"),
    [
        (ApiException(status=503, reason="Service Unavailable"), "API error 503", True),
        (urllib3.exceptions.MaxRetryError(None, "/api", None), "MaxRetryError", True),
        (ConnectionRefusedError(111, "refused"), "ConnectionRefusedError", True),
        (KeyError("phase"), "KeyError", False),
    ],
)
def test_kinds_and_outages(error: Exception, kind: str, outage: bool) -> None:
    assert failure_kind(error) == kind
    assert is_outage(error) is outage


def test_only_the_first_line_of_a_bug_has_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.faultlog")
    failures = FailureLog("reconcile")
    with caplog.at_level(logging.INFO, logger="test.faultlog"):
        for _ in range(50):
            try:
                raise KeyError("phase")
            except KeyError as error:
                log_failure(logger, failures, error, "node=gpu-1")
        for _ in range(50):
            log_failure(logger, failures, ConnectionRefusedError(111, "refused"), "node=gpu-1")
        log_recovery(logger, failures)
    records = caplog.records
    assert [r.levelname for r in records] == ["ERROR", "WARNING", "INFO", "INFO"]
    assert records[0].exc_info is not None
    assert records[1].exc_info is None  # an outage: no traceback
    assert "recovered" in records[2].getMessage()


def test_the_controller_logs_an_outage_once_not_per_pass(caplog: pytest.LogCaptureFixture) -> None:
    controller = Controller(Kube(k8s.ApiClient()), OperatorConfig(), judge)
    try:
        with caplog.at_level(logging.INFO, logger="gpuaccept.operator"):
            for i in range(100):  # 100 failed passes within a few seconds
                controller._log_failure(f"gpu-{i % 7}", urllib3.exceptions.MaxRetryError(None, "/"))
        assert len(caplog.records) == 1
        assert "reconcile failed: MaxRetryError: node=gpu-0" in caplog.records[0].getMessage()
        assert caplog.records[0].exc_info is None
    finally:
        controller.executor.shutdown()
