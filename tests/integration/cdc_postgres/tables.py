"""The source tables of the CDC test, the spec columns each maps to, and how values are compared.

A :class:`Variant` is a Debezium configuration (Kafka Connect's ``schemas.enable`` and the type handling
modes); the PostgreSQL type -> spec column type mapping depends on it where Debezium's encoding does
(docs/connectors.md, "PostgreSQL types").

Values are compared after a type-aware normalization, the same for PostgreSQL's and Spark's side:

* integers, ``numeric`` (as :class:`~decimal.Decimal`, numerically), booleans, text, ``double``,
  ``date``: as they are;
* ``real``: as the float32 it is (PostgreSQL prints the shortest text, Spark widens to float64);
* ``timestamptz``: µs since the epoch (Spark reads ``unix_micros``); ``timestamp``: the local date-time,
  or, where the variant maps it to ``timestamptz`` (wall time written as UTC), µs since the epoch of the
  wall time taken as UTC;
* ``time``: µs since midnight (a ``long`` column) or the time parsed from Debezium's ISO text;
* arrays: their elements normalized as above (NULL elements stay);
* ``uuid``: lower-case text; ``json``/``jsonb``: the parsed JSON value (PostgreSQL keeps json's text
  and reformats jsonb's; Debezium sends the text); ``bytea``: the bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Variant:
    """A Debezium configuration under test."""

    name: str
    settings: dict[str, str]

    @property
    def schemas(self) -> bool:
        return self.settings["converter.schemas.enable"] == "true"


VARIANTS = [
    # Debezium's defaults (decimal.handling.mode=precise, time.precision.mode=adaptive) with the schema.
    Variant("schemas", {"converter.schemas.enable": "true"}),
    # No schema in the records: decimals as text, temporal values as ISO text; and transaction metadata
    # (a transaction block in every event, BEGIN/END on <prefix>.transaction).
    Variant("schemaless", {"converter.schemas.enable": "false", "decimal.handling.mode": "string",
                           "time.precision.mode": "isostring", "provide.transaction.metadata": "true"}),
]


@dataclass(frozen=True)
class SourceTable:
    """A PostgreSQL table: ``columns`` are (name, PostgreSQL type), ``key`` its primary key."""

    name: str
    columns: list[tuple[str, str]]
    key: list[str]

    def ddl(self) -> str:
        body = ", ".join(f"{name} {pg_type}" for name, pg_type in self.columns)
        return f"CREATE TABLE {self.name} ({body}, PRIMARY KEY ({', '.join(self.key)}))"

    def spec_schema(self, variant: Variant) -> list[dict[str, Any]]:
        return [{"name": name, "type": spec_type(pg_type, variant), **({"required": True} if name in self.key else {})}
                for name, pg_type in self.columns]


CUSTOMERS = SourceTable("customers", [
    ("id", "bigint"), ("small", "smallint"), ("qty", "integer"), ("big", "bigint"), ("price", "numeric(12,2)"),
    ("ratio", "numeric"), ("score", "real"), ("weight", "double precision"), ("active", "boolean"),
    ("name", "text"), ("code", "varchar(16)"), ("born", "date"), ("opens", "time"), ("seen", "timestamp"),
    ("updated", "timestamptz"), ("ext", "uuid"), ("prefs", "json"), ("tags", "jsonb"), ("avatar", "bytea"),
    ("bio", "text")], ["id"])
ORDER_LINES = SourceTable("order_lines", [
    ("order_id", "integer"), ("line_no", "smallint"), ("sku", "varchar(32)"), ("qty", "integer"),
    ("price", "numeric(10,3)"), ("note", "text"), ("shipped", "timestamptz")], ["order_id", "line_no"])
DEVICES = SourceTable("devices", [
    ("id", "uuid"), ("label", "text"), ("firmware", "bytea"), ("config", "jsonb"), ("installed", "date"),
    ("online", "boolean"), ("reading", "double precision")], ["id"])
TABLES = [CUSTOMERS, ORDER_LINES, DEVICES]
# REPLICA IDENTITY DEFAULT and a large TOASTed text that most updates leave untouched: Debezium sends
# __debezium_unavailable_value for it, and the sync keeps the stored value (docs/connectors.md,
# "Unchanged TOASTed values"). Its primary keys never change (with DEFAULT that needs FULL: "Primary-key updates").
DOCUMENTS = SourceTable("documents", [("id", "bigint"), ("rev", "integer"), ("body", "text")], ["id"])
# Arrays (Debezium's Connect ARRAY): NULL elements, empty and NULL arrays, and, under REPLICA IDENTITY DEFAULT,
# large TOASTed arrays that most updates leave untouched (Debezium then sends its array placeholder).
COLLECTIONS = SourceTable("collections", [
    ("id", "bigint"), ("rev", "integer"), ("tags", "text[]"), ("scores", "integer[]"), ("prices", "numeric(8,2)[]"),
    ("days", "date[]"), ("counts", "bigint[]")], ["id"])

UNSCALED_NUMERIC = "decimal(38,18)"  # an unconstrained numeric: the workload's values fit 20.18 digits


def spec_type(pg_type: str, variant: Variant) -> str:
    """The spec column type a PostgreSQL type maps to under a Debezium variant."""
    if pg_type.endswith("[]"):
        return f"array<{spec_type(pg_type[:-2], variant)}>"
    if pg_type.startswith("numeric("):
        return "decimal" + pg_type[len("numeric"):]
    if pg_type.startswith("varchar"):
        return "string"
    return {
        "smallint": "int", "integer": "int", "bigint": "long", "numeric": UNSCALED_NUMERIC, "real": "float",
        "double precision": "double", "boolean": "boolean", "text": "string", "date": "date",
        "time": "long" if variant.schemas else "string",
        "timestamp": "timestamp" if variant.schemas else "timestamptz",
        "timestamptz": "timestamptz", "uuid": "string", "json": "string", "jsonb": "string", "bytea": "binary",
    }[pg_type]


def _micros(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _normal(pg_type: str, spec: str, value: Any) -> Any:
    """A PostgreSQL value (as psycopg2 returns it) in the comparable form."""
    if value is None:
        return None
    if pg_type.endswith("[]"):
        return [_normal(pg_type[:-2], spec[len("array<"):-1], item) for item in value]
    if pg_type == "real":
        return float(np.float32(value))
    if pg_type == "timestamptz" or (pg_type == "timestamp" and spec == "timestamptz"):
        return _micros(value if value.tzinfo else value.replace(tzinfo=UTC))
    if pg_type == "bytea":
        return bytes(value)
    if pg_type == "uuid":
        return str(value).lower()
    return value  # json and jsonb: psycopg2 parses both


def _spark_normal(pg_type: str, spec: str, value: Any) -> Any:
    """A value as Spark returns it (timestamptz columns selected as ``unix_micros``) in the comparable form."""
    if value is None:
        return None
    if pg_type.endswith("[]"):
        return [_spark_normal(pg_type[:-2], spec[len("array<"):-1], item) for item in value]
    if pg_type == "real":
        return float(np.float32(value))
    if pg_type == "time":
        if spec == "long":
            return (datetime.min + timedelta(microseconds=value)).time()
        return time.fromisoformat(value.removesuffix("Z"))
    if pg_type in ("json", "jsonb"):
        return json.loads(value)
    if pg_type == "bytea":
        return bytes(value)
    return value


def postgres_rows(connection: Any, table: SourceTable, variant: Variant) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """``SELECT * FROM`` the table, normalized, by key."""
    names = [name for name, _ in table.columns]
    specs = {column["name"]: column["type"] for column in table.spec_schema(variant)}
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table.name}")
        assert [d.name for d in cursor.description] == names
        rows = cursor.fetchall()
    out = {}
    for row in rows:
        normal = tuple(_normal(pg_type, specs[name], value)
                       for (name, pg_type), value in zip(table.columns, row, strict=True))
        out[tuple(normal[names.index(k)] for k in table.key)] = normal
    return out


def spark_rows(spark: Any, metadata_location: str, table: SourceTable,
               variant: Variant) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """The Iceberg table as Apache Iceberg's Spark reader returns it, normalized, by key."""
    names = [name for name, _ in table.columns]
    specs = {column["name"]: column["type"] for column in table.spec_schema(variant)}
    select = [f"unix_micros({name}) AS {name}" if specs[name] == "timestamptz" else name for name in names]
    frame = spark.read.format("iceberg").load(metadata_location).selectExpr(*select)
    out = {}
    for row in frame.collect():
        normal = tuple(_spark_normal(pg_type, specs[name], row[name]) for name, pg_type in table.columns)
        key = tuple(normal[names.index(k)] for k in table.key)
        assert key not in out, f"key {key} is in the table twice"
        out[key] = normal
    return out
