"""Property: no mutation that makes a report inconsistent with its node is accepted.

The mutations are built from the check registry
(:mod:`gpuaccept.testsupport.report_mutations`): every GPU count, per-GPU list, GPU
range, GPU index and measured figure of every registered check's result, in the
termination-message form of a healthy 8-GPU node's report and in the full form of a
4-GPU node's. A check added to the registry is mutated without a new test. Each
mutated report goes through the operator's own decision functions as a probe pod
that exited 0 would. Deterministic: ``derandomize=True``, no example database.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from probe_fixture import full_report
from world import T0, make_report, spec

from gpuaccept.checks.registry import CHECKS
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core.model import NodeView, PodView
from gpuaccept.testsupport.report_mutations import Mutation, apply, mutations, operator_accepts

PROPERTY = settings(
    max_examples=300,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
POD = PodView(
    name="probe-gpu-1-1", phase="Succeeded", terminated=True, exit_code=0,
    created=T0 - timedelta(seconds=5), finished=T0 + timedelta(seconds=5),
)  # fmt: skip
POLICY = spec().probe


def _base(report: ProbeReport) -> tuple[dict[str, Any], list[Mutation], NodeView]:
    gpus = report.summary.gpu_count
    node = NodeView(name=report.node_name, boot_id=report.boot_id, gpus=gpus, gpu_capacity=gpus)
    wire = json.loads(report.model_dump_json(by_alias=True, exclude_none=True))
    return wire, mutations(report, CHECKS), node


BASES = [_base(make_report()), _base(full_report())]


def test_the_bases_are_accepted_and_every_registered_check_is_in_them() -> None:
    for wire, found, node in BASES:
        assert operator_accepts(json.dumps(wire), node, POLICY, POD) == (True, "accepted")
        assert {r["check"] for r in wire["results"]} >= {c.name for c in CHECKS}
        assert found
    mutated = {m.check for _wire, found, _node in BASES for m in found}
    # the checks whose results name GPUs or carry figures are all mutated
    assert mutated >= {
        "gpu_count", "pcie_link", "throttle_reasons", "peer_bandwidth", "nccl_allreduce",
        "nvlink", "nvswitch_fabric", "gpu_config", "gpu_numa", "xid_errors",
        "memory_health", "gpu_compute", "gpu_memory_bandwidth",
    }  # fmt: skip


def test_every_single_mutation_is_refused() -> None:
    for wire, found, node in BASES:
        accepted = [
            m.describe()
            for m in found
            if operator_accepts(json.dumps(apply(wire, m)), node, POLICY, POD)[0]
        ]
        assert not accepted


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, NodeView, list[str]]:
    wire, found, node = draw(st.sampled_from(BASES))
    chosen = draw(
        st.lists(st.sampled_from(found), min_size=1, max_size=4, unique_by=Mutation.describe)
    )
    for mutation in chosen:
        wire = apply(wire, mutation)
    return json.dumps(wire), node, [m.describe() for m in chosen]


@PROPERTY
@given(mutated())
def test_no_combination_of_mutations_is_accepted(case: tuple[str, NodeView, list[str]]) -> None:
    message, node, what = case
    accepted, why = operator_accepts(message, node, POLICY, POD)
    assert not accepted, what
    assert why
