"""The table follows the source's schema (spec.schemaEvolution: evolve) on a real Kafka broker and real Spark:
Debezium change events whose Kafka Connect schema gains a column, widens one and drops one mid-stream are
committed with the table's schema changed by its own fenced commits; a change Iceberg cannot express stops
the sync naming the column with nothing of its trigger committed; a fenced version cannot change the schema."""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.types import DecimalType, IntegerType, LongType, NestedField, StringType, StructType, UUIDType
from pyspark.sql import SparkSession

from icebergsync import protocol
from icebergsync.errors import FencedError, IncompatibleSchemaError
from icebergsync.protocol import Writer
from icebergsync.schema import SchemaChange
from icebergsync.spec import parse_spec
from spark_app.commit.committer import SinkCommitter
from spark_app.job.loop import SyncJob
from tests.infra.services import KafkaBroker
from tests.integration.committer_support import TABLE, create_table, open_catalog
from tests.integration.connect_records import change_event, decimal, decimal_value, field
from tests.integration.kafka_support import kafka_document, last_frontier, new_topic
from tests.integration.sync_support import (
    BackgroundJob,
    catalog_of,
    run_job_process,
    sink_commits,
    write_spec,
)

SINK = "test/orders"
SCHEMA = [{"name": "id", "type": "long", "required": True}, {"name": "name", "type": "string"},
          {"name": "qty", "type": "int"}]
FIRST = [field("id", "int64", optional=False), field("name", "string"), field("qty", "int32")]
WIDENED = [field("id", "int64", optional=False), field("name", "string"), field("qty", "int64"), decimal("price", 10, 2)]
DROPPED = [field("id", "int64", optional=False), field("qty", "int64"), decimal("price", 10, 2)]


def events(ids: range, fields: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    """One insert per id with the columns ``fields`` names (all on partition 0, in order)."""
    names = {f["field"] for f in fields}
    rows = []
    for i in ids:
        row = {"id": i, "name": f"n{i}", "qty": i * 10 if "price" not in names else 3_000_000_000 + i,
               "price": decimal_value(Decimal(i) / 4, 2)}
        rows.append((str(i), change_event("c", fields, {k: v for k, v in row.items() if k in names}), 0))
    return rows


def keyed_document(tmp_path: Path, broker: KafkaBroker, topic: str, **spec: Any) -> dict[str, Any]:
    return kafka_document(tmp_path, broker, topic, source={"maxRecordsPerTrigger": 40}, schema=SCHEMA,
                          table={"key": ["id"]}, changes={"format": "debezium"}, **spec)


def frontier_reaches(broker: KafkaBroker, topic: str, sync_catalog: Any) -> bool:
    end = broker.end_offsets(topic)
    frontier = last_frontier(sync_catalog.load_table("sales.orders")) or {}
    return {int(p): o for p, o in (frontier.get(topic) or {}).items()} == {int(p): o for p, o in end.items()}


def test_added_widened_and_dropped_columns_are_followed(tmp_path: Path, spark: SparkSession,
                                                       kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 1)
    kafka_broker.produce(topic, events(range(0, 60), FIRST) + events(range(60, 120), WIDENED)
                         + events(range(120, 150), DROPPED))
    sync = parse_spec(keyed_document(tmp_path, kafka_broker, topic))
    catalog = catalog_of(sync)
    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: frontier_reaches(kafka_broker, topic, catalog), "every offset committed")
    table = catalog.load_table("sales.orders")
    schema = table.schema()
    assert [f.name for f in schema.fields] == ["id", "name", "qty", "price"]
    assert isinstance(schema.find_field("qty").field_type, LongType)
    assert schema.find_field("price").field_type == DecimalType(10, 2) and not schema.find_field("price").required
    rows = {row["id"]: row for row in spark.read.format("iceberg").load(table.metadata_location).collect()}
    assert sorted(rows) == list(range(150))
    assert rows[5].asDict() == {"id": 5, "name": "n5", "qty": 50, "price": None}
    assert rows[70].asDict() == {"id": 70, "name": "n70", "qty": 3_000_000_070, "price": Decimal("17.50")}
    assert rows[130].asDict() == {"id": 130, "name": None, "qty": 3_000_000_130, "price": Decimal("32.50")}

    # Each schema change is its own commit of kind schema, the frontier of the commit below it unchanged.
    commits = sink_commits(table, SINK)
    schema_commits = [i for i, c in enumerate(commits) if c.kind == protocol.KIND_SCHEMA]
    assert schema_commits, [c.kind for c in commits]
    for index in schema_commits:
        assert commits[index].frontier == commits[index - 1].frontier
    # (besides the upkeep's own commits, which carry the frontier unchanged as well)
    assert {c.kind for c in commits} - {protocol.KIND_MAINTENANCE} == {
        protocol.KIND_FENCE, protocol.KIND_DATA, protocol.KIND_SCHEMA}


