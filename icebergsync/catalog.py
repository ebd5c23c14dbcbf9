"""Catalog and FileIO access from a spec: embedded SQLite/SQL catalogs and REST catalogs, local or S3 storage.

Secrets never appear in the spec text: a ``secretRef`` is mounted (by the operator) as a directory
of files, one per property, under ``$ICEBERGSYNC_SECRETS_DIR/<secret name>/``; values may also use
``${env:NAME}`` to read an environment variable of the job (the operator never expands these:
see icebergsync_operator.catalog_access).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import parse_transform

from icebergsync import spec as model
from icebergsync.errors import CatalogUnreachableError, IncompatibleSchemaError, SpecError
from icebergsync.transient import object_store, rest_catalog
from icebergsync.transient.calls import retry_transient

DEFAULT_SECRETS_DIR = "/etc/icebergsync/secrets"
_ENV_REFERENCE = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")


def secrets_dir() -> Path:
    """Where mounted Secrets live (``ICEBERGSYNC_SECRETS_DIR``, default /etc/icebergsync/secrets)."""
    return Path(os.environ.get("ICEBERGSYNC_SECRETS_DIR", DEFAULT_SECRETS_DIR))


def read_secret(ref: model.SecretRef | None) -> dict[str, str]:
    """Properties from a mounted Secret: each file's name is a key, its content the value."""
    if ref is None:
        return {}
    directory = secrets_dir() / ref.name
    if not directory.is_dir():
        raise SpecError([f"secretRef {ref.name!r}: the Secret is not mounted at {directory}"])
    return {
        path.name: path.read_text().strip()
        for path in sorted(directory.iterdir())
        if path.is_file() and not path.name.startswith(".")
    }


def resolve_env(properties: dict[str, str], field_path: str) -> dict[str, str]:
    """Replace ``${env:NAME}`` references; a missing variable is a spec error naming the field."""
    resolved: dict[str, str] = {}
    problems = []
    for key, value in properties.items():
        def substitute(match: re.Match[str], key: str = key) -> str:
            name = match.group(1)
            if name not in os.environ:
                problems.append(f"{field_path}.{key}: environment variable {name} is not set")
                return ""
            return os.environ[name]

        resolved[key] = _ENV_REFERENCE.sub(substitute, value)
    if problems:
        raise SpecError(problems)
    return resolved


def sql_connection_uri(uri: str) -> str:
    """The SQLAlchemy URI of a ``sql`` catalog: PostgreSQL through the psycopg2 driver in the image.

    ``postgresql://`` and ``postgres://`` become ``postgresql+psycopg2://``; other URIs are kept.
    """
    scheme, separator, rest = uri.partition("://")
    if scheme not in ("postgresql", "postgres", "postgresql+psycopg2"):
        return uri
    return f"postgresql+psycopg2{separator}{rest}"


def _local_uri(path: str) -> str:
    """Turn a relative or absolute local path into a file:// URI; leave other URIs alone."""
    if "://" in path:
        return path
    return Path(path).expanduser().resolve().as_uri()


def catalog_properties(catalog: model.Catalog, secret_values: dict[str, str] | None = None) -> dict[str, str]:
    """The pyiceberg properties for a catalog spec, with secrets and environment resolved.

    ``secret_values`` replaces reading the mounted ``secretRef`` (the operator reads it from the API).
    """
    properties: dict[str, str] = {"type": catalog.type, "uri": catalog.uri}
    if catalog.type == "sql":
        properties["uri"] = sql_connection_uri(catalog.uri)
    warehouse = catalog.warehouse_location
    if warehouse:
        properties["warehouse"] = _local_uri(warehouse) if catalog.type == "sql" else warehouse
    if catalog.type == "sql" and catalog.uri.startswith("sqlite:///") and not catalog.uri.startswith("sqlite:////"):
        relative = catalog.uri.removeprefix("sqlite:///")
        Path(relative).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
        properties["uri"] = "sqlite:///" + str(Path(relative).expanduser().resolve())
    if properties.get("warehouse", "").startswith("file://"):
        Path(properties["warehouse"].removeprefix("file://")).mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    for resolve in (
        lambda: resolve_env(catalog.properties, "spec.table.catalog.properties"),
        lambda: read_secret(catalog.secret_ref) if secret_values is None else secret_values,
    ):
        try:
            properties.update(resolve())
        except SpecError as error:
            problems.extend(error.problems)
    if problems:
        raise SpecError(problems)
    return properties


def with_retries(properties: dict[str, str]) -> dict[str, str]:
    """``properties`` with the job's transient-fault handling (icebergsync/transient/): a REST catalog whose
    requests retry where that is safe, and a FileIO whose uploads survive lost answers, unless the catalog's
    properties name a FileIO of their own."""
    properties = {"py-io-impl": object_store.IMPL, **properties}
    if properties.get("type") == "rest":
        properties = {name: value for name, value in properties.items() if name != "type"}
        properties["py-catalog-impl"] = rest_catalog.IMPL
    return properties


def open_catalog(catalog: model.Catalog, secret_values: dict[str, str] | None = None) -> Catalog:
    """Connect to the catalog; raise ``CatalogUnreachableError`` with the URI when it does not answer."""
    properties = with_retries(catalog_properties(catalog, secret_values))
    try:
        loaded = load_catalog(catalog.name, **properties)
        loaded.list_namespaces()
    except SpecError:
        raise
    except Exception as exc:
        raise CatalogUnreachableError(f"catalog {catalog.name!r} at {catalog.uri} is unreachable: {exc}") from exc
    return loaded


