"""Retries of REST catalog requests: what cannot have been applied, and what is safe to repeat.

``urllib3``'s :class:`~urllib3.util.retry.Retry`, mounted on the catalog's ``requests`` session, with the
rule of which request may be repeated after which answer:

* a connection that could not be opened (the request never left): any method;
* ``429 Too Many Requests``: any method — the server refused the request without applying it;
* ``500``/``502``/``503``/``504``, a connection lost after sending, and an answer whose body breaks off (truncated,
  reset mid-body: :class:`ReadingAdapter`): reads (``GET``, ``HEAD``) only.
  A ``POST`` is a create or a commit whose outcome such an answer leaves unknown: the committer looks
  for what landed before it sends again (``spark_app/commit/swap.py``), and ``ensure_table`` retries
  create-or-load as a whole (:mod:`.calls`).

A ``Retry-After`` header is honoured up to ``RETRY_AFTER_MAX_SECONDS``; otherwise the backoff doubles from
``BACKOFF_SECONDS`` with jitter, up to ``BACKOFF_MAX_SECONDS`` (:func:`jittered_backoff`, the wait of every retry of
:mod:`icebergsync.transient`; :func:`repeated`, its loop bounded by attempts).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

log = logging.getLogger("icebergsync")
T = TypeVar("T")

READS = frozenset({"GET", "HEAD"})
NOT_APPLIED = frozenset({429})
UNAVAILABLE = frozenset({500, 502, 503, 504})
ATTEMPTS = 8
CONNECT_ATTEMPTS = 4  # a catalog that refuses connections is more often down or misnamed than blinking
BACKOFF_SECONDS = 0.25
BACKOFF_MAX_SECONDS = 15.0
RETRY_AFTER_MAX_SECONDS = 30


def jittered_backoff(attempt: int, base: float, cap: float) -> float:
    """Seconds to wait before attempt ``attempt + 1``: ``base`` doubled per attempt, at most ``cap``, jittered down
    by up to half (so that clients that failed together do not come back together)."""
    return min(cap, base * 2 ** min(attempt, 16)) * random.uniform(0.5, 1.0)


def repeated(what: str, step: Callable[[], T], transient: Callable[[Exception], bool], attempts: int = ATTEMPTS,
             sleep: Callable[[float], None] = time.sleep) -> T:
    """``step()``, repeated while it fails with an error ``transient`` accepts, ``attempts`` times at most in all, after
    :func:`jittered_backoff` from ``BACKOFF_SECONDS``; the last error, or one not transient, is raised."""
    attempt = 0
    while True:
        try:
            return step()
        except Exception as error:
            attempt += 1
            if attempt >= attempts or not transient(error):
                raise
            delay = jittered_backoff(attempt, BACKOFF_SECONDS, BACKOFF_MAX_SECONDS)
            log.warning("%s: transient fault (%s); attempt %d again in %.1fs", what, error, attempt + 1, delay)
            sleep(delay)


class TransientRetry(Retry):
    """:class:`Retry` that repeats a request only where that is safe (see the module's docstring)."""

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        if status_code in NOT_APPLIED:
            return True
        return method.upper() in READS and status_code in UNAVAILABLE


def transient_retry() -> TransientRetry:
    """The retry policy of one catalog session."""
    return TransientRetry(
        total=ATTEMPTS, connect=CONNECT_ATTEMPTS, read=ATTEMPTS, status=ATTEMPTS, other=0, redirect=0,
        allowed_methods=READS, backoff_factor=BACKOFF_SECONDS, backoff_max=BACKOFF_MAX_SECONDS,
        backoff_jitter=BACKOFF_SECONDS, retry_after_max=RETRY_AFTER_MAX_SECONDS, respect_retry_after_header=True,
        raise_on_status=False,  # the last answer reaches pyiceberg, which raises its own error for it
    )


class ReadingAdapter(HTTPAdapter):
    """An adapter that reads a read's whole answer before it returns, and sends the read again (up to ``ATTEMPTS``)
    when the body breaks off: urllib3's :class:`Retry` ends once an answer's headers arrived, and ``requests`` reads
    the body after it."""

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        if (request.method or "").upper() not in READS or kwargs.get("stream"):
            return super().send(request, **kwargs)
        answered: list[requests.Response] = []  # the attempt's answer, once its headers came (its body is read next)

        def whole() -> requests.Response:
            answered.clear()
            answered.append(HTTPAdapter.send(self, request, **kwargs))  # its own errors: urllib3's retries are spent
            answered[-1].content  # noqa: B018 - reads the body now, within the retries
            return answered[-1]

        return repeated(f"{request.method} {request.path_url}", whole,
                        lambda error: bool(answered) and isinstance(error, _BROKEN_BODY))


_BROKEN_BODY = (requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError)


def mount_retries(session: requests.Session) -> requests.Session:
    """Mount :func:`transient_retry` on ``session`` for http and https; return it."""
    adapter = ReadingAdapter(max_retries=transient_retry())
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
