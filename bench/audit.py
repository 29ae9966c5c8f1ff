"""Count API requests per identity from kube-apiserver's audit log.

kube-apiserver's ``apiserver_request_total`` has verb/resource/subresource/code
labels but no user, so the benchmark gives every actor its own identity (a
ServiceAccount token) and reads the apiserver's audit log, which records the
user of every request. The policy logs metadata only (no bodies) and skips the
``RequestReceived`` stage; a request that is logged at more than one stage
(a watch: ``ResponseStarted`` then ``ResponseComplete``) is counted once, by
its ``auditID``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from gpuaccept.operator.kube import USER_AGENT as OPERATOR_AGENT

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  # The apiserver's own loopback traffic is not anybody's cost here.
  - level: None
    users: ["system:apiserver"]
  - level: None
    nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/metrics", "/version"]
  - level: Metadata
"""


@dataclass(frozen=True)
class Request:
    """One API request as the audit log recorded it."""

    audit_id: str
    user: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    received: str  # RFC 3339 with microseconds, as logged
    completed: str = ""  # stageTimestamp of the stage logged first (ResponseComplete for writes)
    user_agent: str = ""

    @property
    def kind(self) -> str:
        """``nodes``, ``nodes/status``, ``pods`` ... (resource[/subresource])."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    @property
    def origin(self) -> str:
        """Which loop of the client made it: the operator names it in its User-Agent,
        ``gpuaccept-operator (ORIGIN)`` (operator/kube.py); another client is named by
        its User-Agent's first word without the version (``kopf/1.37`` → ``kopf``)."""
        agent = self.user_agent
        if agent.startswith(OPERATOR_AGENT + " (") and agent.endswith(")"):
            return agent[len(OPERATOR_AGENT) + 2 : -1]
        return agent.split(" ", 1)[0].split("/", 1)[0] or "unnamed"


def read_requests(path: Path, offset: int = 0) -> tuple[list[Request], int]:
    """Requests logged in ``path`` after byte ``offset``; returns them and the new offset.

    Each request appears once, whatever the number of stages it was logged at.
    A partly written last line is left for the next call.
    """
    requests: dict[str, Request] = {}
    with path.open("rb") as stream:
        stream.seek(offset)
        data = stream.read()
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        if not line.strip():
            continue
        request = _parse(line)
        if request is not None and request.audit_id not in requests:
            requests[request.audit_id] = request
    return list(requests.values()), offset + end


def _parse(line: bytes) -> Request | None:
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(event, dict) or event.get("kind") != "Event":
        return None
    ref = event.get("objectRef") or {}
    status = event.get("responseStatus") or {}
    return Request(
        audit_id=str(event.get("auditID", "")),
        user=str((event.get("user") or {}).get("username", "")),
        verb=str(event.get("verb", "")),
        resource=str(ref.get("resource", "")),
        subresource=str(ref.get("subresource", "")),
        namespace=str(ref.get("namespace", "")),
        name=str(ref.get("name", "")),
        code=int(status.get("code", 0) or 0),
        received=str(event.get("requestReceivedTimestamp", "")),
        completed=str(event.get("stageTimestamp", "")),
        user_agent=str(event.get("userAgent", "")),
    )


@dataclass
class RequestCounts:
    """Requests of one identity, by verb and by ``verb resource[/subresource]``."""

    total: int = 0
    by_verb: Counter[str] = field(default_factory=Counter)
    by_call: Counter[str] = field(default_factory=Counter)
    errors: int = 0  # responses >= 400 (409 Conflict included: they cost a round trip too)
    # origin (Request.origin) → ``verb resource[/subresource]`` → requests
    by_origin: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, request: Request) -> None:
        self.total += 1
        call = f"{request.verb} {request.kind}"
        self.by_verb[request.verb] += 1
        self.by_call[call] += 1
        self.by_origin.setdefault(request.origin, Counter())[call] += 1
        if request.code >= 400:
            self.errors += 1

    def per_node(self, nodes: int) -> float:
        return self.total / nodes if nodes else 0.0

    def to_json(self, nodes: int) -> dict[str, object]:
        return {
            "total": self.total,
            "per_node": round(self.per_node(nodes), 3),
            "errors": self.errors,
            "by_verb": dict(sorted(self.by_verb.items())),
            "by_verb_per_node": {
                verb: round(count / nodes, 3) for verb, count in sorted(self.by_verb.items())
            }
            if nodes
            else {},
            "by_call": dict(sorted(self.by_call.items())),
            "by_origin": {
                origin: dict(sorted(calls.items()))
                for origin, calls in sorted(self.by_origin.items())
            },
        }


def count_by_user(requests: Iterable[Request]) -> dict[str, RequestCounts]:
    counts: dict[str, RequestCounts] = {}
    for request in requests:
        counts.setdefault(request.user, RequestCounts()).add(request)
    return counts


class AuditTail:
    """Reads an audit log incrementally, keeping every request seen so far."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._seen: set[str] = set()
        self.requests: list[Request] = []

    def poll(self) -> list[Request]:
        """New requests since the last poll (deduplicated across polls by auditID)."""
        if not self.path.exists():
            return []
        batch, self._offset = read_requests(self.path, self._offset)
        fresh = [r for r in batch if r.audit_id not in self._seen]
        self._seen.update(r.audit_id for r in fresh)
        self.requests.extend(fresh)
        return fresh

    def of_user(self, user: str) -> Iterator[Request]:
        return (r for r in self.requests if r.user == user)
