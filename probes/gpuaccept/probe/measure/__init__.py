"""The probe's measuring half: one module per registered check, named after it.

``gpuaccept.probe.measure.<check>.measure(hardware, section, context)`` asks
the :class:`~gpuaccept.probe.hardware.HardwareBackend` (and nothing else) and
returns the check's ``Observed`` model. Raising
:class:`~gpuaccept.probe.hardware.Unavailable` makes the result ``skip``; any
other exception makes it ``error``. Judging is the check module's, in
:mod:`gpuaccept.checks`.

There is no list here: :func:`measurer` finds the module by the check's name.
"""

import importlib
from collections.abc import Callable
from typing import Any

from gpuaccept.checks.spec import AnyCheckSpec, ObservedModel
from gpuaccept.probe.hardware.base import HardwareBackend
from gpuaccept.probe.measure.context import ProbeContext

Measurer = Callable[[HardwareBackend, Any, ProbeContext], ObservedModel]


def measurer(check: AnyCheckSpec) -> Measurer:
    """The ``measure`` function of ``check`` (its module is named after the check)."""
    module = importlib.import_module(f"{__name__}.{check.name}")
    measure: Measurer = module.measure
    return measure


def runs_last(check: AnyCheckSpec) -> bool:
    """Whether ``check`` is measured after every other one (its module sets
    ``RUNS_LAST``: it reads what the others' load left, as ``xid_errors`` does)."""
    module = importlib.import_module(f"{__name__}.{check.name}")
    return bool(getattr(module, "RUNS_LAST", False))


__all__ = ["Measurer", "ProbeContext", "measurer", "runs_last"]
