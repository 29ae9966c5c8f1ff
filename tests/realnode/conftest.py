"""Tests on the local real node (docs/realnode.md): deselected (not skipped) unless
``GPUACCEPT_REALNODE=1``, which ``make node-test`` sets. They need root, the Debian
packages of ``make node-packages``, ``make node-tools`` and, for the end-to-end
test, ``make node-images``; they take minutes, so ``make test`` does not run them.

``real_node`` reuses a node that ``make node-up`` started (``.node`` on
``.cluster-node``) and leaves it running; otherwise it starts one for the session
and stops it at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gpuaccept.testsupport.controlplane import repo_root
from gpuaccept.testsupport.realnode import RealNode, down, running, supervisor_pid, up
from gpuaccept.testsupport.realnode_config import NodeSettings

NODE_GPUS = 8
HEALTHY_PROFILE = "profiles/h100-sxm-8gpu-healthy.yaml"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("GPUACCEPT_REALNODE") == "1":
        return
    real = [item for item in items if item.get_closest_marker("realnode") is not None]
    if real:
        config.hook.pytest_deselected(items=real)
        items[:] = [item for item in items if item.get_closest_marker("realnode") is None]


@pytest.fixture(scope="session")
def real_node() -> Iterator[RealNode]:
    root = repo_root()
    node_dir, cluster_dir = root / ".node", root / ".cluster-node"
    if supervisor_pid(cluster_dir) is not None:
        yield running(node_dir, cluster_dir)
        return
    settings = NodeSettings(
        node_dir=node_dir,
        cluster_dir=cluster_dir,
        gpu_count=NODE_GPUS,
        profile=root / HEALTHY_PROFILE,
    )
    node = up(settings)
    try:
        yield node
    finally:
        down(node_dir, cluster_dir)