def test_without_spec_schema_the_table_is_created_from_the_first_records(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 1)
    kafka_broker.produce(topic, events(range(0, 50), FIRST) + events(range(50, 90), WIDENED))
    document = keyed_document(tmp_path, kafka_broker, topic)
    del document["spec"]["schema"]
    sync = parse_spec(document)
    catalog = catalog_of(sync)
    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: frontier_reaches(kafka_broker, topic, catalog), "every offset committed")
    table = catalog.load_table("sales.orders")
    assert [(f.name, str(f.field_type), f.required) for f in table.schema().fields] == [
        ("id", "long", True), ("name", "string", False), ("qty", "long", False), ("price", "decimal(10, 2)", False)]
    assert table.schema().identifier_field_names() == {"id"}
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(90))


def test_a_restart_after_the_schema_commit_resumes_with_the_evolved_table(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 1)
    kafka_broker.produce(topic, events(range(0, 30), FIRST) + events(range(30, 70), WIDENED))
    document = keyed_document(tmp_path, kafka_broker, topic)
    status, output = run_job_process(write_spec(tmp_path, document), 1, crash_at="schema-committed")
    assert status == -9, output[-3000:]
    sync = parse_spec(document)
    catalog = catalog_of(sync)
    assert isinstance(catalog.load_table("sales.orders").schema().find_field("qty").field_type, LongType)
    # The spec still says qty int: the table the source widened is what it declared, not a narrowing.
    with BackgroundJob(SyncJob(sync, 2, spark)) as running:
        running.wait_until(lambda: frontier_reaches(kafka_broker, topic, catalog), "every offset committed")
    ids = catalog.load_table("sales.orders").scan().to_arrow().column("id").to_pylist()
    assert sorted(ids) == list(range(70))


def test_columns_another_engine_added_stay_its_own(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    """Another writer adds a nested and a uuid column to a table the sync follows the source into: the sync
    goes on after a restart, its rows null there, the foreign columns untouched."""
    topic = new_topic(kafka_broker, 1)
    kafka_broker.produce(topic, events(range(0, 30), FIRST))
    sync = parse_spec(keyed_document(tmp_path, kafka_broker, topic))
    catalog = catalog_of(sync)
    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: frontier_reaches(kafka_broker, topic, catalog), "the first records committed")
    with catalog.load_table("sales.orders").update_schema() as update:
        update.add_column("labels", StructType(NestedField(100, "colour", StringType(), required=False)))
        update.add_column("ref", UUIDType())
    kafka_broker.produce(topic, events(range(30, 60), WIDENED))
    with BackgroundJob(SyncJob(sync, 2, spark)) as running:
        running.wait_until(lambda: frontier_reaches(kafka_broker, topic, catalog), "every offset committed")
    table = catalog.load_table("sales.orders")
    assert [f.name for f in table.schema().fields] == ["id", "name", "qty", "labels", "ref", "price"]
    rows = {row["id"]: row for row in spark.read.format("iceberg").load(table.metadata_location).collect()}
    assert sorted(rows) == list(range(60))
    assert (rows[45]["qty"], rows[45]["price"], rows[45]["labels"], rows[45]["ref"]) == (
        3_000_000_045, Decimal("11.25"), None, None)


