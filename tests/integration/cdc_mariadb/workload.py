"""A seeded, application-like workload on MariaDB for the CDC acceptance test.

``items`` holds every type of docs/mysql-mariadb.md's table (keys above 2^63 included), ``orders`` and
``order_lines`` are written together in multi-table transactions; inserts, updates, deletes and primary-key
updates, NULLs (an explicit NULL into a column with a DEFAULT too), and DDL between them (ADD, DROP, MODIFY and
RENAME COLUMN), tracking the keys written after each so the test knows what Iceberg must hold for columns the
source dropped or renamed. No TRUNCATE: the sync does not support it yet.
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import numpy as np

from tests.integration.cdc_mariadb.tables import SourceTable, items, order_lines, orders

TEXT = string.ascii_letters + string.digits + " -_.,'\"\\" + "éßçøΩЖ中文ひら" + "😀🚀𝄞🎉"  # 4-byte characters too
FLOAT32_MAX = float(np.finfo(np.float32).max)  # 3.4028235e+38
FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # 1.1754944e-38, the smallest normal
FLOAT32_SUBNORMAL = float(np.float32(1e-45))  # 1.4e-45, the smallest subnormal
UNSIGNED_64 = 2**64 - 1
NULLS = 0.15


def text(rng: random.Random, longest: int) -> str:
    value = "".join(rng.choice(TEXT) for _ in range(rng.randint(0, longest)))
    return value.rstrip(" ")  # CHAR drops trailing spaces


def decimal(rng: random.Random, precision: int, scale: int) -> Decimal:
    return Decimal(rng.randint(-(10**precision - 1), 10**precision - 1)).scaleb(-scale)


def value(rng: random.Random, sql_type: str, snapshot: bool = False) -> Any:
    """A random value of a MariaDB column type. ``snapshot``: for rows Debezium's snapshot reads, FLOATs of at most
    6 significant digits (the snapshot sends FLOAT as MariaDB prints it: docs/mysql-mariadb.md)."""
    kind = sql_type.upper().split(" NOT NULL")[0].split(" DEFAULT")[0].removesuffix(" NULL")
    integers = {"TINYINT": 8, "SMALLINT": 16, "MEDIUMINT": 24, "INT": 32, "BIGINT": 64}
    base = kind.removesuffix(" UNSIGNED")
    if base in integers:
        bits = integers[base]
        if kind.endswith("UNSIGNED"):
            edges = [0, 2**bits - 1, 2**(bits - 1), 2**(bits - 1) - 1]
            return rng.choice(edges) if rng.random() < 0.3 else rng.randint(0, 2**bits - 1)
        edges = [-(2**(bits - 1)), 2**(bits - 1) - 1, 0, -1]
        return rng.choice(edges) if rng.random() < 0.3 else rng.randint(-(2**(bits - 1)), 2**(bits - 1) - 1)
    if kind.startswith("DECIMAL("):
        precision, scale = (int(part) for part in kind[len("DECIMAL("):-1].split(","))
        return decimal(rng, precision, scale)
    if kind == "FLOAT":
        number = float(np.float32(rng.uniform(-1, 1) * 10.0 ** rng.randint(-30, 30)))
        return float(f"{number:.5e}") if snapshot else number
    if kind == "DOUBLE":
        return rng.choice([1.7976931348623157e308, -2.2250738585072014e-308]) if rng.random() < 0.1 \
            else rng.uniform(-1, 1) * 10.0 ** rng.randint(-300, 300)
    if kind.startswith("BIT("):
        return rng.randint(0, 2 ** int(kind[4:-1]) - 1)
    if kind == "BOOL":
        return rng.randint(0, 1)
    if kind.startswith(("CHAR(", "VARCHAR(")):
        return text(rng, int(kind.split("(")[1].rstrip(")")))
    if kind == "TEXT":
        return text(rng, 300)
    if kind == "BLOB":
        return rng.randbytes(rng.randint(0, 64))
    if kind == "DATE":
        return date(1000, 1, 1) + timedelta(days=rng.randint(0, 3_287_000))
    if kind == "DATETIME(6)":
        return datetime(1000, 1, 1) + timedelta(microseconds=rng.randint(0, 3_287_000 * 86_400 * 10**6))
    if kind == "TIMESTAMP(6)":
        return datetime(1970, 1, 2) + timedelta(microseconds=rng.randint(0, 24_800 * 86_400 * 10**6))
    if kind == "TIME(6)":
        return timedelta(microseconds=rng.randint(0, 86_400 * 10**6 - 1))
    if kind == "YEAR":
        return rng.randint(1901, 2155)
    if kind.startswith(("ENUM(", "SET(")):
        labels = [label.strip("'") for label in sql_type[sql_type.index("(") + 1:sql_type.rindex(")")].split(",")]
        if kind.startswith("ENUM("):
            return rng.choice(labels)
        return ",".join(label for label in labels if rng.random() < 0.5)
    if kind == "JSON":
        return json.dumps({text(rng, 6): rng.choice([rng.randint(-9, 9), text(rng, 8), None, [1.5, True]])
                           for _ in range(rng.randint(0, 3))}, ensure_ascii=rng.random() < 0.5)
    raise AssertionError(f"no values for {sql_type}")


@dataclass
class Workload:
    """The workload on database ``shop``; ``tables`` is each table as it is now."""

    connection: Any
    rng: random.Random
    tables: dict[str, SourceTable] = field(default_factory=lambda: {t.name: t for t in (items(), orders(), order_lines())})
    keys: dict[str, list[tuple[Any, ...]]] = field(default_factory=lambda: {"items": [], "orders": [], "order_lines": []})
    written_after: dict[str, set[tuple[Any, ...]]] = field(default_factory=dict)  # "<table>.<column>" -> keys
    float_extreme_keys: list[tuple[Any, ...]] = field(default_factory=list)
    next_item: int = 0
    went_on: int = 0
    next_order: int = 0
    truncates: int = 0  # TRUNCATE TABLE statements run

    def execute(self, *statements: tuple[str, list[Any]]) -> list[int]:
        """The statements as ONE transaction; the rows each changed."""
        with self.connection.cursor() as cursor:
            cursor.execute("BEGIN")
            changed = [cursor.execute(statement, parameters) for statement, parameters in statements]
            cursor.execute("COMMIT")
        return changed

    def create(self) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute("USE shop")
            for table in self.tables.values():
                cursor.execute(table.ddl())

    def _written(self, table: str, key: tuple[Any, ...]) -> None:
        for mark, keys in self.written_after.items():
            if mark.startswith(f"{table}."):
                keys.add(key)

    def _row(self, table: SourceTable, snapshot: bool) -> dict[str, Any]:
        row = {}
        for name, sql_type in table.columns.items():
            if name in table.key:
                continue
            if "NOT NULL" in sql_type or self.rng.random() >= NULLS:
                row[name] = value(self.rng, sql_type, snapshot)
            elif name != "note" or self.rng.random() < 0.5:  # else `note` is left out: its DEFAULT applies
                row[name] = None  # an explicit NULL (into `note`, a column with a DEFAULT, too)
        return row

    @staticmethod
    def _insert(table: str, row: dict[str, Any]) -> tuple[str, list[Any]]:
        return (f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join(['%s'] * len(row))})", list(row.values()))

    def _update(self, table: SourceTable, key: tuple[Any, ...]) -> tuple[str, list[Any]]:
        row = self._row(table, snapshot=False)
        changed = self.rng.sample(sorted(row), min(len(row), self.rng.randint(1, 4)))
        where = " AND ".join(f"{k} = %s" for k in table.key)
        return (f"UPDATE {table.name} SET {', '.join(f'{c} = %s' for c in changed)} WHERE {where}",
                [*(row[c] for c in changed), *key])

    def new_item(self, snapshot: bool = False) -> tuple[str, list[Any]]:
        self.next_item += 1
        key = (self.next_item if self.next_item % 3 else 2**63 + self.next_item,)  # a third above 2^63
        self.keys["items"].append(key)
        self._written("items", key)
        return self._insert("items", {"id": key[0], **self._row(self.tables["items"], snapshot)})

    def new_order(self, snapshot: bool = False) -> list[tuple[str, list[Any]]]:
        self.next_order += 1
        order = (self.next_order,)
        self.keys["orders"].append(order)
        self._written("orders", order)
        statements = [self._insert("orders", {"id": order[0], **self._row(self.tables["orders"], snapshot)})]
        for line_no in range(1, self.rng.randint(1, 4) + 1):
            key = (order[0], line_no)
            self.keys["order_lines"].append(key)
            self._written("order_lines", key)
            statements.append(self._insert("order_lines", {"order_id": order[0], "line_no": line_no,
                                                           **self._row(self.tables["order_lines"], snapshot)}))
        return statements

    def seed(self, count: int) -> None:
        """Rows Debezium's snapshot reads."""
        for _ in range(count):
            self.execute(self.new_item(snapshot=True), *self.new_order(snapshot=True))


    def round(self, changes: int = 12) -> None:
        """``changes`` transactions: inserts, updates, deletes and primary-key updates of items, and orders placed,
        changed and cancelled with their lines (each with an item's update: a multi-table transaction)."""
        for _ in range(changes):
            action = self.rng.random()
            if action < 0.3:
                self.execute(self.new_item(), *self.new_order())
            elif action < 0.55:
                self._update_each()
            elif action < 0.65:
                self._delete_item()
            elif action < 0.75:
                self._move_item()
            elif action < 0.85:
                self._cancel_order()
            else:
                self._renumber_line()

    def _update_each(self) -> None:
        """A row of each table updated in one transaction; a row counts as written only if the update changed it
        (MariaDB logs no row for an update that changes nothing)."""
        picked, statements = [], []
        for name in ("items", "orders", "order_lines"):
            picked.append((name, key := self.rng.choice(self.keys[name])))
            statements.append(self._update(self.tables[name], key))
        changed = self.execute(*statements)
        for (name, key), rows in zip(picked, changed, strict=True):
            if rows:
                self._written(name, key)

    def float_extremes(self) -> None:
        """Items whose FLOAT and DOUBLE are their type's largest, smallest normal and smallest subnormal magnitudes,
        sent by the binlog (exact values, unlike the snapshot's FLOATs)."""
        extremes = [(FLOAT32_MAX, 1.7976931348623157e308), (-FLOAT32_MAX, -1.7976931348623157e308),
                    (FLOAT32_TINY, 2.2250738585072014e-308), (FLOAT32_SUBNORMAL, 5e-324)]
        for score, weight in extremes:
            self.execute(self.new_item())
            self.execute(("UPDATE items SET score = %s, weight = %s WHERE id = %s",
                          [score, weight, self.keys["items"][-1][0]]))
            self.float_extreme_keys.append(self.keys["items"][-1])

    def go_on(self) -> None:
        """A little more work while a job runs, the first 5 times only: the workload stays the same however long the
        job takes."""
        if self.went_on < 5:
            self.went_on += 1
            self.round(2)

    def _delete_item(self) -> None:
        key = self.rng.choice(self.keys["items"])
        self.keys["items"].remove(key)
        self.execute(("DELETE FROM items WHERE id = %s", list(key)))

    def _move_item(self) -> None:
        """A primary-key update."""
        old = self.rng.choice(self.keys["items"])
        self.next_item += 1
        new = (2**63 + self.next_item,) if old[0] < 2**63 else (self.next_item,)
        self.keys["items"].remove(old)
        self.keys["items"].append(new)
        self._written("items", new)
        self.execute(("UPDATE items SET id = %s WHERE id = %s", [new[0], old[0]]))

    def _cancel_order(self) -> None:
        order = self.rng.choice(self.keys["orders"])
        self.keys["orders"].remove(order)
        self.keys["order_lines"] = [key for key in self.keys["order_lines"] if key[0] != order[0]]
        self.execute(("DELETE FROM order_lines WHERE order_id = %s", list(order)),
                     ("DELETE FROM orders WHERE id = %s", list(order)))

    def _renumber_line(self) -> None:
        """A primary-key update of a composite key."""
        old = self.rng.choice(self.keys["order_lines"])
        new = (old[0], 100 + max(n for o, n in self.keys["order_lines"] if o == old[0]))
        self.keys["order_lines"].remove(old)
        self.keys["order_lines"].append(new)
        self._written("order_lines", new)
        self.execute(("UPDATE order_lines SET line_no = %s WHERE order_id = %s AND line_no = %s", [new[1], *old]))

    def truncate(self, table: str) -> None:
        """``TRUNCATE TABLE``, then new orders (with lines) so that every table has rows to change again."""
        with self.connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE TABLE {table}")
        self.truncates += 1
        self.keys[table] = []
        for _ in range(4):
            self.execute(*self.new_order())

    def last_keys(self) -> dict[str, tuple[Any, ...]]:
        """Insert a row into each table, last: once Debezium has sent a table's, it has sent all its earlier changes."""
        self.execute(self.new_item(), *self.new_order())
        return {name: keys[-1] for name, keys in self.keys.items()}

    # -- DDL ----------------------------------------------------------------------------------------------------

    def alter(self, table: str, clause: str) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table} {clause}")

    def add_column(self, table: str, name: str, sql_type: str) -> None:
        self.alter(table, f"ADD COLUMN {name} {sql_type}")
        self.tables[table].columns[name] = sql_type

    def drop_column(self, table: str, name: str) -> None:
        self.alter(table, f"DROP COLUMN {name}")
        self.tables[table].gone[name] = self.tables[table].columns.pop(name)
        self.written_after[f"{table}.{name}"] = set()

    def modify_column(self, table: str, name: str, sql_type: str) -> None:
        self.alter(table, f"MODIFY COLUMN {name} {sql_type}")
        self.tables[table].columns[name] = sql_type

    def rename_column(self, table: str, old: str, new: str) -> None:
        self.alter(table, f"RENAME COLUMN {old} TO {new}")
        columns = self.tables[table].columns
        self.tables[table].gone[old] = columns[old]
        self.tables[table].columns = {new if name == old else name: t for name, t in columns.items()}
        self.written_after[f"{table}.{old}"] = set()
