"""The integration tests' shared operator environment.

``env``: one ``gpuaccept operator`` subprocess under the chart's RBAC and one
kubelet stand-in on the session's control plane, per test module
(gpuaccept.testsupport.operator_env). The modules that drive the operator
(test_operator, test_fabric_operator, test_reverify, test_inservice,
test_fleet_trial) ask for it by name.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuaccept.testsupport.controlplane import ControlPlane
from gpuaccept.testsupport.operator_env import Env, operator_env


@pytest.fixture(scope="module")
def env(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with operator_env(control_plane, tmp_path_factory.mktemp("operator-logs")) as environment:
        yield environment
