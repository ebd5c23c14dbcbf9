"""Read what the table says about a sink, with the catalog's Secret read (into memory) from the sync's namespace.

One read is one ``Deadline`` (``--catalog-timeout``), one ``CatalogScope`` and one share of the
operator's ``MemoryBudget``: the catalog's answers, token exchange, query and metadata file all fit
in them, or the read ends with "catalog at … did not answer within Ns", "… is not among the
endpoints …" or "… sent a response larger than N bytes".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kubernetes.client.rest import ApiException
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table.metadata import TableMetadata

from icebergsync.sink_state import sink_state
from icebergsync.spec import Catalog, IcebergSync, SecretRef
from icebergsync.tables.status import Lanes
from icebergsync_operator.catalog_access import (
    CatalogAccessError,
    CatalogTimeout,
    CatalogTooLarge,
    describe_failure,
    is_timeout,
    is_too_large,
    operator_properties,
    timed_out,
)
from icebergsync_operator.catalog_memory import MemoryBudget
from icebergsync_operator.catalog_scope import CatalogScope
from icebergsync_operator.deadline import Deadline
from icebergsync_operator.kube import KubeApi, UnreadableSecretError
from icebergsync_operator.read_bounds import ReadBounds
from icebergsync_operator.rest_read import read_rest_lanes, read_rest_metadata
from icebergsync_operator.settings import OperatorSettings
from icebergsync_operator.sql_read import read_sql_lanes, read_sql_metadata
from icebergsync_operator.status_update import TableObservation

log = logging.getLogger(__name__)
T = TypeVar("T")


def catalog_secret(api: KubeApi, namespace: str, ref: SecretRef | None) -> dict[str, str]:
    """A catalog Secret's values (none without ``ref``), read from ``namespace`` only."""
    if ref is None:
        return {}
    try:
        return api.read_secret(namespace, ref.name)
    except ApiException as error:
        raise CatalogAccessError(f"cannot read Secret {ref.name!r} of the catalog in namespace "
                                 f"{namespace}: {error.status} {error.reason}") from None
    except UnreadableSecretError as error:
        raise CatalogAccessError(str(error)) from None


@dataclass(frozen=True)
class CatalogReach:
    """How far the operator may go for one catalog: where (``scope``) and with how much memory (``budget``)."""

    settings: OperatorSettings
    scope: CatalogScope
    budget: MemoryBudget


def bounded(catalog: Catalog, reach: CatalogReach, what: str, action: Callable[[ReadBounds], T]) -> T:
    """``action`` within one deadline, scope and memory share; any failure but pyiceberg's "no such table/namespace"
    becomes a ``CatalogAccessError`` with a safe message (``CatalogTimeout`` when the deadline passed,
    ``CatalogTooLarge`` over the size cap or the memory budget)."""
    settings = reach.settings
    memory = reach.budget.share(settings.catalog_max_bytes)
    with Deadline(settings.catalog_timeout) as deadline:
        try:
            return action(ReadBounds(deadline, reach.scope, memory))
        except (NoSuchTableError, NoSuchNamespaceError, CatalogAccessError):
            raise
        except Exception as error:  # a catalog, driver or FileIO error of any library: describe it safely
            log.warning("%s failed: %s", what, type(error).__name__)
            if deadline.expired or is_timeout(error):
                raise CatalogTimeout(timed_out(catalog.uri, settings.catalog_timeout)) from error
            failure = CatalogTooLarge if is_too_large(error) else CatalogAccessError
            raise failure(describe_failure(error, catalog.uri, settings.catalog_timeout)) from error
        finally:
            memory.release()


def read_metadata(sync: IcebergSync, secret_values: dict[str, str], reach: CatalogReach) -> TableMetadata:
    """The table's metadata within one deadline; ``CatalogAccessError`` (safe message) on any failure.

    pyiceberg's "no such table/namespace" errors pass through (the first job creates the table).
    """
    catalog = sync.spec.table.catalog_or_default
    properties = operator_properties(catalog, secret_values)
    read = read_rest_metadata if catalog.type == "rest" else read_sql_metadata
    return bounded(catalog, reach, f"reading table {sync.spec.table.name} for {sync.sink_id}",
                   lambda bounds: read(catalog, properties, sync.spec.table.name, bounds))


def read_lanes(sync: IcebergSync, secret_values: dict[str, str], reach: CatalogReach) -> Lanes:
    """A sync of many tables: its tables (listed, matched, each read) within one deadline, as ``read_metadata``;
    a missing namespace is no tables yet."""
    catalog = sync.spec.table.catalog_or_default
    properties = operator_properties(catalog, secret_values)
    read = read_rest_lanes if catalog.type == "rest" else read_sql_lanes
    try:
        return bounded(catalog, reach, f"reading the tables of {sync.spec.table.name} for {sync.sink_id}",
                       lambda bounds: read(catalog, properties, sync.spec.table.name, sync.sink_id, bounds))
    except NoSuchNamespaceError:
        return Lanes()


def observe_table(api: KubeApi, sync: IcebergSync, reach: CatalogReach) -> TableObservation:
    """The sink's state from the table (from each of its tables, for a template: ``sink`` is then the table of
    the newest commit); a missing table is no error (the first job creates it)."""
    try:
        secret = catalog_secret(api, sync.metadata.namespace, sync.spec.table.catalog_or_default.secret_ref)
        if sync.spec.table.is_template:
            lanes = read_lanes(sync, secret, reach)
            return TableObservation(sink=lanes.newest, lanes=lanes)
        metadata = read_metadata(sync, secret, reach)
        return TableObservation(sink=sink_state(metadata, sync.spec.table.name, sync.sink_id))
    except (NoSuchTableError, NoSuchNamespaceError):
        return TableObservation()
    except CatalogAccessError as error:
        return failed_observation(error)


def failed_observation(error: CatalogAccessError) -> TableObservation:
    """A failed read as observed: its message, and whether it is retried only after a backoff."""
    return TableObservation(error=str(error), timed_out=isinstance(error, CatalogTimeout),
                            too_large=isinstance(error, CatalogTooLarge))
