"""One wall-clock deadline for everything one catalog read does, enforced by cutting its sockets.

A socket timeout bounds each wait, not the exchange: a server that drips a byte a second resets it
forever. A ``Deadline`` knows every socket of its read (HTTP connections, the PostgreSQL
connection) and, when it expires, shuts them all down, so whatever blocks on one of them returns
with an error at once, be it a connect, a TLS handshake, a header line or a body chunk.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from types import TracebackType


class DeadlineExceeded(TimeoutError):
    """The read's deadline passed; the message says after how long."""


class Deadline:
    """``seconds`` from ``start()``; on expiry every watched socket is shut down (a timer does it)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._ends = time.monotonic() + seconds
        self._sockets: list[socket.socket] = []
        self._owned: list[socket.socket] = []  #: duplicates made by ``watch_fd``, closed on exit
        self._expired = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self.expire)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._ends = time.monotonic() + self.seconds
        self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._timer.cancel()
        for sock in self._owned:
            sock.close()

    @property
    def expired(self) -> bool:
        return self._expired or time.monotonic() >= self._ends

    def remaining(self) -> float:
        """Seconds left; ``DeadlineExceeded`` when none are."""
        left = self._ends - time.monotonic()
        if self._expired or left <= 0:
            raise self.exceeded()
        return left

    def exceeded(self) -> DeadlineExceeded:
        return DeadlineExceeded(f"did not answer within {self.seconds:g}s")

    def watch(self, sock: socket.socket) -> None:
        """Cut ``sock`` when the deadline expires (at once if it already has)."""
        with self._lock:
            self._sockets.append(sock)
            expired = self._expired
        if expired:
            _cut(sock)

    def watch_fd(self, fd: int) -> None:
        """Like ``watch``, for a socket known by its file descriptor (a database driver's)."""
        sock = socket.socket(fileno=os.dup(fd))
        self._owned.append(sock)
        self.watch(sock)

    def expire(self) -> None:
        """Shut down every watched socket now; later ones are cut as they are watched."""
        with self._lock:
            self._expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _cut(sock)


def _cut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
