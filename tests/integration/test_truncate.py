"""Source truncates (Debezium's ``op: "t"``) on a real Kafka broker and real Spark (spark_app/decoding/source_positions.py, spark_app/sources/truncate_replay.py).

A truncate's commit empties the table and holds every change after it, and nothing before it, whatever the
partition: Debezium orders a topic's partitions only by the events' source positions (here PostgreSQL-shaped
``lsn``s). The stream is laid out so that the hard cases happen for sure: one partition read past the truncate
before the truncate's own partition reached it (those changes are already in the table and must survive it),
and one partition still holding changes from before it (they must never land), the job killed before and
after the truncate's commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from icebergsync import protocol
from icebergsync.spec import parse_spec
from spark_app.job.loop import SyncJob
from tests.infra.services import KafkaBroker
from tests.integration.kafka_support import kafka_document, last_frontier, new_topic
from tests.integration.sync_support import (
    BackgroundJob,
    catalog_of,
    make_sync,
    run_job_process,
    sink_commits,
    write_spec,
)

SCHEMA = [{"name": "id", "type": "long", "required": True}, {"name": "v", "type": "string"}]


def change(op: str, key: int | None, lsn: int, partition: int) -> tuple[str | None, str, int]:
    """A Debezium event of PostgreSQL's connector at ``lsn``, on ``partition`` (a truncate has no key)."""
    row = None if key is None else {"id": key, "v": f"v{key}@{lsn}"}
    event = {"op": op, "before": None, "after": row if op != "t" else None,
             "source": {"connector": "postgresql", "lsn": lsn, "txId": lsn}}
    return (None if key is None else json.dumps({"id": key}), json.dumps(event), partition)


def ids(spark: SparkSession, document: dict[str, Any]) -> list[int]:
    table = catalog_of(parse_spec(document)).load_table("sales.orders")
    rows = spark.read.format("iceberg").load(table.metadata_location).collect()
    return sorted(row["id"] for row in rows)


def caught_up(broker: KafkaBroker, topic: str, document: dict[str, Any]) -> bool:
    frontier = last_frontier(catalog_of(parse_spec(document)).load_table("sales.orders")) or {}
    return {int(p): o for p, o in (frontier.get(topic) or {}).items()} == broker.end_offsets(topic)


def test_a_truncate_empties_the_table_at_its_place_in_the_source(tmp_path: Path, spark: SparkSession,
                                                                 kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 3)
    document = kafka_document(tmp_path, kafka_broker, topic, schema=SCHEMA, table={"key": ["id"]},
                              changes={"format": "debezium"}, deadLetter={"table": "sales.orders_dlq"})
    spec_path = write_spec(tmp_path, document)
    # Partition 1 is read past the truncate (lsn 500) before partition 0 holds it: 7 (lsn 600) is committed first.
    kafka_broker.produce(topic, [change("c", 1, 100, 0), change("c", 2, 110, 0), change("c", 4, 105, 1),
                                 change("c", 5, 115, 1), change("c", 7, 600, 1)])
    with BackgroundJob(SyncJob(parse_spec(document), 1, spark)) as running:
        running.wait_until(lambda: caught_up(kafka_broker, topic, document), "the changes before the truncate")
    assert ids(spark, document) == [1, 2, 4, 5, 7]
    # The truncate, changes after it, and partition 2 still holding one from before it (10, lsn 400).
    kafka_broker.produce(topic, [change("t", None, 500, 0), change("u", 1, 650, 0), change("c", 8, 700, 0),
                                 change("c", 9, 800, 1), change("c", 10, 400, 2), change("c", 11, 900, 2)])
    status, output = run_job_process(spec_path, 2, crash_at="staged")  # killed before the truncate's commit
    assert status == -9, output[-3000:]
    assert ids(spark, document) == [1, 2, 4, 5, 7]
    status, output = run_job_process(spec_path, 3, crash_at="committed")  # killed right after it
    assert status == -9, output[-3000:]
    expected = [1, 7, 8, 9, 11]  # 1 updated after the truncate (an upsert), 7 committed before it but after it
    assert ids(spark, document) == expected
    kafka_broker.produce(topic, [change("c", 12, 1000, 0)])  # a restart goes on after it, and applies it once
    status, output = run_job_process(spec_path, 4, stop_when=lambda: caught_up(kafka_broker, topic, document))
    assert status == 0, output[-3000:]
    table = catalog_of(parse_spec(document)).load_table("sales.orders")
    rows = {row["id"]: row["v"] for row in spark.read.format("iceberg").load(table.metadata_location).collect()}
    assert rows == {1: "v1@650", 7: "v7@600", 8: "v8@700", 9: "v9@800", 11: "v11@900", 12: "v12@1000"}
    notes = [json.loads(s.summary.additional_properties[protocol.SOURCE_NOTES]) for s in table.snapshots()
             if s.summary and protocol.SOURCE_NOTES in s.summary.additional_properties]
    assert [note["truncated-at"] for note in notes if "truncated-at" in note] == [[500]]  # applied once


def test_a_truncate_in_change_files_empties_the_table_at_its_line(tmp_path: Path, spark: SparkSession) -> None:
    """Change files are one ordered stream: the truncate's trigger is the same range, what precedes it skipped."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    lines = {"0000.json": [change("c", 1, 100, 0), change("c", 2, 110, 0)],
             "0001.json": [change("c", 3, 120, 0), change("t", None, 130, 0), change("c", 4, 140, 0),
                           change("u", 1, 150, 0)],
             "0002.json": [change("c", 5, 160, 0)]}
    for name, events in lines.items():
        (inbox / name).write_text("".join(event + "\n" for _, event, _ in events))
    sync = make_sync(tmp_path, {"files": {"path": str(inbox), "maxFilesPerTrigger": 1}}, schema=SCHEMA,
                     table={"key": ["id"]}, changes={"format": "debezium"}, deadLetter={"table": "sales.orders_dlq"})
    catalog = catalog_of(sync)

    def reached() -> bool:
        commits = sink_commits(catalog.load_table("sales.orders"), "test/orders")
        return bool(commits) and commits[-1].frontier == {"after": "0002.json"}

    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(reached, "the last file committed")
    table = catalog.load_table("sales.orders")
    rows = {row["id"]: row["v"] for row in spark.read.format("iceberg").load(table.metadata_location).collect()}
    assert rows == {1: "v1@150", 4: "v4@140", 5: "v5@160"}


def test_a_truncate_without_a_source_position_is_a_dead_letter(tmp_path: Path, spark: SparkSession,
                                                                kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 1)
    document = kafka_document(tmp_path, kafka_broker, topic, schema=SCHEMA, table={"key": ["id"]},
                              changes={"format": "debezium"}, deadLetter={"table": "sales.orders_dlq"})
    unordered = json.dumps({"op": "t", "before": None, "after": None, "source": {"connector": "sqlserver"}})
    kafka_broker.produce(topic, [change("c", 1, 100, 0), (None, unordered, 0), change("c", 2, 200, 0)])
    with BackgroundJob(SyncJob(parse_spec(document), 1, spark)) as running:
        running.wait_until(lambda: caught_up(kafka_broker, topic, document), "every record")
    assert ids(spark, document) == [1, 2]
    letters = catalog_of(parse_spec(document)).load_table("sales.orders_dlq").scan().to_arrow().to_pylist()
    assert [letter["reason"].split(":")[0] for letter in letters] == [
        "a truncate (op t) whose source names no position to order it by against the other changes (PostgreSQL's lsn, "
        "MySQL's and MariaDB's binlog file and pos)"]
