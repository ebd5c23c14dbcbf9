"""The cut (spark_app/iceberg/cut.py) on REST catalogs declared atomic (``icebergsync.atomic-multi-table-commit``):
ONE ``POST /v1/transactions/commit``. On Project Nessie's server (0.99.0, from Maven Central) it is atomic: both
tables land in one Nessie commit, a requirement failing on the second table leaves the first unchanged, and a reader
of one Nessie commit never sees an order without its lines; a cut whose answer is lost and whose snapshots another
writer's commits hide (Nessie's metadata keeps the current snapshot only) is found by the checkpoint property it
wrote, never sent twice. On Iceberg's reference server (1.10.1) it is not: a
table another writer moves after the server validated the request leaves the earlier tables committed, which the
sink's compare-and-swap then reports as a cut that landed on some tables only.

The real job on Nessie (the shop sync of test_many_tables_cuts.py, its Shop, Reader and checks): a reader of both
tables as of ONE Nessie commit (``GET /api/v2/trees/main/contents?key=…&key=…``) checks every state it reads while
the job runs, and every state of main afterwards from Nessie's log; each cut is one Nessie commit and says
``"atomic": true``. kill -9 just before the cut's one request (crash point ``cut-sending``) and just after Nessie
accepted it (``cut-committed``), restarts at the same and a higher version: every table exactly once."""

from __future__ import annotations

import json
import sqlite3
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import StaticTable, Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId
from pyspark.sql import SparkSession

import spark_app.commit.swap as swap_module
from icebergsync import protocol
from icebergsync.errors import CommitStateUnknownError
from icebergsync.protocol import Writer
from icebergsync.spec import parse_spec
from icebergsync.tables.cuts import ATOMIC_MULTI_TABLE_COMMIT, catalog_cut_support, spec_cut_support
from spark_app.commit.swap import SwapPart, swap_cut
from spark_app.iceberg.cut import TableChange, atomic_cut_supported, commit_cut
from spark_app.iceberg.internals import commit_transactions
from spark_app.job.trigger import commit_trigger
from tests.infra.services import KafkaBroker, RestCatalog, S3Server
from tests.integration.committer_support import SCHEMA
from tests.integration.cut_support import reads_during
from tests.integration.sync_support import catalog_of, run_job_process, sink_commits, write_spec
from tests.integration.test_atomic_cut import LINES, ORDERS, order_rows
from tests.integration.test_many_tables_cuts import (
    PER_BURST,
    SINK,
    Reader,
    Shop,
    expected_rows,
    frontier_of,
    read_while_synced,
    synced,
    table_rows,
)
from tests.integration.test_multi_table_commit import claim, ids, trigger_part


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

    def read() -> tuple[pa.Table, pa.Table]:
        pointers = nessie_pointers(nessie_catalog, namespace)
        orders, lines = (StaticTable.from_metadata(pointers[name], io).scan().to_arrow() for name in ("orders", "lines"))
        return orders, lines

    def land() -> None:
        for cut in range(8):
            order_table, line_table = order_rows(cut * 2, 2)
            commit_cut(catalog, [appending(catalog.load_table(f"{namespace}.orders"), order_table),
                                 appending(catalog.load_table(f"{namespace}.lines"), line_table)])

    reads = reads_during(read, land)
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


