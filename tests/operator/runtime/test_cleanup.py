"""``gpuaccept cleanup``'s pure decisions: which keys gpuaccept owns on a node, and
whether an operator still holds the Lease. The calls are tested on the real API
server in tests/integration/test_cleanup_command.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpuaccept.operator.cleanup import (
    NodeCleanup,
    RecordedKeys,
    lease_holder,
    node_cleanup,
    recorded_keys,
)

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def _node(
    taints: list[dict[str, str]] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    conditions: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "gpu-1",
            "resourceVersion": "7",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {"taints": taints or []},
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions or []]},
    }


PENDING = {"key": "gpuaccept.io/pending", "value": "true", "effect": "NoSchedule"}
CUSTOM = {"key": "example.com/gpu-quarantine", "effect": "NoSchedule"}
OTHERS = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("node", "recorded", "expected"),
    [
        pytest.param(_node(), RecordedKeys(), ((), (), (), False), id="nothing"),
        pytest.param(
            _node(taints=[PENDING, OTHERS]),
            RecordedKeys(),
            (("gpuaccept.io/pending",), (), (), False),
            id="own-taint-only",
        ),
        pytest.param(
            _node(taints=[CUSTOM, OTHERS]),
            RecordedKeys(),
            ((), (), (), False),
            id="custom-prefix-unrecorded-kept",
        ),
        pytest.param(
            _node(taints=[CUSTOM], labels={"example.com/gpu-bad": "true"}),
            RecordedKeys(
                taints=frozenset({CUSTOM["key"]}), labels=frozenset({"example.com/gpu-bad"})
            ),
            ((CUSTOM["key"],), ("example.com/gpu-bad",), (), False),
            id="recorded-custom-keys",
        ),
        pytest.param(
            _node(
                labels={"gpuaccept.io/acceptance": "Accepted", "nvidia.com/gpu.present": "true"},
                annotations={"gpuaccept.io/reprobe": "1", "example.com/gpu-x": "y"},
                conditions=["Ready", "GPUAcceptance"],
            ),
            RecordedKeys(labels=frozenset({"example.com/gpu-x"})),
            ((), ("gpuaccept.io/acceptance",), ("gpuaccept.io/reprobe",), True),
            id="labels-annotations-condition",
        ),
    ],
)
def test_only_owned_keys_are_removed(
    node: dict[str, Any],
    recorded: RecordedKeys,
    expected: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], bool],
) -> None:
    plan = node_cleanup(node, recorded)
    assert (plan.taints, plan.labels, plan.annotations, plan.condition) == expected


def test_the_patch_keeps_other_taints_and_is_guarded() -> None:
    plan = node_cleanup(
        _node(taints=[PENDING, OTHERS], labels={"gpuaccept.io/acceptance": "Accepted"}),
        RecordedKeys(),
    )
    assert plan.metadata_patch() == {
        "metadata": {"resourceVersion": "7", "labels": {"gpuaccept.io/acceptance": None}},
        "spec": {"taints": [OTHERS]},
    }


def test_removing_the_last_taint_drops_the_list() -> None:
    plan = node_cleanup(_node(taints=[PENDING]), RecordedKeys())
    assert plan.metadata_patch()["spec"] == {"taints": None}


def test_a_condition_alone_needs_no_metadata_patch() -> None:
    plan = node_cleanup(_node(conditions=["GPUAcceptance"]), RecordedKeys())
    assert not plan.metadata_changes
    assert plan.describe() == ["condition GPUAcceptance from node gpu-1"]


def test_recorded_keys_per_node() -> None:
    acceptances = [
        {"metadata": {"name": "gpu-1"}, "status": {"appliedTaints": ["a/b"]}},
        {"metadata": {"name": "gpu-2"}},
    ]
    assert recorded_keys(acceptances, ("gpuaccept.io/", "a/")) == (
        {"gpu-1": RecordedKeys(taints=frozenset({"a/b"})), "gpu-2": RecordedKeys()},
        [],
    )


def test_a_recorded_key_under_no_owned_prefix_is_kept_and_named() -> None:
    """Issue 42 item 10: a forged record (appliedTaints naming a foreign taint) must not
    make an admin's cleanup remove it."""
    acceptances = [
        {
            "metadata": {"name": "gpu-1"},
            "status": {
                "appliedTaints": ["example.com/gpu-q", "dedicated"],
                "appliedLabels": ["node-role.kubernetes.io/gpu"],
            },
        }
    ]
    recorded, refused = recorded_keys(acceptances, ("gpuaccept.io/", "example.com/gpu-"))
    assert recorded == {"gpu-1": RecordedKeys(taints=frozenset({"example.com/gpu-q"}))}
    assert refused == [
        "kept taint dedicated of node gpu-1: recorded as applied in its NodeAcceptance, "
        "but under no owned prefix (--owned-key-prefix)",
        "kept label node-role.kubernetes.io/gpu of node gpu-1: recorded as applied in its "
        "NodeAcceptance, but under no owned prefix (--owned-key-prefix)",
    ]
    plan = node_cleanup(
        _node(taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
        recorded["gpu-1"],
    )
    assert plan.taints == ()


@pytest.mark.parametrize(
    ("spec", "holder"),
    [
        pytest.param(None, None, id="no-lease"),
        pytest.param({}, None, id="empty"),
        pytest.param(
            {"holderIdentity": "op-1", "renewTime": "2026-01-01T11:59:55.000000Z",
             "leaseDurationSeconds": 15},
            "op-1",
            id="held",
        ),
        pytest.param(
            {"holderIdentity": "op-1", "renewTime": "2026-01-01T11:59:00.000000Z",
             "leaseDurationSeconds": 15},
            None,
            id="expired",
        ),
        pytest.param(
            {"holderIdentity": "", "renewTime": "2026-01-01T11:59:59.000000Z",
             "leaseDurationSeconds": 1},
            None,
            id="released",
        ),
    ],
)  # fmt: skip
def test_lease_holder(spec: dict[str, Any] | None, holder: str | None) -> None:
    lease = None if spec is None else {"spec": spec}
    assert lease_holder(lease, NOW) == holder


def test_describe_names_every_removal() -> None:
    plan = NodeCleanup(
        node="n", resource_version="1", taints=("t",), labels=("l",), annotations=("a",),
        condition=True,
    )  # fmt: skip
    assert plan.describe() == [
        "taint t from node n",
        "label l from node n",
        "annotation a from node n",
        "condition GPUAcceptance from node n",
    ]
