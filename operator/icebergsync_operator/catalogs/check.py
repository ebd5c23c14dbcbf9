"""The connection check behind a catalog resource's Ready condition, on the operator's bounded read path.

It connects the way a status read does (the same endpoint parse and allow-list, properties filter,
deadline, size cap and safe messages) and asks for nothing about any table: a REST catalog's
config (and OAuth2 token exchange), a SQL catalog's database answering one query.
"""

from __future__ import annotations

from collections.abc import Mapping

from icebergsync.spec import Catalog
from icebergsync_operator.catalog_access import CatalogAccessError, CatalogTimeout, operator_properties
from icebergsync_operator.deadline import Deadline
from icebergsync_operator.endpoints import redact
from icebergsync_operator.rest_read import open_rest_catalog
from icebergsync_operator.settings import OperatorSettings
from icebergsync_operator.sql_read import check_sql_catalog
from icebergsync_operator.status_update import TableObservation
from icebergsync_operator.table import bounded


def check_connection(catalog: Catalog, secret_values: Mapping[str, str], settings: OperatorSettings) -> None:
    """Return when the catalog answers within the deadline; ``CatalogAccessError`` (safe message) otherwise."""
    properties = operator_properties(catalog, secret_values)

    def connect(deadline: Deadline) -> None:
        if catalog.type == "rest":
            open_rest_catalog(catalog, properties, deadline, settings)
        else:
            check_sql_catalog(catalog, deadline, settings)

    bounded(catalog, settings, f"checking the catalog at {redact(catalog.uri)}", connect)


def observe_connection(catalog: Catalog, secret_values: Mapping[str, str],
                       settings: OperatorSettings) -> TableObservation:
    """The check's outcome as the catalog reads report it: no error, or the error and whether it timed out."""
    try:
        check_connection(catalog, secret_values, settings)
    except CatalogAccessError as error:
        return TableObservation(error=str(error), timed_out=isinstance(error, CatalogTimeout))
    return TableObservation()
