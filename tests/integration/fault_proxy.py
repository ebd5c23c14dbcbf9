"""Seeded fault proxies: HTTP on 127.0.0.1 in front of the REST catalog or the object store (MinIO).

A :class:`FaultProxy` forwards every request to its upstream unchanged (the ``Host`` header included: an S3
client signs for the proxy's host and port with SigV4, and the store checks the signature against the ``Host``
it receives), and injects a fault into some of them. Which, and which fault, a :class:`FaultPlan` decides in
arrival order from its seed, the first of its plans that draws one winning (:data:`KINDS`):

* ``429``: ``429 Too Many Requests`` with ``Retry-After: 1``, not forwarded;
* ``500``: the server's error (S3: its XML ``InternalError``), not forwarded;
* ``503``: the server unavailable with ``Retry-After: 1`` (S3: its XML ``ServiceUnavailable``), not forwarded;
* ``slowdown``: S3's ``503 SlowDown`` with ``Retry-After: 1``, not forwarded;
* ``reset``: the connection reset before any answer, not forwarded;
* ``dropped``: forwarded (the request is applied), then the connection reset instead of the answer;
* ``stall``: 1 to 3 s of silence, then forwarded;
* ``truncated``: forwarded, then half the answer's body sent and the connection reset (an answer without a
  body is dropped instead).

``injected`` counts what each proxy did by kind (and, apart, the error answers to a short read, S3's
:data:`SHORT_READ_REFUSED`). A proxy lives for its ``with`` block, at most ``LIFETIME``.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import random
import re
import socket
import struct
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.infra.services import HOST, RestCatalog, S3Server

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"}
LIFETIME = 600.0  #: a proxy stops serving after this many seconds, whatever the test does
CATALOG_KINDS = ("429", "500", "503", "reset", "dropped", "stall", "truncated")
S3_KINDS = ("429", "500", "503", "slowdown", "reset", "dropped", "stall", "truncated")
KINDS = tuple(dict.fromkeys(CATALOG_KINDS + S3_KINDS))
REFUSALS = ("429", "500", "503", "slowdown")  # an error answer, the request not forwarded
SHORT_READ_REFUSED = "refusals of a short read"  # counted besides their kind: error answers to a short read
REST_ERRORS = {429: "TooManyRequestsException", 500: "ServiceFailureException", 503: "ServiceUnavailableException"}


@dataclass(frozen=True)
class Request:
    """What the proxy received: ``method``, ``path`` (with the query), ``body`` and the ``Range`` header's."""

    method: str
    path: str
    body: bytes
    range: str | None = None

    @property
    def range_bytes(self) -> int | None:
        """How many bytes a ``Range: bytes=a-b`` asks for (None: no such range)."""
        found = re.fullmatch(r"bytes=(\d+)-(\d+)", self.range or "")
        return int(found[2]) - int(found[1]) + 1 if found else None


@dataclass(frozen=True)
class Answer:
    """The upstream's answer to a forwarded request."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class FaultPlan:
    """Which requests meet which fault: each request that ``applies`` meets one of ``kinds`` with probability
    ``rate``, drawn in arrival order from ``seed`` (``rate=1``: every such request; ``each``: the kinds in a
    shuffled order, each once per round, rather than at random). At most ``limit`` faults, and never more than ``run``
    in a row (a client's retry budget is finite; the plan tests riding out weather)."""

    seed: int
    kinds: Sequence[str]
    rate: float = 1.0
    applies: Callable[[Request], bool] = lambda _: True
    limit: int | None = None
    run: int = 3
    each: bool = False
    _rng: random.Random = field(init=False, repr=False)
    _order: list[str] = field(init=False, repr=False)
    _in_a_row: int = field(default=0, init=False, repr=False)
    _drawn: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._order = self._rng.sample(list(self.kinds), len(self.kinds))

    def draw(self, request: Request) -> str | None:
        """The fault ``request`` meets (None: forwarded as it is); called under the proxy's lock."""
        if not self.applies(request):
            return None
        roll, kind = self._rng.random(), self._rng.choice(self.kinds)
        if roll >= self.rate or self._in_a_row >= self.run or (self.limit is not None and self._drawn >= self.limit):
            self._in_a_row = 0
            return None
        if self.each:
            kind = self._order[self._drawn % len(self._order)]
        self._in_a_row += 1
        self._drawn += 1
        return kind

    def stall_seconds(self) -> float:
        return self._rng.uniform(1.0, 3.0)


def forward(upstream: tuple[str, int], request: Request, headers: dict[str, str]) -> Answer:
    """Send ``request`` to ``upstream`` with ``headers`` (``Host`` kept) and read the whole answer."""
    connection = http.client.HTTPConnection(*upstream, timeout=60)
    try:
        sent = {k: v for k, v in headers.items() if k.lower() not in HOP_HEADERS}
        connection.request(request.method, request.path, body=request.body or None, headers=sent)
        response = connection.getresponse()
        return Answer(response.status, dict(response.getheaders()), response.read())
    finally:
        connection.close()


def error_answer(status: int, s3: bool, code: str | None = None, retry_after: str | None = None) -> Answer:
    """An error answer in the upstream's own format (S3's XML, the REST catalog's JSON)."""
    if s3:  # as long as S3's own (its RequestId and HostId): a few hundred bytes
        code = code or {429: "SlowDown", 500: "InternalError", 503: "ServiceUnavailable"}[status]
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>injected: please reduce your request rate</Message>'
                f'<RequestId>{random.randbytes(8).hex().upper()}</RequestId>'
                f'<HostId>{base64.b64encode(random.randbytes(57)).decode()}</HostId></Error>')
        headers = {"Content-Type": "application/xml"}
    else:
        kind = REST_ERRORS.get(status, "BadGatewayException")
        body = f'{{"error": {{"message": "injected {status}", "type": "{kind}", "code": {status}}}}}'
        headers = {"Content-Type": "application/json"}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    return Answer(status, headers, body.encode())


