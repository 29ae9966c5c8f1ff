"""An asyncio work queue with de-duplication and delayed adds (client-go style).

* A key is queued at most once; adding a queued key is a no-op.
* A key is processed by at most one worker at a time; a key added while it
  is being processed is queued again when that worker is done.
* ``add_after`` keeps one heap of wake-up times (not a timer per key): the
  earliest wake-up per key wins, and one task moves due keys into the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time


class WorkQueue:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._heap: list[tuple[float, str]] = []
        self._due: dict[str, float] = {}
        self._wakeup = asyncio.Event()

    def __len__(self) -> int:
        return len(self._queued)

    @property
    def delayed(self) -> int:
        return len(self._due)

    def add(self, key: str) -> None:
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.put_nowait(key)

    def add_after(self, key: str, seconds: float) -> None:
        if seconds <= 0:
            self.add(key)
            return
        when = time.monotonic() + seconds
        if key in self._due and self._due[key] <= when:
            return
        self._due[key] = when
        heapq.heappush(self._heap, (when, key))
        self._wakeup.set()

    async def get(self) -> str:
        key = await self._queue.get()
        self._queued.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    async def run_delayed(self) -> None:
        """Move keys whose time has come into the queue (one task for all keys)."""
        while True:
            now = time.monotonic()
            while self._heap and self._heap[0][0] <= now:
                when, key = heapq.heappop(self._heap)
                if self._due.get(key) == when:
                    del self._due[key]
                    self.add(key)
            timeout = (self._heap[0][0] - now) if self._heap else None
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout=timeout)
