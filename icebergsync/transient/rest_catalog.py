"""The REST catalog the job opens: pyiceberg's, with :mod:`icebergsync.transient.http` mounted on its session."""

from __future__ import annotations

from pyiceberg.catalog.rest import RestCatalog
from requests import Session

from icebergsync.transient.http import mount_retries


class RetryingRestCatalog(RestCatalog):
    """A :class:`RestCatalog` whose every request (the config fetch, token exchanges, loads, commits) rides
    out transient faults where repeating it is safe."""

    def _create_session(self) -> Session:
        return mount_retries(super()._create_session())


IMPL = f"{RetryingRestCatalog.__module__}.{RetryingRestCatalog.__qualname__}"