class ProxyHandler(BaseHTTPRequestHandler):
    """A request handler that reads a whole request (plain or chunked body) and writes answers; ``handle_request``
    decides what happens to it."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def handle_request(self, request: Request) -> None:
        raise NotImplementedError

    def _handle(self) -> None:
        self.handle_request(Request(self.command, self.path, self._body(), self.headers.get("Range")))

    do_GET = do_POST = do_DELETE = do_HEAD = do_PUT = _handle

    def _body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def reply(self, answer: Answer, body_bytes: int | None = None) -> None:
        """Write ``answer`` (``body_bytes``: only that much of its body, the rest never comes)."""
        self.send_response(answer.status)
        for key, value in answer.headers.items():
            if key.lower() not in HOP_HEADERS:
                self.send_header(key, value)
        length = answer.headers.get("Content-Length") if self.command == "HEAD" else None
        self.send_header("Content-Length", length or str(len(answer.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer.body if body_bytes is None else answer.body[:body_bytes])
        self.wfile.flush()

    def reset(self) -> None:
        """Reset the connection (RST, not FIN): what the client reads is an error, never an answer."""
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        self.close_connection = True


class Proxy:
    """A threading HTTP server on 127.0.0.1 in front of ``upstream`` with ``handler``; a ``with`` block (at most
    ``LIFETIME`` seconds) runs it."""

    def __init__(self, upstream: str, handler: type[ProxyHandler]):
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname or HOST, parsed.port or 80)
        self._server = ThreadingHTTPServer((HOST, 0), handler)
        self._server.daemon_threads = True
        self.address = f"{HOST}:{self._server.server_address[1]}"
        self.uri = f"http://{self.address}{parsed.path}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._lifetime = threading.Timer(LIFETIME, self._server.shutdown)
        self._lifetime.daemon = True

    def __enter__(self) -> Proxy:
        self._thread.start()
        self._lifetime.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._lifetime.cancel()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


class FaultProxy(Proxy):
    """A proxy injecting its ``plans``' faults (``s3``: in S3's format); ``injected`` counts them by kind, ``log``
    holds (monotonic time, method, path, fault) of every request."""

    def __init__(self, upstream: str, *plans: FaultPlan, s3: bool = False):
        self.plans, self.s3 = plans, s3
        self.injected: Counter[str] = Counter()
        self.log: list[tuple[float, str, str, str | None]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(ProxyHandler):
            def handle_request(self, request: Request) -> None:
                with proxy._lock:
                    kind, stall = proxy._draw(request)
                    proxy.log.append((time.monotonic(), request.method, request.path, kind))
                proxy._serve(self, request, kind, stall)

        super().__init__(upstream, Handler)

    def __enter__(self) -> FaultProxy:
        super().__enter__()
        return self

    def _draw(self, request: Request) -> tuple[str | None, float]:
        """The fault ``request`` meets and, for a stall, its seconds; under the lock."""
        for plan in self.plans:
            kind = plan.draw(request)
            if kind is not None:
                return kind, plan.stall_seconds() if kind == "stall" else 0.0
        return None, 0.0

    @property
    def total(self) -> int:
        return sum(count for kind, count in self.injected.items() if kind in KINDS)

    def _serve(self, handler: ProxyHandler, request: Request, kind: str | None, stall: float) -> None:
        refusals = {"429": error_answer(429, self.s3, retry_after="1"), "500": error_answer(500, self.s3),
                    "503": error_answer(503, self.s3, retry_after="1"),
                    "slowdown": error_answer(503, self.s3, "SlowDown", retry_after="1")}
        if kind in refusals:
            self._count(kind)
            if self.s3 and short_read(request):
                self._count(SHORT_READ_REFUSED)
            handler.reply(refusals[kind])
            return
        if kind == "reset":
            self._count(kind)
            handler.reset()
            return
        if kind == "stall":
            self._count(kind)
            time.sleep(stall)
        answer = forward(self.upstream, request, dict(handler.headers))
        if kind == "truncated" and len(answer.body) > 1 and request.method != "HEAD":
            self._count(kind)
            handler.reply(answer, body_bytes=len(answer.body) // 2)
            handler.reset()
        elif kind in ("dropped", "truncated"):
            self._count("dropped")
            handler.reset()
        else:
            handler.reply(answer)

    def _count(self, kind: str) -> None:
        with self._lock:
            self.injected[kind] += 1

    def report(self, name: str) -> str:
        """One line for the test's output: the seed and what was injected, by kind."""
        seeds = ", ".join(str(plan.seed) for plan in self.plans)
        return f"{name}: seed {seeds}, {len(self.log)} requests, {self.total} faults {dict(self.injected)}"


