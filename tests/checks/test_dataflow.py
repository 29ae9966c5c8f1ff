"""The data checks pass each other is declared (``CheckSpec.needs`` / ``provides``), and
the registry's order follows from the declarations (gpuaccept.checks.dataflow)."""

from dataclasses import dataclass, field

import pytest

from gpuaccept.checks.dataflow import (
    RUN_FACTS,
    DataflowError,
    in_data_order,
    providers,
    unprovided,
)
from gpuaccept.checks.registry import CHECKS


@dataclass(frozen=True)
class Declared:
    name: str
    needs: frozenset[str] = field(default_factory=frozenset)
    provides: frozenset[str] = field(default_factory=frozenset)


def check(name: str, needs: str = "", provides: str = "") -> Declared:
    return Declared(name, frozenset(needs.split()), frozenset(provides.split()))


def names(checks: tuple[Declared, ...]) -> list[str]:
    return [c.name for c in checks]


def test_every_need_of_the_registry_has_a_provider() -> None:
    assert unprovided(CHECKS) == []
    facts = providers(CHECKS)
    assert facts == {"under_load": "throttle_reasons", "matmul_load": "throttle_reasons",
                     "h2d_gbps": "pcie_link"}  # fmt: skip
    for reader, fact in (("gpu_config", "under_load"), ("gpu_compute", "matmul_load"),
                         ("peer_bandwidth", "h2d_gbps")):  # fmt: skip
        order = [c.name for c in CHECKS]
        assert order.index(facts[fact]) < order.index(reader), (reader, fact)


def test_the_registry_order_is_its_listing_order_where_no_declaration_moves_a_check() -> None:
    assert in_data_order(CHECKS) == CHECKS


def test_a_reader_listed_before_its_provider_runs_after_it_and_the_rest_keep_their_order() -> None:
    listed = (
        check("a"),
        check("reader", needs="fact"),
        check("b"),
        check("provider", provides="fact"),
        check("c"),
    )
    assert names(in_data_order(listed)) == ["a", "b", "provider", "reader", "c"]


def test_the_registry_reversed_still_puts_every_provider_first() -> None:
    reordered = in_data_order(tuple(reversed(CHECKS)))
    seen: set[str] = set(RUN_FACTS)
    for spec in reordered:
        assert spec.needs <= seen, spec.name
        seen |= spec.provides


def test_a_need_without_a_provider_is_refused() -> None:
    listed = (check("reader", needs="nobody_gives_this"), check("other"))
    with pytest.raises(DataflowError, match="no check provides what reader needs nobody_gives"):
        in_data_order(listed)
    # a run of some checks only: the need stays unmet, the reader still runs
    assert names(in_data_order(listed, complete=False)) == ["reader", "other"]


def test_run_facts_need_no_check() -> None:
    assert names(in_data_order((check("gpu_count", needs="node_gpus"),))) == ["gpu_count"]


def test_two_providers_of_one_fact_are_refused() -> None:
    with pytest.raises(DataflowError, match="fact is provided by one and by two"):
        in_data_order((check("one", provides="fact"), check("two", provides="fact")))
    with pytest.raises(DataflowError, match="xids is provided by the probe run and by x"):
        in_data_order((check("x", provides="xids"),))


def test_checks_that_need_each_other_are_refused() -> None:
    listed = (check("a", needs="from_b", provides="from_a"), check("b", needs="from_a",
              provides="from_b"))  # fmt: skip
    with pytest.raises(DataflowError, match="need each other's facts: a, b"):
        in_data_order(listed)
