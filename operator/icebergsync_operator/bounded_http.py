"""The operator's HTTP transport to tenants' endpoints: checked, direct, deadline-bound and size-capped.

``BoundedAdapter`` is mounted on the requests session pyiceberg's REST catalog uses, before any
request is made (OAuth2 token exchange included). For every request it:

- parses the URL with ``endpoints.parse_endpoint``, has the caller's ``check`` allow it, and
  connects to exactly that parse's scheme, host and port (never through a proxy);
- registers each new socket with the read's ``Deadline``, which cuts it when the deadline passes;
- refuses redirects instead of following them;
- reads the whole body itself, decompressing gzip/deflate with a cap on the decompressed size and
  every byte charged to the read's ``MemoryShare``, so neither a slow drip nor a gzip bomb outlives
  the deadline, the cap or the operator's memory for catalog reads.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool

from icebergsync_operator.catalog_memory import MemoryShare, TooLarge
from icebergsync_operator.deadline import Deadline
from icebergsync_operator.endpoints import Endpoint, parse_endpoint

CHUNK = 64 * 1024
ACCEPTED_ENCODING = "gzip, deflate"
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class RefusedResponse(Exception):
    """An answer the operator will not take; the message is safe to show (no remote content)."""


def _watched(base: type[HTTPConnection], deadline: Deadline) -> type[HTTPConnection]:
    class Watched(base):  # type: ignore[valid-type,misc]
        def _new_conn(self) -> Any:
            sock = super()._new_conn()
            deadline.watch(sock)
            return sock

    return Watched


def too_large(limit: int) -> TooLarge:
    return TooLarge(f"sent a response larger than {limit} bytes")


class CappedBody:
    """A body accumulated up to the share's ``body_limit`` bytes after decompression (gzip, deflate or
    none), each byte charged to ``memory`` as it arrives."""

    def __init__(self, encoding: str, memory: MemoryShare):
        encoding = encoding.strip().lower()
        if encoding not in ("", "identity", *_WBITS):
            raise RefusedResponse("sent a body in a content encoding the operator did not ask for")
        self._inflate = zlib.decompressobj(_WBITS[encoding]) if encoding in _WBITS else None
        self._memory = memory
        self._limit = memory.body_limit
        self.data = bytearray()
        memory.start_body()

    def _add(self, data: bytes) -> None:
        if len(self.data) + len(data) > self._limit:
            raise too_large(self._limit)
        self._memory.charge(len(data))
        self.data += data

    def feed(self, chunk: bytes) -> None:
        while chunk:
            room = self._limit + 1 - len(self.data)
            if self._inflate is None:
                self._add(chunk[:room])
                chunk = b""
            else:
                try:
                    self._add(self._inflate.decompress(chunk, min(room, CHUNK)))
                except zlib.error:
                    raise RefusedResponse("sent a body that does not decompress") from None
                chunk = self._inflate.unconsumed_tail


def read_body(response: requests.Response, deadline: Deadline, memory: MemoryShare) -> bytes:
    """The whole decompressed body, or ``TooLarge`` past the share's body limit or budget."""
    length = response.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > memory.body_limit:
        raise too_large(memory.body_limit)
    body = CappedBody(response.headers.get("Content-Encoding", ""), memory)
    for chunk in response.raw.stream(CHUNK, decode_content=False):
        deadline.remaining()
        body.feed(chunk)
    return bytes(body.data)


class BoundedAdapter(HTTPAdapter):
    """Transport for one catalog read: see the module docstring."""

    def __init__(self, deadline: Deadline, check: Callable[[Endpoint], None], memory: MemoryShare):
        super().__init__(max_retries=0)
        self._deadline = deadline
        self._check = check
        self._memory = memory
        self._connections = {"http": _watched(HTTPConnection, deadline),
                             "https": _watched(HTTPSConnection, deadline)}

    def get_connection_with_tls_context(self, request: requests.PreparedRequest, verify: Any,
                                        proxies: Any = None, cert: Any = None) -> HTTPConnectionPool:
        target = parse_endpoint(str(request.url).partition("?")[0])
        self._check(target)
        _, pool_kwargs = self.build_connection_pool_key_attributes(request, verify, cert)
        pool = self.poolmanager.connection_from_host(target.host, target.port, target.scheme, pool_kwargs=pool_kwargs)
        pool.ConnectionCls = self._connections[target.scheme]
        return pool

    def send(self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None,
             verify: Any = True, cert: Any = None, proxies: Any = None) -> requests.Response:
        request.headers["Accept-Encoding"] = ACCEPTED_ENCODING
        try:
            response = super().send(request, stream=True, timeout=self._deadline.remaining(), verify=verify,
                                    cert=cert, proxies={})
            try:
                if response.is_redirect:
                    raise RefusedResponse(f"answered with a redirect (HTTP {response.status_code}), which the "
                                          "operator does not follow")
                response._content = read_body(response, self._deadline, self._memory)
            finally:
                response.close()
        except Exception as error:
            if self._deadline.expired and not isinstance(error, (RefusedResponse, TooLarge)):
                raise self._deadline.exceeded() from error
            raise
        return response


def bounded_session(deadline: Deadline, check: Callable[[Endpoint], None], memory: MemoryShare) -> requests.Session:
    """A session whose every request goes through a ``BoundedAdapter``."""
    session = requests.Session()
    adapter = BoundedAdapter(deadline, check, memory)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
