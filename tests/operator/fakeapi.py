"""A fake Kubernetes API server at the HTTP edge: a local HTTP server that answers each
``(method, path)`` from a script of ``(status, body)`` (its last answer for ever after;
404 for a path not scripted), reached through the real Kubernetes client. What it was
asked is kept (``asked``: method, path and the JSON body sent)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kubernetes

from gpuaccept.operator.kube import Kube

Answer = tuple[int, dict[str, Any]]


def status_body(code: int, message: str = "") -> dict[str, Any]:
    """The body of an error as the API server sends it (a ``Status``)."""
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "message": message}  # fmt: skip


class FakeApiServer(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: dict[tuple[str, str], list[Answer]] = {}
        self.asked: list[tuple[str, str, Any]] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def answer(self, method: str, path: str, body: Any) -> Answer:
        with self._lock:
            answers = self.script.get((method, path))
            self.asked.append((method, path, body))
            if not answers:
                return 404, status_body(404, f"{path} not found")
            return answers.pop(0) if len(answers) > 1 else answers[0]

    def count(self, method: str, path: str) -> int:
        return sum(1 for m, p, _ in self.asked if (m, p) == (method, path))

    def kube(self) -> Kube:
        configuration = kubernetes.client.Configuration()
        configuration.host = self.url
        return Kube(kubernetes.client.ApiClient(configuration))


class _Handler(BaseHTTPRequestHandler):
    server: FakeApiServer

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        sent = json.loads(raw) if raw else None
        status, body = self.server.answer(self.command, self.path, sent)
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def fake_api() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
