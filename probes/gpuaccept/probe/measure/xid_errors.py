"""Measures :mod:`gpuaccept.checks.xid_errors`: the Xids recorded while the
GPUs were loaded, and each GPU's recovery action.

The listener is not opened here: the runner opens it (``hardware.xid_listener()``)
before the first check and this module is measured after every other check
(:data:`RUNS_LAST`), so the listener spans every phase that loads the GPUs —
the PCIe copies, the sustained load and the all-reduce — whatever their order
in the registry.
"""

from gpuaccept.checks.gpu_ranges import format_gpus
from gpuaccept.checks.gpu_sets import gpu_label
from gpuaccept.checks.xid_errors import (
    EVENTS_MAX,
    RECOVERY_ACTION_BY_VALUE,
    ListenerStop,
    RecoveryAction,
    XidErrorsObserved,
    XidErrorsPolicy,
    XidEventObserved,
    xid_sets,
)
from gpuaccept.probe.hardware.base import GpuFailedError, HardwareBackend, Unavailable
from gpuaccept.probe.hardware.xid_events import XidLog
from gpuaccept.probe.measure.context import ProbeContext

RUNS_LAST = True
WHY_MAX = 120


def _recovery_actions(
    hardware: HardwareBackend, gpus: list[int]
) -> tuple[dict[str, str], dict[int, str]]:
    """(action other than none → GPU range text, GPU → why its action was not read)."""
    by_action: dict[str, list[int]] = {}
    not_read: dict[int, str] = {}
    for gpu in gpus:
        try:
            action = RECOVERY_ACTION_BY_VALUE[hardware.gpu_recovery_action(gpu)]
        except (Unavailable, GpuFailedError) as exc:
            not_read[gpu] = str(exc)
            continue
        if action is not RecoveryAction.NONE:
            by_action.setdefault(str(action), []).append(gpu)
    return {a: format_gpus(g) for a, g in sorted(by_action.items())}, not_read


def _why(not_read: dict[int, str]) -> str:
    """One line for the GPUs whose part was not read (the first reason, and how many)."""
    reasons = sorted(set(not_read.values()))
    first = reasons[0].removeprefix(f"GPU {min(not_read)}: ")
    more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
    return f"{gpu_label(format_gpus(list(not_read)))}: {first}"[: WHY_MAX - len(more)] + more


def _events_not_read(log: XidLog | None) -> str | None:
    """Why events were not read: no listener, or one that could not start, stopped
    early, or left GPUs out."""
    if log is None:
        return "no Xid listener ran (measured outside a probe run)"
    notes = [log.problem[:WHY_MAX]] if log.problem else []
    notes += [_why(log.unwatched)] if log.unwatched else []
    return "; ".join(notes) or None


def _listener_stop(log: XidLog | None) -> ListenerStop | None:
    """When and why the listener stopped before the run's end (None: it did not)."""
    if log is None or log.died is None:
        return None
    at_s, during, error, gpu_lost = log.died
    return ListenerStop(
        at_s=at_s, during=during[:64] if during else None, error=error[:160], gpu_lost=gpu_lost
    )


def _not_read(log: XidLog | None, actions_not_read: dict[int, str]) -> dict[str, str]:
    not_read: dict[str, str] = {}
    if actions_not_read:
        not_read["recoveryAction"] = _why(actions_not_read)
    if (events := _events_not_read(log)) is not None:
        not_read["events"] = events
    return not_read


def _events(
    log: XidLog | None,
) -> tuple[list[XidEventObserved] | None, dict[str, list[int]] | None]:
    """The events the listener recorded (the first EVENTS_MAX), and every Xid by GPU."""
    events = log.events() if log is not None else []
    observed = [
        XidEventObserved(gpu=e.gpu, xid=e.xid, at_s=e.at_s, during=e.during)
        for e in events[:EVENTS_MAX]
    ]
    return observed or None, xid_sets([(e.gpu, e.xid) for e in events]) or None


def measure(
    hardware: HardwareBackend, policy: XidErrorsPolicy, context: ProbeContext
) -> XidErrorsObserved:
    listed = hardware.gpus()
    gpus = [g.index for g in listed]
    if not gpus:
        raise Unavailable("no GPU to read")
    usable = [g.index for g in listed if g.problem is None]  # a lost one fails elsewhere
    actions, actions_not_read = _recovery_actions(hardware, gpus)
    log = context.xids
    not_read = _not_read(log, actions_not_read)
    listened = log is not None and bool(log.watched)
    if not listened and len(actions_not_read) == len(gpus):
        raise Unavailable(
            f"neither Xid events nor recovery actions readable: {not_read.get('events')}; "
            f"{not_read['recoveryAction']}"
        )
    events, xids = _events(log)
    return XidErrorsObserved(
        gpus=format_gpus(usable) or None,
        watched=format_gpus(list(log.watched)) if log is not None and log.watched else None,
        listened_s=log.seconds if listened and log is not None else None,
        events=events,
        xids=xids,
        recovery_action=actions or None,
        not_read=not_read or None,
        listener_stopped=_listener_stop(log),
    )
