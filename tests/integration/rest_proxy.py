"""A tiny HTTP proxy in front of the Iceberg REST catalog that can make a sink's data commits fail.

Faults are planned per data-commit request (a POST to a table whose snapshot says
``icebergsync.kind=data``), numbered from 1 in arrival order, retries included:

* ``"conflict"``: run ``before_conflict`` (another writer commits directly to the server), then
  forward — the server answers 409 because the head moved.
* ``"lost-response"``: forward (the commit lands), then answer 502: the client cannot know.
* ``"unavailable"``: answer 503 without forwarding (nothing landed).

Everything else is forwarded unchanged (tests/integration/fault_proxy.py: the seeded faults of any request).
Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from tests.integration.fault_proxy import Proxy, ProxyHandler, Request, error_answer, forward


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


class RestProxy(Proxy):
    def __init__(self, upstream: str, faults: dict[int, str], before_conflict: Callable[[], None] | None = None):
        self.faults = dict(faults)
        self.before_conflict = before_conflict
        self.actions: list[str] = []  # what happened to each data-commit request
        self.statuses: list[int] = []  # what the client was told for each
        self._lock = threading.Lock()
        proxy = self

        class Handler(ProxyHandler):
            def handle_request(self, request: Request) -> None:
                fault = None
                if is_data_commit(request.method, request.path, request.body):
                    with proxy._lock:
                        fault = proxy.faults.get(len(proxy.actions) + 1, "forward")
                        proxy.actions.append(fault)
                if fault == "unavailable":
                    answer = error_answer(503, s3=False)
                else:
                    if fault == "conflict" and proxy.before_conflict is not None:
                        proxy.before_conflict()
                    answer = forward(proxy.upstream, request, dict(self.headers))
                    if fault == "lost-response":
                        answer = error_answer(502, s3=False)
                self.reply(answer)
                if fault is not None:
                    proxy.statuses.append(answer.status)

        super().__init__(upstream, Handler)

    def __enter__(self) -> RestProxy:
        super().__enter__()
        return self