# -- the job's catalog and object store behind fault proxies ---------------------------------------------------------

CATALOG_RATE = 0.1  # of the job's catalog requests, each meets a fault with this probability
STORE_RATE = 0.05  # and of its object-store requests
SHORT_READ_BYTES = 256  # a GET of fewer bytes cannot hold an S3 error answer (the injected ones: 267 to 277 bytes)
DATA_SNAPSHOT = re.compile(rb'"icebergsync\.kind"\s*:\s*"data"')


def everything(_: Request) -> bool:
    return True


def reads(request: Request) -> bool:
    return request.method == "GET"


def short_read(request: Request) -> bool:
    """A GET of a range shorter than an S3 error answer's body: Arrow reads a range into a buffer of its size, the AWS
    SDK writes an error answer's body there too, and one that does not fit fails the read (``INTERNAL_FAILURE``,
    "Failed to flush response stream") unless the reader repeats it (``icebergsync/transient/reads.py``)."""
    return reads(request) and (request.range_bytes or SHORT_READ_BYTES) < SHORT_READ_BYTES


def first_of_each(applies: Callable[[Request], bool]) -> Callable[[Request], bool]:
    """The requests ``applies`` selects, each (method, path, range) the first time only: its repetitions pass."""
    seen: set[tuple[str, str, str | None]] = set()

    def first(request: Request) -> bool:
        key = (request.method, request.path, request.range)
        if key in seen or not applies(request):
            return False
        seen.add(key)
        return True

    return first


def every_kind_once(seed: int, kinds: Sequence[str]) -> FaultPlan:
    """Each of ``kinds`` once, early, on reads (a ``GET`` has a body to truncate)."""
    return FaultPlan(seed, kinds, 0.35, applies=reads, limit=len(kinds), run=1, each=True)


def lands_data(request: Request) -> bool:
    """A sink's data commit: one table's (``POST .../tables/<name>``) or a cut's (``POST .../transactions/commit``)."""
    return request.method == "POST" and bool(DATA_SNAPSHOT.search(request.body))


def after(first: Callable[[Request], bool], then: Callable[[Request], bool]) -> Callable[[Request], bool]:
    """The requests ``then`` selects that arrive after the first one ``first`` selects."""
    seen = False

    def applies(request: Request) -> bool:
        nonlocal seen
        if seen:
            return then(request)
        seen = first(request)
        return False

    return applies


@dataclass
class Weather:
    """The two fault proxies of one sync, and the ``spec.table.catalog`` that reaches the servers through them."""

    catalog: FaultProxy
    store: FaultProxy
    spec_catalog: dict[str, Any]
    seconds: float = 0.0

    @property
    def faults(self) -> int:
        return self.catalog.total + self.store.total

    def report(self) -> str:
        return "\n".join([self.catalog.report("catalog"), self.store.report("object store"),
                          f"{self.faults} faults in {self.seconds:.0f} s"])


@contextlib.contextmanager
def weather(rest: RestCatalog, s3: S3Server, seed: int, *, catalog: tuple[FaultPlan, ...] | None = None,
            store: tuple[FaultPlan, ...] | None = None, **properties: str) -> Iterator[Weather]:
    """Fault proxies in front of ``rest`` and ``s3``: by default a lost first data commit (a 503 before it is
    forwarded), every kind of fault once, every error answer once to the first short reads (:func:`short_read`), and
    random faults of every kind; the report is printed (``pytest -s``) when the block ends."""
    catalog = catalog if catalog is not None else (
        FaultPlan(seed, ("503",), applies=lands_data, limit=1), every_kind_once(seed + 4, CATALOG_KINDS),
        FaultPlan(seed + 1, CATALOG_KINDS, CATALOG_RATE))
    store = store if store is not None else (
        every_kind_once(seed + 5, S3_KINDS),
        FaultPlan(seed + 3, REFUSALS, applies=short_read, limit=len(REFUSALS), run=1, each=True),
        FaultPlan(seed + 2, S3_KINDS, STORE_RATE))
    started = time.monotonic()
    with FaultProxy(rest.uri, *catalog) as catalog_proxy, FaultProxy(s3.endpoint, *store, s3=True) as store_proxy:
        spec_catalog = {"type": "rest", "name": "rest", "uri": catalog_proxy.uri, "warehouse": rest.warehouse,
                        "properties": {**s3.fileio_properties, "s3.endpoint": f"http://{store_proxy.address}",
                                       **properties}}
        found = Weather(catalog_proxy, store_proxy, spec_catalog)
        try:
            yield found
        finally:
            found.seconds = time.monotonic() - started
            print(f"\nfault seed {seed}:\n{found.report()}")


