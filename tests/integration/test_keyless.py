"""A table without a primary key (``key: []``) through the whole job: real Kafka, Spark and Iceberg tables.

Debezium-shaped events of a table with duplicate rows and NULLs (PostgreSQL's, ``REPLICA IDENTITY FULL``: every
update and delete carries the whole old row) go through a one-partition topic with null message keys, as Debezium
sends them. Each delete or update must remove exactly ONE live copy, so duplicates stay duplicates: Apache Iceberg's
Spark runtime must read the multiset the events leave, on format 2 (position delete files) and 3 (deletion vectors),
with small files written again (copy-on-write) or not, the job SIGKILLed before and right after a commit, upkeep
(compaction, rewriteDeletes) running between triggers. A delete of a copy in a later trigger must find a live copy,
never one an earlier commit already deleted.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from icebergsync import protocol
from icebergsync.errors import EXIT_INVALID_SPEC
from icebergsync.spec import parse_spec
from spark_app.commit.data_commit import UNMATCHED_COPIES_NOTE
from tests.infra.services import KafkaBroker
from tests.integration.kafka_support import kafka_document, last_frontier, new_topic
from tests.integration.sync_support import catalog_of, run_job_process, sink_commits, write_spec

SCHEMA = [{"name": "name", "type": "string"}, {"name": "qty", "type": "int"},
          {"name": "price", "type": "decimal(10,2)"}, {"name": "note", "type": "string"}]
Row = tuple[str | None, int | None, str | None, str | None]

R1: Row = ("a", 1, "1.50", None)
R2: Row = (None, None, None, None)
R3: Row = ("b", None, "2.00", "x")
R4: Row = ("c", 2, None, None)


class Stream:
    """Debezium events of one table (PostgreSQL's, REPLICA IDENTITY FULL) and the multiset they leave."""

    def __init__(self) -> None:
        self.lsn = 100
        self.expected: Counter[Row] = Counter()
        self.events: list[tuple[None, str, int]] = []

    def _event(self, op: str, before: Row | None, after: Row | None) -> None:
        self.lsn += 10
        def image(row: Row | None) -> dict[str, Any] | None:
            return None if row is None else dict(zip(("name", "qty", "price", "note"), row, strict=True))
        event = {"op": op, "before": image(before), "after": image(after),
                 "source": {"connector": "postgresql", "lsn": self.lsn, "txId": self.lsn}}
        self.events.append((None, json.dumps(event), 0))  # a table without a primary key: no message key

    def insert(self, row: Row, copies: int = 1) -> None:
        for _ in range(copies):
            self._event("c", None, row)
            self.expected[row] += 1

    def delete(self, row: Row) -> None:
        self._event("d", row, None)
        self.expected[row] -= 1
        self.expected = +self.expected  # a delete of a row the table does not hold removes nothing

    def update(self, before: Row, after: Row) -> None:
        self._event("u", before, after)
        self.expected[before] -= 1
        self.expected[after] += 1

    def take(self) -> list[tuple[None, str, int]]:
        events, self.events = self.events, []
        return events


def multiset(spark: SparkSession, document: dict[str, Any]) -> Counter[Row]:
    table = catalog_of(parse_spec(document)).load_table("sales.orders")
    rows = spark.read.format("iceberg").load(table.metadata_location).collect()
    return Counter((r["name"], r["qty"], None if r["price"] is None else str(r["price"]), r["note"]) for r in rows)


def caught_up(broker: KafkaBroker, topic: str, document: dict[str, Any]) -> bool:
    frontier = last_frontier(catalog_of(parse_spec(document)).load_table("sales.orders")) or {}
    return {int(p): o for p, o in (frontier.get(topic) or {}).items()} == broker.end_offsets(topic)


def notes(document: dict[str, Any]) -> list[dict[str, Any]]:
    table = catalog_of(parse_spec(document)).load_table("sales.orders")
    return [json.loads(s.summary.additional_properties[protocol.SOURCE_NOTES]) for s in table.snapshots()
            if s.summary and protocol.SOURCE_NOTES in s.summary.additional_properties]


def upkept(document: dict[str, Any]) -> bool:
    """Whether upkeep (compaction, rewriteDeletes) rewrote data files after the sink's last data commit."""
    table = catalog_of(parse_spec(document)).load_table("sales.orders")
    commits = sink_commits(table, "test/orders")
    last_data = max(index for index, commit in enumerate(commits) if commit.kind == "data")
    summaries = [table.snapshot_by_id(commit.snapshot_id).summary for commit in commits[last_data + 1:]  # type: ignore[union-attr]
                 if commit.kind == "maintenance"]
    return any(int(summary.additional_properties.get("deleted-data-files", 0)) for summary in summaries if summary)


def run(broker: KafkaBroker, topic: str, document: dict[str, Any], spec_path: Path, version: int,
        events: Iterable[tuple[None, str, int]], crash_at: str | None = None, upkeep: bool = False) -> None:
    """Produce ``events``, then run the job until it has committed them (and, with ``upkeep``, compacted after
    them), or until it dies at ``crash_at``."""
    broker.produce(topic, list(events))
    if crash_at is not None:
        status, output = run_job_process(spec_path, version, crash_at=crash_at)
        assert status == -9, output[-3000:]
    else:
        status, output = run_job_process(spec_path, version, stop_when=lambda: caught_up(broker, topic, document)
                                         and (not upkeep or upkept(document)))
        assert status == 0, output[-3000:]


@pytest.mark.parametrize("format_version, copy_on_write", [("2", "0"), ("3", "0"), ("2", "256Ki")],
                         ids=["v2-position-deletes", "v3-deletion-vectors", "v2-copy-on-write"])
def test_each_delete_or_update_removes_one_copy_exactly_once(tmp_path: Path, spark: SparkSession,
                                                             kafka_broker: KafkaBroker, format_version: str,
                                                             copy_on_write: str) -> None:
    topic = new_topic(kafka_broker, 1)
    document = kafka_document(tmp_path, kafka_broker, topic, schema=SCHEMA,
                              table={"key": [], "properties": {"format-version": format_version}},
                              changes={"format": "debezium", "copyOnWriteBelow": copy_on_write},
                              deadLetter={"table": "sales.orders_dlq"},
                              maintenance={"compaction": {"minInputFiles": 2},
                                           "rewriteDeletes": {"deletedRowsPercent": 1}})
    spec_path = write_spec(tmp_path, document)
    stream = Stream()
    stream.insert(R1, 3)
    stream.insert(R2, 2)
    stream.insert(R3, 2)
    stream.insert(R4)
    for i in range(5):
        stream.insert((f"d{i}", i, f"{i}.25", None if i % 2 else "n"))
    run(kafka_broker, topic, document, spec_path, 1, stream.take())
    first = stream.expected.copy()
    assert multiset(spark, document) == first

    stream.delete(R1)  # one copy of three
    stream.update(R3, ("b", 5, "2.00", "x"))  # one copy of two
    stream.delete(R2)  # one of two all-NULL rows
    stream.insert(R4)
    stream.update(R4, R4)  # an update that changes nothing
    stream.insert(("e", 9, None, None))
    stream.delete(("e", 9, None, None))  # inserted and deleted in one trigger
    second = stream.expected.copy()
    run(kafka_broker, topic, document, spec_path, 2, stream.take(), crash_at="staged")  # killed before the commit
    assert multiset(spark, document) == first
    run(kafka_broker, topic, document, spec_path, 3, [], crash_at="committed")  # killed right after it
    assert multiset(spark, document) == second

    stream.delete(R1)  # another copy: a live one, never the one deleted before
    stream.delete(R2)  # the last all-NULL row
    stream.update(("b", 5, "2.00", "x"), ("b", 6, "2.00", "x"))
    stream.delete(R4)  # one copy of two
    stream.delete(("zz", None, None, None))  # a row the table never held: noted, nothing removed
    # Without copy-on-write the table holds several small files and delete files: upkeep rewrites them, duplicates kept
    run(kafka_broker, topic, document, spec_path, 4, stream.take(), upkeep=copy_on_write == "0")
    assert multiset(spark, document) == stream.expected
    assert stream.expected[R1] == 1 and stream.expected[R3] == 1 and stream.expected[R4] == 1
    assert [note[UNMATCHED_COPIES_NOTE] for note in notes(document) if UNMATCHED_COPIES_NOTE in note] == [1]
    dead = catalog_of(parse_spec(document)).load_table("sales.orders_dlq").scan().to_arrow()
    assert dead.num_rows == 0, dead.to_pylist()


def test_a_keyless_table_needs_a_topic_of_one_partition(tmp_path: Path, kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 2)
    document = kafka_document(tmp_path, kafka_broker, topic, schema=SCHEMA, table={"key": []},
                              changes={"format": "debezium"})
    status, output = run_job_process(write_spec(tmp_path, document), 1)
    assert status == EXIT_INVALID_SPEC, output[-3000:]
    assert f"topic {topic} has 2 partitions, but its table has no primary key (key: [])" in output
