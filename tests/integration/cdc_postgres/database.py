"""The source database of the one-sync-per-database acceptance test (tests/integration/test_postgres_database_sync.py).

The database is set up as examples/postgres-debezium/postgres-setup.sql says (that file is run: the example's
``customers`` table, REPLICA IDENTITY DEFAULT, its publication and the ``debezium`` role), with the publication
widened to the test's other tables, which hold every type of docs/connectors.md's "PostgreSQL types" tables between
them: :data:`KINDS` each scalar type, :data:`ORDER_LINES` arrays under a composite key, :data:`DEVICES` a uuid key,
:data:`ACCOUNTS` the columns the workload changes mid-stream (ADD, DROP, widening ALTER COLUMN TYPE, RENAME),
:data:`MEASURES` an unconstrained ``numeric``.

:class:`DatabaseWorkload` is :class:`~tests.integration.cdc_postgres.workload.Workload` on these tables, with edge
values (each type's extremes, float32's largest and smallest values, text outside the BMP, an all-NULL row), a
multidimensional array, and the schema changes of :data:`ACCOUNTS`, whose dropped and renamed columns it follows
(Iceberg keeps them: docs/connectors.md, "Schema changes from the source")."""

from __future__ import annotations

import dataclasses
import json
import random
import re
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import psycopg2

from tests.infra.services import REPO_ROOT
from tests.integration.cdc_postgres.tables import SourceTable, postgres_value
from tests.integration.cdc_postgres.workload import WORDS, Workload, hstore_text

EXAMPLE_SETUP = REPO_ROOT / "examples" / "postgres-debezium" / "postgres-setup.sql"
PUBLICATION = "icebergsync_customers"  # the example's publication (postgres-setup.sql, debezium-connector.json)

# The example's table, as postgres-setup.sql creates it; ``notes`` holds a large TOASTed text that updates leave alone.
CUSTOMERS = SourceTable("customers", [
    ("id", "bigint"), ("email", "text"), ("balance", "numeric(12,2)"), ("active", "boolean"), ("born", "date"),
    ("updated_at", "timestamptz"), ("avatar", "bytea"), ("notes", "text")], ["id"])
KINDS = SourceTable("kinds", [
    ("id", "bigint"), ("small", "smallint"), ("qty", "integer"), ("big", "bigint"), ("price", "numeric(10,3)"),
    ("score", "real"), ("weight", "double precision"), ("flag", "boolean"), ("name", "text"), ("code", "varchar(16)"),
    ("born", "date"), ("opens", "time"), ("opens_ms", "time(3)"), ("seen", "timestamp"), ("seen_ms", "timestamp(3)"),
    ("updated", "timestamptz"), ("ext", "uuid"), ("prefs", "json"), ("tags", "jsonb"), ("blob", "bytea"),
    ("span", "interval"), ("feeling", "mood"), ("cost", "money"), ("attrs", "hstore")], ["id"])
ORDER_LINES = SourceTable("order_lines", [
    ("order_id", "integer"), ("line_no", "smallint"), ("sku", "varchar(32)"), ("qty", "integer"),
    ("labels", "text[]"), ("scores", "integer[]"), ("counts", "bigint[]"), ("prices", "numeric(8,2)[]"),
    ("days", "date[]")], ["order_id", "line_no"])
DEVICES = SourceTable("devices", [("id", "uuid"), ("label", "text"), ("reading", "double precision")], ["id"])
ACCOUNTS = SourceTable("accounts", [
    ("id", "bigint"), ("name", "text"), ("qty", "integer"), ("score", "real"), ("price", "numeric(10,2)"),
    ("note", "text"), ("nick", "text")], ["id"])
MEASURES = SourceTable("measures", [("id", "bigint"), ("ratio", "numeric"), ("label", "text")], ["id"])
TABLES = [CUSTOMERS, KINDS, ORDER_LINES, DEVICES, ACCOUNTS, MEASURES]

