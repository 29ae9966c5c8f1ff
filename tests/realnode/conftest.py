"""Tests on the local real node (docs/realnode.md): deselected (not skipped) unless
``GPUACCEPT_REALNODE=1``, which ``make node-test`` sets. They need root, the Debian
packages of ``make node-packages``, ``make node-tools`` and, for the end-to-end
test, ``make node-images``; they take minutes, so ``make test`` does not run them.

``real_node`` (the FAKE device plugin's ``nvidia.com/gpu``) and ``dra_node`` (the
FAKE DRA driver's ResourceSlices) are the one node of the session in either mode:
a module that asks for the other mode restarts the node in it on the same control
plane (``realnode.switch``). The session reuses a node that ``make node-up``
started (``.node`` on ``.cluster-node``) and leaves it running, in the mode it had;
otherwise it starts one and stops it at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gpuaccept.testsupport.controlplane import repo_root
from gpuaccept.testsupport.realnode import (
    RealNode,
    down,
    running,
    supervisor_pid,
    switch,
    up,
)
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


class SessionNode:
    """The session's one node, in the mode the running module asked for."""

    def __init__(self, node: RealNode) -> None:
        self.node = node

    def mode(self, *, dra: bool) -> RealNode:
        self.node = switch(self.node, dra=dra)
        return self.node


@pytest.fixture(scope="session")
def session_node() -> Iterator[SessionNode]:
    root = repo_root()
    node_dir, cluster_dir = root / ".node", root / ".cluster-node"
    if supervisor_pid(cluster_dir) is not None:
        reused = SessionNode(running(node_dir, cluster_dir))
        started_dra = reused.node.settings.dra
        yield reused
        reused.mode(dra=started_dra)  # left as make node-up started it
        return
    settings = NodeSettings(
        node_dir=node_dir,
        cluster_dir=cluster_dir,
        gpu_count=NODE_GPUS,
        profile=root / HEALTHY_PROFILE,
    )
    node = up(settings)
    try:
        yield SessionNode(node)
    finally:
        down(node_dir, cluster_dir)


@pytest.fixture(scope="module")
def real_node(session_node: SessionNode) -> RealNode:
    """The node with its FAKE GPUs as the device plugin's ``nvidia.com/gpu``."""
    return session_node.mode(dra=False)


@pytest.fixture(scope="module")
def dra_node(session_node: SessionNode) -> RealNode:
    """The node with its FAKE GPUs as devices of the FAKE DRA driver's ResourceSlices."""
    return session_node.mode(dra=True)
