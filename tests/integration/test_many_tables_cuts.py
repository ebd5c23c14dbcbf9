"""Many-table cuts through the real job: a trigger's commits to the tables it touched, orders and their lines.

A producer writes orders to one topic and their lines to another, each burst in ONE Kafka transaction, so
that the lines of an order add up to its total. One sync (``shop.{1}`` over both topics, the lines table with
its own schema from ``spec.tables``) writes both tables.

*SQL catalog (SQLite, PostgreSQL)*: a reader reads both tables' metadata pointers in ONE database statement
(one snapshot of ``iceberg_tables``) again and again while the job runs. What the product promises, checked
at every state read: a trigger's cut is seen on every table it touched or on none (its id is in both
tables' histories or in neither), and each table holds exactly the records below its own frontier. What it
promises about orders and lines follows from that only when a trigger's range of each topic ends where a
producer's transaction ends: a trigger reads whatever each partition's last stable offset is when it is
planned, capped by ``maxRecordsPerTrigger`` (split in proportion over the partitions), so nothing makes the
ranges of two topics end at the same transaction. The test makes them: ``maxRecordsPerTrigger`` is far above
a burst, and the producer waits until the tables hold a burst before it writes the next, so each trigger
takes whole bursts. At every state read whose two frontiers end at the same burst (a trigger planned in the
instant between the two partitions' commit markers would give a state that does not; the test counts those
and requires almost every state to be aligned) every order has its lines, summing to its total, and no line
is without its order.

*REST catalog declared atomic (Project Nessie)*: the same sync, reader and checks, reading both pointers as of one
Nessie commit, are in test_rest_atomic_cut.py.

*REST catalog (Iceberg 1.10.1's reference server)*: the tables of a trigger are committed one at a time in
identifier order, each snapshot saying ``"atomic": false``; a kill at ``table-committed`` leaves the lines
advanced and the orders not, and restarts (same version, then a higher one) complete every table exactly
once.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy
from confluent_kafka import Producer as ClientProducer
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import StaticTable, Table
from pyspark.sql import SparkSession

from icebergsync import protocol
from icebergsync.spec import IcebergSync, parse_spec
from spark_app.job.loop import SyncJob
from tests.infra.services import KafkaBroker, RestCatalog
from tests.integration.cut_support import broken_orders
from tests.integration.sync_support import (
    BackgroundJob,
    catalog_of,
    run_job_process,
    sink_commits,
    sync_document,
    write_spec,
)

SINK = "test/shop"
ORDERS_SCHEMA = [{"name": "order_id", "type": "long", "required": True}, {"name": "total", "type": "double"}]
LINES_SCHEMA = [{"name": "order_id", "type": "long", "required": True}, {"name": "line", "type": "int", "required": True},
                {"name": "amount", "type": "double"}]
BURSTS = 15
PER_BURST = 6


def lines_of(order_id: int) -> list[float]:
    """An order's line amounts: 1 to 4 lines, whole numbers (their sum is exact)."""
    return [float(order_id * 10 + line) for line in range(1 + order_id % 4)]