def open_catalog_within(catalog: model.Catalog, seconds: float) -> Catalog:
    """``open_catalog``, given up after ``seconds`` (``CatalogUnreachableError``): a catalog that takes longer
    to answer is as good as down for whoever waits (the call goes on in a daemon thread, abandoned)."""
    outcome: list[Catalog | BaseException] = []

    def attempt() -> None:
        try:
            outcome.append(open_catalog(catalog))
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=attempt, name="isync-open-catalog", daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        raise CatalogUnreachableError(f"catalog {catalog.name!r} at {catalog.uri} is unreachable: "
                                      f"it did not answer within {seconds:.0f}s")
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def partition_spec(schema: Schema, expressions: list[str]) -> PartitionSpec:
    """Build a partition spec from expressions like ``day(ts)``, ``bucket(16, vendor)`` or ``vendor``."""
    fields = []
    for index, expression in enumerate(expressions):
        text = expression.replace(" ", "")
        match = re.fullmatch(r"(\w+)\((?:(\d+),)?[\w.]+\)", text)
        name, argument = (match.group(1), match.group(2)) if match else ("identity", None)
        column = model.partition_source(expression)
        transform = parse_transform(f"{name}[{argument}]" if argument else name)
        source = schema.find_field(column)
        suffix = "" if name == "identity" else f"_{name}" + (f"_{argument}" if argument else "")
        fields.append(
            PartitionField(source_id=source.field_id, field_id=1000 + index, transform=transform, name=f"{column}{suffix}")
        )
    return PartitionSpec(*fields)


# Properties a table the sink creates gets unless spec.table.properties sets them: a sink commits often, and
# without these every commit's metadata file would stay forever (Iceberg's own advice for streaming writers).
NEW_TABLE_DEFAULTS = {"write.metadata.delete-after-commit.enabled": "true", "write.metadata.previous-versions-max": "100"}


def ensure_table(catalog: Catalog, identifier: str, schema: Schema, partition_by: list[str], properties: dict[str, str],
                 *, key: Sequence[str] | None = None) -> Table:
    """Load the table, creating its namespace and the table itself (with ``NEW_TABLE_DEFAULTS`` under
    ``properties``) when missing.

    With ``key`` (``spec.table.key``) the table is *keyed*: created with the key columns as its
    identifier fields and format-version 2 (equality deletes need it); an existing table must be
    format-version 2 with exactly those identifier fields, else ``IncompatibleSchemaError`` names
    what differs. An empty ``key`` (a table without a primary key) is the same with no identifier fields. (Its
    unpartitioned spec for global equality deletes is added by the sink's fence.)
    """
    if key is not None:
        schema, properties = _keyed(identifier, schema, properties, key)
    table = retry_transient(f"create or load {identifier}", lambda: _create_or_load(
        catalog, identifier, schema, partition_by, {**NEW_TABLE_DEFAULTS, **properties}))
    if key is not None:
        check_keyed_table(identifier, table, key)
    return table


def _create_or_load(catalog: Catalog, identifier: str, schema: Schema, partition_by: list[str],
                    properties: dict[str, str]) -> Table:
    """Load the table, creating its namespace and itself when missing: idempotent as a whole (a create whose
    answer was lost finds the table on the next attempt)."""
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(identifier.rsplit(".", 1)[0])
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        try:
            return catalog.create_table(identifier, schema=schema, partition_spec=partition_spec(schema, partition_by),
                                        properties=properties)
        except TableAlreadyExistsError:
            return catalog.load_table(identifier)


KEYED_FORMAT_VERSION = 2  # what a new keyed table is, unless spec.table.properties asks for 3 (deletion vectors)
KEYED_FORMAT_VERSIONS = ("2", "3")


def _keyed(identifier: str, schema: Schema, properties: dict[str, str], key: Sequence[str]) -> tuple[Schema, dict[str, str]]:
    """The schema (with the key as identifier fields) and properties (format-version 2 unless 3 is asked for) of a
    new keyed table."""
    version = properties.get("format-version", str(KEYED_FORMAT_VERSION))
    if version not in KEYED_FORMAT_VERSIONS:
        raise IncompatibleSchemaError(
            f"table {identifier}: spec.table.properties sets format-version {version}, but a keyed table (spec.table.key) "
            f"is format-version 2 (position delete files) or 3 (deletion vectors)"
        )
    ids = [schema.find_field(name).field_id for name in key]
    keyed = Schema(*schema.fields, schema_id=schema.schema_id, identifier_field_ids=ids)
    return keyed, {**properties, "format-version": version}


def check_keyed_table(identifier: str, table: Table, key: Sequence[str]) -> None:
    """Raise ``IncompatibleSchemaError`` unless ``table`` is format-version 2 or 3 with ``key`` as its identifier
    fields."""
    version = table.metadata.format_version
    if str(version) not in KEYED_FORMAT_VERSIONS:
        raise IncompatibleSchemaError(
            f"table {identifier} is Iceberg format-version {version}; a keyed table (spec.table.key) must be "
            f"format-version 2 or 3: upgrade it (e.g. Spark: ALTER TABLE ... SET TBLPROPERTIES "
            "('format-version'='2')) or sync into a new table"
        )
    found = sorted(table.schema().identifier_field_names())
    if found != sorted(key):
        raise IncompatibleSchemaError(
            f"table {identifier} has identifier fields {found or 'none'}, but spec.table.key is {sorted(key)}: a sync "
            "never changes a table's key. Set the table's identifier fields (e.g. Spark: ALTER TABLE ... SET "
            "IDENTIFIER FIELDS ...), or sync into a new table"
        )
