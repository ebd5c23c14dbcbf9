"""The consistent cut (spark_app/iceberg/cut.py) on real SQL catalogs, SQLite and PostgreSQL: every table's
metadata pointer moves in one database transaction or none does, the tables stay readable and writable by
pyiceberg's own SqlCatalog, and a reader of the catalog never sees an order without its lines. A REST catalog
refuses a cut of several tables."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.table import StaticTable, Table, Transaction
from pyiceberg.types import DoubleType, LongType, NestedField
from sqlalchemy import event, text

from spark_app.iceberg.cut import AtomicCutUnsupportedError, TableChange, atomic_cut_supported, commit_cut
from tests.infra.services import RestCatalog
from tests.integration.cut_support import broken_orders, reads_during

ORDERS = Schema(NestedField(1, "order_id", LongType()), NestedField(2, "total", DoubleType()))
LINES = Schema(NestedField(1, "order_id", LongType()), NestedField(2, "amount", DoubleType()))


@pytest.fixture(params=["sqlite", "postgresql"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlCatalog]:
    """A fresh SQL catalog (its own name, so tests sharing the PostgreSQL server never meet)."""
    warehouse = (tmp_path / "warehouse").as_uri()
    if request.param == "sqlite":
        uri = f"sqlite:///{tmp_path}/catalog.db"
    else:
        uri = request.getfixturevalue("postgres_uri").replace("postgresql://", "postgresql+psycopg2://")
    opened = SqlCatalog(f"cut_{uuid.uuid4().hex[:8]}", uri=uri, warehouse=warehouse)
    opened.create_namespace("db")
    yield opened
    opened.engine.dispose()


def reopened(catalog: SqlCatalog) -> SqlCatalog:
    """Another process's view of the same catalog: its own engine and connections."""
    return SqlCatalog(catalog.name, **catalog.properties)


def order_rows(first: int, count: int) -> tuple[pa.Table, pa.Table]:
    """``count`` orders from ``first``, each with three lines that sum to its total."""
    ids = list(range(first, first + count))
    orders = pa.table({"order_id": pa.array(ids, pa.int64()), "total": [6.0 * i for i in ids]})
    lines = pa.table({"order_id": pa.array([i for i in ids for _ in range(3)], pa.int64()),
                      "amount": [float(part * i) for i in ids for part in (1, 2, 3)]})
    return orders, lines


def appending(table: Table, rows: pa.Table) -> TableChange:
    transaction = Transaction(table)
    transaction.append(rows)
    return TableChange(table, transaction)


def location(catalog: SqlCatalog, identifier: str) -> str:
    return catalog.load_table(identifier).metadata_location


def test_a_cut_moves_every_table_and_pyiceberg_reads_and_writes_them_after(catalog: SqlCatalog) -> None:
    orders, lines = catalog.create_table("db.orders", ORDERS), catalog.create_table("db.lines", LINES)
    before = {name: location(catalog, name) for name in ("db.orders", "db.lines")}
    order_table, line_table = order_rows(0, 5)

    responses = commit_cut(catalog, [appending(orders, order_table), appending(lines, line_table)])

    other = reopened(catalog)
    assert [r.metadata_location for r in responses] == [location(other, "db.orders"), location(other, "db.lines")]
    with catalog.engine.connect() as connection:
        previous = dict(connection.execute(text(
            "SELECT table_name, previous_metadata_location FROM iceberg_tables WHERE catalog_name = :name"),
            {"name": catalog.name}).all())
    assert previous == {"orders": before["db.orders"], "lines": before["db.lines"]}
    assert other.load_table("db.orders").scan().to_arrow().num_rows == 5
    assert other.load_table("db.lines").scan().to_arrow().num_rows == 15
    other.load_table("db.orders").append(order_rows(5, 1)[0])  # pyiceberg's own commit, on top of the cut
    assert catalog.load_table("db.orders").scan().to_arrow().num_rows == 6
    other.engine.dispose()


