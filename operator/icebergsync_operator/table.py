"""Read what the table says about a sink, with the catalog's Secret read (into memory) from the sync's namespace.

One read is one ``Deadline`` (``--catalog-timeout``): the catalog's answers, token exchange, query
and metadata file all fit in it, or the read ends with "catalog at … did not answer within Ns".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
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
    describe_failure,
    is_timeout,
    operator_properties,
    timed_out,
)
from icebergsync_operator.deadline import Deadline
from icebergsync_operator.kube import KubeApi, UnreadableSecretError
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


def bounded(catalog: Catalog, settings: OperatorSettings, what: str, action: Callable[[Deadline], T]) -> T:
    """``action`` within one deadline; any failure but pyiceberg's "no such table/namespace" becomes a
    ``CatalogAccessError`` with a safe message (``CatalogTimeout`` when the deadline passed)."""
    with Deadline(settings.catalog_timeout) as deadline:
        try:
            return action(deadline)
        except (NoSuchTableError, NoSuchNamespaceError, CatalogAccessError):
            raise
        except Exception as error:  # a catalog, driver or FileIO error of any library: describe it safely
            log.warning("%s failed: %s", what, type(error).__name__)
            if deadline.expired or is_timeout(error):
                raise CatalogTimeout(timed_out(catalog.uri, settings.catalog_timeout)) from error
            raise CatalogAccessError(describe_failure(error, catalog.uri, settings.catalog_timeout)) from error


def read_metadata(sync: IcebergSync, secret_values: dict[str, str], settings: OperatorSettings) -> TableMetadata:
    """The table's metadata within one deadline; ``CatalogAccessError`` (safe message) on any failure.

    pyiceberg's "no such table/namespace" errors pass through (the first job creates the table).
    """
    catalog = sync.spec.table.catalog_or_default
    properties = operator_properties(catalog, secret_values)
    read = read_rest_metadata if catalog.type == "rest" else read_sql_metadata
    return bounded(catalog, settings, f"reading table {sync.spec.table.name} for {sync.sink_id}",
                   lambda deadline: read(catalog, properties, sync.spec.table.name, deadline, settings))


def read_lanes(sync: IcebergSync, secret_values: dict[str, str], settings: OperatorSettings) -> Lanes:
    """A sync of many tables: its tables (listed, matched, each read) within one deadline, as ``read_metadata``;
    a missing namespace is no tables yet."""
    catalog = sync.spec.table.catalog_or_default
    properties = operator_properties(catalog, secret_values)
    read = read_rest_lanes if catalog.type == "rest" else read_sql_lanes
    try:
        return bounded(catalog, settings, f"reading the tables of {sync.spec.table.name} for {sync.sink_id}",
                       lambda deadline: read(catalog, properties, sync.spec.table.name, sync.sink_id, deadline,
                                             settings))
    except NoSuchNamespaceError:
        return Lanes()


def observe_table(api: KubeApi, sync: IcebergSync, settings: OperatorSettings) -> TableObservation:
    """The sink's state from the table (from each of its tables, for a template: ``sink`` is then the table of
    the newest commit); a missing table is no error (the first job creates it)."""
    try:
        secret = catalog_secret(api, sync.metadata.namespace, sync.spec.table.catalog_or_default.secret_ref)
        if sync.spec.table.is_template:
            lanes = read_lanes(sync, secret, settings)
            return TableObservation(sink=lanes.newest, lanes=lanes)
        metadata = read_metadata(sync, secret, settings)
        return TableObservation(sink=sink_state(metadata, sync.spec.table.name, sync.sink_id))
    except (NoSuchTableError, NoSuchNamespaceError):
        return TableObservation()
    except CatalogAccessError as error:
        return TableObservation(error=str(error), timed_out=isinstance(error, CatalogTimeout))