def test_an_incompatible_change_stops_the_sync_naming_table_and_column(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 1)
    retyped = [field("id", "int64", optional=False), field("name", "string"), field("qty", "string")]
    retyped_event = change_event("c", retyped, {"id": 40, "name": "n", "qty": "many"})
    kafka_broker.produce(topic, [*events(range(0, 40), FIRST), ("40", retyped_event, 0)])
    sync = parse_spec(keyed_document(tmp_path, kafka_broker, topic))
    catalog = catalog_of(sync)
    with pytest.raises(IncompatibleSchemaError) as raised:
        SyncJob(sync, 1, spark).run()
    assert "sales.orders" in str(raised.value) and "'qty' is int in the table" in str(raised.value)
    table = catalog.load_table("sales.orders")
    assert isinstance(table.schema().find_field("qty").field_type, IntegerType)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(40))
    assert last_frontier(table) == {topic: {"0": 40}}


def test_with_evolution_off_an_unknown_field_is_a_dead_letter(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 1)
    kafka_broker.produce(topic, events(range(0, 10), FIRST) + events(range(10, 12), WIDENED))
    sync = parse_spec(keyed_document(tmp_path, kafka_broker, topic, schemaEvolution="none",
                                     deadLetter={"table": "sales.orders_dlq"}))
    catalog = catalog_of(sync)
    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: frontier_reaches(kafka_broker, topic, catalog), "every offset committed")
    assert [f.name for f in catalog.load_table("sales.orders").schema().fields] == ["id", "name", "qty"]
    reasons = catalog.load_table("sales.orders_dlq").scan().to_arrow().column("reason").to_pylist()
    assert len(reasons) == 2 and all("unknown field(s) not in spec.schema: price" in r for r in reasons)


def test_a_running_job_outranked_by_a_newer_version_cannot_evolve_the_schema(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 1)
    kafka_broker.produce(topic, events(range(0, 20), FIRST))
    sync = parse_spec(keyed_document(tmp_path, kafka_broker, topic))
    catalog = catalog_of(sync)
    running = BackgroundJob(SyncJob(sync, 1, spark)).__enter__()
    try:
        running.wait_until(lambda: frontier_reaches(kafka_broker, topic, catalog), "the first records committed")
        newer = SinkCommitter(catalog, "sales.orders", Writer(SINK, 2, "newer"))
        newer.start([], sink_commits(catalog.load_table("sales.orders"), SINK)[-1].source)
        kafka_broker.produce(topic, events(range(20, 30), WIDENED))
        deadline = time.monotonic() + 120
        while running.error is None:  # version 1 meets the drift; its schema commit is refused
            assert time.monotonic() < deadline, "version 1 did not stop"
            time.sleep(0.2)
    finally:
        running.job.stop_requested.set()
    with pytest.raises(FencedError):
        running.stop()
    table = catalog.load_table("sales.orders")
    assert [f.name for f in table.schema().fields] == ["id", "name", "qty"]
    assert isinstance(table.schema().find_field("qty").field_type, IntegerType)
    assert protocol.KIND_SCHEMA not in {c.kind for c in sink_commits(table, SINK)}


def test_a_fenced_version_cannot_change_the_schema(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    create_table(catalog)
    older = SinkCommitter(catalog, TABLE, Writer(SINK, 1, "a1"))
    older.start([], {"kind": "generator"})
    SinkCommitter(catalog, TABLE, Writer(SINK, 2, "a2")).start([], {"kind": "generator"})
    schema_id = catalog.load_table(TABLE).metadata.current_schema_id
    with pytest.raises(FencedError):
        older.evolve_schema([SchemaChange("add", "extra", LongType())])
    table = catalog.load_table(TABLE)
    assert table.metadata.current_schema_id == schema_id and "extra" not in [f.name for f in table.schema().fields]
