"""Real-hardware tests: deselected (not skipped) unless ``GPUACCEPT_DEVICE=1``.

``make test`` also passes ``-m "not device"``; ``scripts/device-check.sh`` sets
``GPUACCEPT_DEVICE=1`` on a GPU host and runs them.
"""

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("GPUACCEPT_DEVICE") == "1":
        return
    device = [item for item in items if item.get_closest_marker("device") is not None]
    if device:
        config.hook.pytest_deselected(items=device)
        items[:] = [item for item in items if item.get_closest_marker("device") is None]