class Shop:
    """Two topics, ``<prefix>.orders`` (2 partitions) and ``<prefix>.lines`` (1 partition), written by one
    transactional producer; ``ends`` holds both topics' end offsets after each burst's commit."""

    def __init__(self, broker: KafkaBroker):
        self.broker = broker
        self.prefix = f"shop{uuid.uuid4().hex[:6]}"
        self.orders, self.lines = f"{self.prefix}.orders", f"{self.prefix}.lines"
        broker.create_topic(self.orders, 2)
        broker.create_topic(self.lines, 1)
        self.producer = ClientProducer({"bootstrap.servers": broker.bootstrap_servers,
                                        "transactional.id": f"shop-{uuid.uuid4().hex}"})
        self.producer.init_transactions(30)
        self.ends: list[dict[str, dict[str, int]]] = [self.end_offsets()]
        self.produced = 0

    def end_offsets(self) -> dict[str, dict[str, int]]:
        return {topic: {str(p): o for p, o in self.broker.end_offsets(topic).items()}
                for topic in (self.orders, self.lines)}

    def burst(self, count: int) -> range:
        """``count`` new orders and their lines in one transaction, committed; returns the order ids."""
        ids = range(self.produced, self.produced + count)
        last: dict[tuple[str, int], int] = {}

        def delivered(error: Any, message: Any) -> None:
            assert error is None, error
            last[(message.topic(), message.partition())] = message.offset()

        self.producer.begin_transaction()
        for order_id in ids:
            amounts = lines_of(order_id)
            self.producer.produce(self.orders, key=str(order_id), partition=order_id % 2, on_delivery=delivered,
                                  value=json.dumps({"order_id": order_id, "total": sum(amounts)}))
            for line, amount in enumerate(amounts):
                self.producer.produce(self.lines, key=str(order_id), partition=0, on_delivery=delivered,
                                      value=json.dumps({"order_id": order_id, "line": line, "amount": amount}))
        self.producer.flush(30)
        self.producer.commit_transaction(30)
        self.produced += count
        # The commit returns before the coordinator has written its markers: wait until every partition's log
        # ends past its marker (one offset after the transaction's last record), what the sync's frontier reaches.
        deadline = time.monotonic() + 60
        while True:
            ends = self.end_offsets()
            if all(ends[topic][str(partition)] >= offset + 2 for (topic, partition), offset in last.items()):
                break
            assert time.monotonic() < deadline, f"the transaction's markers never landed: {ends} {last}"
            time.sleep(0.05)
        assert all(ends[topic][str(partition)] == offset + 2 for (topic, partition), offset in last.items())
        self.ends.append(ends)
        return ids

    def document(self, directory: Path, catalog: dict[str, Any], namespace: str = "shop") -> dict[str, Any]:
        source = {"kafka": {"bootstrapServers": self.broker.bootstrap_servers,
                            "topicPattern": rf"{self.prefix}\.(orders|lines)", "maxRecordsPerTrigger": 100_000}}
        return sync_document(directory, source, name="shop", schema=ORDERS_SCHEMA,
                             table={"name": f"{namespace}.{{1}}", "catalog": catalog},
                             tables={f"{namespace}.lines": {"schema": LINES_SCHEMA}},
                             commit={"interval": "300ms", "pollInterval": "100ms", "targetFileSize": "8Mi"})




def cuts_of(table: Table | StaticTable | None) -> dict[str, dict[str, Any]]:
    """The ``icebergsync.cut`` of each of the sink's data commits on main: cut id -> the cut (``atomic``,
    ``tables``: how many tables it holds)."""
    if table is None:
        return {}
    summaries = {s.snapshot_id: s.summary.additional_properties for s in table.metadata.snapshots}  # type: ignore[union-attr]
    cuts = {}
    for commit in sink_commits(table, SINK):
        if commit.kind == "data":
            cut = json.loads(summaries[commit.snapshot_id][protocol.CUT])
            cuts[cut["id"]] = cut
    return cuts


def cut_ids(table: Table | StaticTable | None) -> dict[str, int]:
    """The cut of each of the sink's data commits on main: cut id -> how many tables the cut holds."""
    return {cut_id: cut["tables"] for cut_id, cut in cuts_of(table).items()}


History = Callable[[str, Table | StaticTable], dict[str, dict[str, Any]]]
"""The cuts a table's history holds (:func:`cuts_of`'s answer), given the table's name (``orders``, ``lines``) and the
table as read; the default reads them from the table's own snapshots. A catalog whose table metadata keeps only the
current snapshot (Nessie's) answers from its own log instead."""


def history_in_metadata(_: str, table: Table | StaticTable) -> dict[str, dict[str, Any]]:
    return cuts_of(table)


