"""Retries of REST catalog requests: what cannot have been applied, and what is safe to repeat.

``urllib3``'s :class:`~urllib3.util.retry.Retry`, mounted on the catalog's ``requests`` session, with the
rule of which request may be repeated after which answer:

* a connection that could not be opened (the request never left): any method;
* ``429 Too Many Requests``: any method — the server refused the request without applying it;
* ``500``/``502``/``503``/``504``, a connection lost after sending, and an answer whose body breaks off (truncated,
  reset mid-body: :class:`ReadingAdapter`): reads (``GET``, ``HEAD``) only.
  A ``POST`` is a create or a commit whose outcome such an answer leaves unknown: the committer looks
  for what landed before it sends again (``spark_app/committer.py``), and ``ensure_table`` retries
  create-or-load as a whole (:mod:`.calls`).

A ``Retry-After`` header is honoured up to ``RETRY_AFTER_MAX_SECONDS``; otherwise the backoff doubles from
``BACKOFF_SECONDS`` with jitter, up to ``BACKOFF_MAX_SECONDS``.
"""

from __future__ import annotations

import random
import time
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

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
        attempt = 0
        while True:
            response = super().send(request, **kwargs)
            if (request.method or "").upper() not in READS or kwargs.get("stream"):
                return response
            try:
                response.content  # noqa: B018 - reads the body now, within the retries
                return response
            except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError):
                attempt += 1
                if attempt >= ATTEMPTS:
                    raise
                time.sleep(jittered_backoff(attempt, BACKOFF_SECONDS, BACKOFF_MAX_SECONDS))


def mount_retries(session: requests.Session) -> requests.Session:
    """Mount :func:`transient_retry` on ``session`` for http and https; return it."""
    adapter = ReadingAdapter(max_retries=transient_retry())
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