def test_nessie_an_unknown_outcome_whose_snapshots_another_writer_hid_is_found_by_the_checkpoint(
        nessie_catalog: RestCatalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nessie's table metadata holds the current snapshot only: when the cut lands, its answer is lost, and another
    writer commits to both tables before the sink reloads them, the attempted snapshots are in no table's metadata.
    The checkpoint property the cut wrote names them: the sink takes the cut as landed and never sends it again."""
    catalog = declared_atomic(nessie_catalog)
    namespace = f"cut_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    names = (f"{namespace}.lines", f"{namespace}.orders")
    for name in names:
        catalog.create_table(name, SCHEMA)
    writer = Writer(SINK, 1, "a")
    lines, orders = (claim(catalog, writer, name)[0] for name in names)
    commit_trigger([trigger_part(orders, 0, 5), trigger_part(lines, 0, 15)])
    sent = []

    def answer_lost(cat: Catalog, changes: Any) -> Any:
        sent.append(len(changes))
        responses = commit_transactions(cat, changes)
        if len(sent) == 1:
            for name in names:  # another writer, on top of the cut, on both tables
                cat.load_table(name).append(pa.Table.from_pylist([{"id": 1000, "who": "other"}],
                                                                 schema=SCHEMA.as_arrow()))
            raise ConnectionError("the answer was lost")
        return responses

    monkeypatch.setattr(swap_module, "commit_transactions", answer_lost)
    landed = commit_trigger([trigger_part(orders, 5, 10), trigger_part(lines, 15, 20)])

    assert sent == [2]  # sent once, found landed
    assert ids(catalog.load_table(names[1])) == [*range(10), 1000]
    assert ids(catalog.load_table(names[0])) == [*range(20), 1000]
    for name, commit in landed.items():
        checkpoint = protocol.parse_checkpoint(catalog.load_table(name).metadata, SINK)
        assert checkpoint is not None and checkpoint.snapshot_id == commit.snapshot.snapshot_id


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


# -- the job on Nessie -------------------------------------------------------------------------------
#
# Nessie's Iceberg REST keeps only a table's current snapshot in the metadata it writes (one snapshot, no parent):
# a table's history is Nessie's commit log. The reader's "cut on both tables or neither" asks what each table's
# history holds, so on Nessie it is answered from that log (NessieHistory), not from the metadata.


def nessie_shop_catalog(server: RestCatalog, s3: S3Server) -> dict[str, Any]:
    """``spec.table.catalog`` of the shop sync on Nessie: declared atomic, its files on MinIO, no warehouse (Nessie's
    default warehouse is the server's own choice; a rest catalog's spec asks for none unless given)."""
    return {"type": "rest", "name": "nessie", "uri": server.uri,
            "properties": {**s3.fileio_properties, ATOMIC_MULTI_TABLE_COMMIT: "true"}}


def nessie_log(server: RestCatalog) -> list[dict[str, Any]]:
    """Every commit of Nessie's branch main, oldest first, with its operations (each PUT with its content)."""
    entries: list[dict[str, Any]] = []
    token = ""
    while True:
        page = nessie_api(server, "trees/main/history?fetch=ALL&max-records=200" + (f"&page-token={token}" if token else ""))
        entries += page["logEntries"]
        if not page.get("hasMore"):
            return entries[::-1]
        token = page["token"]


class NessieHistory:
    """The cuts each table of ``namespace`` holds in its history as of a metadata location Nessie put: those of every
    data snapshot that was the table's head in a commit of main up to the one that put the location (a
    :data:`~tests.integration.test_many_tables_cuts.History`). ``commits`` lists, for each commit of main that
    moved both tables, the cut ids of the two heads it put."""

    def __init__(self, server: RestCatalog, namespace: str, io: dict[str, str]):
        self.server, self.namespace, self.io = server, namespace, io
        self.as_of: dict[str, dict[str, dict[str, Any]]] = {}  # metadata location -> the table's cuts up to it
        self.commits: list[set[str]] = []
        self._heads: dict[str, dict[str, Any] | None] = {}  # metadata location -> the cut of its current snapshot

    def __call__(self, name: str, table: Table | StaticTable) -> dict[str, dict[str, Any]]:
        if table.metadata_location not in self.as_of:
            self.replay()
        return self.as_of[table.metadata_location]

    def head_cut(self, location: str) -> dict[str, Any] | None:
        if location not in self._heads:
            snapshot = StaticTable.from_metadata(location, self.io).current_snapshot()
            summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
            self._heads[location] = json.loads(summary[protocol.CUT]) if protocol.CUT in summary else None
        return self._heads[location]

    def replay(self) -> None:
        cuts: dict[str, dict[str, dict[str, Any]]] = {"orders": {}, "lines": {}}
        self.commits = []
        for entry in nessie_log(self.server):
            heads = {}
            for operation in entry.get("operations") or []:
                elements = operation["key"]["elements"]
                if operation["type"] != "PUT" or elements[:-1] != [self.namespace] or elements[-1] not in cuts:
                    continue
                location = operation["content"]["metadataLocation"]
                cut = heads[elements[-1]] = self.head_cut(location)
                if cut is not None:
                    cuts[elements[-1]] = {**cuts[elements[-1]], cut["id"]: cut}
                self.as_of[location] = cuts[elements[-1]]
            if len(heads) == 2:
                self.commits.append({cut["id"] if cut else "" for cut in heads.values()})


def test_nessie_a_reader_of_one_commit_sees_each_trigger_of_the_job_on_both_tables_or_on_neither(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker, nessie_catalog: RestCatalog,
        s3_server: S3Server) -> None:
    """The shop sync of test_many_tables_cuts.py, run by the real job on Nessie declared atomic: a reader of both
    tables' pointers as of ONE Nessie commit checks every state it reads (a cut on both tables or on neither, rows
    matching the frontiers, orders with their lines when the frontiers are aligned), every cut says ``"atomic":
    true``, each cut is exactly ONE Nessie commit moving both tables, and every state main ever held passes the same
    checks."""
    shop = Shop(kafka_broker)
    namespace = f"shop_{uuid.uuid4().hex[:8]}"  # the server is shared
    sync = parse_spec(shop.document(tmp_path, nessie_shop_catalog(nessie_catalog, s3_server), namespace))
    decided = catalog_cut_support(catalog_of(sync))
    assert decided == spec_cut_support(sync.spec.table.catalog_or_default)  # the job and the operator agree
    assert decided.reason == "RestCatalogDeclaredAtomic"
    io = s3_server.fileio_properties
    history = NessieHistory(nessie_catalog, namespace, io)

    catalog = read_while_synced(spark, shop, sync, lambda: nessie_pointers(nessie_catalog, namespace), io, namespace,
                                history)

    orders = catalog.load_table(f"{namespace}.orders")
    assert len(orders.metadata.snapshots) == 1  # Nessie's metadata: the current snapshot only (see above)
    cuts = history("orders", orders)
    assert all(len(ids) == 1 for ids in history.commits), history.commits  # a commit moving both: one cut's heads
    assert sorted(id_ for ids in history.commits for id_ in ids) == sorted(cuts)  # each cut: ONE Nessie commit
    replayed = Reader(shop, lambda: {}, io, history)  # every state of main, oldest first, through the same checks
    for state in nessie_states(nessie_catalog, namespace):
        replayed.check(state)
    assert replayed.problems == []
    assert len(replayed.states) > len(cuts)


def nessie_states(server: RestCatalog, namespace: str) -> list[dict[str, str]]:
    """Both tables' metadata locations after each commit of main that moved either, oldest first."""
    states, pointers = [], {}
    for entry in nessie_log(server):
        for operation in entry.get("operations") or []:
            elements = operation["key"]["elements"]
            if operation["type"] == "PUT" and elements[:-1] == [namespace] and elements[-1] in ("orders", "lines"):
                pointers[elements[-1]] = operation["content"]["metadataLocation"]
        if pointers and (not states or states[-1] != pointers):
            states.append(dict(pointers))
    return states


def test_nessie_a_kill_just_before_or_just_after_the_cuts_one_request_is_completed_by_the_restarts(
        tmp_path: Path, kafka_broker: KafkaBroker, nessie_catalog: RestCatalog, s3_server: S3Server) -> None:
    """kill -9 of the job with its cut built and checked but its ``POST /v1/transactions/commit`` not sent
    (``cut-sending``), then of the same version just after Nessie accepted it (``cut-committed``), then a higher
    version: every table exactly once, and a reader of one Nessie commit never sees a cut on one table only."""
    shop = Shop(kafka_broker)
    namespace = f"shop_{uuid.uuid4().hex[:8]}"
    document = shop.document(tmp_path, nessie_shop_catalog(nessie_catalog, s3_server), namespace)
    spec_path = write_spec(tmp_path, document)
    catalog = catalog_of(parse_spec(document))
    names = (f"{namespace}.orders", f"{namespace}.lines")
    io = s3_server.fileio_properties
    history = NessieHistory(nessie_catalog, namespace, io)
    shop.burst(PER_BURST)

    def heads() -> list[str]:
        return [sink_commits(catalog.load_table(name), SINK)[-1].kind for name in names]

    def rows() -> tuple[list[tuple[Any, ...]], ...]:
        return tuple(table_rows(catalog.load_table(name)) for name in names)

    def cuts() -> list[dict[str, dict[str, Any]]]:
        return [history(name.rsplit(".", 1)[1], catalog.load_table(name)) for name in names]

    with Reader(shop, lambda: nessie_pointers(nessie_catalog, namespace), io, history) as reader:
        # v1 dies with both tables claimed and its first cut ready to send: nothing of it is on any table.
        status, log = run_job_process(spec_path, 1, crash_at="cut-sending:1")
        assert status == -9, log[-3000:]
        assert heads() == ["fence", "fence"]
        assert rows() == ([], [])
        assert cuts() == [{}, {}]

        # v1 again: Nessie commits its cut, and the job dies before it hears so. Both tables hold the burst, once.
        status, log = run_job_process(spec_path, 1, crash_at="cut-committed:1")
        assert status == -9, log[-3000:]
        assert heads() == ["data", "data"]
        assert rows() == expected_rows(PER_BURST)
        assert [frontier_of(catalog.load_table(name)) for name in names] == [
            {shop.orders: shop.ends[-1][shop.orders]}, {shop.lines: shop.ends[-1][shop.lines]}]
        [cut] = cuts()[0].values()
        assert cuts()[1] == {cut["id"]: cut} and cut["tables"] == 2

        # A higher version, after another burst: it resumes both tables from the cut v1 landed.
        shop.burst(PER_BURST)
        status, log = run_job_process(spec_path, 2, stop_when=lambda: synced(catalog, shop, namespace))
        assert status == 0, log[-3000:]
        reader.done.set()
        reader.thread.join(120)
        assert not reader.thread.is_alive()
    assert reader.problems == []
    assert reader.states[-1] == tuple(len(rows) for rows in expected_rows(2 * PER_BURST))
    assert rows() == expected_rows(2 * PER_BURST)
    orders_cuts, lines_cuts = cuts()
    assert orders_cuts == lines_cuts and len(orders_cuts) == 2
    assert all(cut["atomic"] is True and cut["tables"] == 2 for cut in orders_cuts.values())
    assert all(len(ids) == 1 for ids in history.commits) and len(history.commits) == 2
    for name in names:
        assert sink_commits(catalog.load_table(name), SINK)[-1].writer.version == 2, name
