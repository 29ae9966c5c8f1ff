"""The harness's own list+watch of a kind (as the admin; not counted for the arms).

:func:`list_then_watch` lists, hands every item to ``on_event`` as ``ADDED``, then
watches from the list's resourceVersion (30 s at a time) until ``stop`` is set;
:func:`keep_watching` runs it again after an error, so a broken watch costs a
relist, not the run. Used by the fleet benchmark's tracker and the
re-verification phase's observer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import watch

from gpuaccept.contracts.api import ACCEPTANCE_PLURAL, GROUP, VERSION

OnEvent = Callable[[str, Any], None]


def list_then_watch(
    list_call: Callable[..., Any],
    *args: Any,
    on_event: OnEvent,
    stop: threading.Event,
    on_listed: Callable[[], None] | None = None,
    **params: Any,
) -> None:
    """One list, then one watch (the API's typed objects, or dicts for custom objects);
    ``args`` and ``params`` go to both calls (a namespace, a label selector);
    ``on_listed`` is called once the list's items are handed over."""
    listed = list_call(*args, **params)
    if isinstance(listed, dict):
        items, version = listed["items"], listed["metadata"]["resourceVersion"]
    else:
        items = listed.items
        version = listed.metadata.resource_version if listed.metadata else None
    for item in items:
        on_event("ADDED", item)
    if on_listed is not None:
        on_listed()
    stream: Any = watch.Watch()  # type: ignore[no-untyped-call]
    for event in stream.stream(
        list_call, *args, resource_version=version, timeout_seconds=30, **params
    ):
        on_event(event["type"], event["object"])
        if stop.is_set():
            stream.stop()


def list_then_watch_acceptances(
    custom: Any,
    on_event: OnEvent,
    stop: threading.Event,
    on_listed: Callable[[], None] | None = None,
) -> None:
    """:func:`list_then_watch` of every NodeAcceptance (``custom``: a CustomObjectsApi)."""
    list_then_watch(
        custom.list_cluster_custom_object,
        GROUP,
        VERSION,
        ACCEPTANCE_PLURAL,
        on_event=on_event,
        stop=stop,
        on_listed=on_listed,
    )


def keep_watching(
    body: Callable[[], None], stop: threading.Event, warn: Callable[[str], None]
) -> None:
    """``body`` again and again until ``stop`` (an error: warn, wait 0.5 s, again)."""
    while not stop.is_set():
        try:
            body()
        except Exception as error:  # keep watching; the deadline catches a dead watcher
            if not stop.is_set():
                warn(f"[yellow]watch: {error!r}; rewatching[/]")
                time.sleep(0.5)
