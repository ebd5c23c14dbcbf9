"""Cuts aligned with the source's transactions (spec.changes.transactions), end to end on real components.

A real PostgreSQL runs many transactions over two tables, ``orders`` and ``order_lines`` (an order and its lines
inserted together, each order's lines summing to its total; repricings that change an order's total and one of
its lines together; deletions of an order with its lines); Debezium's PostgreSQL connector (embedded engine,
``provide.transaction.metadata=true``) writes the change events to two topics of two partitions each and BEGIN/END
events to ``<prefix>.transaction``. One sync of many tables (``shop.{1}``, a SQLite catalog) with a small
``maxRecordsPerTrigger`` reads a backlog and then the workload as it goes on. A reader reads both tables'
catalog pointers at one instant, again and again while the sync runs: at every state it observes, every order
has exactly its lines (they sum to its total) and no line is without its order. Every cut the sync committed is
also checked against the topics: each source transaction is below the cut's frontier whole or not at all. The
same stream synced without ``transactions`` does split transactions across cuts.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import StaticTable
from pyspark.sql import SparkSession
from sqlalchemy import text

from icebergsync import protocol
from icebergsync.spec import parse_spec
from spark_app.decoding.changes import transaction_key
from spark_app.job.loop import SyncJob
from tests.infra.services import KafkaBroker
from tests.integration.cdc_postgres.servers import Postgres, start_debezium
from tests.integration.sync_support import BackgroundJob, catalog_of, holds, sync_document

PARTITIONS = 2
TABLES = ("orders", "order_lines")
SETTINGS = {"converter.schemas.enable": "false", "provide.transaction.metadata": "true"}
ORDERS_SCHEMA = [{"name": "id", "type": "long", "required": True}, {"name": "total", "type": "long"}]
LINES_SCHEMA = [{"name": "order_id", "type": "long", "required": True},
                {"name": "line_no", "type": "int", "required": True}, {"name": "amount", "type": "long"}]


class Shop:
    """The workload: each method one PostgreSQL transaction over both tables."""

    def __init__(self, connection: Any, rng: random.Random):
        self.connection = connection
        self.rng = rng
        self.orders: dict[int, int] = {}  # id -> lines
        self.next_id = 1
        self.transactions = 0

    def create(self) -> None:
        with self.connection, self.connection.cursor() as cursor:
            cursor.execute("CREATE TABLE orders (id bigint PRIMARY KEY, total bigint NOT NULL)")
            cursor.execute("CREATE TABLE order_lines (order_id bigint, line_no int, amount bigint NOT NULL, "
                           "PRIMARY KEY (order_id, line_no))")

    def place(self) -> None:
        order, lines = self.next_id, self.rng.randint(1, 5)
        self.next_id += 1
        amounts = [self.rng.randint(1, 100) for _ in range(lines)]
        with self.connection, self.connection.cursor() as cursor:
            cursor.execute("INSERT INTO orders VALUES (%s, %s)", (order, sum(amounts)))
            for line_no, amount in enumerate(amounts, 1):
                cursor.execute("INSERT INTO order_lines VALUES (%s, %s, %s)", (order, line_no, amount))
        self.orders[order] = lines

    def reprice(self) -> None:
        order = self.rng.choice(sorted(self.orders))
        delta = self.rng.randint(1, 50)
        with self.connection, self.connection.cursor() as cursor:
            cursor.execute("UPDATE order_lines SET amount = amount + %s WHERE order_id = %s AND line_no = %s",
                           (delta, order, self.rng.randint(1, self.orders[order])))
            cursor.execute("UPDATE orders SET total = total + %s WHERE id = %s", (delta, order))

    def cancel(self) -> None:
        order = self.rng.choice(sorted(self.orders))
        with self.connection, self.connection.cursor() as cursor:
            cursor.execute("DELETE FROM order_lines WHERE order_id = %s", (order,))
            cursor.execute("DELETE FROM orders WHERE id = %s", (order,))
        del self.orders[order]

    def some(self, count: int) -> None:
        for _ in range(count):
            choice = self.rng.random()
            if choice < 0.6 or len(self.orders) < 3:
                self.place()
            elif choice < 0.85:
                self.reprice()
            else:
                self.cancel()
            self.transactions += 1

    def rows(self) -> tuple[dict[int, int], dict[tuple[int, int], int]]:
        with self.connection, self.connection.cursor() as cursor:
            cursor.execute("SELECT id, total FROM orders")
            orders = dict(cursor.fetchall())
            cursor.execute("SELECT order_id, line_no, amount FROM order_lines")
            lines = {(o, n): a for o, n, a in cursor.fetchall()}
        return orders, lines


def document_of(directory: Path, broker: KafkaBroker, prefix: str, name: str, aligned: bool) -> dict[str, Any]:
    directory.mkdir(parents=True, exist_ok=True)
    changes: dict[str, Any] = {"format": "debezium"}
    if aligned:
        changes["transactions"] = {"topic": f"{prefix}.transaction", "maxWait": "5m"}
    return sync_document(
        directory, {"kafka": {"bootstrapServers": broker.bootstrap_servers,
                              "topicPattern": rf"{prefix}\.public\.(\w+)", "maxRecordsPerTrigger": 7}},
        name=name, table={"name": "shop.{1}", "key": ["id"]},
        tables={"shop.orders": {"schema": ORDERS_SCHEMA},
                "shop.order_lines": {"key": ["order_id", "line_no"], "schema": LINES_SCHEMA}},
        changes=changes, deadLetter={"table": "shop.{1}_dlq"})


def consistent_read(catalog: SqlCatalog) -> tuple[dict[int, int], dict[tuple[int, int], int]]:
    """Both tables as of ONE reading of the catalog's pointers (one statement: one database snapshot)."""
    with catalog.engine.connect() as connection:
        pointers: dict[str, str] = dict(connection.execute(text(
            "SELECT table_name, metadata_location FROM iceberg_tables WHERE catalog_name = :name "
            "AND table_namespace = 'shop' AND table_name IN ('orders', 'order_lines')"),
            {"name": catalog.name}).all())
    orders: dict[int, int] = {}
    lines: dict[tuple[int, int], int] = {}
    if "orders" in pointers:
        rows = StaticTable.from_metadata(pointers["orders"], catalog.properties).scan().to_arrow().to_pylist()
        orders = {row["id"]: row["total"] for row in rows}
    if "order_lines" in pointers:
        rows = StaticTable.from_metadata(pointers["order_lines"], catalog.properties).scan().to_arrow().to_pylist()
        lines = {(row["order_id"], row["line_no"]): row["amount"] for row in rows}
    return orders, lines


