"""An accepted node's in-service ledger as it starts, and its watch pods' names and
reservations (pure; below the in-service step, core/inservice/phase.py, and the
verdict's record, core/record.py).

:func:`ledger_for` is the ledger of an acceptance. A watch pod's serial is reserved
(its creation intent on record under this process's nonce) by a status write that
happens anyway, so its create needs no write of its own before it
(docs/benchmarks.md, "One status write per window"): :func:`reserved`, the next
serial, with the ledger that counts the last window's report; :func:`first_window`,
the first serial, with the verdict that accepts the node into service (it starts
the ledger too), so the first window costs what every later one does: a create,
then the write of its UID.
"""

from __future__ import annotations

from datetime import datetime

from gpuaccept.contracts.inservice import InServiceStatus
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.operator.core.creationintent import POD, creation_nonce, intend
from gpuaccept.operator.core.nodecontext import NodeContext
from gpuaccept.operator.core.podspec import watch_pod_name


def ledger_for(
    old: InServiceStatus | None, boot_id: str, accepted: datetime | None
) -> InServiceStatus:
    """``old`` if it is about this boot and this acceptance, else a new ledger."""
    if old is not None and old.boot_id == boot_id and old.accepted_time == accepted:
        return old
    # the watch pods' serial goes on: a new pod never takes an old one's name
    serial = old.watch_serial if old is not None else 0
    return InServiceStatus(boot_id=boot_id, accepted_time=accepted, watch_serial=serial)


def watch_name(ctx: NodeContext, serial: int) -> str:
    return watch_pod_name(ctx.obs.config.pod_prefix, ctx.node.name, serial)


def name_taken(ctx: NodeContext, name: str) -> bool:
    """A pod under ``name`` is (or may be) there, or its create was sent without an
    answer: the name is never created again."""
    obs = ctx.obs
    return (
        name in obs.pod_creates_unanswered
        or any(p.name == name for p in obs.pods)
        or any(f.pod.name == name for f in ctx.foreign_pods)
    )


def intent_on_record(st: NodeAcceptanceStatus, name: str) -> bool:
    return any(e.kind == POD and e.name == name for e in st.creation_intents)


def reserved(ctx: NodeContext, st: NodeAcceptanceStatus) -> NodeAcceptanceStatus:
    """``st`` with the next watch pod's serial reserved: its intent on record under
    this process's nonce, written with the window's ledger, so the next pod is
    created before the write that counts this one's report. A name with any intent
    on record, or taken, is left as it is (it is passed over later)."""
    ledger = st.in_service
    if ledger is None:
        return st
    name = watch_name(ctx, ledger.watch_serial + 1)
    if intent_on_record(st, name) or name_taken(ctx, name):
        return st
    return intend(st, POD, name, creation_nonce(ctx.obs.nonce_seed, POD, name))


def first_window(ctx: NodeContext, new: NodeAcceptanceStatus) -> NodeAcceptanceStatus:
    """``new`` (a verdict's status) with the in-service ledger it starts and the first
    watch pod's serial reserved, when it accepts the node into service under a policy
    that watches it with watch pods, and its acceptance starts a new ledger (a new
    probe, or the first time in service). Else ``new`` as it is: the in-service pass
    writes what it needs."""
    section = ctx.spec.in_service
    if not (section.enabled and section.watch_pods) or new.phase != Phase.ACCEPTED:
        return new
    ledger = ledger_for(new.in_service, ctx.node.boot_id, new.last_probe_time)
    if ledger is new.in_service or ledger.watch_pod is not None:
        return new
    return reserved(ctx, new.model_copy(update={"in_service": ledger}))
