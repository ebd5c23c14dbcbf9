"""A tiny HTTP proxy in front of the Iceberg REST catalog that can make a sink's data commits fail.

Faults are planned per data-commit request (a POST to a table whose snapshot says
``icebergsync.kind=data``), numbered from 1 in arrival order, retries included:

* ``"conflict"``: run ``before_conflict`` (another writer commits directly to the server), then
  forward — the server answers 409 because the head moved.
* ``"lost-response"``: forward (the commit lands), then answer 502: the client cannot know.
* ``"unavailable"``: answer 503 without forwarding (nothing landed).

Everything else is forwarded unchanged. Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.infra.services import HOST

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def is_data_commit(method: str, path: str, body: bytes) -> bool:
    if method != "POST" or "/tables/" not in path or not body:
        return False
    try:
        request = json.loads(body)
    except ValueError:
        return False
    return any(
        update.get("action") == "add-snapshot"
        and (update.get("snapshot", {}).get("summary") or {}).get("icebergsync.kind") == "data"
        for update in request.get("updates", [])
    )


class RestProxy:
    def __init__(self, upstream: str, faults: dict[int, str], before_conflict: Callable[[], None] | None = None):
        parsed = urllib.parse.urlsplit(upstream)
        self._upstream = (parsed.hostname or HOST, parsed.port or 80)
        self.faults = dict(faults)
        self.before_conflict = before_conflict
        self.actions: list[str] = []  # what happened to each data-commit request
        self.statuses: list[int] = []  # what the client was told for each
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                fault = None
                if is_data_commit(self.command, self.path, body):
                    with proxy._lock:
                        number = len(proxy.actions) + 1
                        fault = proxy.faults.get(number, "forward")
                        proxy.actions.append(fault)
                if fault == "unavailable":
                    self._reply(503, b'{"error": {"message": "injected: unavailable", "type": "ServiceUnavailable", '
                                     b'"code": 503}}', {"Content-Type": "application/json"})
                    proxy.statuses.append(503)
                    return
                if fault == "conflict" and proxy.before_conflict is not None:
                    proxy.before_conflict()
                status, headers, answer = proxy._forward(self.command, self.path, dict(self.headers), body)
                if fault == "lost-response":
                    status, answer = 502, b'{"error": {"message": "injected: bad gateway", "type": "BadGateway", "code": 502}}'
                    headers = {"Content-Type": "application/json"}
                self._reply(status, answer, headers)
                if fault is not None:
                    proxy.statuses.append(status)

            def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    if key.lower() not in HOP_HEADERS:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = do_HEAD = do_PUT = _handle

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self.uri = f"http://{HOST}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection(*self._upstream, timeout=60)
        try:
            forwarded = {k: v for k, v in headers.items() if k.lower() not in HOP_HEADERS}
            connection.request(method, path, body=body or None, headers=forwarded)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def __enter__(self) -> RestProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
