"""Running one action against the API server, with the one ladder of what can go
wrong (runtime).

The controller (a node's plan) and the fabric loop (a policy's pass) both run
their writes through an :class:`ActionRunner`: the action goes to the
:class:`~gpuaccept.operator.executor.KubeExecutor` in the API threads, and what
came of it is one :class:`Ran`: done; not leading any more; the cache was stale
(the plan is dropped and re-made); a conflict (the object is re-read into the
cache first); a status the API server refused as invalid (kept for the core by
the executor); or another API error. Each caller decides what its plan does next.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum

from kubernetes.client.exceptions import ApiException

from gpuaccept.operator import metrics
from gpuaccept.operator.core.model import Action, NodeSnapshot
from gpuaccept.operator.executor import KubeExecutor, StaleCacheError, StatusRefusedError
from gpuaccept.operator.kube import ConflictError

log = logging.getLogger("gpuaccept.operator")


class RunResult(Enum):
    DONE = "done"
    NOT_LEADING = "not leading"
    STALE_CACHE = "stale cache"
    CONFLICT = "conflict"
    STATUS_REFUSED = "status refused"
    API_ERROR = "API error"


@dataclass(frozen=True)
class Ran:
    result: RunResult
    error: ApiException | None = None  # for API_ERROR


class ActionRunner:
    """Runs actions through ``actions`` in ``pool`` (None: the loop's default), while
    ``leading``; ``who`` prefixes its log lines."""

    def __init__(
        self,
        actions: KubeExecutor,
        pool: ThreadPoolExecutor | None,
        *,
        leading: Callable[[], bool],
        who: str = "",
    ) -> None:
        self.actions = actions
        self.pool = pool
        self.leading = leading
        self.who = who

    async def run(self, observed: NodeSnapshot, action: Action) -> Ran:
        if not self.leading():
            return Ran(RunResult.NOT_LEADING)
        node, kind = observed.node_name, type(action).__name__
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.pool, self.actions.execute, observed, action)
        except StaleCacheError:
            return Ran(RunResult.STALE_CACHE)
        except StatusRefusedError as error:
            log.warning("%snode=%s status update refused: %s", self.who, node, error)
            return Ran(RunResult.STATUS_REFUSED)
        except ConflictError:
            log.info("%snode=%s conflict on %s; re-reading", self.who, node, kind)
            await loop.run_in_executor(self.pool, self.actions.refresh, observed, action)
            return Ran(RunResult.CONFLICT)
        except ApiException as error:
            return Ran(RunResult.API_ERROR, error)
        metrics.API_CALLS.labels(kind).inc()
        return Ran(RunResult.DONE)
