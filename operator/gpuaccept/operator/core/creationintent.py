"""An object the operator is about to create for a node, on record before its
create (pure; docs/security.md, "Pod identity").

The operator trusts an object it creates for a node (a probe, fabric or watch pod;
any later kind, e.g. a ResourceClaim) once the UID the create's answer carried is in
the node's status (``status.ownedPods``). A crash between the create and that record
left the object unowned: after a restart it could not be told from a squatter's.
So before each create the node's status records the intent
(``status.creationIntents``: the kind, the name, the SHA-256 digest of a nonce), and
the object carries the nonce itself (annotation ``gpuaccept.io/creation-nonce``):

* the nonce is drawn from a random seed the runtime draws once per process
  (:func:`creation_nonce`), never stored in plain text: whoever reads the status
  sees only its digest, and cannot make an object that matches it (a watch pod's
  intent is recorded a window before its create: core/inservice/phase.py);
* after a restart, an object under a recorded name with no UID on record whose
  nonce matches (:func:`intended`) is the operator's own crash-window object: it is
  deleted unread (never adopted: its fields were not checked against a create's
  answer), and the attempt it served is given back;
* one whose nonce does not match (or that carries none) is a squatter's, handled as
  before: never read, never deleted, the node waits ``PodNameTaken``;
* an intent is dropped once its object's UID is on record (:func:`settled`), and
  the list keeps the newest :data:`MAX_CREATION_INTENTS`.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuaccept.contracts.api import CREATION_NONCE_ANNOTATION
from gpuaccept.contracts.nodeacceptance import (
    MAX_CREATION_INTENTS,
    CreationIntent,
    NodeAcceptanceStatus,
)
from gpuaccept.operator.core.model import CreateProbePod

__all__ = [
    "creation_nonce",
    "intend",
    "intended",
    "intended_create",
    "nonce_digest",
    "settled",
    "with_nonce",
]

POD = "Pod"


def creation_nonce(seed: str, kind: str, name: str) -> str:
    """The nonce of ``kind/name`` in the process whose random seed is ``seed``
    (HMAC-SHA256, 32 hex digits: a label-safe value). One seed serves every object of
    a process; an empty seed (a test's) gives a guessable nonce, so the runtime never
    passes one."""
    message = f"{kind}/{name}".encode()
    return hmac.new(seed.encode(), message, hashlib.sha256).hexdigest()[:32]


def nonce_digest(nonce: str) -> str:
    """What the status keeps of a nonce: its SHA-256, hex."""
    return hashlib.sha256(nonce.encode()).hexdigest()


def intend(status: NodeAcceptanceStatus, kind: str, name: str, nonce: str) -> NodeAcceptanceStatus:
    """``status`` with the intent to create ``kind/name`` carrying ``nonce`` (an
    earlier intent under the same name is kept: its object may exist yet)."""
    entry = CreationIntent(kind=kind, name=name, nonce_digest=nonce_digest(nonce))
    kept = [e for e in status.creation_intents if e != entry]
    intents = [*kept, entry][-MAX_CREATION_INTENTS:]
    return status.model_copy(update={"creation_intents": intents})


def with_nonce(manifest: Mapping[str, Any], nonce: str) -> dict[str, Any]:
    """``manifest`` carrying ``nonce`` in its annotation."""
    meta = dict(manifest.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), CREATION_NONCE_ANNOTATION: nonce}
    return {**manifest, "metadata": meta}


def intended(intents: Sequence[CreationIntent], kind: str, name: str, nonce: str) -> bool:
    """Whether an object ``kind/name`` found carrying ``nonce`` is one the operator
    recorded the intent to create (a nonce of another name, or none, is not)."""
    if not nonce:
        return False
    digest = nonce_digest(nonce)
    return any(
        e.kind == kind and e.name == name and hmac.compare_digest(e.nonce_digest, digest)
        for e in intents
    )


def settled(
    intents: Sequence[CreationIntent], kind: str, owned: Iterable[str]
) -> list[CreationIntent]:
    """``intents`` without those of kind ``kind`` whose names are ``owned`` (their
    UIDs on record: the intent has served)."""
    names = set(owned)
    return [e for e in intents if not (e.kind == kind and e.name in names)]


def intended_create(
    status: NodeAcceptanceStatus, seed: str, name: str, manifest: Mapping[str, Any]
) -> tuple[NodeAcceptanceStatus, CreateProbePod]:
    """The pod ``name`` to create for a node whose status is ``status``: that status
    with the intent on record (to be written before the create), and the create of
    ``manifest`` carrying the nonce. Every pod create of the core is made here; another
    kind of object takes :func:`creation_nonce`, :func:`intend` and :func:`with_nonce`
    the same way."""
    nonce = creation_nonce(seed, POD, name)
    return intend(status, POD, name, nonce), CreateProbePod(name, with_nonce(manifest, nonce))
