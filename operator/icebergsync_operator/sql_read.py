"""Reading a table's metadata from a tenant's SQL catalog: one read-only query, then the metadata file.

The operator does not use pyiceberg's ``SqlCatalog`` (it creates the catalog's tables on open and
reads the metadata file with an unbounded FileIO that signs with the operator's own cloud identity).
A local ``sqlite:`` catalog is opened read-only, only where the read's scope allows local files
(never in a cluster), and never created. A PostgreSQL one is connected with a URL built from the parsed
URI (``endpoints.parse_sql_uri``), with libpq's connect timeout, a statement timeout, TCP keepalives
and a TCP user timeout; once connected, the ``Deadline`` watches the connection's socket, so a
server that authenticates and then goes silent is cut at the deadline like an HTTP one.
"""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeGuard
from urllib.parse import quote

from pyiceberg.catalog import Catalog as PyIcebergCatalog
from pyiceberg.catalog.sql import IcebergTables
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table.metadata import TableMetadata
from sqlalchemy import URL, create_engine, event, inspect, make_url, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from icebergsync import spec as model
from icebergsync.table_routing import template_texts
from icebergsync.tables.status import MAX_LISTED_ROWS, Lanes, namespace_of, read_lanes
from icebergsync_operator.bounded_http import bounded_session
from icebergsync_operator.catalog_scope import LOCAL_SCHEME
from icebergsync_operator.endpoints import parse_sql_uri
from icebergsync_operator.metadata_file import read_metadata_file
from icebergsync_operator.read_bounds import ReadBounds


def postgres_url(uri: str, bounds: ReadBounds) -> URL:
    """The SQLAlchemy URL of a PostgreSQL catalog, from its parsed parts, with the read's time limits."""
    parsed = parse_sql_uri(uri)
    bounds.scope.check(parsed.endpoint)
    seconds = max(2, math.ceil(bounds.deadline.remaining()))  # libpq counts whole seconds, at least 2
    limits = {"connect_timeout": str(seconds), "options": f"-c statement_timeout={seconds * 1000}",
              "keepalives": "1", "keepalives_idle": "1", "keepalives_interval": "1", "keepalives_count": "3",
              "tcp_user_timeout": str(seconds * 1000)}
    return URL.create("postgresql+psycopg2", username=parsed.username, password=parsed.password,
                      host=parsed.endpoint.host, port=parsed.endpoint.port, database=parsed.database,
                      query={**parsed.options, **limits})


def _sqlite_engine(uri: str, bounds: ReadBounds) -> Engine | None:
    """A read-only engine on a local SQLite catalog, only where the scope allows local files; None when the file
    does not exist (a catalog with no tables yet: the operator never creates it)."""
    bounds.scope.check_local(f"catalog {uri}")
    path = make_url(uri).database
    if not path or not os.path.isfile(path):
        return None
    return create_engine("sqlite://", poolclass=NullPool,
                         creator=lambda: sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True))


def _engine(catalog: model.Catalog, bounds: ReadBounds) -> Engine | None:
    if catalog.uri.startswith(LOCAL_SCHEME):
        return _sqlite_engine(catalog.uri, bounds)
    engine = create_engine(postgres_url(catalog.uri, bounds), poolclass=NullPool)

    @event.listens_for(engine, "connect", insert=True)  # before the dialect's first queries
    def watch(connection: Any, _: Any) -> None:
        bounds.deadline.watch_fd(connection.fileno())

    return engine


@contextmanager
def _connected(catalog: model.Catalog, bounds: ReadBounds) -> Iterator[Connection | None]:
    """A connection to the catalog database (None: a local catalog whose file does not exist yet)."""
    engine = _engine(catalog, bounds)
    if engine is None:
        yield None
        return
    try:
        with engine.connect() as connection:
            yield connection
    finally:
        engine.dispose()


def _has_tables(connection: Connection | None) -> TypeGuard[Connection]:
    """Whether the catalog database has pyiceberg's catalog table (none until a job creates it)."""
    return connection is not None and inspect(connection).has_table(IcebergTables.__tablename__)


def metadata_location(connection: Connection | None, catalog_name: str, table_name: str) -> str:
    """Where the catalog says the table's current metadata is; ``NoSuchTableError`` when it has none."""
    namespace = PyIcebergCatalog.namespace_to_string(PyIcebergCatalog.namespace_from(table_name))
    name = PyIcebergCatalog.table_name_from(table_name)
    if not _has_tables(connection):
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


def namespace_tables(connection: Connection | None, catalog_name: str, template: str, limit: int) -> dict[str, str]:
    """Each table of the template's namespace whose name its LIKE pattern matches (``namespace.table``), with its
    metadata location; at most ``limit`` rows, in name order."""
    namespace = namespace_of(template)
    pattern = like_pattern(PyIcebergCatalog.table_name_from(template))
    if not _has_tables(connection):
        return {}
    rows = connection.execute(
        select(IcebergTables.table_name, IcebergTables.metadata_location)
        .where(IcebergTables.catalog_name == catalog_name, IcebergTables.table_namespace == namespace,
               IcebergTables.table_name.like(pattern, escape="\\"))
        .order_by(IcebergTables.table_name).limit(limit)).all()
    return {f"{namespace}.{name}": location for name, location in rows if location}


def check_sql_catalog(catalog: model.Catalog, bounds: ReadBounds) -> None:
    """Connect to the catalog database and run one trivial query (a local catalog's file need not exist yet)."""
    with _connected(catalog, bounds) as connection:
        if connection is not None:
            connection.execute(select(1))


def read_sql_metadata(catalog: model.Catalog, properties: Mapping[str, str], table_name: str,
                      bounds: ReadBounds) -> TableMetadata:
    """The table's metadata: its location from the catalog database, then the file itself."""
    with _connected(catalog, bounds) as connection:
        location = metadata_location(connection, catalog.name, table_name)
    return _metadata_file_reader(properties, bounds)(location)


def read_sql_lanes(catalog: model.Catalog, properties: Mapping[str, str], template: str, sink_id: str,
                   bounds: ReadBounds) -> Lanes:
    """The tables of a sync of many tables: one query lists the namespace's tables the template names, then each
    one's metadata file is read (all within the read's deadline, at most ``MAX_READ`` files)."""
    with _connected(catalog, bounds) as connection:
        locations = namespace_tables(connection, catalog.name, template, MAX_LISTED_ROWS)
    read = _metadata_file_reader(properties, bounds)
    return read_lanes(template, locations, lambda name: read(locations[name]), sink_id)


def _metadata_file_reader(properties: Mapping[str, str], bounds: ReadBounds) -> Callable[[str], TableMetadata]:
    """Reads a metadata file by its location, through the allowed S3 endpoints, within the read's bounds."""
    s3 = bounds.scope.checked_endpoints({key: value for key, value in properties.items() if key.startswith("s3.")})
    session = bounded_session(bounds.deadline, bounds.scope.check, bounds.memory)
    return lambda location: read_metadata_file(location, s3, session, bounds)
