"""The cut (spark_app/multi_table/cut.py) on REST catalogs declared atomic (``icebergsync.atomic-multi-table-commit``):
ONE ``POST /v1/transactions/commit``. On Project Nessie's server (0.99.0, from Maven Central) it is atomic: both
tables land in one Nessie commit, a requirement failing on the second table leaves the first unchanged, and a reader
of one Nessie commit never sees an order without its lines. On Iceberg's reference server (1.10.1) it is not: a
table another writer moves after the server validated the request leaves the earlier tables committed, which the
sink's compare-and-swap then reports as a cut that landed on some tables only."""

from __future__ import annotations

import json
import sqlite3
import threading
import urllib.request
import uuid
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import StaticTable, Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId

from icebergsync.tables.cuts import ATOMIC_MULTI_TABLE_COMMIT, catalog_cut_support
from spark_app.committer import CommitStateUnknownError, SwapPart, swap_cut
from spark_app.multi_table.cut import TableChange, atomic_cut_supported, commit_cut
from tests.infra.services import RestCatalog
from tests.integration.cut_support import broken_orders
from tests.integration.test_atomic_cut import LINES, ORDERS, order_rows


def declared_atomic(server: RestCatalog) -> Catalog:
    return load_catalog("rest", **server.properties, **{ATOMIC_MULTI_TABLE_COMMIT: "true"})


def appending(table: Table, rows: pa.Table, *requirements: Any) -> TableChange:
    transaction = Transaction(table)
    transaction.append(rows)
    return TableChange(table, transaction, tuple(requirements))


def two_tables(catalog: Catalog) -> tuple[str, Table, Table]:
    namespace = f"cut_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    return namespace, catalog.create_table(f"{namespace}.orders", ORDERS), catalog.create_table(f"{namespace}.lines", LINES)


def nessie_api(server: RestCatalog, path: str) -> Any:
    root = server.uri.removesuffix("/iceberg")
    with urllib.request.urlopen(f"{root}/api/v2/{path}", timeout=10) as response:
        return json.load(response)


def nessie_pointers(server: RestCatalog, namespace: str) -> dict[str, str]:
    """Both tables' metadata locations as of ONE Nessie commit (main's head when asked)."""
    answer = nessie_api(server, f"trees/main/contents?key={namespace}.orders&key={namespace}.lines")
    return {entry["key"]["elements"][-1]: entry["content"]["metadataLocation"] for entry in answer["contents"]}


def test_nessie_commits_a_cut_as_one_nessie_commit(nessie_catalog: RestCatalog) -> None:
    catalog = declared_atomic(nessie_catalog)
    assert atomic_cut_supported(catalog)
    assert catalog_cut_support(catalog).reason == "RestCatalogDeclaredAtomic"
    assert not atomic_cut_supported(nessie_catalog.load())  # never guessed: only the property says so
    namespace, orders, lines = two_tables(catalog)
    order_table, line_table = order_rows(0, 4)

    responses = commit_cut(catalog, [appending(orders, order_table), appending(lines, line_table)])

    assert [r.metadata_location for r in responses] == [catalog.load_table(f"{namespace}.orders").metadata_location,
                                                        catalog.load_table(f"{namespace}.lines").metadata_location]
    assert catalog.load_table(f"{namespace}.orders").scan().to_arrow().num_rows == 4
    assert catalog.load_table(f"{namespace}.lines").scan().to_arrow().num_rows == 12
    [newest] = nessie_api(nessie_catalog, "trees/main/history?fetch=ALL&max-records=1")["logEntries"][:1]
    keys = sorted(".".join(op["key"]["elements"]) for op in newest["operations"])
    assert keys == [f"{namespace}.lines", f"{namespace}.orders"]  # one Nessie commit moved both tables
    catalog.load_table(f"{namespace}.orders").append(order_rows(4, 1)[0])  # pyiceberg's own commit, on top
    assert catalog.load_table(f"{namespace}.orders").scan().to_arrow().num_rows == 5


def test_nessie_a_requirement_the_second_table_fails_commits_no_table(nessie_catalog: RestCatalog) -> None:
    catalog = declared_atomic(nessie_catalog)
    namespace, orders, lines = two_tables(catalog)
    lines.append(order_rows(50, 1)[1])
    lines = catalog.load_table(f"{namespace}.lines")
    head = lines.current_snapshot()
    assert head is not None
    stale = appending(lines, order_rows(0, 2)[1],
                      AssertRefSnapshotId(ref="main", snapshot_id=head.snapshot_id))  # type: ignore[call-arg]
    catalog.load_table(f"{namespace}.lines").append(order_rows(60, 1)[1])  # another writer moves db.lines
    before = nessie_pointers(nessie_catalog, namespace)

    with pytest.raises(CommitFailedException):
        commit_cut(catalog, [appending(orders, order_rows(0, 2)[0]), stale])  # orders first, lines second

    assert nessie_pointers(nessie_catalog, namespace) == before
    assert catalog.load_table(f"{namespace}.orders").current_snapshot() is None
    assert catalog.load_table(f"{namespace}.lines").scan().to_arrow().num_rows == 6


