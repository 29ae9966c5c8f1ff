"""pytest plugin: the session-scoped ``control_plane`` fixture — test support, not shipped.

Load it from a conftest with ``pytest_plugins = ["gpuaccept.testsupport.pytest_plugin"]``.

``control_plane`` yields a :class:`gpuaccept.testsupport.controlplane.ControlPlane`.
In a plain run, if a cluster from ``make cluster-up`` is already running in
``.cluster/`` (or in ``$GPUACCEPT_CLUSTER_DIR``) it is reused and left running;
otherwise one is started for the session and stopped at its end.

Under pytest-xdist (``make test`` runs ``pytest -n``) every worker starts its own
control plane in its own temp dir and stops it at the end of its session: the
integration tests install CRDs, charts and cluster-scoped policies, upgrade CRDs
and clean up by name prefix, so two workers must never share an API server.

Tests marked ``long`` (minutes each) are moved to the heads of the workers' first
slices of the collection, so that every worker starts on its share of them and no
long test finishes the run alone (gpuaccept.testsupport.long_first).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuaccept.testsupport.controlplane import ControlPlane, default_dir, start
from gpuaccept.testsupport.long_first import long_first

# pytest-xdist sets these in each worker process ("gw0", "gw1", ...; how many).
XDIST_WORKER = "PYTEST_XDIST_WORKER"
XDIST_WORKER_COUNT = "PYTEST_XDIST_WORKER_COUNT"
LONG_MARK = "long"


@pytest.hookimpl(trylast=True)  # after deselection: the order of what runs
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every worker collects the same tests and orders them the same way (xdist
    checks that the collections are identical)."""
    workers = int(os.environ.get(XDIST_WORKER_COUNT) or 1)
    items[:] = long_first(items, is_long, workers, group=lambda item: item.path)


def is_long(item: pytest.Item) -> bool:
    return item.get_closest_marker(LONG_MARK) is not None


def control_plane_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The state dir of this session's control plane: the shared one in a plain run,
    a fresh one in the worker's own temp dir under xdist."""
    if os.environ.get(XDIST_WORKER):
        return tmp_path_factory.mktemp("controlplane", numbered=False)
    return default_dir()


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = start(control_plane_dir(tmp_path_factory))
    try:
        yield cp
    finally:
        if cp.owned:
            cp.stop()
