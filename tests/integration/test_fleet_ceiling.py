"""The operator's ceiling is the fleet's (issue 42, item 5), on the real API server.

The trial's attack: one policy per node, each node failing it. A percentage of a
one-node pool rounds up to 1, so a ceiling counted per policy let every one of them
quarantine its node (10 of 12). Counted over every policy's nodes, a 50% ceiling
lets 6 of 12 out and holds the other 6 (``Held``, ``BreakerOpen``, under the
pending taint), each saying the ceiling held it.

The operator runs as a subprocess with the chart's ServiceAccount (the module
fixture of test_operator, shared), restarted here with ``--max-unavailable-ceiling
50%``; the kubelet stand-in runs the real probe on a simulated PCIe x8 fault.
"""

from __future__ import annotations

import time

import pytest

from gpuaccept.contracts.api import PENDING_TAINT_KEY, QUARANTINE_TAINT_KEY
from gpuaccept.testsupport.operator_env import (
    ROOT,
    Env,
    Operator,
    operator_ports,
    suite_id,
    wait_for,
    wait_node_side,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PCIE_X8 = str(ROOT / "profiles/faults/pcie-x8.yaml")  # fails the default pcieLink check
NODES = 12


def test_one_policy_per_node_takes_out_no_more_than_the_fleet_ceiling(env: Env) -> None:
    base = suite_id("ceiling")
    env.operator.stop()
    operator = Operator(env.cp, env.log_dir, lease=f"{env.operator.lease}-ceil", name="ceiling")
    try:
        operator.start("--max-unavailable-ceiling", "50%", **operator_ports())
        names: list[str] = []
        for i in range(NODES):  # a policy of its own for each node: a one-node pool
            suite = f"{base}-{i}"
            env.policy(suite, maxQuarantined="100%")
            names += env.nodes(suite, {"n": PCIE_X8})

        def settled() -> bool:
            phases = [env.status(n).get("phase") for n in names]
            return phases.count("Quarantined") == 6 and phases.count("Held") == 6

        wait_for("6 of 12 quarantined and 6 held by the fleet's ceiling", settled, 300)
        for name in names:
            status = env.status(name)
            if status["phase"] == "Quarantined":
                wait_node_side(env, name, "Quarantined")
                assert env.taint_keys(name) == [QUARANTINE_TAINT_KEY]
                continue
            assert status["reason"] == "BreakerOpen", env.describe([name])
            assert status["heldAction"] == "Quarantine"
            assert "--max-unavailable-ceiling=50%: 6 of fleet limit 6" in status["message"]
            wait_node_side(env, name, "Pending")
            assert env.taint_keys(name) == [PENDING_TAINT_KEY]
        # and it stays so: the held nodes are woken by the policy status passes
        # (every second here) and re-planned, and none of them gets a seventh slot
        time.sleep(10)
        quarantined = [n for n in names if env.status(n).get("phase") == "Quarantined"]
        assert len(quarantined) == 6, env.describe(names)
    finally:
        operator.stop()
        env.operator.start(**operator_ports())
