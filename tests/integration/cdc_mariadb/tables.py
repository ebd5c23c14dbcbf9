"""The MariaDB source tables of the CDC acceptance test, and how their values compare with Iceberg's.

Each column is (name, MariaDB type). Values are compared after a type-aware normalization, the same for both
sides, as docs/mysql-mariadb.md describes what arrives:

* integers (signed and unsigned; ``BIGINT UNSIGNED`` arrives as ``decimal(20,0)``), ``YEAR``, ``DECIMAL``
  (as :class:`~decimal.Decimal`, numerically), ``DOUBLE``, text, ``ENUM``, ``SET``, ``JSON`` (its text, as stored),
  ``BLOB``, ``DATE``, ``DATETIME``: as they are;
* ``FLOAT``: the float32 it is (MariaDB is read as ``CAST(c AS DOUBLE)``: its text protocol prints 6 digits);
* ``BIT(1)``: a boolean; ``BIT(n)``: the number (MariaDB returns big-endian bytes, Debezium sends little-endian);
* ``TIMESTAMP``: µs since the epoch (the server runs in UTC; Spark reads ``unix_micros``);
* ``TIME``: a :class:`~datetime.timedelta` (Iceberg holds µs in a ``long``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import numpy as np


@dataclass
class SourceTable:
    """A MariaDB table as it is now: ``columns`` (name -> MariaDB type, in order) and its primary ``key``."""

    name: str
    columns: dict[str, str]
    key: list[str]
    # Columns Iceberg keeps after the source dropped or renamed them: name -> the MariaDB type they had.
    gone: dict[str, str] = field(default_factory=dict)

    def ddl(self) -> str:
        body = ", ".join(f"{name} {sql_type}" for name, sql_type in self.columns.items())
        return f"CREATE TABLE {self.name} ({body}, PRIMARY KEY ({', '.join(self.key)}))"


def items() -> SourceTable:
    """Every type of docs/mysql-mariadb.md's table, a BIGINT UNSIGNED key, and a NULL-able column with a DEFAULT."""
    return SourceTable("items", {
        "id": "BIGINT UNSIGNED NOT NULL", "i8": "TINYINT", "u8": "TINYINT UNSIGNED", "i16": "SMALLINT",
        "u16": "SMALLINT UNSIGNED", "i24": "MEDIUMINT", "u24": "MEDIUMINT UNSIGNED", "i32": "INT", "u32": "INT UNSIGNED",
        "i64": "BIGINT", "u64": "BIGINT UNSIGNED", "price": "DECIMAL(12,2)", "exact": "DECIMAL(30,10)", "score": "FLOAT",
        "weight": "DOUBLE", "flags": "BIT(10)", "flag": "BIT(1)", "active": "BOOL", "code": "CHAR(8)",
        "name": "VARCHAR(64)", "bio": "TEXT", "avatar": "BLOB", "born": "DATE", "seen": "DATETIME(6)",
        "updated": "TIMESTAMP(6) NULL", "opens": "TIME(6)", "made": "YEAR", "size": "ENUM('S','M','L','XL')",
        "tags": "SET('red','green','blue')", "prefs": "JSON", "note": "VARCHAR(32) DEFAULT 'none'"}, ["id"])


def orders() -> SourceTable:
    return SourceTable("orders", {
        "id": "INT NOT NULL", "customer": "VARCHAR(32)", "total": "DECIMAL(10,2)", "status": "ENUM('new','paid','shipped')",
        "created": "DATETIME(6)", "note": "TEXT"}, ["id"])


def order_lines() -> SourceTable:
    return SourceTable("order_lines", {
        "order_id": "INT NOT NULL", "line_no": "SMALLINT NOT NULL", "sku": "VARCHAR(32)", "qty": "INT",
        "price": "DECIMAL(10,3)"}, ["order_id", "line_no"])


def _kind(sql_type: str) -> str:
    sql_type = sql_type.upper()
    for prefix in ("BIGINT UNSIGNED", "BIT(1)", "BIT", "FLOAT", "TIMESTAMP", "TIME", "BLOB"):
        if sql_type.startswith(prefix):
            return prefix
    return "other"


def _micros(moment: datetime) -> int:
    return (moment.replace(tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def mariadb_value(sql_type: str, value: Any) -> Any:
    """A value as PyMySQL returns it, in the comparable form."""
    kind = _kind(sql_type)
    if value is None or kind == "other":
        return value
    convert: dict[str, Callable[[Any], Any]] = {
        "BIGINT UNSIGNED": int, "BIT(1)": lambda v: bool(int.from_bytes(v, "big")),
        "BIT": lambda v: int.from_bytes(v, "big"), "FLOAT": lambda v: float(np.float32(v)), "TIMESTAMP": _micros,
        "TIME": lambda v: v, "BLOB": bytes}
    return convert[kind](value)


def iceberg_value(sql_type: str, value: Any) -> Any:
    """A value as Spark returns it from Iceberg (``TIMESTAMP`` columns selected as ``unix_micros``), comparable."""
    kind = _kind(sql_type)
    if value is None or kind == "other":
        return value
    convert: dict[str, Callable[[Any], Any]] = {
        "BIGINT UNSIGNED": lambda v: int(Decimal(v)), "BIT(1)": bool, "BIT": lambda v: int.from_bytes(v, "little"),
        "FLOAT": lambda v: float(np.float32(v)), "TIMESTAMP": lambda v: v,
        "TIME": lambda v: timedelta(microseconds=v), "BLOB": bytes}
    return convert[kind](value)


def mariadb_rows(connection: Any, table: SourceTable) -> dict[tuple[Any, ...], dict[str, Any]]:
    """``SELECT *`` (each FLOAT column as ``CAST(c AS DOUBLE)``, its exact value), normalized, by key."""
    select = [f"CAST({name} AS DOUBLE) AS {name}" if _kind(t) == "FLOAT" else name for name, t in table.columns.items()]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table.name} LIMIT 0")
        assert [d[0] for d in cursor.description] == list(table.columns), "the workload's idea of the columns"
        cursor.execute(f"SELECT {', '.join(select)} FROM {table.name}")
        rows = cursor.fetchall()
    out = {}
    for row in rows:
        normal = {name: mariadb_value(t, v) for (name, t), v in zip(table.columns.items(), row, strict=True)}
        out[tuple(normal[k] for k in table.key)] = normal
    return out


def iceberg_rows(spark: Any, metadata_location: str, table: SourceTable) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The Iceberg table as Apache Iceberg's Spark runtime reads it (current and gone columns), normalized, by key."""
    columns = {**table.columns, **table.gone}
    select = [f"unix_micros({name}) AS {name}" if _kind(t) == "TIMESTAMP" else name for name, t in columns.items()]
    out = {}
    for row in spark.read.format("iceberg").load(metadata_location).selectExpr(*select).collect():
        normal = {name: iceberg_value(t, row[name]) for name, t in columns.items()}
        key = tuple(normal[k] for k in table.key)
        assert key not in out, f"{table.name}: key {key} is in the table twice"
        out[key] = normal
    return out
