"""Servers standing in for a hostile tenant's catalog, on 127.0.0.1 only, each with a bounded lifetime.

``Listener`` accepts connections in a thread, counts them, and hands each to a behaviour: hold it
and never answer (a tarpit), drip a response a byte a second, send an endless body as fast as the
reader takes it, send a fixed response (a gzip bomb, a redirect), or speak PostgreSQL up to
authentication and then go silent. Leaving the ``with``
block (or ``stop``) closes the listener and every connection, and joins the threads.
"""

from __future__ import annotations

import contextlib
import gzip
import socket
import struct
import threading
from collections.abc import Callable
from types import TracebackType

Behaviour = Callable[[socket.socket, threading.Event], None]
LIFETIME = 120.0  #: no connection is held longer than this, whatever the test does


class Listener:
    """A TCP listener on 127.0.0.1 that runs ``behaviour`` for every connection it accepts."""

    def __init__(self, behaviour: Behaviour | None = None):
        self._behaviour = behaviour or hold
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self._socket.settimeout(0.2)
        self.port = int(self._socket.getsockname()[1])
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()
        self._lifetime = threading.Timer(LIFETIME, self._stop.set)
        self._lifetime.daemon = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def connections(self) -> int:
        """Connections accepted so far."""
        with self._lock:
            return len(self._connections)

    def __enter__(self) -> Listener:
        self._spawn(self._accept)
        self._lifetime.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._lifetime.cancel()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._socket.close()

    def _spawn(self, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except (TimeoutError, OSError):
                continue
            with self._lock:
                self._connections.append(connection)
            self._spawn(lambda connection=connection: self._serve(connection))  # type: ignore[misc]

    def _serve(self, connection: socket.socket) -> None:
        with contextlib.suppress(OSError):
            self._behaviour(connection, self._stop)


def hold(connection: socket.socket, stop: threading.Event) -> None:
    """A tarpit: accept, never answer."""
    stop.wait()


def _read_request_head(connection: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return
        data += chunk


def drip(connection: socket.socket, stop: threading.Event) -> None:
    """A slow drip: a 200 whose headers promise a large body, then one byte every second."""
    _read_request_head(connection)
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
    while not stop.wait(1.0):
        connection.sendall(b" ")


def endless(connection: socket.socket, stop: threading.Event) -> None:
    """An endless body: a 200 without a length, then zeros as fast as the reader takes them."""
    _read_request_head(connection)
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
    block = b"\0" * 65536
    while not stop.is_set():
        connection.sendall(block)


def respond(status: str, headers: dict[str, str], body: bytes = b"") -> Behaviour:
    """Answer every request with this response."""
    head = "".join(f"{name}: {value}\r\n" for name, value in {**headers, "Content-Length": str(len(body))}.items())
    response = f"HTTP/1.1 {status}\r\n{head}\r\n".encode() + body

    def behaviour(connection: socket.socket, stop: threading.Event) -> None:
        _read_request_head(connection)
        connection.sendall(response)
        stop.wait()

    return behaviour


def gzip_bomb(decompressed_bytes: int) -> bytes:
    """A gzip body of ``decompressed_bytes`` zeros (about a thousandth of that compressed)."""
    return gzip.compress(b"\0" * decompressed_bytes, compresslevel=9)


def _message(kind: bytes, payload: bytes) -> bytes:
    return kind + struct.pack("!I", len(payload) + 4) + payload


def silent_postgres(connection: socket.socket, stop: threading.Event) -> None:
    """PostgreSQL up to "ready for query" (any user, no password), then silence."""
    while True:
        (length,) = struct.unpack("!I", _recv_exactly(connection, 4))
        (code,) = struct.unpack("!I", _recv_exactly(connection, 4))
        _recv_exactly(connection, length - 8)
        if code in (80877103, 80877104):  # SSLRequest, GSSENCRequest: refused, go on in plain text
            connection.sendall(b"N")
            continue
        break
    parameters = {"server_version": "16.0", "server_encoding": "UTF8", "client_encoding": "UTF8",
                  "standard_conforming_strings": "on", "integer_datetimes": "on", "DateStyle": "ISO, MDY"}
    connection.sendall(_message(b"R", struct.pack("!I", 0))
                       + b"".join(_message(b"S", f"{key}\0{value}\0".encode()) for key, value in parameters.items())
                       + _message(b"K", struct.pack("!II", 1, 1)) + _message(b"Z", b"I"))
    stop.wait()


def _recv_exactly(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data