NON_BMP = ["😀", "𝄞 clef", "𠜎𠜱", "ü ✓ 😀"]
# A multidimensional array, in order_lines' row (0, 1), which the workload never changes.
MULTIDIMENSIONAL_KEY = (0, 1)
MULTIDIMENSIONAL = [[1, 2], [3, 4]]

_EDGE_KINDS: list[dict[str, Any]] = [
    {"small": 32767, "qty": 2**31 - 1, "big": 2**63 - 1, "price": Decimal("9999999.999"), "score": 3.4028235e38,
     "weight": 1.7976931348623157e308, "flag": True, "name": "😀 𝄞 𠜎 ü", "code": "𝄞😀𠜎", "born": date(9999, 12, 31),
     "opens": time(23, 59, 59, 999999), "opens_ms": time(23, 59, 59, 999000),
     "seen": datetime(9999, 12, 31, 23, 59, 59, 999999), "seen_ms": datetime(9999, 12, 31, 23, 59, 59, 999000),
     "updated": datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
     "ext": "FFFFFFFF-FFFF-4FFF-BFFF-FFFFFFFFFFFF", "prefs": json.dumps({"a": "😀", "b": [1, 2.5e300, None]}),
     "tags": json.dumps({"𝄞": {"x": [True, False]}}), "blob": psycopg2.Binary(bytes(range(256))),
     "span": "30 years 11 mons 30 days 23:59:59.999999", "feeling": "happy", "cost": "92233720368547758.07",
     "attrs": hstore_text({"😀": "𝄞", "k": None, 'q"uote': "back\\slash"})},
    {"small": -32768, "qty": -(2**31), "big": -(2**63), "price": Decimal("-9999999.999"), "score": -3.4028235e38,
     "weight": -1.7976931348623157e308, "flag": False, "name": "", "code": "", "born": date(1, 1, 1),
     "opens": time(0, 0), "opens_ms": time(0, 0), "seen": datetime(1, 1, 1, 0, 0, 0, 999999),
     "seen_ms": datetime(1, 1, 1), "updated": datetime(1, 1, 1, tzinfo=UTC),
     "ext": "00000000-0000-0000-0000-000000000000", "prefs": "[]", "tags": "{}", "blob": psycopg2.Binary(b""),
     "span": "-1 mons -2 days +03:00:00.000001", "feeling": "sad", "cost": "-92233720368547758.08", "attrs": ""},
    {"small": 0, "qty": -1, "big": 1, "price": Decimal("0.001"), "score": 1.4e-45, "weight": 5e-324,
     "span": "0", "cost": "0.01", "name": "tiny"},
    {"score": -1.17549435e-38, "weight": -2.2250738585072014e-308, "price": Decimal("-0.001"), "name": "tiny -"},
    {"score": -0.0, "weight": -0.0, "name": "negative zero"},
    {},  # NULL in every nullable column
]
_EDGE_MEASURES = [Decimal("12345678901234567890.123456789012345678"), Decimal("-0.000000000000000001"),
                  Decimal("0"), Decimal("3.14159"), Decimal("1.500"), Decimal("-99999999999999999999")]


def run_example_setup(cursor: Any) -> None:
    """examples/postgres-debezium/postgres-setup.sql as it is (its role created once per server), on ``cursor``'s
    database (autocommit)."""
    cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = 'debezium'")
    role_exists = cursor.fetchone() is not None
    sql = re.sub(r"--[^\n]*", "", EXAMPLE_SETUP.read_text())
    for statement in filter(None, (part.strip() for part in sql.split(";"))):
        if not (role_exists and statement.startswith("CREATE ROLE")):
            cursor.execute(statement.replace("REPLACE_ME", "test"))


