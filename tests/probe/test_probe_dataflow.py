"""A measuring function reads and writes only the context its spec declares: the
probe's context refuses anything else at run time, and every measuring module's
``context.<field>`` uses are held to the declarations here (all paths, run or not)."""

import ast
import dataclasses
from pathlib import Path

import pytest
from probe_scenarios import HEALTHY, default_policy

from gpuaccept.checks.dataflow import RUN_FACTS, UNDECLARED_READABLE, providers
from gpuaccept.checks.registry import BY_NAME, CHECKS
from gpuaccept.checks.spec import AnyCheckSpec
from gpuaccept.contracts.report import CheckStatus
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.measure.context import (
    CONTEXT_FIELDS,
    LoadClocks,
    ProbeContext,
    UndeclaredContextError,
)
from gpuaccept.probe.runner import hardware_summary, measuring_order, run_check

MEASURE = Path(__file__).resolve().parents[2] / "probes/gpuaccept/probe/measure"


def context_uses(check: str) -> tuple[set[str], set[str]]:
    return context_uses_in((MEASURE / f"{check}.py").read_text(encoding="utf-8"))


def context_uses_in(source: str) -> tuple[set[str], set[str]]:
    """(read, written): the fields of the context a module names, through ``context``
    or any parameter annotated ``ProbeContext`` (a helper's own name for it)."""
    tree = ast.parse(source)
    names = {"context"} | {
        node.arg
        for node in ast.walk(tree)
        if isinstance(node, ast.arg)
        and isinstance(node.annotation, ast.Name)
        and node.annotation.id == "ProbeContext"
    }
    read: set[str] = set()
    written: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in names
            and node.attr in CONTEXT_FIELDS
        ):
            (written if isinstance(node.ctx, ast.Store) else read).add(node.attr)
    return read, written


def test_a_helper_taking_the_context_under_another_name_is_seen_too() -> None:
    source = (
        "def helper(ctx: ProbeContext, other: Policy) -> None:\n"
        "    ctx.under_load = ctx.h2d_gbps\n"
        "    other.xids = None\n"
    )
    assert context_uses_in(source) == ({"h2d_gbps"}, {"under_load"})


def test_the_runner_orders_a_run_of_some_checks_by_their_declarations() -> None:
    some = [BY_NAME["gpu_compute"], BY_NAME["xid_errors"], BY_NAME["throttle_reasons"]]
    # the provider first; xid_errors, which reads what every load left, last
    assert [c.name for c in measuring_order(some)] == [
        "throttle_reasons",
        "gpu_compute",
        "xid_errors",
    ]
    # a need nothing in the run provides stays unmet: the reader runs on its own
    assert [c.name for c in measuring_order([BY_NAME["gpu_config"]])] == ["gpu_config"]


def test_every_context_field_is_a_run_fact_a_provided_fact_or_the_progress_note() -> None:
    """A new shared field has a declared provider, or it is one of the run's facts."""
    declared = RUN_FACTS | providers(CHECKS).keys() | UNDECLARED_READABLE
    assert declared == CONTEXT_FIELDS


@pytest.mark.parametrize("spec", CHECKS, ids=lambda c: c.name)
def test_a_measuring_module_uses_exactly_the_context_its_spec_declares(
    spec: AnyCheckSpec,
) -> None:
    read, written = context_uses(spec.name)
    assert written <= spec.provides, f"{spec.name} writes {written - spec.provides} undeclared"
    assert read - UNDECLARED_READABLE <= spec.needs | spec.provides, (
        f"{spec.name} reads {read - UNDECLARED_READABLE - spec.needs - spec.provides}: "
        "declare it in its CheckSpec's needs"
    )
    assert spec.needs <= read, f"{spec.name} declares needs it never reads: {spec.needs - read}"
    assert spec.provides <= read | written, f"{spec.name} never provides {spec.provides}"


def test_the_view_refuses_undeclared_reads_and_writes_and_passes_declared_ones_through() -> None:
    shared = ProbeContext()
    view = shared.view("gpu_config", needs=frozenset({"under_load"}), provides=frozenset())
    assert view.under_load is None
    view.progress("a note is always allowed")
    with pytest.raises(UndeclaredContextError, match=r"gpu_config reads context\.matmul_load"):
        _ = view.matmul_load
    with pytest.raises(UndeclaredContextError, match=r"gpu_config writes context\.under_load"):
        view.under_load = None
    writer = shared.view("throttle_reasons", needs=frozenset(), provides=frozenset({"under_load"}))
    clocks = LoadClocks(samples=1, app_clocks_fraction={}, sm_clock_fraction={},
                        limited=frozenset())  # fmt: skip
    writer.under_load = clocks
    assert shared.under_load is clocks
    assert view.under_load is clocks
    with pytest.raises(UndeclaredContextError, match=r"declares \['no_such_field'\]"):
        shared.view("x", needs=frozenset({"no_such_field"}), provides=frozenset())


def test_a_check_that_reads_a_fact_it_did_not_declare_errors_in_a_real_run() -> None:
    """gpu_config on a simulated node, with its ``needs`` taken away: its measuring
    function reads ``under_load`` and the run refuses it (an error result, named)."""
    hardware = SimulatedBackend(load_profile(HEALTHY))
    policy, summary = default_policy(), hardware_summary(hardware)
    declared = run_check(BY_NAME["gpu_config"], hardware, policy, ProbeContext(), summary)
    assert declared.status is CheckStatus.PASS
    undeclared = dataclasses.replace(BY_NAME["gpu_config"], needs=frozenset())
    result = run_check(undeclared, hardware, policy, ProbeContext(), summary)
    assert result.status is CheckStatus.ERROR
    assert result.message == (
        "UndeclaredContextError: check gpu_config reads context.under_load without "
        "declaring it (CheckSpec.needs)"
    )
