"""kube-apiserver's own request counter, ``apiserver_request_total``.

The counter has no user label, so it cannot split the operator's requests from
the stand-in's; the benchmark uses it as a cross-check of the audit-log
counts: the delta over a run is every client's requests together.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from kubernetes import client

_LINE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Key = tuple[str, str, str]  # verb, resource, subresource


def parse(text: str) -> Counter[Key]:
    """``apiserver_request_total`` summed over code, component, group, version, scope."""
    totals: Counter[Key] = Counter()
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        if labels.get("resource", "") == "":
            continue  # non-resource URLs (/healthz, /metrics, ...)
        verb = labels.get("verb", "").lower()
        key = (verb, labels.get("resource", ""), labels.get("subresource", ""))
        totals[key] += int(float(match["value"]))
    return totals


def scrape(api: client.ApiClient) -> Counter[Key]:
    """The counter now, as the admin (client certificate) sees it."""
    rest: Any = api.rest_client
    response: Any = rest.request("GET", f"{api.configuration.host}/metrics", headers={})
    response.read()
    if response.status != 200:
        raise RuntimeError(f"GET /metrics: {response.status}")
    return parse(response.data.decode())


def delta(after: Counter[Key], before: Counter[Key]) -> Counter[Key]:
    out: Counter[Key] = Counter()
    for key, value in after.items():
        diff = value - before.get(key, 0)
        if diff > 0:
            out[key] = diff
    return out


def by_verb(counts: Counter[Key]) -> Counter[str]:
    verbs: Counter[str] = Counter()
    for (verb, _resource, _sub), value in counts.items():
        verbs[verb] += value
    return verbs