def frontier_of(table: Table | StaticTable | None) -> dict[str, Any]:
    commits = [c for c in sink_commits(table, SINK) if c.frontier is not None] if table is not None else []
    return commits[-1].frontier or {} if commits else {}


EMPTY = {"orders": pa.table({"order_id": pa.array([], pa.int64()), "total": pa.array([], pa.float64())}),
         "lines": pa.table({"order_id": pa.array([], pa.int64()), "amount": pa.array([], pa.float64())})}


class SqlPointers:
    """Both tables' metadata pointers on a SQL catalog, read in ONE statement (one snapshot of ``iceberg_tables``)."""

    def __init__(self, url: str, catalog_name: str):
        self.engine = sqlalchemy.create_engine(url)
        self.catalog_name = catalog_name

    def __call__(self) -> dict[str, str]:
        with self.engine.connect() as connection:
            return dict(connection.execute(sqlalchemy.text(
                "SELECT table_name, metadata_location FROM iceberg_tables WHERE catalog_name = :catalog "
                "AND table_namespace = 'shop' AND table_name IN ('orders', 'lines')"),
                {"catalog": self.catalog_name}).all())

    def close(self) -> None:
        self.engine.dispose()


class Reader:
    """Reads both tables as of ONE reading of the catalog's pointers, again and again in a thread, and checks every
    state it reads. ``pointers`` reads them (``{"orders": location, "lines": location}``, a table not created yet
    left out) at one instant of the catalog: one database snapshot (:class:`SqlPointers`), one Nessie commit;
    ``io`` are the FileIO properties the tables' files are read with; ``history`` tells the cuts each table's history
    holds."""

    def __init__(self, shop: Shop, pointers: Callable[[], dict[str, str]], io: dict[str, str] | None = None,
                 history: History = history_in_metadata):
        self.shop = shop
        self.pointers = pointers
        self.io = io or {}
        self.history = history
        self.states: list[tuple[int, int]] = []  # (orders, lines) rows of each state read
        self.aligned = 0  # states whose two frontiers end at the same burst
        self.problems: list[str] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Reader:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.done.set()
        self.thread.join(120)

    def _run(self) -> None:
        while True:
            finished = self.done.is_set()
            try:
                self.check(self.pointers())
            except Exception as exc:
                self.problems.append(f"read failed: {exc!r}")
            if finished or len(self.problems) > 20:
                return

    def check(self, pointers: dict[str, str]) -> None:
        tables = {name: StaticTable.from_metadata(location, self.io) for name, location in pointers.items()}
        rows = {name: tables[name].scan().to_arrow() if name in tables else EMPTY[name] for name in EMPTY}
        frontiers = {name: frontier_of(tables.get(name)) for name in EMPTY}
        state = f"state {len(self.states)} at {frontiers}"
        # The product's promise: a cut is on every table it touched or on none.
        cuts = {name: {cut_id: cut["tables"] for cut_id, cut in self.history(name, tables[name]).items()}
                if name in tables else {} for name in EMPTY}
        shared = {name: {cut for cut, count in cuts[name].items() if count == 2} for name in EMPTY}
        if shared["orders"] != shared["lines"]:
            self.problems.append(f"{state}: a cut on one table only: {shared}")
        # Each table holds exactly the records below its own frontier, and orders and lines match, when both
        # frontiers end at the same burst (see the module's docstring).
        position = {name: next((index for index, ends in enumerate(self.shop.ends)
                                if ends[topic] == frontiers[name].get(topic, {p: 0 for p in ends[topic]})), None)
                    for name, topic in (("orders", self.shop.orders), ("lines", self.shop.lines))}
        for name, at in position.items():
            if at is not None and rows[name].num_rows != len(expected_rows(at * PER_BURST)[name == "lines"]):
                self.problems.append(f"{state}: {name} holds {rows[name].num_rows} rows, not those of "
                                     f"{at} burst(s) its frontier covers")
        if position["orders"] is not None and position["orders"] == position["lines"]:
            self.aligned += 1
            broken = broken_orders(rows["orders"], rows["lines"])
            if broken:
                self.problems.append(f"{state}: orders without their lines (or lines without their order): {broken}")
        self.states.append((rows["orders"].num_rows, rows["lines"].num_rows))


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except NoSuchTableError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def synced(catalog: Catalog, shop: Shop, namespace: str = "shop") -> bool:
    """Both tables' frontiers are at the topics' ends after the last burst."""
    ends = shop.ends[-1]
    return all(frontier_of(catalog.load_table(f"{namespace}.{name}")).get(topic) == ends[topic]
               for name, topic in (("orders", shop.orders), ("lines", shop.lines)) if sum(ends[topic].values()))