def broken_orders(orders: dict[int, int], lines: dict[tuple[int, int], int]) -> list[int]:
    """Orders whose lines do not sum to their total, and lines without their order."""
    sums: dict[int, int] = {}
    for (order, _), amount in lines.items():
        sums[order] = sums.get(order, 0) + amount
    return sorted({o for o, total in orders.items() if sums.get(o) != total} | (sums.keys() - orders.keys()))


def transaction_events(broker: KafkaBroker, prefix: str) -> dict[tuple[str, int, int], str]:
    """``(topic, partition, offset) -> transaction id`` of every change event on the two topics."""
    events = {}
    for table in TABLES:
        topic = f"{prefix}.public.{table}"
        for record in broker.consume(topic, timeout=10):
            if record.value:
                block = json.loads(record.value).get("transaction")
                if block:
                    events[(topic, record.partition, record.offset)] = transaction_key(block["id"])
    return events


def cut_frontiers(catalog: Any, sink_id: str) -> list[dict[str, dict[str, int]]]:
    """The sync's frontier over both topics after each of its cuts, in commit order."""
    changes: list[tuple[int, str, str, dict[str, Any]]] = []  # (timestamp, cut id, table, frontier)
    for table in TABLES:
        loaded = catalog.load_table(f"shop.{table}")
        for snapshot in protocol.main_ancestry(loaded.metadata):
            commit = protocol.parse_commit(snapshot)
            if commit is None or commit.writer.sink_id != sink_id or commit.kind != "data":
                continue
            raw_cut = snapshot.summary.get(protocol.CUT) if snapshot.summary is not None else None
            cut = json.loads(raw_cut)["id"] if raw_cut else ""
            changes.append((commit.timestamp_ms, cut or str(snapshot.snapshot_id), table, commit.frontier or {}))
    order: list[str] = []
    by_cut: dict[str, list[dict[str, Any]]] = {}
    for _, cut, _, frontier in sorted(changes, key=lambda change: change[0]):
        if cut not in by_cut:
            order.append(cut)
        by_cut.setdefault(cut, []).append(frontier)
    states, current = [], {}
    for cut in order:
        for frontier in by_cut[cut]:
            current.update(frontier)
        states.append(dict(current))
    return states


