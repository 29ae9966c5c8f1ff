"""What checks pass each other during a probe run, declared, and the order that follows.

A check's measuring function may leave a fact for later checks (``throttle_reasons``
leaves the clocks it sampled under load for ``gpu_config``, and its timed matmuls for
``gpu_compute``; ``pcie_link`` leaves each GPU's host-to-device rate for
``peer_bandwidth``). Each such fact is a field of the probe's shared context
(``gpuaccept.probe.measure.context.ProbeContext``), named in the writer's
``CheckSpec.provides`` and in each reader's ``CheckSpec.needs``. The probe gives a
check a view of the context that refuses any other read or write, so the
declarations are the whole story; :func:`in_data_order` puts every provider
before the checks that need it.

A need is optional data: a run of some checks only (a targeted re-verification,
a disabled provider) leaves it ``None`` or empty, and the reader measures on its
own (``gpu_compute`` loads the GPUs itself). Only the registry as a whole must
have a provider for every need.
"""

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

# Facts the probe run provides before the first check, not any check: what Kubernetes
# says of the node's GPUs, the Xid listener open over every check, each GPU's NVLink
# counters before the first check. A check still declares them in ``needs``.
RUN_FACTS = frozenset({"node_gpus", "xids", "nvlink_before"})
# Readable by every check without a declaration: it carries no data (a progress note).
UNDECLARED_READABLE = frozenset({"progress"})


class DataflowError(ValueError):
    """The checks' declarations do not make an order: a need without a provider, two
    providers of one fact, or checks that need each other."""


class DeclaresData(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def needs(self) -> frozenset[str]: ...
    @property
    def provides(self) -> frozenset[str]: ...


C = TypeVar("C", bound=DeclaresData)


def providers(checks: Iterable[C]) -> dict[str, str]:
    """Fact -> the check that provides it (a fact has one provider)."""
    found: dict[str, str] = {}
    for check in checks:
        for fact in sorted(check.provides):
            if fact in RUN_FACTS or fact in found:
                first = "the probe run" if fact in RUN_FACTS else found[fact]
                raise DataflowError(f"{fact} is provided by {first} and by {check.name}")
            found[fact] = check.name
    return found


def unprovided(checks: Iterable[C]) -> list[tuple[str, str]]:
    """(check, fact) for every need that neither the run nor any of ``checks`` provides."""
    listed = list(checks)
    given = RUN_FACTS | providers(listed).keys()
    return [(c.name, fact) for c in listed for fact in sorted(c.needs - given)]


def in_data_order(checks: Sequence[C], *, complete: bool = True) -> tuple[C, ...]:
    """``checks`` with every provider before the checks that need it, otherwise in the
    order listed (a stable topological order: each step takes the first listed check
    whose needs are met). ``complete``: every need must have a provider among
    ``checks`` (the registry); a run of some checks only passes ``complete=False``, and
    a need nothing in it provides stays unmet (the reader gets ``None``)."""
    missing = unprovided(checks)
    if complete and missing:
        named = ", ".join(f"{check} needs {fact}" for check, fact in missing)
        raise DataflowError(f"no check provides what {named}")
    unmet = {fact for _check, fact in missing}
    available = set(RUN_FACTS | unmet)
    remaining = list(checks)
    ordered: list[C] = []
    while remaining:
        ready = next((c for c in remaining if c.needs <= available), None)
        if ready is None:
            names = ", ".join(c.name for c in remaining)
            raise DataflowError(f"these checks need each other's facts: {names}")
        remaining.remove(ready)
        ordered.append(ready)
        available |= ready.provides
    return tuple(ordered)