def table_rows(table: Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(row.values()) for row in table.scan().to_arrow().to_pylist())


def expected_rows(count: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    orders = [(i, sum(lines_of(i))) for i in range(count)]
    lines = [(i, line, amount) for i in range(count) for line, amount in enumerate(lines_of(i))]
    return orders, lines


def read_while_synced(spark: SparkSession, shop: Shop, sync: IcebergSync, pointers: Callable[[], dict[str, str]],
                      io: dict[str, str] | None = None, namespace: str = "shop",
                      history: History = history_in_metadata) -> Catalog:
    """Run the job (version 1, in this process) while ``shop`` writes ``BURSTS`` bursts, each synced before the next,
    and a :class:`Reader` of ``pointers`` checks every state of the catalog meanwhile; then check what it saw and
    what the tables hold: every record once, each cut on both tables, every cut atomic. Returns the catalog."""
    catalog = catalog_of(sync)
    with BackgroundJob(SyncJob(sync, 1, spark)) as running, Reader(shop, pointers, io, history) as reader:
        for _ in range(BURSTS):
            shop.burst(PER_BURST)
            running.wait_until(lambda: synced(catalog, shop, namespace), f"burst {len(shop.ends) - 1} synced")
        reader.done.set()
        reader.thread.join(120)
        assert not reader.thread.is_alive()
    assert reader.problems == []
    orders, lines = expected_rows(BURSTS * PER_BURST)
    assert reader.states[-1] == (len(orders), len(lines))  # the last read came after the last burst landed
    assert len(set(reader.states)) >= BURSTS // 2, reader.states  # it read the tables between many cuts
    assert reader.aligned >= 0.9 * len(reader.states), (reader.aligned, len(reader.states))
    assert table_rows(catalog.load_table(f"{namespace}.orders")) == orders
    assert table_rows(catalog.load_table(f"{namespace}.lines")) == lines
    cuts = {name: history(name, catalog.load_table(f"{namespace}.{name}")) for name in ("orders", "lines")}
    assert cuts["orders"] == cuts["lines"] and {cut["tables"] for cut in cuts["orders"].values()} == {2}
    assert {cut["atomic"] for cut in cuts["orders"].values()} == {True}
    for name in ("orders", "lines"):
        assert cut_flags(catalog.load_table(f"{namespace}.{name}")) <= {True}, name
    return catalog


def cut_flags(table: Table) -> set[bool]:
    """The ``"atomic"`` of every snapshot's ``icebergsync.cut`` (data commits of the sync)."""
    return {json.loads(cut)["atomic"] for snapshot in table.metadata.snapshots
            if (cut := (snapshot.summary.additional_properties if snapshot.summary else {}).get(protocol.CUT))}


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_reader_of_the_catalog_sees_each_trigger_on_both_tables_or_on_neither(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker, request: pytest.FixtureRequest,
        database: str) -> None:
    shop = Shop(kafka_broker)
    catalog_name = f"shop_{uuid.uuid4().hex[:8]}"
    if database == "sqlite":
        uri = f"sqlite:///{tmp_path}/catalog.db"
        reader_url = uri
    else:
        uri = request.getfixturevalue("postgres_uri")
        reader_url = uri.replace("postgresql://", "postgresql+psycopg2://")
    sync = parse_spec(shop.document(tmp_path, {"type": "sql", "uri": uri, "warehouse": str(tmp_path / "warehouse"),
                                               "name": catalog_name}))
    with closing(SqlPointers(reader_url, catalog_name)) as pointers:
        read_while_synced(spark, shop, sync, pointers)


def test_on_a_rest_catalog_a_kill_between_the_table_commits_is_completed_by_the_restart(
        tmp_path: Path, kafka_broker: KafkaBroker, rest_catalog: RestCatalog) -> None:
    shop = Shop(kafka_broker)
    namespace = f"shop_{uuid.uuid4().hex[:8]}"  # the server is shared
    document = shop.document(tmp_path, {"type": "rest", "uri": rest_catalog.uri, "warehouse": rest_catalog.warehouse},
                             namespace)
    sync: IcebergSync = parse_spec(document)
    spec_path = write_spec(tmp_path, document)
    catalog = rest_catalog.load()
    names = {"lines": f"{namespace}.lines", "orders": f"{namespace}.orders"}  # identifier order: lines first
    assert sync.spec.table.is_template
    shop.burst(PER_BURST)

    # v1 dies between the two table commits of its first trigger.
    status, log = run_job_process(spec_path, 1, crash_at="table-committed:1")
    assert status == -9, log[-3000:]
    lines, orders = catalog.load_table(names["lines"]), catalog.load_table(names["orders"])
    assert frontier_of(lines) == {shop.lines: shop.ends[-1][shop.lines]}
    assert [c.kind for c in sink_commits(orders, SINK)] == ["fence"]  # claimed, not advanced
    assert orders.scan().to_arrow().num_rows == 0
    assert broken_orders(orders.scan().to_arrow(), lines.scan().to_arrow()) != []  # the cut is not consistent
    [cut] = [json.loads(s.summary.additional_properties[protocol.CUT])
             for s in lines.metadata.snapshots if protocol.CUT in (s.summary.additional_properties if s.summary else {})]
    assert cut["atomic"] is False and cut["tables"] == 2

    # The same version restarts: it reads again only what orders lacks, and commits it to orders alone.
    status, log = run_job_process(spec_path, 1, stop_when=lambda: synced(catalog, shop, namespace))
    assert status == 0, log[-3000:]
    orders_rows, lines_rows = expected_rows(PER_BURST)
    assert table_rows(catalog.load_table(names["orders"])) == orders_rows
    assert table_rows(catalog.load_table(names["lines"])) == lines_rows
    assert [c.kind for c in sink_commits(catalog.load_table(names["lines"]), SINK)].count("data") == 1

    # An upgrade, killed between the table commits again, then restarted: every table exactly once.
    shop.burst(PER_BURST)
    status, log = run_job_process(spec_path, 2, crash_at="table-committed:1")
    assert status == -9, log[-3000:]
    assert frontier_of(catalog.load_table(names["lines"])) == {shop.lines: shop.ends[-1][shop.lines]}
    assert frontier_of(catalog.load_table(names["orders"])) == {shop.orders: shop.ends[-2][shop.orders]}
    shop.burst(PER_BURST)
    status, log = run_job_process(spec_path, 2, stop_when=lambda: synced(catalog, shop, namespace))
    assert status == 0, log[-3000:]
    orders_rows, lines_rows = expected_rows(3 * PER_BURST)
    assert table_rows(catalog.load_table(names["orders"])) == orders_rows
    assert table_rows(catalog.load_table(names["lines"])) == lines_rows
    for name in names.values():
        table = catalog.load_table(name)
        assert cut_flags(table) == {False}, name
        assert [c.writer.version for c in sink_commits(table, SINK) if c.kind == "data"][-1] == 2