def split_transactions(frontier: dict[str, dict[str, int]], events: dict[tuple[str, int, int], str]) -> set[str]:
    """The transactions partly below ``frontier``."""
    below: dict[str, set[bool]] = {}
    for (topic, partition, offset), transaction in events.items():
        below.setdefault(transaction, set()).add(offset < int(frontier.get(topic, {}).get(str(partition), 0)))
    return {transaction for transaction, sides in below.items() if len(sides) == 2}


def caught_up(catalog: Any, sink_id: str, broker: KafkaBroker, prefix: str) -> bool:
    states = cut_frontiers(catalog, sink_id)
    if not states:
        return False
    for table in TABLES:
        topic = f"{prefix}.public.{table}"
        for partition, end in broker.end_offsets(topic).items():
            if int(states[-1].get(topic, {}).get(str(partition), 0)) != end:
                return False
    return True


def wait_for_debezium(broker: KafkaBroker, prefix: str, shop: Shop, timeout: float = 120) -> None:
    """Until the transaction topic holds an END for every transaction the workload ran."""
    deadline = time.monotonic() + timeout
    while True:
        ends = [r for r in broker.consume(f"{prefix}.transaction", timeout=10)
                if r.value and json.loads(r.value).get("status") == "END"]
        if len(ends) >= shop.transactions:
            return
        assert time.monotonic() < deadline, f"Debezium wrote {len(ends)} of {shop.transactions} transactions"
        time.sleep(1)


def test_a_reader_never_sees_part_of_a_source_transaction(tmp_path: Path, spark: SparkSession,
                                                           kafka_broker: KafkaBroker, postgres: Postgres) -> None:
    connection = postgres.connect()
    shop = Shop(connection, random.Random("transaction-cuts"))
    shop.create()
    prefix = f"pg{uuid.uuid4().hex[:8]}"
    for table in TABLES:
        kafka_broker.create_topic(f"{prefix}.public.{table}", PARTITIONS)
    kafka_broker.create_topic(f"{prefix}.transaction", 1)
    (tmp_path / "debezium").mkdir()
    debezium = start_debezium(tmp_path / "debezium", postgres, kafka_broker, prefix, list(TABLES), SETTINGS)
    try:
        shop.some(40)  # a backlog: the first triggers are capped at 7 records
        wait_for_debezium(kafka_broker, prefix, shop)
        document = document_of(tmp_path / "aligned", kafka_broker, prefix, "shop", aligned=True)
        sink_id = "test/shop"
        catalog = catalog_of(parse_spec(document))
        assert isinstance(catalog, SqlCatalog)
        reader_catalog = SqlCatalog(catalog.name, **catalog.properties)
        done = threading.Event()
        observed: list[tuple[int, list[int]]] = []
        failures: list[BaseException] = []

        def read_until_done() -> None:
            try:
                while not done.is_set():
                    orders, lines = consistent_read(reader_catalog)
                    observed.append((len(orders), broken_orders(orders, lines)))
            except BaseException as exc:  # handed to the test thread
                failures.append(exc)

        reader = threading.Thread(target=read_until_done, daemon=True)
        with BackgroundJob(SyncJob(parse_spec(document), 1, spark)) as running:
            reader.start()
            try:
                for _ in range(4):  # the workload goes on while the sync runs
                    shop.some(10)
                    time.sleep(1)
                wait_for_debezium(kafka_broker, prefix, shop)
                running.wait_until(lambda: caught_up(catalog, sink_id, kafka_broker, prefix), "caught up", 300)
            finally:
                done.set()
                reader.join(60)
        assert not failures, failures
        reader_catalog.engine.dispose()

        events = transaction_events(kafka_broker, prefix)
        assert len(set(events.values())) >= shop.transactions
        states = cut_frontiers(catalog, sink_id)
        assert len(states) >= 10, "too few cuts to judge"
        assert [split_transactions(state, events) for state in states if split_transactions(state, events)] == []
        assert len(observed) >= 10 and any(count > 0 for count, _ in observed)
        assert [broken for _, broken in observed if broken] == []
        assert consistent_read(catalog) == shop.rows()  # and the sync holds exactly what PostgreSQL holds

        # The same stream without transaction metadata: ranges end anywhere, and transactions are split.
        unaligned = document_of(tmp_path / "unaligned", kafka_broker, prefix, "shop-raw", aligned=False)
        raw_catalog = catalog_of(parse_spec(unaligned))
        with BackgroundJob(SyncJob(parse_spec(unaligned), 1, spark)) as running:
            running.wait_until(lambda: holds(lambda: caught_up(raw_catalog, "test/shop-raw", kafka_broker, prefix)),
                               "the unaligned sync caught up", 300)
        splits = [split_transactions(state, events) for state in cut_frontiers(raw_catalog, "test/shop-raw")]
        assert any(splits), "without transactions no cut split a transaction (the workload is too easy)"
    finally:
        connection.close()
        debezium.stop()


