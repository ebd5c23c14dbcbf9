"""The job's own idempotent steps against the catalog and the object store, retried on transient faults.

What :mod:`.http` and :mod:`.object_store` did not ride out below (their budgets spent, or a ``POST`` whose
answer was lost) reaches the step that made the call. A step that is idempotent as a whole — create-or-load
a table, load a table, delete staged files — is repeated by :func:`retry_transient` with jittered
exponential backoff until ``BUDGET_SECONDS`` have passed; then it raises the documented error
(:class:`~icebergsync.errors.CatalogUnreachableError`, :class:`~icebergsync.errors.ObjectStoreUnreachableError`)
with the cause's last line. An error that is not transient (a refused spec, a missing table, a fence) is
raised at once, as it was.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable
from typing import TypeVar

import requests
from pyiceberg.exceptions import ServerError, ServiceUnavailableError, TooManyRequestsError

from icebergsync.errors import CatalogUnreachableError, IcebergSyncError, ObjectStoreUnreachableError

log = logging.getLogger("icebergsync")
T = TypeVar("T")

BUDGET_SECONDS = 120.0
BACKOFF_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 15.0

# What pyarrow's S3 filesystem says of a fault worth waiting out (AWS SDK error names, HTTP statuses).
_TRANSIENT_S3 = re.compile(
    r"AWS Error (NETWORK_CONNECTION|SLOW_DOWN|SERVICE_UNAVAILABLE|INTERNAL_FAILURE|THROTTLING|REQUEST_TIMEOUT|"
    r"REQUEST_TIME_TOO_SKEWED)|HTTP status (429|5\d\d)|curlCode: (6|7|18|28|52|55|56)|Connection reset|timed out")
_SPARK_TASK_FAILURES = ("PythonException", "Py4JJavaError")
_CATALOG_FAULTS: tuple[type[BaseException], ...] = (
    TooManyRequestsError, ServiceUnavailableError, ServerError, requests.ConnectionError, requests.Timeout,
    requests.exceptions.ChunkedEncodingError)


def catalog_fault(error: BaseException) -> bool:
    """Whether ``error`` is a transient fault of the catalog (a refusal to wait out, a lost connection)."""
    if isinstance(error, _CATALOG_FAULTS):
        return True
    try:
        from sqlalchemy.exc import DisconnectionError, OperationalError
    except ImportError:  # pragma: no cover - sqlalchemy comes with pyiceberg[sql-postgres]
        return False
    return isinstance(error, OperationalError | DisconnectionError)


def object_store_fault(error: BaseException) -> bool:
    """Whether ``error`` is a transient fault of the object store, as pyarrow's S3 filesystem reports it: in this
    process, or in a Spark task whose failure reached the driver (``PythonException``, ``Py4JJavaError``)."""
    if isinstance(error, FileNotFoundError | PermissionError):
        return False
    from_task = type(error).__name__ in _SPARK_TASK_FAILURES and "OSError" in str(error)
    return (isinstance(error, OSError) or from_task) and bool(_TRANSIENT_S3.search(str(error)))


def last_line(error: BaseException) -> str:
    """The last nonempty line of ``error``'s message (the SDK's and the servers' messages run long)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}".rstrip(": ")


def unreachable(what: str, error: BaseException) -> IcebergSyncError | None:
    """The documented error for ``error`` met by ``what`` when it is transient (None: it is not)."""
    if catalog_fault(error):
        return CatalogUnreachableError(f"{what}: the catalog did not answer usefully ({last_line(error)})")
    if object_store_fault(error):
        return ObjectStoreUnreachableError(f"{what}: the object store did not answer usefully ({last_line(error)})")
    return None


def retry_transient(what: str, step: Callable[[], T], budget_seconds: float = BUDGET_SECONDS,
                    sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> T:
    """``step()``, repeated while it fails with a transient fault, until ``budget_seconds`` have passed.

    ``step`` must be idempotent as a whole. After the budget the documented error for the last fault is
    raised (see :func:`unreachable`); any other error is raised at once."""
    deadline = clock() + budget_seconds
    attempt = 0
    while True:
        attempt += 1
        try:
            return step()
        except Exception as error:
            documented = unreachable(what, error)
            if documented is None:
                raise
            delay = min(BACKOFF_MAX_SECONDS, BACKOFF_SECONDS * 2 ** min(attempt - 1, 8)) * random.uniform(0.5, 1.0)
            if clock() + delay > deadline:
                raise documented from error
            log.warning("%s: transient fault (%s); attempt %d again in %.1fs", what, last_line(error), attempt + 1,
                        delay)
            sleep(delay)