def test_nessie_a_reader_of_one_commit_never_sees_an_order_without_its_lines(nessie_catalog: RestCatalog) -> None:
    catalog = declared_atomic(nessie_catalog)
    namespace, _, _ = two_tables(catalog)
    io = catalog.properties
    done, reads = threading.Event(), []

    def read_until_done() -> None:
        while True:
            finished = done.is_set()
            pointers = nessie_pointers(nessie_catalog, namespace)
            orders, lines = (StaticTable.from_metadata(pointers[name], io).scan().to_arrow() for name in ("orders", "lines"))
            reads.append((orders.num_rows, broken_orders(orders, lines)))
            if finished:
                return

    reader = threading.Thread(target=read_until_done)
    reader.start()
    try:
        for cut in range(8):
            order_table, line_table = order_rows(cut * 2, 2)
            commit_cut(catalog, [appending(catalog.load_table(f"{namespace}.orders"), order_table),
                                 appending(catalog.load_table(f"{namespace}.lines"), line_table)])
    finally:
        done.set()
        reader.join()
    assert [broken for _, broken in reads if broken] == []
    assert reads[-1][0] == 16


def _added_snapshot(transaction: Transaction) -> int:
    return next(u.snapshot.snapshot_id for u in transaction._updates if isinstance(u, AddSnapshotUpdate))


def _part(identifier: str, rows: pa.Table) -> SwapPart:
    def build(table: Table) -> tuple[Transaction, int]:
        transaction = Transaction(table)
        transaction.append(rows)
        return transaction, _added_snapshot(transaction)

    def check(_: TableMetadata) -> None:
        return None

    return SwapPart(identifier, None, check, build)


def test_nessie_the_sinks_compare_and_swap_lands_a_cut_through_it(nessie_catalog: RestCatalog) -> None:
    catalog = declared_atomic(nessie_catalog)
    namespace, _, _ = two_tables(catalog)
    order_table, line_table = order_rows(0, 3)
    landed = swap_cut(catalog, [_part(f"{namespace}.orders", order_table), _part(f"{namespace}.lines", line_table)])
    assert [metadata.current_snapshot_id for _, metadata in landed] == [s.snapshot_id for s, _ in landed]


def test_the_reference_server_declared_atomic_commits_the_first_table_of_a_failed_cut(rest_catalog: RestCatalog) -> None:
    """What the property does on a server that does not keep it: the reference server validates every table's
    requirements, then commits table by table; another writer moving db.lines in between (here: its pointer
    update is made to match no row, as a concurrent writer's move does) fails db.lines after db.orders landed."""
    catalog = declared_atomic(rest_catalog)
    assert atomic_cut_supported(catalog)  # the property is believed: the server cannot be asked
    namespace, orders, lines = two_tables(catalog)
    orders_before = catalog.load_table(f"{namespace}.orders").metadata_location
    database = rest_catalog.log_path.parent / "catalog.db"
    trigger = f"icebergsync_race_{uuid.uuid4().hex[:8]}"
    with sqlite3.connect(database) as connection:
        connection.execute(f"CREATE TRIGGER {trigger} BEFORE UPDATE ON iceberg_tables "
                           f"WHEN old.table_namespace = '{namespace}' AND old.table_name = 'lines' "
                           "BEGIN SELECT RAISE(IGNORE); END")
    try:
        order_table, line_table = order_rows(0, 1)
        with pytest.raises(CommitFailedException):
            commit_cut(catalog, [appending(orders, order_table), appending(lines, line_table)])
        assert catalog.load_table(f"{namespace}.orders").metadata_location != orders_before  # landed: NOT atomic
        assert catalog.load_table(f"{namespace}.orders").scan().to_arrow().num_rows == 1
        assert catalog.load_table(f"{namespace}.lines").current_snapshot() is None

        # Through the sink's compare-and-swap the half-landed cut is caught, not retried: it stops, saying so.
        with pytest.raises(CommitStateUnknownError, match="did not commit it atomically"):
            swap_cut(catalog, [_part(f"{namespace}.orders", order_rows(1, 1)[0]),
                               _part(f"{namespace}.lines", order_rows(1, 1)[1])])
    finally:
        with sqlite3.connect(database) as connection:
            connection.execute(f"DROP TRIGGER {trigger}")
