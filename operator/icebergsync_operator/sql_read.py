"""Reading a table's metadata from a tenant's SQL catalog: one read-only query, then the metadata file.

The operator does not use pyiceberg's ``SqlCatalog`` (it creates the catalog's tables on open and
reads the metadata file with an unbounded FileIO that signs with the operator's own cloud identity). It connects with a URL built from the parsed
URI (``endpoints.parse_sql_uri``), with libpq's connect timeout, a statement timeout, TCP keepalives
and a TCP user timeout; once connected, the ``Deadline`` watches the connection's socket, so a
server that authenticates and then goes silent is cut at the deadline like an HTTP one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from pyiceberg.catalog import Catalog as PyIcebergCatalog
from pyiceberg.catalog.sql import IcebergTables
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table.metadata import TableMetadata
from sqlalchemy import URL, create_engine, event, inspect, select
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

from icebergsync import spec as model
from icebergsync.tables.routing import template_texts
from icebergsync.tables.status import MAX_LISTED_ROWS, Lanes, namespace_of, read_lanes
from icebergsync_operator.bounded_http import bounded_session
from icebergsync_operator.catalog_access import check_endpoint, checked_endpoints
from icebergsync_operator.deadline import Deadline
from icebergsync_operator.endpoints import parse_sql_uri
from icebergsync_operator.metadata_file import read_metadata_file
from icebergsync_operator.settings import OperatorSettings


def postgres_url(uri: str, deadline: Deadline, allow_list: tuple[str, ...]) -> URL:
    """The SQLAlchemy URL of a PostgreSQL catalog, from its parsed parts, with the read's time limits."""
    parsed = parse_sql_uri(uri)
    check_endpoint(parsed.endpoint, allow_list)
    seconds = max(2, math.ceil(deadline.remaining()))  # libpq counts whole seconds, at least 2
    limits = {"connect_timeout": str(seconds), "options": f"-c statement_timeout={seconds * 1000}",
              "keepalives": "1", "keepalives_idle": "1", "keepalives_interval": "1", "keepalives_count": "3",
              "tcp_user_timeout": str(seconds * 1000)}
    return URL.create("postgresql+psycopg2", username=parsed.username, password=parsed.password,
                      host=parsed.endpoint.host, port=parsed.endpoint.port, database=parsed.database,
                      query={**parsed.options, **limits})


def _engine(catalog: model.Catalog, deadline: Deadline, allow_list: tuple[str, ...]) -> Engine:
    if catalog.uri.startswith("sqlite:"):
        return create_engine(catalog.uri, poolclass=NullPool)
    engine = create_engine(postgres_url(catalog.uri, deadline, allow_list), poolclass=NullPool)

    @event.listens_for(engine, "connect", insert=True)  # before the dialect's first queries
    def watch(connection: Any, _: Any) -> None:
        deadline.watch_fd(connection.fileno())

    return engine


def metadata_location(engine: Engine, catalog_name: str, table_name: str) -> str:
    """Where the catalog says the table's current metadata is; ``NoSuchTableError`` when it has none."""
    namespace = PyIcebergCatalog.namespace_to_string(PyIcebergCatalog.namespace_from(table_name))
    name = PyIcebergCatalog.table_name_from(table_name)
    with engine.connect() as connection:
        if not inspect(connection).has_table(IcebergTables.__tablename__):
            raise NoSuchTableError(f"table does not exist: {table_name}")
        location = connection.execute(select(IcebergTables.metadata_location).where(
            IcebergTables.catalog_name == catalog_name, IcebergTables.table_namespace == namespace,
            IcebergTables.table_name == name)).scalar_one_or_none()
    if not location:
        raise NoSuchTableError(f"table does not exist: {table_name}")
    return location


def like_pattern(template_table: str) -> str:
    """A SQL LIKE pattern (escape ``\\``) of the names a template's table part gives: each field is ``%``."""
    return "%".join(text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
                    for text in template_texts(template_table))


def namespace_tables(engine: Engine, catalog_name: str, template: str, limit: int) -> dict[str, str]:
    """Each table of the template's namespace whose name its LIKE pattern matches (``namespace.table``), with its
    metadata location; at most ``limit`` rows, in name order."""
    namespace = namespace_of(template)
    pattern = like_pattern(PyIcebergCatalog.table_name_from(template))
    with engine.connect() as connection:
        if not inspect(connection).has_table(IcebergTables.__tablename__):
            return {}
        rows = connection.execute(
            select(IcebergTables.table_name, IcebergTables.metadata_location)
            .where(IcebergTables.catalog_name == catalog_name, IcebergTables.table_namespace == namespace,
                   IcebergTables.table_name.like(pattern, escape="\\"))
            .order_by(IcebergTables.table_name).limit(limit)).all()
    return {f"{namespace}.{name}": location for name, location in rows if location}


def check_sql_catalog(catalog: model.Catalog, deadline: Deadline, settings: OperatorSettings) -> None:
    """Connect to the catalog database and run one trivial query."""
    engine = _engine(catalog, deadline, settings.allowed_catalog_uris)
    try:
        with engine.connect() as connection:
            connection.execute(select(1))
    finally:
        engine.dispose()


def read_sql_metadata(catalog: model.Catalog, properties: Mapping[str, str], table_name: str,
                      deadline: Deadline, settings: OperatorSettings) -> TableMetadata:
    """The table's metadata: its location from the catalog database, then the file itself."""
    engine = _engine(catalog, deadline, settings.allowed_catalog_uris)
    try:
        location = metadata_location(engine, catalog.name, table_name)
    finally:
        engine.dispose()
    return _metadata_file_reader(properties, deadline, settings)(location)


def read_sql_lanes(catalog: model.Catalog, properties: Mapping[str, str], template: str, sink_id: str,
                   deadline: Deadline, settings: OperatorSettings) -> Lanes:
    """The tables of a sync of many tables: one query lists the namespace's tables the template names, then each
    one's metadata file is read (all within ``deadline``, at most ``MAX_READ`` files)."""
    engine = _engine(catalog, deadline, settings.allowed_catalog_uris)
    try:
        locations = namespace_tables(engine, catalog.name, template, MAX_LISTED_ROWS)
    finally:
        engine.dispose()
    read = _metadata_file_reader(properties, deadline, settings)
    return read_lanes(template, locations, lambda name: read(locations[name]), sink_id)


def _metadata_file_reader(properties: Mapping[str, str], deadline: Deadline,
                          settings: OperatorSettings) -> Callable[[str], TableMetadata]:
    """Reads a metadata file by its location, through the allowed S3 endpoints, bounded by ``deadline``."""
    s3 = checked_endpoints({key: value for key, value in properties.items() if key.startswith("s3.")},
                           settings.allowed_catalog_uris)
    session = bounded_session(deadline, partial(check_endpoint, allow_list=settings.allowed_catalog_uris),
                              settings.catalog_max_bytes)
    return lambda location: read_metadata_file(location, s3, session, deadline, settings.catalog_max_bytes)