class DatabaseWorkload(Workload):
    """:class:`Workload` on :data:`TABLES` (``customers.notes`` TOASTed, left untouched by updates), plus edge rows,
    schema changes of ``accounts``, and what Iceberg holds of its dropped and renamed columns."""

    def __init__(self, connection: Any, rng: random.Random):
        super().__init__(connection, rng, TABLES, toasted=("notes",), words=[*WORDS, *NON_BMP])
        self.next_id = 100
        # column -> (its PostgreSQL type, its values (by key) when it went away, the keys written since)
        self.gone: dict[str, tuple[str, dict[tuple[Any, ...], Any], set[tuple[Any, ...]]]] = {}
        self.renamed: dict[str, str] = {}  # new name -> old name
        self.added_after: dict[str, set[tuple[Any, ...]]] = {}  # a renamed column's new name -> keys written since

    def _execute(self, statement: str, parameters: list[Any] | None = None) -> None:
        with self.connection, self.connection.cursor() as cursor:
            cursor.execute(statement, parameters)

    def setup(self) -> None:
        """The example's setup (postgres-setup.sql, its role created once per server), then the other tables, each
        REPLICA IDENTITY DEFAULT as the example's, in the example's publication and readable by its role."""
        self.connection.autocommit = True
        with self.connection.cursor() as cursor:
            run_example_setup(cursor)
            cursor.execute("CREATE EXTENSION hstore")
            cursor.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
            for table in TABLES[1:]:
                cursor.execute(table.ddl())
                cursor.execute(f"ALTER TABLE {table.name} REPLICA IDENTITY DEFAULT")
                cursor.execute(f"ALTER PUBLICATION {PUBLICATION} ADD TABLE public.{table.name}")
                cursor.execute(f"GRANT SELECT ON public.{table.name} TO debezium")
        self.connection.autocommit = False

    def _insert_row(self, table: SourceTable, row: dict[str, Any]) -> None:
        self._execute(f"INSERT INTO {table.name} ({', '.join(row)}) VALUES ({', '.join(['%s'] * len(row))})",
                      list(row.values()))

    def seed(self) -> None:
        """Edge rows and 12 random rows per table: what Debezium's snapshot reads (op r)."""
        for edges in _EDGE_KINDS:
            self.next_id += 1
            self._insert_row(KINDS, {"id": self.next_id, **edges})
            self.keys[KINDS.name].append((self.next_id,))
        for ratio in _EDGE_MEASURES:
            self.next_id += 1
            self._insert_row(MEASURES, {"id": self.next_id, "ratio": ratio, "label": "edge"})
            self.keys[MEASURES.name].append((self.next_id,))
        self._insert_row(ORDER_LINES, {"order_id": 0, "line_no": 0, "labels": ["😀", None, "", "𝄞"], "scores": [],
                                       "counts": None, "prices": [None], "days": [date(1, 1, 1), date(9999, 12, 31)]})
        self.keys[ORDER_LINES.name].append((0, 0))
        self._insert_row(ORDER_LINES, {"order_id": MULTIDIMENSIONAL_KEY[0], "line_no": MULTIDIMENSIONAL_KEY[1],
                                       "scores": MULTIDIMENSIONAL})  # not in self.keys: never changed
        self.snapshot_rows()

    def movable(self, cursor: Any, table: SourceTable) -> list[tuple[Any, ...]]:
        """Keys of rows without a TOASTed value: under REPLICA IDENTITY DEFAULT a primary-key update of a row with
        an unchanged TOASTed value is another case (docs/connectors.md, "Primary-key updates"; see
        :meth:`move_toasted`)."""
        cursor.execute(f"SELECT {', '.join(table.key)} FROM {table.name} t WHERE pg_column_size(t.*) < 1500")
        small = {tuple(row) for row in cursor.fetchall()}
        return [key for key in self.keys[table.name] if key in small]

    def move_toasted(self, then_update: bool = False) -> tuple[Any, ...]:
        """A primary-key update of a customer whose TOASTed ``notes`` it leaves unchanged (``then_update``: and, in a
        transaction of its own, an update of another column of the new key); the new key, which the workload does
        not touch again."""
        with self.connection, self.connection.cursor() as cursor:
            cursor.execute("SELECT id FROM customers WHERE length(notes) > 10000 ORDER BY id")
            old = next(row for row in cursor.fetchall() if row in self.keys[CUSTOMERS.name])
            self.move(cursor, CUSTOMERS, old)
        new = self.keys[CUSTOMERS.name].pop()
        if then_update:
            self._execute("UPDATE customers SET email = %s WHERE id = %s", ["moved, then updated", *new])
        return new

    def go_on(self) -> None:
        """A few updates of every table (customers' leave its TOASTed notes unchanged): the workload going on."""
        self.update_some()

    def wrote(self, table: SourceTable, key: tuple[Any, ...]) -> None:
        if table.name == ACCOUNTS.name:
            for _, _, written in self.gone.values():
                written.add(key)
            for written in self.added_after.values():
                written.add(key)

    # -- schema changes of accounts ----------------------------------------------------------------------

    @property
    def accounts(self) -> SourceTable:
        return next(table for table in self.tables if table.name == ACCOUNTS.name)

    def _alter(self, statement: str, columns: list[tuple[str, str]]) -> None:
        self._execute(f"ALTER TABLE accounts {statement}")
        index = self.tables.index(self.accounts)
        self.tables[index] = dataclasses.replace(self.accounts, columns=columns)

    def _going(self, name: str) -> None:
        """Note ``name``'s values before it goes (a drop or a rename): Iceberg keeps them until a row is written."""
        pg_type = dict(self.accounts.columns)[name]
        with self.connection, self.connection.cursor() as cursor:
            cursor.execute(f"SELECT id, {name} FROM accounts")
            self.gone[name] = (pg_type, {(key,): value for key, value in cursor.fetchall()}, set())

    def add_column(self, name: str, pg_type: str) -> None:
        self._alter(f"ADD COLUMN {name} {pg_type}", [*self.accounts.columns, (name, pg_type)])

    def widen(self, name: str, pg_type: str) -> None:
        self._alter(f"ALTER COLUMN {name} TYPE {pg_type}",
                    [(column, pg_type if column == name else old) for column, old in self.accounts.columns])

    def drop_column(self, name: str) -> None:
        self._going(name)
        self._alter(f"DROP COLUMN {name}", [column for column in self.accounts.columns if column[0] != name])

    def rename_column(self, name: str, new: str) -> None:
        self._going(name)
        self.renamed[new] = name
        self.added_after[new] = set()
        self._alter(f"RENAME COLUMN {name} TO {new}",
                    [(new if column == name else column, pg_type) for column, pg_type in self.accounts.columns])

    def accounts_changes(self) -> None:
        """Inserts, updates, a delete and a primary-key update of accounts, each its own transaction."""
        for step in (self.insert, self.insert, self.update, self.update, self.delete, self.move):
            with self.connection, self.connection.cursor() as cursor:
                step(cursor, self.accounts)

    def iceberg_accounts(self, expected: dict[tuple[Any, ...], dict[str, Any]], spec_types: dict[str, str],
                         modes: dict[str, str]) -> dict[tuple[Any, ...], dict[str, Any]]:
        """``expected`` (accounts as ``SELECT *`` returns them, normalized) as Iceberg holds them, as the docs say:
        a dropped column keeps its values in rows not written since and is null in the others; a renamed column is a
        drop and an add, the new column null in rows not written since."""
        out = {}
        for key, row in expected.items():
            row = dict(row)
            for new in self.renamed:
                if key not in self.added_after[new]:
                    row[new] = None
            for name, (pg_type, values, written) in self.gone.items():
                row[name] = None if key in written else postgres_value(pg_type, spec_types[name], values.get(key), modes)
            out[key] = row
        return out
