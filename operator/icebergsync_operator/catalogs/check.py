"""The connection check behind a catalog resource's Ready condition, on the operator's bounded read path.

It connects the way a status read does (the same endpoint parse and scope, properties filter,
deadline, size cap, memory budget and safe messages) and asks for nothing about any table: a REST catalog's
config (and OAuth2 token exchange), a SQL catalog's database answering one query.
"""

from __future__ import annotations

from collections.abc import Mapping

from icebergsync.spec import Catalog
from icebergsync_operator.catalog_access import CatalogAccessError, operator_properties
from icebergsync_operator.endpoints import redact
from icebergsync_operator.read_bounds import ReadBounds
from icebergsync_operator.rest_read import open_rest_catalog
from icebergsync_operator.sql_read import check_sql_catalog
from icebergsync_operator.status_update import TableObservation
from icebergsync_operator.table import CatalogReach, bounded, failed_observation


def check_connection(catalog: Catalog, secret_values: Mapping[str, str], reach: CatalogReach) -> None:
    """Return when the catalog answers within the read's bounds; ``CatalogAccessError`` (safe message) otherwise."""
    properties = operator_properties(catalog, secret_values)

    def connect(bounds: ReadBounds) -> None:
        if catalog.type == "rest":
            open_rest_catalog(catalog, properties, bounds)
        else:
            check_sql_catalog(catalog, bounds)

    bounded(catalog, reach, f"checking the catalog at {redact(catalog.uri)}", connect)


def observe_connection(catalog: Catalog, secret_values: Mapping[str, str], reach: CatalogReach) -> TableObservation:
    """The check's outcome as the catalog reads report it: no error, or the error and whether it backs off."""
    try:
        check_connection(catalog, secret_values, reach)
    except CatalogAccessError as error:
        return failed_observation(error)
    return TableObservation()
