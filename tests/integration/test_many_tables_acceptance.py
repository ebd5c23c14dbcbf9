"""Acceptance of many tables: ONE sync of many Debezium topics into one table each, through the real job, killed -9.

A database's change topics (56 of them: a few hot ones on two partitions, many with a handful of changes,
some idle) carry Debezium change events with their Kafka Connect schema (``schemas.enable=true``: inserts,
updates, deletes followed by their tombstone, re-inserts; one hot topic's schema gains a column mid-stream).
One ``icebergsync run`` process at a time syncs them by ``topicPattern`` into ``lake.{1}``: no spec.schema,
so each table is created from its first records, keyed by ``id``, with one table's partitioning and
properties overridden in ``spec.tables``. Each process is SIGKILLed (the whole process group) at a crash
point (``fenced``, ``staged``, ``committed``), a random moment after a trigger landed, or a random time from
the start, and restarted with the same or a higher sink version. After every kill every table holds exactly
the model of the changes its own frontier covers (pyiceberg's reader); at the end Apache Iceberg's Spark
runtime reads every table, which must equal the model of its whole topic (every row the one of its key's
last change, named by the change's index) and hold no key twice; its data commits' frontiers only move
forward, each commit an atomic cut; an idle topic has no table. (A keyed commit's ``icebergsync.records``
counts the rows it wrote, after a trigger's changes to one key collapsed, so it is no count of changes.)
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from icebergsync import protocol
from icebergsync.spec import parse_spec
from tests.infra.services import KafkaBroker
from tests.integration.cdc_postgres.progress import message_key
from tests.integration.cdc_postgres.servers import start_debezium, start_postgres
from tests.integration.cdc_postgres.tables import DOCUMENTS, TABLES, VARIANTS
from tests.integration.cdc_postgres.tables import postgres_rows as select_star
from tests.integration.cdc_postgres.tables import spark_rows as iceberg_rows
from tests.integration.cdc_postgres.workload import Workload
from tests.integration.connect_records import change_event
from tests.integration.connect_records import field as connect_field
from tests.integration.sync_support import (
    catalog_of,
    job_process,
    kill_after_first_commit,
    run_job_process,
    sink_commits,
    sync_document,
    write_spec,
)

SINK = "test/orders"
HOT, WARM, IDLE = 3, 45, 8  # topics: hot (2 partitions, many changes), warm (1 partition, 1-8 changes), idle
HOT_CHANGES = int(os.environ.get("ICEBERGSYNC_MANY_HOT_CHANGES", "1200"))
EVOLVED = "t01"  # the hot topic whose Connect schema gains a column (note) mid-stream
OVERRIDDEN = "t00"  # the table with its own partitioning and properties (spec.tables)
FIELDS = [connect_field("id", "int64", optional=False), connect_field("name", "string"), connect_field("qty", "int32")]
WITH_NOTE = [*FIELDS, connect_field("note", "string")]
# How each run before the last ends, in turn: (how, crash point, version step)
RUNS: list[tuple[str, str | None, int]] = [
    ("crash", "fenced:5", 1),      # v1 dies right after its 5th lazy claim (tables being created)
    ("progress", None, 0),         # v1 again (a new attempt), killed a random 0-3 s after a trigger landed
    ("crash", "staged:1", 0),      # v1 again, killed with a trigger staged and not committed
    ("crash", "committed:1", 1),   # v2 (upgrade), killed right after a trigger's cut landed
    ("random", None, 0),           # v2 again, killed at a random time from the start
]

Row = dict[str, Any]


@dataclass
class Topic:
    """One source topic: its changes as produced, each with the (partition, offset) it got."""

    name: str  # e.g. t07
    topic: str
    partitions: int
    records: list[tuple[int, str | None, str, list[tuple[int, Row | None]]]] = field(default_factory=list)
    placed: list[tuple[int, int]] = field(default_factory=list)

    @property
    def table(self) -> str:
        return f"lake.{self.name}"

    @property
    def ends(self) -> dict[str, int]:
        ends = {str(p): 0 for p in range(self.partitions)}
        for partition, offset in self.placed:
            ends[str(partition)] = max(ends[str(partition)], offset + 1)
        return ends

    def model(self, frontier: dict[str, Any] | None) -> dict[int, Row]:
        """The rows after the changes ``frontier`` covers (all changes of a key are in one partition, in order)."""
        offsets = {int(p): int(o) for p, o in ((frontier or {}).get(self.topic) or {}).items()}
        rows: dict[int, Row] = {}
        for (_, _, _, effects), (partition, offset) in zip(self.records, self.placed, strict=True):
            if offset >= offsets.get(partition, 0):
                continue
            for key, row in effects:
                if row is None:
                    rows.pop(key, None)
                else:
                    rows[key] = row
        return rows


def changes(topic: Topic, count: int, keys: int, rng: random.Random) -> None:
    """``count`` Debezium change events over ``keys`` keys; a delete is followed by its tombstone."""
    live: dict[int, Row] = {}
    evolve_at = int(count * 0.6) if topic.name == EVOLVED else None
    for index in range(count):
        fields = WITH_NOTE if evolve_at is not None and index >= evolve_at else FIELDS
        key = rng.randrange(keys)
        partition = key % topic.partitions
        message_key = json.dumps({"id": key})
        row = {"id": key, "name": f"{topic.name}-{key}-{index}", "qty": rng.randrange(-1000, 1000)}
        if fields is WITH_NOTE:
            row["note"] = f"note {index}" if rng.random() < 0.7 else None
        stored = {**row, "note": row.get("note")} if topic.name == EVOLVED else row
        if key not in live:
            op = rng.choice("cr")
            topic.records.append((partition, change_event(op, fields, row), message_key, [(key, stored)]))
            live[key] = stored
        elif rng.random() < 0.75:
            before = {name: value for name, value in live[key].items() if name in {f["field"] for f in fields}}
            topic.records.append((partition, change_event("u", fields, row, before=before), message_key,
                                  [(key, stored)]))
            live[key] = stored
        else:
            before = {name: value for name, value in live[key].items() if name in {f["field"] for f in fields}}
            topic.records.append((partition, change_event("d", fields, None, before=before), message_key, [(key, None)]))
            topic.records.append((partition, None, message_key, []))  # Debezium's tombstone after a delete
            del live[key]


def produce(broker: KafkaBroker, topic: Topic) -> None:
    if topic.records:
        topic.placed = broker.produce(topic.topic, [(k, v, p) for p, v, k, _ in topic.records])
        assert [p for p, _ in topic.placed] == [p for p, _, _, _ in topic.records]


def source_topics(broker: KafkaBroker, prefix: str, rng: random.Random) -> list[Topic]:
    topics: list[Topic] = []
    for number in range(HOT + WARM + IDLE):
        name = f"t{number:02d}"
        hot = number < HOT
        topic = Topic(name, f"{prefix}.{name}", 2 if hot else 1)
        broker.create_topic(topic.topic, topic.partitions)
        if hot:
            changes(topic, HOT_CHANGES, HOT_CHANGES // 8, rng)
        elif number < HOT + WARM:
            changes(topic, rng.randint(1, 8), 4, rng)
        produce(broker, topic)
        topics.append(topic)
    return topics


def table_or_none(catalog: Catalog, name: str) -> Table | None:
    try:
        return catalog.load_table(name)
    except NoSuchTableError:
        return None


def last_frontier(table: Table | None) -> dict[str, Any] | None:
    commits = [c for c in sink_commits(table, SINK) if c.frontier is not None] if table is not None else []
    return commits[-1].frontier if commits else None


def pyiceberg_rows(table: Table) -> dict[int, Row]:
    names = [f.name for f in table.schema().fields]
    rows = table.scan().to_arrow().to_pylist()
    assert len(rows) == len({row["id"] for row in rows}), f"{table.name()}: a key is in the table twice"
    return {row["id"]: {name: row[name] for name in names} for row in rows}


def expected(topic: Topic, frontier: dict[str, Any] | None, columns: list[str]) -> dict[int, Row]:
    return {key: {name: row.get(name) for name in columns} for key, row in topic.model(frontier).items()}


def check_every_table(catalog: Catalog, topics: list[Topic], when: str) -> int:
    """Each existing table equals the model of exactly what its frontier covers; returns the tables checked."""
    checked = 0
    for topic in topics:
        table = table_or_none(catalog, topic.table)
        if table is None:
            continue
        frontier = last_frontier(table)
        assert set(frontier or {}) <= {topic.topic}, f"{topic.table} holds another table's streams: {frontier}"
        columns = [f.name for f in table.schema().fields]
        assert pyiceberg_rows(table) == expected(topic, frontier, columns), f"{topic.table} {when} at {frontier}"
        checked += 1
    return checked


def finished(catalog: Catalog, topics: list[Topic]) -> bool:
    return all(last_frontier(table_or_none(catalog, t.table)) == {t.topic: t.ends} for t in topics if t.records)


def data_commits(catalog: Catalog, topics: list[Topic]) -> int:
    total = 0
    for topic in topics[:HOT]:
        table = table_or_none(catalog, topic.table)
        total += sum(1 for c in sink_commits(table, SINK) if c.kind == "data") if table is not None else 0
    return total


def run(spec_path: Path, version: int, how: str, crash_at: str | None, catalog: Catalog, topics: list[Topic],
        rng: random.Random, timeout: float = 600) -> tuple[int, str]:
    """One ``icebergsync run`` process, ended as ``how`` says: SIGKILL at a crash point (the job kills itself),
    a random 0-3 s after a trigger landed (``progress``), at a random 5-30 s from the start (``random``), or a
    SIGTERM once every topic is committed (``finish``)."""
    seen = data_commits(catalog, topics)
    kill_at = time.monotonic() + rng.uniform(5, 30) if how == "random" else None
    with job_process(spec_path, version, crash_at) as (process, output):
        deadline = time.monotonic() + timeout
        while process.poll() is None:
            assert time.monotonic() < deadline, f"job v{version} ({how}) ran {timeout}s:\n{output.read_text()[-4000:]}"
            if how == "finish" and finished(catalog, topics):
                process.send_signal(signal.SIGTERM)
                how = "stopping"
            elif how in ("progress", "crash") and kill_at is None and data_commits(catalog, topics) > seen:
                # progress: a random moment of the next trigger(s); crash: the point should come first
                kill_at = time.monotonic() + (rng.uniform(0, 3) if how == "progress" else 120)
            if kill_at is not None and time.monotonic() >= kill_at:
                os.killpg(process.pid, signal.SIGKILL)
            time.sleep(0.5)
    return process.returncode, output.read_text()


@pytest.mark.slow
def test_many_debezium_topics_into_their_tables_exactly_once_across_kill_9(
        tmp_path: Path, kafka_broker: KafkaBroker, request: pytest.FixtureRequest) -> None:
    seed = os.environ.get("ICEBERGSYNC_MANY_SEED", "many-tables-acceptance")
    rng = random.Random(seed)
    prefix = f"pg{uuid.uuid4().hex[:6]}.public"
    topics = source_topics(kafka_broker, prefix, rng)
    busy = [t for t in topics if t.records]
    idle = [t for t in topics if not t.records]
    assert len(topics) >= 50 and len(idle) == IDLE
    total = sum(len(t.records) for t in topics)
    document = sync_document(
        tmp_path, {"kafka": {"bootstrapServers": kafka_broker.bootstrap_servers,
                             "topicPattern": re.escape(prefix) + r"\.(t[0-9]+)",
                             "maxRecordsPerTrigger": max(200, total // 8)}},
        table={"name": "lake.{1}", "key": ["id"]},
        tables={f"lake.{OVERRIDDEN}": {"partitionBy": ["bucket(4, id)"],
                                       "properties": {"icebergsync.test.override": "yes"}}},
        changes={"format": "debezium"},
        commit={"interval": "500ms", "pollInterval": "200ms", "targetFileSize": "8Mi"},
    )
    spec_path = write_spec(tmp_path, document)
    catalog = catalog_of(parse_spec(document))

    version = 1
    for number, (how, crash_at, step) in enumerate(RUNS):
        version += step if number else 0
        status, log = run(spec_path, version, how, crash_at, catalog, topics, rng)
        assert status == -9, f"run {number} v{version} ({how} {crash_at or ''}) ended {status}:\n{log[-4000:]}"
        check_every_table(catalog, topics, f"after run {number} (v{version}, {how} {crash_at or ''})")
        assert not finished(catalog, topics) or number >= 3, "the kills came too late to interrupt anything"

    version += 1
    status, log = run(spec_path, version, "finish", None, catalog, topics, rng)
    assert status == 0, log[-4000:]

    spark = request.getfixturevalue("spark")  # Apache Iceberg's own Spark runtime, the independent reader
    for topic in busy:
        table = catalog.load_table(topic.table)
        columns = [f.name for f in table.schema().fields]
        read = spark.read.format("iceberg").load(table.metadata_location).select(*columns).collect()
        rows = {row["id"]: row.asDict() for row in read}
        assert len(rows) == len(read), f"{topic.table}: a key is in the table twice"
        assert rows == expected(topic, {topic.topic: topic.ends}, columns), topic.table
        commits = sink_commits(table, SINK)
        summaries = {s.snapshot_id: s.summary.additional_properties for s in table.metadata.snapshots}  # type: ignore[union-attr]
        data = [c for c in commits if c.kind == "data"]
        # Every data commit moved the table's own frontier forward (each starts where the previous one ended,
        # so no range of the topic was committed twice), and each is part of an atomic cut.
        previous: dict[str, int] = {}
        for commit in data:
            offsets = (commit.frontier or {})[topic.topic]
            assert all(offsets.get(p, 0) >= o for p, o in previous.items()) and offsets != previous, topic.table
            previous = offsets
            cut = json.loads(summaries[commit.snapshot_id][protocol.CUT])
            assert cut["atomic"] is True
        assert commits[-1].frontier == {topic.topic: topic.ends}
    for topic in idle:  # an idle topic costs no table
        assert not catalog.table_exists(topic.table), topic.table
    # Tables were created from the records' Connect schema; the evolved topic's table gained its column;
    # spec.tables gave one table its own partitioning and properties.
    assert [f.name for f in catalog.load_table(f"lake.{EVOLVED}").schema().fields] == ["id", "name", "qty", "note"]
    assert [f.name for f in catalog.load_table("lake.t02").schema().fields] == ["id", "name", "qty"]
    overridden = catalog.load_table(f"lake.{OVERRIDDEN}")
    assert [str(f.transform) for f in overridden.spec().fields] == ["bucket[4]"]
    assert overridden.properties.get("icebergsync.test.override") == "yes"
    assert list(catalog.load_table("lake.t02").spec().fields) == []
    assert catalog.load_table("lake.t02").schema().identifier_field_names() == {"id"}
    # Some trigger's cut spanned many tables at once.
    widest = 0
    for topic in busy:
        table = catalog.load_table(topic.table)
        for snapshot in table.metadata.snapshots:
            cut = (snapshot.summary.additional_properties if snapshot.summary else {}).get(protocol.CUT)
            if cut:
                widest = max(widest, json.loads(cut)["tables"])
    assert widest >= 10, widest


def test_a_postgres_database_through_debezium_into_one_sync_of_its_tables(
        tmp_path: Path, kafka_broker: KafkaBroker, request: pytest.FixtureRequest) -> None:
    """The real pipeline: PostgreSQL (four tables: a bigint key, a composite key, a uuid key, TOASTed text left
    untouched by updates) → Debezium's PostgreSQL connector (Connect schemas on) → one Kafka topic per table →
    ONE sync of ``<prefix>.public.(\\w+)`` into ``cdc.{1}`` with each table's key and columns from
    ``spec.tables`` and a dead-letter template. Version 1 is SIGKILLed once its first cut landed, while the
    workload goes on; version 2 catches up. Then Apache Iceberg's Spark reader returns, for every table, what
    ``SELECT *`` returns on PostgreSQL, and no record is a dead letter."""
    variant = VARIANTS[0]  # Debezium's defaults, with the records' schema
    (tmp_path / "postgres").mkdir()
    postgres = start_postgres(tmp_path / "postgres")
    connection = postgres.connect()
    debezium = None
    try:
        workload = Workload(connection, random.Random("many-tables-postgres"))
        workload.create()
        workload.create_documents()
        workload.snapshot_rows()
        tables = [*TABLES, DOCUMENTS]
        prefix = f"pg{uuid.uuid4().hex[:8]}"
        topics = {table.name: f"{prefix}.public.{table.name}" for table in tables}
        for topic in topics.values():
            kafka_broker.create_topic(topic, 2)
        (tmp_path / "debezium").mkdir()
        debezium = start_debezium(tmp_path / "debezium", postgres, kafka_broker, prefix, [t.name for t in tables],
                                  variant.settings)
        document = sync_document(
            tmp_path, {"kafka": {"bootstrapServers": kafka_broker.bootstrap_servers,
                                 "topicPattern": re.escape(prefix) + r"\.public\.(\w+)"}},
            name="shop-db", table={"name": "cdc.{1}", "key": ["id"]}, changes={"format": "debezium"},
            tables={f"cdc.{t.name}": {"key": t.key, "schema": t.spec_schema(variant)} for t in tables},
            deadLetter={"table": "cdc.{1}_dlq"})
        spec_path = write_spec(tmp_path, document)
        catalog = catalog_of(parse_spec(document))
        sink = "test/shop-db"

        def commits(name: str) -> list[protocol.SinkCommit]:
            table = table_or_none(catalog, f"cdc.{name}")
            return sink_commits(table, sink) if table is not None else []

        def caught_up() -> bool:
            for table in tables:
                landed = [c for c in commits(table.name) if c.frontier is not None]
                frontier = (landed[-1].frontier or {}).get(topics[table.name], {}) if landed else {}
                ends = kafka_broker.end_offsets(topics[table.name])
                if not all(int(frontier.get(str(p), 0)) == end for p, end in ends.items()):
                    return False
            return True

        workload.round()
        workload.documents_round()
        kill_after_first_commit(spec_path, lambda: any(c.kind == "data" for t in tables for c in commits(t.name)),
                                workload.go_on)
        workload.round()
        workload.documents_round()
        last = {**workload.last_row(), DOCUMENTS.name: workload.last_document()}
        for table in tables:  # Debezium has written the workload's last change of every table
            key = dict(zip(table.key, last[table.name], strict=True))
            deadline = time.monotonic() + 120
            while not any(message_key(r.key) == key for r in kafka_broker.consume(topics[table.name], timeout=10)):
                assert time.monotonic() < deadline, f"Debezium never wrote {key} to {topics[table.name]}"
                time.sleep(1)
        status, log_text = run_job_process(spec_path, 2, stop_when=caught_up, timeout=400)
        assert status == 0, log_text[-4000:]

        spark = request.getfixturevalue("spark")
        for table in tables:
            iceberg = catalog.load_table(f"cdc.{table.name}")
            expected_rows = select_star(connection, table, variant)
            actual = iceberg_rows(spark, iceberg.metadata_location, table, variant)
            assert len(expected_rows) >= 15, f"{table.name}: the workload left too few rows to compare"
            assert sorted(actual) == sorted(expected_rows), f"{table.name}: the keys differ"
            for primary, row in expected_rows.items():
                assert actual[primary] == row, f"{table.name} {primary}:\n iceberg  {actual[primary]}\n postgres {row}"[:3000]
            assert iceberg.schema().identifier_field_names() == set(table.key)
            assert {topic for c in commits(table.name) if c.frontier for topic in c.frontier} == {topics[table.name]}
            dead = table_or_none(catalog, f"cdc.{table.name}_dlq")
            assert dead is None or dead.scan().to_arrow().num_rows == 0, f"{table.name}: dead letters"
    finally:
        connection.close()
        if debezium is not None:
            debezium.stop()
        postgres.server.stop()
