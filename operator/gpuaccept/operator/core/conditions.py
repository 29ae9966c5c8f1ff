"""The NodeAcceptance's own condition ``Accepted`` (pure), kept in line with the phase
by every status write (:meth:`~.nodecontext.PlanBuilder.write_status`), so that
``kubectl wait --for=condition=Accepted nodeacceptance/NODE`` works:

* ``True`` once the node is accepted (phase ``Accepted``);
* ``False`` when it is not, for now: ``Quarantined``, ``Held`` (dryRun or the
  quarantine limit), ``Stalled``, ``Released`` (in service on a person's word, not
  on the checks);
* ``Unknown`` while it is undecided (``Pending``, ``Probing``, ``Fabric``, ``Waiting``).

Its reason is the status's reason (``Accepted`` when it is true), its message the
status's message; its ``lastTransitionTime`` moves only when its status changes.
"""

from __future__ import annotations

import re
from datetime import datetime

from gpuaccept.contracts.api import ACCEPTED_CONDITION_TYPE
from gpuaccept.contracts.nodeacceptance import (
    Condition,
    ConditionStatus,
    NodeAcceptanceStatus,
    Phase,
)

NOT_ACCEPTED = frozenset({Phase.QUARANTINED, Phase.HELD, Phase.STALLED, Phase.RELEASED})
_NOT_IN_REASON = re.compile(r"[^A-Za-z0-9_,:]+")
MAX_MESSAGE = 1000


def condition_reason(text: str) -> str:
    """``text`` as a condition reason (a letter first, then letters, digits, ``_,:``)."""
    reason = _NOT_IN_REASON.sub("_", text).strip("_,:")[:1024].rstrip(",:")
    return reason if reason[:1].isalpha() else f"Reason{reason}"


def accepted_state(st: NodeAcceptanceStatus) -> tuple[ConditionStatus, str, str]:
    """(status, reason, message) of the ``Accepted`` condition for ``st``."""
    message = (st.message or st.phase.value)[:MAX_MESSAGE]
    if st.phase == Phase.ACCEPTED:
        return ConditionStatus.TRUE, "Accepted", message
    reason = condition_reason(st.reason or st.phase.value)
    if st.phase in NOT_ACCEPTED:
        return ConditionStatus.FALSE, reason, message
    return ConditionStatus.UNKNOWN, reason, message


def with_accepted_condition(st: NodeAcceptanceStatus, now: datetime) -> NodeAcceptanceStatus:
    """``st`` with its ``Accepted`` condition in line with its phase (the other
    conditions, e.g. ``OptedOut``, as they are)."""
    status, reason, message = accepted_state(st)
    old = next((c for c in st.conditions if c.type == ACCEPTED_CONDITION_TYPE), None)
    if old is not None and (old.status, old.reason, old.message) == (status, reason, message):
        return st
    stamp = old.last_transition_time if old is not None and old.status == status else now
    condition = Condition(
        type=ACCEPTED_CONDITION_TYPE,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=stamp,
    )
    others = [c for c in st.conditions if c.type != ACCEPTED_CONDITION_TYPE]
    return st.model_copy(update={"conditions": [condition, *others]})