def change(event_id: int, transaction: str, order: int) -> str:
    return json.dumps({"op": "c", "before": None, "after": {"id": event_id, "grp": order},
                       "transaction": {"id": transaction, "total_order": order, "data_collection_order": order}})


def marker(status: str, transaction: str, events: int | None = None) -> str:
    collections = None if events is None else [{"data_collection": "public.items", "event_count": events}]
    return json.dumps({"status": status, "id": transaction, "ts_ms": 0, "event_count": events,
                       "data_collections": collections})


def test_one_table_over_two_partitions_waits_then_splits_and_commits_large_transactions_in_parts(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    """One table, two partitions, Debezium-shaped events written by a Kafka producer: transactions of 3 events over
    both partitions with a cap of 4 records a trigger are never split; one of 10 events (larger than a trigger) is
    committed in parts, and one whose END never comes is committed after maxWait; both noted transaction-split."""
    prefix = f"fake{uuid.uuid4().hex[:8]}"
    topic, transactions_topic = f"{prefix}.public.items", f"{prefix}.transaction"
    kafka_broker.create_topic(topic, 2)
    kafka_broker.create_topic(transactions_topic, 1)
    events: list[tuple[str, str, int]] = []  # (key, value, partition)
    markers: list[tuple[str, str]] = []
    event_id = 0
    sizes = [3] * 12 + [10] + [3] * 4
    for number, size in enumerate(sizes):
        transaction = f"tx-{number}"
        markers.append((transaction, marker("BEGIN", transaction)))
        for order in range(1, size + 1):
            events.append((str(event_id), change(event_id, transaction, order), (event_id + number) % 2))
            event_id += 1
        markers.append((transaction, marker("END", transaction, size)))
    markers.append(("tx-open", marker("BEGIN", "tx-open")))  # its END never comes
    for order in (1, 2):
        events.append((str(event_id), change(event_id, "tx-open", order), order % 2))
        event_id += 1
    kafka_broker.produce(topic, events)
    kafka_broker.produce(transactions_topic, markers)

    document = sync_document(
        tmp_path, {"kafka": {"bootstrapServers": kafka_broker.bootstrap_servers, "topic": topic,
                             "maxRecordsPerTrigger": 4}},
        name="items", schema=[{"name": "id", "type": "long", "required": True}, {"name": "grp", "type": "long"}],
        table={"name": "sales.items", "key": ["id"]},
        changes={"format": "debezium", "transactions": {"topic": transactions_topic, "maxWait": "3s"}})
    catalog = catalog_of(parse_spec(document))
    ends = kafka_broker.end_offsets(topic)
    started = time.monotonic()
    with BackgroundJob(SyncJob(parse_spec(document), 1, spark)) as running:
        running.wait_until(lambda: holds(lambda: (sink_frontier(catalog) or {}).get(topic) == {
            str(p): o for p, o in ends.items()}), "every event committed", 300)
    assert time.monotonic() - started >= 3, "the open transaction was not waited for"

    table = catalog.load_table("sales.items")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == list(range(event_id))
    by_offset = {}
    for record in kafka_broker.consume(topic, timeout=10):
        by_offset[(topic, record.partition, record.offset)] = json.loads(record.value or b"{}")["transaction"]["id"]
    split_by_note: set[str] = set()
    split_seen: set[str] = set()
    for snapshot in protocol.main_ancestry(table.metadata):
        commit = protocol.parse_commit(snapshot)
        if commit is None or commit.kind != "data":
            continue
        notes = json.loads((snapshot.summary.get(protocol.SOURCE_NOTES) if snapshot.summary else None) or "{}")
        split_by_note |= set(notes.get("transaction-split", []))
        split_seen |= split_transactions(commit.frontier or {}, by_offset)
    assert split_seen <= {"tx-12", "tx-open"}, split_seen
    assert "tx-12" in split_seen and split_seen <= split_by_note, (split_seen, split_by_note)
    assert "tx-open" in split_by_note  # committed once it waited maxWait


def sink_frontier(catalog: Any) -> dict[str, Any] | None:
    commits = [c for c in (protocol.parse_commit(s) for s in protocol.main_ancestry(
        catalog.load_table("sales.items").metadata)) if c is not None and c.kind == "data"]
    return commits[0].frontier if commits else None
