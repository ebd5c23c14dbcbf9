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

Under Debezium's other modes (``decimal.handling.mode``, ``binary.handling.mode``, ``time.precision.mode``,
``interval.handling.mode``; :func:`column_type` is the column a sync without spec.schema makes of each): numbers
sent as text or as a double are compared as :class:`~decimal.Decimal` or float; ``bytea`` sent as base64 or hex
text as its bytes; ``time`` in the unit sent (ms for ``io.debezium.time.Time`` and Connect's ``Time``),
``time``/``timestamp`` under ``connect`` cut to ms as Debezium cuts them (toward the past); ``interval`` as
Debezium's µs (a month 30.4375 days) or as (months, days, µs) parsed from ISO-8601 text (PostgreSQL's
``intervalstyle = iso_8601`` and Debezium's string alike); ``money`` as a Decimal; ``hstore`` as a dict.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import numpy as np
import psycopg2.extensions
import psycopg2.extras


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


# Debezium's settings when not set (its defaults), and the one a column type depends on of each.
DEBEZIUM_DEFAULTS = {"decimal.handling.mode": "precise", "binary.handling.mode": "bytes",
                     "time.precision.mode": "adaptive", "interval.handling.mode": "numeric"}


def _parts(pg_type: str) -> tuple[str, list[int]]:
    """A type's name and its modifiers: ``numeric(10,2)`` -> ``("numeric", [10, 2])``."""
    name, _, modifiers = pg_type.partition("(")
    return name, [int(part) for part in modifiers.rstrip(")").split(",") if part]


def column_type(pg_type: str, modes: Mapping[str, str]) -> str | None:
    """The Iceberg column (a spec type) a keyed sync without spec.schema creates for a PostgreSQL column under
    Debezium's ``modes`` (the records' Kafka Connect schema, docs/connectors.md, "Connect types as Iceberg columns");
    None where there is none (an unconstrained ``numeric`` in ``precise`` mode: the sync stops)."""
    modes = {**DEBEZIUM_DEFAULTS, **modes}
    if pg_type.endswith("[]"):
        element = column_type(pg_type[:-2], modes)
        return None if element is None else f"array<{element}>"
    name, modifiers = _parts(pg_type)
    if name in ("numeric", "money"):
        decimal = modes["decimal.handling.mode"]
        if decimal != "precise":
            return decimal  # string | double
        if name == "money":
            return "decimal(38,2)"  # Connect Decimal of scale 2 (money.fraction.digits) without a precision
        return f"decimal({modifiers[0]},{modifiers[1]})" if modifiers else None
    if name == "bytea":
        return "binary" if modes["binary.handling.mode"] == "bytes" else "string"
    if name == "time":
        time_mode = modes["time.precision.mode"]
        # io.debezium.time.MicroTime is an int64, io.debezium.time.Time and Connect's Time an int32
        return "long" if time_mode == "adaptive_time_microseconds" or (
            time_mode == "adaptive" and (not modifiers or modifiers[0] > 3)) else "int"
    if name == "interval":
        return "long" if modes["interval.handling.mode"] == "numeric" else "string"
    return {
        "smallint": "int", "integer": "int", "bigint": "long", "real": "float", "double precision": "double",
        "boolean": "boolean", "text": "string", "varchar": "string", "date": "date", "timestamp": "timestamp",
        "timestamptz": "timestamptz", "uuid": "string", "json": "string", "jsonb": "string", "hstore": "string",
    }.get(name, "string")  # enums: io.debezium.data.Enum text


def _micros(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _millis_only(pg_type: str, modes: Mapping[str, str]) -> bool:
    """Whether Debezium sends this temporal type in ms, cut from PostgreSQL's µs (``time.precision.mode=connect``)."""
    return modes.get("time.precision.mode") == "connect" and _parts(pg_type)[0] in ("time", "timestamp")


_ISO_INTERVAL = re.compile(r"P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)D)?"
                           r"(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?[\d.]+)S)?)?")


def _interval_parts(text: str) -> tuple[int, int, int, int, int, Decimal]:
    """(years, months, days, hours, minutes, seconds) of ISO-8601 interval text (PostgreSQL's ``iso_8601`` style
    omits zero fields; Debezium's string mode writes them all)."""
    match = _ISO_INTERVAL.fullmatch(text)
    assert match, f"not an ISO-8601 interval: {text}"
    *whole, seconds = match.groups()
    years, months, days, hours, minutes = (int(part or 0) for part in whole)
    return years, months, days, hours, minutes, Decimal(seconds or 0)


def _interval_canonical(text: str) -> tuple[int, int, int]:
    """(months, days, µs): what an interval holds, however its text splits it."""
    years, months, days, hours, minutes, seconds = _interval_parts(text)
    return years * 12 + months, days, int(((hours * 60 + minutes) * 60 + seconds) * 1_000_000)


def _debezium_interval_micros(text: str) -> int:
    """Debezium's ``MicroDuration`` of an interval: its arithmetic in doubles, a month 30.4375 days (365.25 / 12),
    truncated to a long (io.debezium.time.MicroDuration.durationMicros)."""
    years, months, days, hours, minutes, seconds = _interval_parts(text)
    whole = int(seconds)  # PGInterval: whole seconds plus µs / 1e6
    seconds_double = whole + int((seconds - whole) * 1_000_000) / 1e6
    number_of_days = (years * 12 + months) * 30.4375 + days
    number_of_seconds = ((number_of_days * 24 + hours) * 60 + minutes) * 60 + seconds_double
    return int(number_of_seconds * 1e6)


def postgres_value(pg_type: str, spec: str, value: Any, modes: Mapping[str, str] | None = None) -> Any:
    """A PostgreSQL value (as psycopg2 returns it on a connection of :func:`register_types`) in the comparable
    form, for an Iceberg column of type ``spec`` (Debezium's ``modes``: see the module's docstring)."""
    modes = modes or {}
    if value is None:
        return None
    if pg_type.endswith("[]"):
        return [postgres_value(pg_type[:-2], spec[len("array<"):-1], item, modes) for item in value]
    name, _ = _parts(pg_type)
    if name == "real":
        return float(np.float32(value))
    if name in ("numeric", "money") and spec == "double":
        return float(value)
    if name == "interval":
        return _debezium_interval_micros(value) if spec == "long" else _interval_canonical(value)
    if name == "time" and _millis_only(pg_type, modes):
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    if name == "timestamp" and _millis_only(pg_type, modes):
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    if pg_type == "timestamptz" or (name == "timestamp" and spec == "timestamptz"):
        return _micros(value if value.tzinfo else value.replace(tzinfo=UTC))
    if pg_type == "bytea":
        return bytes(value)
    if pg_type == "uuid":
        return str(value).lower()
    return value  # json and jsonb: psycopg2 parses both; hstore: a dict; money: a Decimal


def iceberg_value(pg_type: str, spec: str, value: Any, modes: Mapping[str, str] | None = None) -> Any:
    """A value as Spark returns it (timestamptz columns selected as ``unix_micros``) in the comparable form."""
    modes = modes or {}
    if value is None:
        return None
    if pg_type.endswith("[]"):
        return [iceberg_value(pg_type[:-2], spec[len("array<"):-1], item, modes) for item in value]
    name, _ = _parts(pg_type)
    if name == "real":
        return float(np.float32(value))
    if name in ("numeric", "money") and spec == "string":
        return Decimal(value)
    if name == "time":
        if spec in ("long", "int"):
            millis = spec == "int"  # io.debezium.time.Time and Connect's Time: ms; MicroTime: µs
            return (datetime.min + timedelta(microseconds=value * (1000 if millis else 1))).time()
        return time.fromisoformat(value.removesuffix("Z"))
    if name == "interval":
        return value if spec == "long" else _interval_canonical(value)
    if name in ("json", "jsonb", "hstore"):
        return json.loads(value)
    if name == "bytea":
        if spec == "string":
            binary = modes.get("binary.handling.mode")
            return bytes.fromhex(value) if binary == "hex" else base64.b64decode(value, validate=True)
        return bytes(value)
    return value


def register_types(connection: Any) -> None:
    """Make ``connection`` return what psycopg2 does not parse as the comparison needs: ``money`` as a Decimal
    (its text, ``-$1,234.56`` in the C locale), ``interval`` as its ISO-8601 text (``intervalstyle = iso_8601``;
    psycopg2's timedelta takes a month for 30 days), ``hstore`` as a dict."""
    with connection, connection.cursor() as cursor:
        cursor.execute("SET intervalstyle = iso_8601")
        cursor.execute("SELECT oid, typname FROM pg_type WHERE typname IN ('money', '_money', 'interval', '_interval')")
        oids = dict((name, oid) for oid, name in cursor.fetchall())

    def money(text: str | None, _cursor: Any) -> Decimal | None:
        return None if text is None else Decimal(text.replace("$", "").replace(",", ""))

    def interval(text: str | None, _cursor: Any) -> str | None:
        return text

    for name, parse in (("money", money), ("interval", interval)):
        scalar = psycopg2.extensions.new_type((oids[name],), name.upper() + "_TEXT", parse)
        psycopg2.extensions.register_type(scalar, connection)
        psycopg2.extensions.register_type(
            psycopg2.extensions.new_array_type((oids[f"_{name}"],), name.upper() + "_TEXT[]", scalar), connection)
    with connection, connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_type WHERE typname = 'hstore'")
        if cursor.fetchone():
            psycopg2.extras.register_hstore(connection)


def select_star_rows(connection: Any, table: str, columns: Mapping[str, tuple[str, str]],
                     modes: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """``SELECT * FROM table``, each row normalized, by column name; ``columns`` gives each column's (PostgreSQL
    type, Iceberg column type)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table}")
        names = [d.name for d in cursor.description]
        assert names == list(columns), f"{table}: the columns are {names}"
        rows = cursor.fetchall()
    return [{name: postgres_value(*columns[name], value, modes) for name, value in zip(names, row, strict=True)}
            for row in rows]


def select_star(connection: Any, table: str, columns: Mapping[str, tuple[str, str]], key: list[str],
                modes: Mapping[str, str] | None = None) -> dict[tuple[Any, ...], dict[str, Any]]:
    """:func:`select_star_rows` by key."""
    return {tuple(row[k] for k in key): row for row in select_star_rows(connection, table, columns, modes)}


def iceberg_table_rows(spark: Any, metadata_location: str, columns: Mapping[str, tuple[str, str]],
                       modes: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The Iceberg table's ``columns`` as Apache Iceberg's Spark reader returns them, each row normalized."""
    select = [f"unix_micros({name}) AS {name}" if spec == "timestamptz" else name
              for name, (_, spec) in columns.items()]
    frame = spark.read.format("iceberg").load(metadata_location).selectExpr(*select)
    return [{name: iceberg_value(*columns[name], row[name], modes) for name in columns} for row in frame.collect()]


def iceberg_rows(spark: Any, metadata_location: str, columns: Mapping[str, tuple[str, str]], key: list[str],
                 modes: Mapping[str, str] | None = None) -> dict[tuple[Any, ...], dict[str, Any]]:
    """:func:`iceberg_table_rows` by key (each key once)."""
    out = {}
    for normal in iceberg_table_rows(spark, metadata_location, columns, modes):
        key_of = tuple(normal[k] for k in key)
        assert key_of not in out, f"key {key_of} is in the table twice"
        out[key_of] = normal
    return out


def _columns(table: SourceTable, variant: Variant) -> dict[str, tuple[str, str]]:
    specs = {column["name"]: column["type"] for column in table.spec_schema(variant)}
    return {name: (pg_type, specs[name]) for name, pg_type in table.columns}


def postgres_rows(connection: Any, table: SourceTable, variant: Variant) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """``SELECT * FROM`` the table, normalized, by key."""
    rows = select_star(connection, table.name, _columns(table, variant), table.key)
    return {key: tuple(row.values()) for key, row in rows.items()}


def spark_rows(spark: Any, metadata_location: str, table: SourceTable,
               variant: Variant) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """The Iceberg table as Apache Iceberg's Spark reader returns it, normalized, by key."""
    rows = iceberg_rows(spark, metadata_location, _columns(table, variant), table.key)
    return {key: tuple(row.values()) for key, row in rows.items()}
