"""The unmatched pending nodes as the policy status loop reports them: one series
each (``gpuaccept_node_unmatched_pending{node}``), gone when the node is matched,
and one log line on the leader when a node starts or stops being one."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest
from prometheus_client import REGISTRY, generate_latest

from gpuaccept.operator.cache import Cache
from gpuaccept.operator.kube import Kube
from gpuaccept.operator.policystatus import PolicyStatusLoop, StatusWriter
from gpuaccept.operator.quarantinelimit import QuarantineLimit

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PENDING = frozenset({"gpuaccept.io/pending"})


def _loop(cache: Cache, *, leading: bool) -> PolicyStatusLoop:
    return PolicyStatusLoop(
        StatusWriter(cast(Kube, object())),
        QuarantineLimit(cache),
        wake=lambda _node: None,
        leading=lambda: leading,
        unmatched_grace_seconds=600,
    )


def _series() -> list[str]:
    text = generate_latest(REGISTRY).decode()
    return [line for line in text.splitlines() if line.startswith("gpuaccept_node_unmatched")]


def test_an_unmatched_pending_node_is_a_series_and_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = Cache()
    loop = _loop(cache, leading=True)
    cache.count.set_node("gpu-new", {}, taint_keys=PENDING, created=T0)
    caplog.set_level(logging.INFO, logger="gpuaccept.operator")
    try:
        loop.report_unmatched(T0 + timedelta(seconds=60))  # within the grace
        assert _series() == []
        loop.report_unmatched(T0 + timedelta(seconds=601))
        loop.report_unmatched(T0 + timedelta(seconds=900))  # logged once
        assert _series() == ['gpuaccept_node_unmatched_pending{node="gpu-new"} 1.0']
        warned = [r for r in caplog.records if "gpu-new carries a pending taint" in r.message]
        assert len(warned) == 1
        assert warned[0].levelno == logging.WARNING
        cache.count.set_node("gpu-new", {}, created=T0)  # the taint came off
        loop.report_unmatched(T0 + timedelta(seconds=960))
        assert _series() == []
        assert any("gpu-new: no longer" in r.message for r in caplog.records)
    finally:
        loop.report_unmatched(T0)  # nothing stays registered for other tests


def test_a_standby_exports_the_series_but_does_not_log(caplog: pytest.LogCaptureFixture) -> None:
    cache = Cache()
    loop = _loop(cache, leading=False)
    cache.count.set_node("gpu-new", {}, taint_keys=PENDING, created=T0)
    caplog.set_level(logging.INFO, logger="gpuaccept.operator")
    try:
        loop.report_unmatched(T0 + timedelta(hours=1))
        assert _series() == ['gpuaccept_node_unmatched_pending{node="gpu-new"} 1.0']
        assert not [r for r in caplog.records if "pending taint" in r.message]
    finally:
        cache.count.set_node("gpu-new", None)
        loop.report_unmatched(T0)
