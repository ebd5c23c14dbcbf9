"""The schema-change workload: DML on a table whose columns change mid-stream (``ALTER TABLE … ADD COLUMN``,
a widening ``ALTER COLUMN … TYPE``, ``DROP COLUMN``), and how PostgreSQL's rows compare with Iceberg's.

The table starts as :data:`ACCOUNTS`; :class:`EvolvingWorkload` tracks its current columns, its keys, and
the keys written after each column was dropped (Iceberg must hold null there from then on)."""

from __future__ import annotations

import random
from typing import Any

from tests.integration.cdc_postgres.tables import SourceTable
from tests.integration.cdc_postgres.workload import value

ACCOUNTS = SourceTable("accounts", [("id", "bigint"), ("name", "text"), ("qty", "integer"),
                                    ("price", "numeric(10,2)"), ("note", "text")], ["id"])


class EvolvingWorkload:
    """Inserts, updates and deletes on :data:`ACCOUNTS`, each its own transaction, between schema changes."""

    def __init__(self, connection: Any, rng: random.Random):
        self.connection = connection
        self.rng = rng
        self.columns = dict(ACCOUNTS.columns)  # name -> PostgreSQL type, as the table is now
        self.keys: list[int] = []
        self.next_id = 0
        self.written_after_drop: dict[str, set[int]] = {}

    def _execute(self, statement: str, parameters: list[Any] | None = None) -> None:
        with self.connection, self.connection.cursor() as cursor:
            cursor.execute(statement, parameters)

    def create(self) -> None:
        self._execute(ACCOUNTS.ddl())

    def _values(self) -> dict[str, Any]:
        return {name: None if self.rng.random() < 0.15 else value(self.rng, pg_type)
                for name, pg_type in self.columns.items() if name != "id"}

    def _written(self, key: int) -> None:
        for keys in self.written_after_drop.values():
            keys.add(key)

    def changes(self, inserts: int = 4, updates: int = 4, deletes: int = 1) -> None:
        for _ in range(inserts):
            self.next_id += 1
            row = {"id": self.next_id, **self._values()}
            self._execute(f"INSERT INTO accounts ({', '.join(row)}) VALUES ({', '.join(['%s'] * len(row))})",
                          list(row.values()))
            self.keys.append(self.next_id)
            self._written(self.next_id)
        for _ in range(updates):
            key = self.rng.choice(self.keys)
            row = self._values()
            changed = self.rng.sample(sorted(row), self.rng.randint(1, len(row)))
            self._execute(f"UPDATE accounts SET {', '.join(f'{name} = %s' for name in changed)} WHERE id = %s",
                          [*(row[name] for name in changed), key])
            self._written(key)
        for _ in range(deletes):
            self._execute("DELETE FROM accounts WHERE id = %s", [self.keys.pop(self.rng.randrange(len(self.keys)))])

    def add_column(self, name: str, pg_type: str) -> None:
        self._execute(f"ALTER TABLE accounts ADD COLUMN {name} {pg_type}")
        self.columns[name] = pg_type

    def widen(self, name: str, pg_type: str) -> None:
        self._execute(f"ALTER TABLE accounts ALTER COLUMN {name} TYPE {pg_type}")
        self.columns[name] = pg_type

    def drop_column(self, name: str) -> None:
        self._execute(f"ALTER TABLE accounts DROP COLUMN {name}")
        del self.columns[name]
        self.written_after_drop[name] = set()

    def last_key(self) -> int:
        """Insert one more row, the workload's last change; its key."""
        self.changes(inserts=1, updates=0, deletes=0)
        return self.keys[-1]


def postgres_rows(connection: Any) -> dict[int, dict[str, Any]]:
    """``SELECT * FROM accounts`` by key, each row by column name."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM accounts")
        names = [d.name for d in cursor.description]
        return {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}


def iceberg_rows(spark: Any, metadata_location: str) -> dict[int, dict[str, Any]]:
    """The Iceberg table as Apache Iceberg's Spark reader returns it, by key, each row by column name."""
    rows: dict[int, dict[str, Any]] = {}
    for row in spark.read.format("iceberg").load(metadata_location).collect():
        assert row["id"] not in rows, f"key {row['id']} is in the table twice"
        rows[row["id"]] = row.asDict()
    return rows
