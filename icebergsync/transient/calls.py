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
import re
import time
from collections.abc import Callable
from typing import TypeVar

import requests
from pyiceberg.exceptions import ServerError, ServiceUnavailableError, TooManyRequestsError

from icebergsync.errors import (
    CatalogUnreachableError,
    IcebergSyncError,
    ObjectStoreUnreachableError,
    SchemaRegistryUnreachableError,
)
from icebergsync.transient.http import jittered_backoff

log = logging.getLogger("icebergsync")
T = TypeVar("T")

BUDGET_SECONDS = 120.0
BACKOFF_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 15.0

# What pyarrow's S3 filesystem says of a fault worth waiting out (AWS SDK error names, HTTP statuses).
_TRANSIENT_S3 = re.compile(
    r"AWS Error (NETWORK_CONNECTION|SLOW_DOWN|SERVICE_UNAVAILABLE|INTERNAL_FAILURE|THROTTLING|REQUEST_TIMEOUT|"
    r"REQUEST_TIME_TOO_SKEWED)|HTTP status (429|5\d\d)|curlCode: (6|7|18|28|52|55|56)|Connection reset|timed out")
# How the driver hears of a Spark task's error (a Py4JJavaError, a PythonException): the worker's traceback as text,
# its exception on a line of its own.
_TASK_OS_ERROR = re.compile(r"^(?:builtins\.)?OSError: .*$", re.MULTILINE)
_TASK_REGISTRY_FAULT = re.compile(r"SchemaRegistryUnreachableError: (.*)$", re.MULTILINE)
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
    """Whether ``error`` is a transient fault of the object store (as pyarrow's S3 filesystem reports it), met by the
    driver or by a Spark task (an executor's upload: the driver hears of it as the task's failure)."""
    if isinstance(error, OSError):
        return not isinstance(error, FileNotFoundError | PermissionError) and bool(_TRANSIENT_S3.search(str(error)))
    return _task_fault(error) is not None


def _task_fault(error: BaseException) -> str | None:
    """The line of the transient object-store fault of a Spark task whose failure ``error`` reports (None: none)."""
    return next((line for line in reversed(_TASK_OS_ERROR.findall(str(error))) if _TRANSIENT_S3.search(line)), None)


def last_line(error: BaseException) -> str:
    """The last nonempty line of ``error``'s message (the SDK's and the servers' messages run long); for a Spark task's
    object-store fault, its line (the last one of a task's failure is a Java stack frame)."""
    task_fault = None if isinstance(error, OSError) else _task_fault(error)
    if task_fault is not None:
        return f"{type(error).__name__} of a Spark task: {task_fault.strip()}"
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}".rstrip(": ")


def unreachable(what: str, error: BaseException) -> IcebergSyncError | None:
    """The documented error for ``error`` met by ``what`` when it is transient (None: it is not); a Spark task's
    failure from a Schema Registry that outlasted its budget is that error again (its line)."""
    registry = _TASK_REGISTRY_FAULT.search(str(error)) if not isinstance(error, IcebergSyncError) else None
    if registry is not None:
        return SchemaRegistryUnreachableError(registry.group(1).strip())
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
            delay = jittered_backoff(attempt - 1, BACKOFF_SECONDS, BACKOFF_MAX_SECONDS)
            if clock() + delay > deadline:
                raise documented from error
            log.warning("%s: transient fault (%s); attempt %d again in %.1fs", what, last_line(error), attempt + 1,
                        delay)
            sleep(delay)
