"""The operator's HTTP transport to tenants' endpoints: checked, direct, deadline-bound and size-capped.

``BoundedAdapter`` is mounted on the requests session pyiceberg's REST catalog uses, before any
request is made (OAuth2 token exchange included). For every request it:

- parses the URL with ``endpoints.parse_endpoint``, has the caller's ``check`` allow it, and
  connects to exactly that parse's scheme, host and port (never through a proxy);
- registers each new socket with the read's ``Deadline``, which cuts it when the deadline passes;
- refuses redirects instead of following them;
- reads the whole body itself, decompressing gzip/deflate with a cap on the decompressed size,
  so neither a slow drip nor a gzip bomb outlives the deadline or the cap.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool

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


class CappedBody:
    """A body accumulated up to ``limit`` bytes after decompression (gzip, deflate or none)."""

    def __init__(self, encoding: str, limit: int):
        encoding = encoding.strip().lower()
        if encoding not in ("", "identity", *_WBITS):
            raise RefusedResponse("sent a body in a content encoding the operator did not ask for")
        self._inflate = zlib.decompressobj(_WBITS[encoding]) if encoding in _WBITS else None
        self._limit = limit
        self.data = bytearray()

    def feed(self, chunk: bytes) -> None:
        while chunk:
            room = self._limit + 1 - len(self.data)
            if self._inflate is None:
                self.data += chunk[:room]
                chunk = b""
            else:
                try:
                    self.data += self._inflate.decompress(chunk, room)
                except zlib.error:
                    raise RefusedResponse("sent a body that does not decompress") from None
                chunk = self._inflate.unconsumed_tail
            if len(self.data) > self._limit:
                raise RefusedResponse(f"sent a response larger than {self._limit} bytes")


def read_body(response: requests.Response, deadline: Deadline, limit: int) -> bytes:
    """The whole decompressed body, or ``RefusedResponse`` past ``limit`` bytes."""
    length = response.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > limit:
        raise RefusedResponse(f"sent a response larger than {limit} bytes")
    body = CappedBody(response.headers.get("Content-Encoding", ""), limit)
    for chunk in response.raw.stream(CHUNK, decode_content=False):
        deadline.remaining()
        body.feed(chunk)
    return bytes(body.data)


class BoundedAdapter(HTTPAdapter):
    """Transport for one catalog read: see the module docstring."""

    def __init__(self, deadline: Deadline, check: Callable[[Endpoint], None], limit: int):
        super().__init__(max_retries=0)
        self._deadline = deadline
        self._check = check
        self._limit = limit
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
                response._content = read_body(response, self._deadline, self._limit)
            finally:
                response.close()
        except Exception as error:
            if self._deadline.expired and not isinstance(error, RefusedResponse):
                raise self._deadline.exceeded() from error
            raise
        return response


def bounded_session(deadline: Deadline, check: Callable[[Endpoint], None], limit: int) -> requests.Session:
    """A session whose every request goes through a ``BoundedAdapter``."""
    session = requests.Session()
    adapter = BoundedAdapter(deadline, check, limit)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
