"""An application-like workload on the source tables: inserts, updates (some leaving a large TOASTed text
untouched), deletes, primary-key updates, multi-row transactions and NULLs in every nullable column.

Deterministic for a given ``random.Random``; every statement goes through psycopg2 with parameters.
No DDL after the tables are created (schema changes run on a table of their own: schema_changes.py)."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import psycopg2

from tests.integration.cdc_postgres.tables import (
    COLLECTIONS,
    CUSTOMERS,
    DOCUMENTS,
    TABLES,
    SourceTable,
)

NULLS = 0.15
WORDS = ["alpha", "Ünïcödé ✓", "it's", 'say "hi"', "back\\slash", "tab\there", "", "日本語"]


MOODS = ["sad", "ok", "happy"]  # the enum type mood of the database sync's test


def hstore_text(pairs: dict[str, str | None]) -> str:
    def quoted(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return ", ".join(f"{quoted(k)}=>{'NULL' if v is None else quoted(v)}" for k, v in pairs.items())


def value(rng: random.Random, pg_type: str, words: list[str] = WORDS) -> Any:
    """A random value of a PostgreSQL type, as a psycopg2 parameter (text from ``words``)."""
    if pg_type == "time(3)":
        return value(rng, "time")  # PostgreSQL rounds it to ms
    if pg_type == "timestamp(3)":
        return value(rng, "timestamp")
    if pg_type == "interval":
        sign = rng.choice([1, -1])
        return (f"{sign * rng.randint(0, 30)} years {rng.randint(-11, 11)} mons {sign * rng.randint(0, 400)} days "
                f"{rng.randint(-99, 99)}:{rng.randint(0, 59):02}:{rng.randint(0, 59):02}.{rng.randint(0, 999999):06}")
    if pg_type == "money":
        return str(Decimal(rng.randint(-(10**14), 10**14)).scaleb(-2))
    if pg_type == "mood":
        return rng.choice(MOODS)
    if pg_type == "hstore":
        return hstore_text({rng.choice(words) + str(i): None if rng.random() < NULLS else rng.choice(words)
                             for i in range(rng.randint(0, 3))})
    if pg_type.startswith("varchar") or pg_type == "text":
        return " ".join(rng.choice(words) for _ in range(rng.randint(0, 3)))[:16]  # fits every varchar here
    if pg_type == "smallint":
        return rng.randint(-32768, 32767)
    if pg_type == "integer":
        return rng.randint(-(2**31), 2**31 - 1)
    if pg_type == "bigint":
        return rng.randint(-(2**63), 2**63 - 1)
    if pg_type.startswith("numeric("):
        precision, scale = (int(part) for part in pg_type[8:-1].split(","))
        return Decimal(rng.randint(-(10**precision) + 1, 10**precision - 1)).scaleb(-scale)
    if pg_type == "numeric":
        return Decimal(rng.randint(-(10**15), 10**15)).scaleb(-rng.randint(0, 12))
    if pg_type == "real":
        return round(rng.uniform(-1e4, 1e4), rng.randint(0, 4))
    if pg_type == "double precision":
        return rng.uniform(-1e9, 1e9)
    if pg_type == "boolean":
        return rng.random() < 0.5
    if pg_type == "date":
        return date(1990, 1, 1) + timedelta(days=rng.randint(0, 20000))
    if pg_type == "time":
        return time(rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59), rng.choice([0, rng.randint(0, 999999)]))
    if pg_type == "timestamp":
        return datetime(2020, 1, 1) + timedelta(microseconds=rng.randint(0, 10**14))
    if pg_type == "timestamptz":
        return datetime(2020, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randint(0, 10**14))
    if pg_type == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    if pg_type in ("json", "jsonb"):
        return json.dumps({"n": rng.randint(0, 99), "tags": [rng.choice(words) for _ in range(2)],
                           "ok": rng.random() < 0.5, "nested": {"x": None}})
    if pg_type == "bytea":
        return psycopg2.Binary(rng.randbytes(rng.randint(0, 48)))
    raise ValueError(pg_type)


# Arrays Debezium has a placeholder for in every variant when it did not read them (an unchanged TOASTed value). Of
# other arrays (numeric[], boolean[], timestamp[] …; date[] with time.precision.mode=isostring) Debezium 3.6 sends
# null then, indistinguishable from NULL: such columns need REPLICA IDENTITY FULL (docs/connectors.md, "Unchanged
# TOASTed values"), so the workload keeps them small.
TOASTED_ARRAYS = ("text[]", "integer[]", "bigint[]")


def array_value(rng: random.Random, pg_type: str) -> list[Any] | None:
    """A random value of a PostgreSQL array type: NULL, empty, a few elements (some NULL), or, of the types in
    :data:`TOASTED_ARRAYS`, one large enough to be TOASTed (thousands of incompressible elements)."""
    element = pg_type[:-2]
    draw = rng.random()
    if draw < 0.1:
        return None
    if draw < 0.2:
        return []
    if draw < 0.5 and pg_type in TOASTED_ARRAYS:
        return [value(rng, element) if element != "text" else rng.randbytes(16).hex() for _ in range(3000)]
    return [None if rng.random() < NULLS else value(rng, element) for _ in range(rng.randint(1, 5))]


def large_text(rng: random.Random) -> str:
    """Text PostgreSQL stores out of line (TOAST): ~16 KB that does not compress."""
    return rng.randbytes(8192).hex()


class Workload:
    """The workload's state: the keys that exist, and the next new key of each table.

    ``tables`` are its tables (by default those of :data:`TABLES`); the columns named in ``toasted`` hold a large
    TOASTed text in about half the rows, and updates leave them untouched."""

    def __init__(self, connection: Any, rng: random.Random, tables: Sequence[SourceTable] = TABLES,
                 toasted: Sequence[str] = ("bio",), words: list[str] = WORDS):
        self.connection = connection
        self.rng = rng
        self.tables = list(tables)
        self.toasted = set(toasted)
        self.words = words
        self.keys: dict[str, list[tuple[Any, ...]]] = {table.name: [] for table in self.tables}
        self.next_id = 1
        self.truncates = 0  # TRUNCATE statements run

    def wrote(self, table: SourceTable, key: tuple[Any, ...]) -> None:
        """Called for each row an insert, update or primary-key update writes (a hook for subclasses)."""

    def create(self) -> None:
        with self.connection, self.connection.cursor() as cursor:
            for table in TABLES:
                cursor.execute(table.ddl())
            # Debezium then sends every column of an update, TOASTed ones included (docs/connectors.md).
            cursor.execute(f"ALTER TABLE {CUSTOMERS.name} REPLICA IDENTITY FULL")

    def _row(self, table: SourceTable, key: tuple[Any, ...]) -> dict[str, Any]:
        row = {}
        for name, pg_type in table.columns:
            if name in table.key:
                row[name] = key[table.key.index(name)]
            elif name in self.toasted:
                row[name] = large_text(self.rng) if self.rng.random() < 0.5 else None
            elif pg_type.endswith("[]"):
                row[name] = array_value(self.rng, pg_type)
            else:
                row[name] = None if self.rng.random() < NULLS else value(self.rng, pg_type, self.words)
        return row

    def _new_key(self, table: SourceTable) -> tuple[Any, ...]:
        self.next_id += 1
        if dict(table.columns)[table.key[0]] == "uuid":
            return (str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),)
        if len(table.key) == 2:
            return (self.next_id // 4, self.next_id % 4)
        return (self.next_id,)

    def _where(self, table: SourceTable) -> str:
        return " AND ".join(f"{name} = %s" for name in table.key)

    def insert(self, cursor: Any, table: SourceTable, count: int = 1) -> None:
        for _ in range(count):
            key = self._new_key(table)
            row = self._row(table, key)
            cursor.execute(f"INSERT INTO {table.name} ({', '.join(row)}) VALUES ({', '.join(['%s'] * len(row))})",
                           list(row.values()))
            self.keys[table.name].append(key)
            self.wrote(table, key)

    def update(self, cursor: Any, table: SourceTable, count: int = 1) -> None:
        """Update a few random non-key columns (never a ``toasted`` one: its TOASTed value stays as it was)."""
        candidates = [(name, pg_type) for name, pg_type in table.columns
                      if name not in table.key and name not in self.toasted]
        for _ in range(count):
            key = self.rng.choice(self.keys[table.name])
            changed = self.rng.sample(candidates, min(len(candidates), self.rng.randint(1, 3)))
            values = [array_value(self.rng, pg_type) if pg_type.endswith("[]")
                      else None if self.rng.random() < NULLS else value(self.rng, pg_type, self.words)
                      for _, pg_type in changed]
            assignments = ", ".join(f"{name} = %s" for name, _ in changed)
            cursor.execute(f"UPDATE {table.name} SET {assignments} WHERE {self._where(table)}", [*values, *key])
            self.wrote(table, key)

    def delete(self, cursor: Any, table: SourceTable, count: int = 1) -> None:
        for _ in range(count):
            key = self.keys[table.name].pop(self.rng.randrange(len(self.keys[table.name])))
            cursor.execute(f"DELETE FROM {table.name} WHERE {self._where(table)}", list(key))

    def movable(self, cursor: Any, table: SourceTable) -> list[tuple[Any, ...]]:
        """The keys :meth:`move` may move (all of them: a hook for subclasses)."""
        return self.keys[table.name]

    def move(self, cursor: Any, table: SourceTable, old: tuple[Any, ...] | None = None) -> None:
        """Update a row's primary key (Debezium: a delete of the old key, its tombstone, a create of the new);
        ``old``, or a random key of :meth:`movable`."""
        keys = self.keys[table.name]
        old = self.rng.choice(self.movable(cursor, table)) if old is None else old
        keys.remove(old)
        new = self._new_key(table)
        assignments = ", ".join(f"{name} = %s" for name in table.key)
        cursor.execute(f"UPDATE {table.name} SET {assignments} WHERE {self._where(table)}", [*new, *old])
        keys.append(new)
        self.wrote(table, new)

    def snapshot_rows(self) -> None:
        """The rows that exist before Debezium starts: its snapshot reads them (op r)."""
        with self.connection, self.connection.cursor() as cursor:
            for table in self.tables:
                self.insert(cursor, table, 12)

    def round(self) -> None:
        """One round of changes: each a transaction of its own, and one multi-row transaction over all tables."""
        for table in self.tables:
            for step in (self.insert, self.insert, self.update, self.update, self.update, self.delete):
                with self.connection, self.connection.cursor() as cursor:
                    step(cursor, table)
            with self.connection, self.connection.cursor() as cursor:
                self.move(cursor, table)
        with self.connection, self.connection.cursor() as cursor:
            for table in self.tables:
                self.insert(cursor, table, 3)
                self.update(cursor, table, 3)
                self.delete(cursor, table, 1)
                self.move(cursor, table)

    def last_row(self) -> dict[str, tuple[Any, ...]]:
        """Insert one more row into each table, the last change of the workload; returns its key per table."""
        with self.connection, self.connection.cursor() as cursor:
            for table in self.tables:
                self.insert(cursor, table)
        return {table.name: self.keys[table.name][-1] for table in self.tables}

    def update_some(self) -> None:
        """A few updates of each table, each in its own transaction (the workload going on while a job runs)."""
        for table in self.tables:
            with self.connection, self.connection.cursor() as cursor:
                self.update(cursor, table, 2)

    # -- documents: unchanged TOASTed values under REPLICA IDENTITY DEFAULT ---------------------------

    def _create_with_rows(self, table: SourceTable, insert: Callable[[Any], tuple[Any, ...]]) -> None:
        """``table`` (REPLICA IDENTITY DEFAULT) and 16 rows by ``insert`` (Debezium's snapshot reads them whole)."""
        with self.connection, self.connection.cursor() as cursor:
            cursor.execute(table.ddl())
            self.keys[table.name] = []
            for _ in range(16):
                insert(cursor)

    def create_documents(self) -> None:
        self._create_with_rows(DOCUMENTS, self._insert_document)

    def _insert_document(self, cursor: Any) -> tuple[Any, ...]:
        self.next_id += 1
        body = large_text(self.rng) if self.rng.random() < 0.8 else None
        cursor.execute(f"INSERT INTO {DOCUMENTS.name} (id, rev, body) VALUES (%s, 0, %s)", [self.next_id, body])
        self.keys[DOCUMENTS.name].append((self.next_id,))
        return (self.next_id,)

    def _touch(self, cursor: Any, key: tuple[Any, ...], table: SourceTable = DOCUMENTS) -> None:
        """An update that leaves the TOASTed values (a document's body, a collection's arrays) untouched."""
        cursor.execute(f"UPDATE {table.name} SET rev = rev + 1 WHERE id = %s", list(key))

    def documents_round(self) -> None:
        """Updates leaving the body untouched, alone and several of one row in a transaction, after an insert in
        the same transaction, a new body, a delete and a re-insert."""
        keys = self.keys[DOCUMENTS.name]
        for _ in range(4):
            with self.connection, self.connection.cursor() as cursor:
                self._touch(cursor, self.rng.choice(keys))
        with self.connection, self.connection.cursor() as cursor:
            twice = self.rng.choice(keys)
            self._touch(cursor, twice)
            self._touch(cursor, twice)
            self._touch(cursor, self._insert_document(cursor))
        with self.connection, self.connection.cursor() as cursor:
            cursor.execute(f"UPDATE {DOCUMENTS.name} SET body = %s WHERE id = %s",
                           [large_text(self.rng), *self.rng.choice(keys)])
        with self.connection, self.connection.cursor() as cursor:
            gone = keys.pop(self.rng.randrange(len(keys)))
            cursor.execute(f"DELETE FROM {DOCUMENTS.name} WHERE id = %s", list(gone))
            self._insert_document(cursor)

    def move_documents(self) -> None:
        """Primary-key updates that leave the body untouched (Debezium: a delete of the old key, a create of the new
        one with the placeholder): alone, with another column changed, two in one transaction, and a row updated
        then moved in one transaction."""
        keys = self.keys[DOCUMENTS.name]

        def move(cursor: Any, also: str = "") -> None:
            old = keys.pop(self.rng.randrange(len(keys)))
            self.next_id += 1
            cursor.execute(f"UPDATE {DOCUMENTS.name} SET id = %s{also} WHERE id = %s", [self.next_id, *old])
            keys.append((self.next_id,))

        with self.connection, self.connection.cursor() as cursor:
            move(cursor)
        with self.connection, self.connection.cursor() as cursor:
            move(cursor, ", rev = rev + 1")
        with self.connection, self.connection.cursor() as cursor:
            move(cursor)
            move(cursor)
        with self.connection, self.connection.cursor() as cursor:
            self._touch(cursor, keys[-1])
            move(cursor)

    def insert_documents(self, count: int) -> None:
        """``count`` more documents, one transaction."""
        with self.connection, self.connection.cursor() as cursor:
            for _ in range(count):
                self._insert_document(cursor)

    def truncate_documents(self) -> None:
        """TRUNCATE, alone and in a transaction between inserts (those before it go, those after it stay)."""
        self.truncates += 2
        with self.connection, self.connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {DOCUMENTS.name}")
        self.keys[DOCUMENTS.name] = []
        for _ in range(6):
            with self.connection, self.connection.cursor() as cursor:
                self._insert_document(cursor)
        with self.connection, self.connection.cursor() as cursor:
            self._insert_document(cursor)
            cursor.execute(f"TRUNCATE {DOCUMENTS.name}")
            self.keys[DOCUMENTS.name] = []
            for _ in range(8):
                self._insert_document(cursor)

    def touch_documents(self) -> None:
        """Two updates leaving the body untouched (the workload going on while a job runs)."""
        for _ in range(2):
            with self.connection, self.connection.cursor() as cursor:
                self._touch(cursor, self.rng.choice(self.keys[DOCUMENTS.name]))

    def go_on(self) -> None:
        """A few updates of every table, documents included: the workload going on while a job runs."""
        self.update_some()
        self.touch_documents()

    # -- collections: arrays, TOASTed ones left untouched by most updates ------------------------------

    def create_collections(self) -> None:
        self._create_with_rows(COLLECTIONS, self._insert_collection)

    def _insert_collection(self, cursor: Any) -> tuple[Any, ...]:
        self.next_id += 1
        row = {"id": self.next_id, "rev": 0, **{name: array_value(self.rng, pg_type)
                                                for name, pg_type in COLLECTIONS.columns[2:]}}
        cursor.execute(f"INSERT INTO {COLLECTIONS.name} ({', '.join(row)}) VALUES ({', '.join(['%s'] * len(row))})",
                       list(row.values()))
        self.keys[COLLECTIONS.name].append((self.next_id,))
        return (self.next_id,)

    def _change_arrays(self, cursor: Any, key: tuple[Any, ...]) -> None:
        """An update of one or two arrays (to NULL, empty, small or large ones), the others untouched."""
        changed = self.rng.sample(COLLECTIONS.columns[2:], self.rng.randint(1, 2))
        assignments = ", ".join(f"{name} = %s" for name, _ in changed)
        cursor.execute(f"UPDATE {COLLECTIONS.name} SET {assignments}, rev = rev + 1 WHERE id = %s",
                       [*(array_value(self.rng, pg_type) for _, pg_type in changed), *key])

    def collections_round(self) -> None:
        """Untouched arrays alone and twice in a transaction, after an insert in the same transaction, changed
        arrays, a delete and a re-insert."""
        keys = self.keys[COLLECTIONS.name]
        for _ in range(4):
            with self.connection, self.connection.cursor() as cursor:
                self._touch(cursor, self.rng.choice(keys), COLLECTIONS)
            with self.connection, self.connection.cursor() as cursor:
                self._change_arrays(cursor, self.rng.choice(keys))
        with self.connection, self.connection.cursor() as cursor:
            twice = self.rng.choice(keys)
            self._touch(cursor, twice, COLLECTIONS)
            self._change_arrays(cursor, twice)
            self._touch(cursor, twice, COLLECTIONS)
            self._touch(cursor, self._insert_collection(cursor), COLLECTIONS)
        with self.connection, self.connection.cursor() as cursor:
            gone = keys.pop(self.rng.randrange(len(keys)))
            cursor.execute(f"DELETE FROM {COLLECTIONS.name} WHERE id = %s", list(gone))
            self._insert_collection(cursor)

    def last_document(self) -> tuple[Any, ...]:
        """Touch a document, then insert one more: the last change to documents; returns its key."""
        return self._last(DOCUMENTS, self._insert_document)

    def last_collection(self) -> tuple[Any, ...]:
        """Touch a collection, then insert one more: the last change to collections; returns its key."""
        return self._last(COLLECTIONS, self._insert_collection)

    def _last(self, table: SourceTable, insert: Callable[[Any], tuple[Any, ...]]) -> tuple[Any, ...]:
        with self.connection, self.connection.cursor() as cursor:
            self._touch(cursor, self.rng.choice(self.keys[table.name]), table)
            return insert(cursor)
