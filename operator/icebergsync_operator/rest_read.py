"""Reading a table's metadata from a tenant's REST catalog, on the bounded transport."""

from __future__ import annotations

import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.rest.auth import AuthManagerAdapter
from pyiceberg.io import FileIO, InputFile, OutputFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import EMPTY_DICT, Properties

from icebergsync import spec as model
from icebergsync.tables.status import Lanes, read_catalog_lanes
from icebergsync_operator.bounded_http import bounded_session
from icebergsync_operator.catalog_access import CatalogAccessError, allowed_only
from icebergsync_operator.read_bounds import ReadBounds


class _NoFiles(FileIO):
    """A REST table's metadata comes in the catalog's answer: the operator opens no file of it."""

    def new_input(self, location: str) -> InputFile:
        raise CatalogAccessError("the operator reads no table files of a REST catalog")

    def new_output(self, location: str) -> OutputFile:
        raise CatalogAccessError("the operator writes no files")

    def delete(self, location: str | InputFile | OutputFile) -> None:
        raise CatalogAccessError("the operator deletes no files")


class GuardedRestCatalog(RestCatalog):
    """A REST catalog on a bounded session, whose server config cannot widen its properties.

    ``_create_session`` builds the session itself so the ``BoundedAdapter`` is mounted before the
    OAuth2 token exchange (pyiceberg's own runs it first). It supports what ``ALLOWED_PROPERTIES``
    can ask for: a bearer ``token`` or OAuth2 client ``credential`` (with scope, audience, resource,
    oauth2-server-uri); no custom auth managers, SigV4, TLS files or extra headers.
    """

    def __init__(self, name: str, bounds: ReadBounds, **properties: str):
        self._bounds = bounds
        super().__init__(name, **properties)

    def _create_session(self) -> requests.Session:
        session = bounded_session(self._bounds.deadline, self._bounds.scope.check, self._bounds.memory)
        self._config_headers(session)
        self._auth_manager = self._create_legacy_oauth2_auth_manager(session)
        session.auth = AuthManagerAdapter(self._auth_manager)
        return session

    def _fetch_config(self) -> None:
        super()._fetch_config()
        properties = self._bounds.scope.checked_endpoints({**allowed_only(self.properties), "uri": self.uri})
        self.properties, self.uri = properties, properties["uri"]

    def _load_file_io(self, properties: Properties = EMPTY_DICT, location: str | None = None) -> FileIO:
        return _NoFiles()


def open_rest_catalog(catalog: model.Catalog, properties: dict[str, str], bounds: ReadBounds) -> GuardedRestCatalog:
    """The REST catalog, opened: its config fetched (and its OAuth2 token exchanged) on the bounded session."""
    return GuardedRestCatalog(catalog.name, bounds, **bounds.scope.checked_endpoints({**properties, "uri": catalog.uri}))


def read_rest_metadata(catalog: model.Catalog, properties: dict[str, str], table_name: str,
                       bounds: ReadBounds) -> TableMetadata:
    """The table's metadata as the REST catalog answers it (config, token exchange, load table)."""
    return open_rest_catalog(catalog, properties, bounds).load_table(table_name).metadata


def read_rest_lanes(catalog: model.Catalog, properties: dict[str, str], template: str, sink_id: str,
                    bounds: ReadBounds) -> Lanes:
    """The tables of a sync of many tables: ``GET /v1/namespaces/{ns}/tables`` (every page, each answer bounded),
    then each one the template names loaded (all within the read's deadline, at most ``MAX_READ`` tables)."""
    return read_catalog_lanes(open_rest_catalog(catalog, properties, bounds), template, sink_id)
