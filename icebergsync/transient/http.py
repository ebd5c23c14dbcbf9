"""Retries of REST catalog requests: what cannot have been applied, and what is safe to repeat.

``urllib3``'s :class:`~urllib3.util.retry.Retry`, mounted on the catalog's ``requests`` session, with the
rule of which request may be repeated after which answer:

* a connection that could not be opened (the request never left): any method;
* ``429 Too Many Requests``: any method — the server refused the request without applying it;
* ``500``/``502``/``503``/``504`` and a connection lost after sending: reads (``GET``, ``HEAD``) only.
  A ``POST`` is a create or a commit whose outcome such an answer leaves unknown: the committer looks
  for what landed before it sends again (``spark_app/committer.py``), and ``ensure_table`` retries
  create-or-load as a whole (:mod:`.calls`).

A ``Retry-After`` header is honoured up to ``RETRY_AFTER_MAX_SECONDS``; otherwise the backoff doubles from
``BACKOFF_SECONDS`` with jitter, up to ``BACKOFF_MAX_SECONDS``.
"""

from __future__ import annotations

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


def mount_retries(session: requests.Session) -> requests.Session:
    """Mount :func:`transient_retry` on ``session`` for http and https; return it."""
    adapter = HTTPAdapter(max_retries=transient_retry())
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