def test_a_pointer_another_writer_moves_during_the_cut_rolls_back_every_table(catalog: SqlCatalog) -> None:
    orders, lines = catalog.create_table("db.orders", ORDERS), catalog.create_table("db.lines", LINES)
    lines_before = location(catalog, "db.lines")
    other = reopened(catalog)
    interleaved: list[str] = []

    @event.listens_for(catalog.engine, "before_cursor_execute")
    def another_writer_commits(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        # Inside the cut's database transaction, before its first pointer move (db.lines: the cut moves
        # the tables in identifier order): another writer moves db.orders, the cut's last table.
        if statement.lstrip().upper().startswith("UPDATE ICEBERG_TABLES") and not interleaved:
            interleaved.append(statement)
            other.load_table("db.orders").append(order_rows(100, 1)[0])

    order_table, line_table = order_rows(0, 5)
    with pytest.raises(CommitFailedException, match=r"db\.orders"):
        commit_cut(catalog, [appending(orders, order_table), appending(lines, line_table)])

    assert interleaved
    assert location(other, "db.lines") == lines_before  # moved first, then rolled back with the cut
    assert other.load_table("db.lines").current_snapshot() is None
    assert other.load_table("db.orders").scan().to_arrow()["order_id"].to_pylist() == [100]
    other.engine.dispose()


def test_a_requirement_one_table_fails_commits_no_table(catalog: SqlCatalog) -> None:
    orders, lines = catalog.create_table("db.orders", ORDERS), catalog.create_table("db.lines", LINES)
    order_table, line_table = order_rows(0, 2)
    stale = appending(lines, line_table)  # built on the empty head of db.lines
    lines.append(order_rows(50, 1)[1])  # which then moves
    orders_before = location(catalog, "db.orders")

    with pytest.raises(CommitFailedException):
        commit_cut(catalog, [appending(orders, order_table), stale])

    assert location(catalog, "db.orders") == orders_before
    assert catalog.load_table("db.lines").scan().to_arrow().num_rows == 3


def consistent_read(catalog: SqlCatalog) -> tuple[pa.Table, pa.Table]:
    """Both tables as of ONE reading of the catalog's pointers (one statement: one database snapshot)."""
    with catalog.engine.connect() as connection:
        pointers = dict(connection.execute(text(
            "SELECT table_name, metadata_location FROM iceberg_tables WHERE catalog_name = :name "
            "AND table_name IN ('orders', 'lines')"), {"name": catalog.name}).all())
    io_properties = catalog.properties
    return (StaticTable.from_metadata(pointers["orders"], io_properties).scan().to_arrow(),
            StaticTable.from_metadata(pointers["lines"], io_properties).scan().to_arrow())


def test_a_reader_of_the_catalog_never_sees_an_order_without_its_lines(catalog: SqlCatalog) -> None:
    catalog.create_table("db.orders", ORDERS)
    catalog.create_table("db.lines", LINES)
    cuts, per_cut = 20, 3
    reader_catalog = reopened(catalog)

    def land() -> None:
        for cut in range(cuts):
            order_table, line_table = order_rows(cut * per_cut, per_cut)
            commit_cut(catalog, [appending(catalog.load_table("db.orders"), order_table),
                                 appending(catalog.load_table("db.lines"), line_table)])

    reads = reads_during(lambda: consistent_read(reader_catalog), land)
    reader_catalog.engine.dispose()

    assert [broken for _, broken in reads if broken] == []
    assert reads[-1][0] == cuts * per_cut  # the last read came after the last cut
    # What a reader sees when the tables are committed one at a time: the orders, not yet their lines.
    order_table, _ = order_rows(cuts * per_cut, 1)
    commit_cut(catalog, [appending(catalog.load_table("db.orders"), order_table)])
    assert broken_orders(*consistent_read(catalog)) == [cuts * per_cut]


def test_a_rest_catalog_commits_one_table_at_a_time(rest_catalog: RestCatalog) -> None:
    catalog: Catalog = rest_catalog.load()
    namespace = f"cut_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    orders = catalog.create_table(f"{namespace}.orders", ORDERS)
    lines = catalog.create_table(f"{namespace}.lines", LINES)
    order_table, line_table = order_rows(0, 1)
    assert not atomic_cut_supported(catalog)

    with pytest.raises(AtomicCutUnsupportedError):
        commit_cut(catalog, [appending(orders, order_table), appending(lines, line_table)])
    assert catalog.load_table(f"{namespace}.orders").current_snapshot() is None

    commit_cut(catalog, [appending(orders, order_table)])  # the one-table cut: the catalog's own commit
    assert catalog.load_table(f"{namespace}.orders").scan().to_arrow().num_rows == 1
