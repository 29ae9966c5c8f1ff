"""pytest plugin: the session-scoped ``control_plane`` fixture — test support, not shipped.

Load it from a conftest with ``pytest_plugins = ["gpuaccept.testsupport.pytest_plugin"]``.

``control_plane`` yields a :class:`gpuaccept.testsupport.controlplane.ControlPlane`.
If a cluster from ``make cluster-up`` is already running in ``.cluster/`` (or in
``$GPUACCEPT_CLUSTER_DIR``) it is reused and left running; otherwise one is
started for the session and stopped at its end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuaccept.testsupport.controlplane import ControlPlane, default_dir, start


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    cp = start(default_dir())
    try:
        yield cp
    finally:
        if cp.owned:
            cp.stop()
