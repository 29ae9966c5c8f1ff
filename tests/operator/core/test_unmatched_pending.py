"""A node that carries a pending taint and that no policy matches is found
(issue 25, item 1): the GPU Operator's node-feature-discovery never labels a node
whose pending taint it does not tolerate, so no policy ever matches it and it stays
out of service, silently. The fleet count keeps such nodes as it keeps the counts
(no walk over the fleet); they are reported after a grace from registration."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.operator.core.fleet import unmatched_past_grace
from gpuaccept.operator.core.fleetcount import FleetCount
from gpuaccept.operator.core.model import PolicyView

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GPU = {"nvidia.com/gpu.present": "true"}
PENDING = frozenset({"gpuaccept.io/pending"})


def _policy(name: str = "default", **spec: object) -> PolicyView:
    body: dict[str, object] = {"nodeSelector": GPU, **spec}
    return PolicyView(name=name, spec=NodeAcceptancePolicySpec.model_validate(body))


def test_a_pending_node_no_policy_matches_is_kept() -> None:
    count = FleetCount()
    count.set_policies([_policy()])
    count.set_node("matched", GPU, taint_keys=PENDING, created=T0)
    count.set_node("unlabelled", {}, taint_keys=PENDING, created=T0)  # NFD never came
    count.set_node("cpu", {}, created=T0)  # no taint: not ours to report
    count.set_node("other-taint", {}, taint_keys=frozenset({"example.com/x"}), created=T0)
    assert count.unmatched_pending() == {"unlabelled": T0}
    # the label arrives: matched, no longer reported
    count.set_node("unlabelled", GPU, taint_keys=PENDING, created=T0)
    assert count.unmatched_pending() == {}
    # a node relabelled away while under the taint is one too, and so is one gone
    count.set_node("matched", {"role": "x"}, taint_keys=PENDING, created=T0)
    assert count.unmatched_pending() == {"matched": T0}
    count.set_node("matched", None)
    assert count.unmatched_pending() == {}


def test_the_taint_coming_off_or_a_new_policy_clears_it() -> None:
    count = FleetCount()
    count.set_policies([_policy()])
    count.set_node("n", {"pool": "a100"}, taint_keys=PENDING, created=T0)
    assert "n" in count.unmatched_pending()
    count.set_node("n", {"pool": "a100"}, created=T0)  # someone took the taint off
    assert count.unmatched_pending() == {}
    count.set_node("n", {"pool": "a100"}, taint_keys=PENDING, created=T0)
    count.set_policies(
        [_policy(), PolicyView(name="a100", spec=_policy(nodeSelector={"pool": "a100"}).spec)]
    )
    assert count.unmatched_pending() == {}


def test_a_policys_own_pending_key_counts() -> None:
    count = FleetCount()
    custom = frozenset({"example.com/gpu-pending"})
    count.set_node("n", {}, taint_keys=custom, created=T0)
    assert count.unmatched_pending() == {}  # no policy names that key yet
    count.set_policies([_policy(pendingTaintKey="example.com/gpu-pending")])
    assert count.unmatched_pending() == {"n": T0}


@pytest.mark.parametrize(
    ("created", "reported"),
    [
        (T0 - timedelta(seconds=899), False),  # its labels may still come
        (T0 - timedelta(seconds=900), True),
        (T0 - timedelta(days=3), True),
        (None, True),
    ],
)
def test_reported_after_the_grace_from_registration(
    created: datetime | None, reported: bool
) -> None:
    assert unmatched_past_grace({"n": created}, T0, 900) == (("n",) if reported else ())
