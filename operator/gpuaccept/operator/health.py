"""``/healthz`` (liveness) and ``/readyz`` (readiness) on ``--health-port``.

* ``/healthz``: 200 while the event loop answers and the operator's own tasks
  (workers, delay queue, leader election, policy status) are alive.
* ``/readyz``: 200 once kopf has started (logged in, handlers registered).
  A standby replica (not the Lease holder) is ready: it keeps a warm cache.
"""

from __future__ import annotations

import threading

from aiohttp import web

from gpuaccept.operator.controller import Controller


async def serve_health(port: int, controller: Controller, ready: threading.Event) -> web.AppRunner:
    async def healthz(_: web.Request) -> web.Response:
        if controller.started and not controller.healthy():
            return web.Response(status=500, text="a controller task died\n")
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if ready.is_set() and controller.started:
            return web.Response(text="ok\n")
        return web.Response(status=503, text="starting\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner
