"""Kafka → Iceberg on a real Kafka broker (KRaft) and real Spark: the frontier, lag, dead letters,
partitions added later, retention losses, and exactly-once across kill -9 and fencing.

There is no Spark checkpoint anywhere: the job reads Kafka in batch mode with explicit offsets, and
the table's frontier is the only record of progress (nothing is committed to Kafka either). Every
restart below therefore is a restart "without its Spark checkpoint".
"""

from __future__ import annotations

import json
import logging
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from icebergsync.errors import EXIT_FENCED
from icebergsync.protocol import SOURCE_LAG, SOURCE_NOTES
from icebergsync.spec import parse_spec
from spark_app.job.loop import SyncJob
from spark_app.sources.kafka import KafkaSource
from tests.infra.services import KafkaBroker
from tests.integration.kafka_support import (
    Producer,
    add_partitions,
    covered_ids,
    data_summaries,
    kafka_document,
    last_frontier,
    new_topic,
    produce_orders,
)
from tests.integration.sync_support import (
    BackgroundJob,
    catalog_of,
    run_job_process,
    sink_commits,
    table_ids,
    unreferenced_sink_files,
    wait_while_running,
    write_spec,
)

DEAD_LETTERS = {"table": "sales.orders_dlq"}


def _frontier_of(offsets: dict[int, int], topic: str) -> dict[str, dict[str, int]]:
    return {topic: {str(p): o for p, o in offsets.items()}}


def test_records_land_once_with_frontier_lag_and_dead_letters(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 3)
    placed = produce_orders(kafka_broker, topic, range(600))
    bad = kafka_broker.produce(topic, [("k", "{broken", 0), ("k", '{"id": "x", "amount": 1}', 1), ("k", None, 2)])
    sync = parse_spec(kafka_document(tmp_path, kafka_broker, topic, source={"maxRecordsPerTrigger": 250},
                                     deadLetter=DEAD_LETTERS))
    catalog = catalog_of(sync)
    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: last_frontier(catalog.load_table("sales.orders"))
                           == _frontier_of(kafka_broker.end_offsets(topic), topic), "every offset committed")
    table = catalog.load_table("sales.orders")
    assert table_ids(table) == list(range(600))
    rows = table.scan().to_arrow().sort_by("id").to_pylist()
    assert rows[7] == {"id": 7, "customer": "c0", "amount": 1.75}

    # Each commit's frontier states exactly which records it holds: 250, 250, then the rest.
    summaries = data_summaries(table)
    assert [int(s["icebergsync.records"]) + int(s["icebergsync.dead-letters"]) for s in summaries] == [250, 250, 103]
    cumulative = 0
    covered: list[int] = []
    for commit, summary in zip([c for c in sink_commits(table, "test/orders") if c.kind == "data"], summaries,
                               strict=True):
        cumulative += int(summary["icebergsync.records"]) + int(summary["icebergsync.dead-letters"])
        assert commit.frontier is not None
        covered = covered_ids(placed, commit.frontier, topic)
        bad_covered = [(p, o) for p, o in bad if o < commit.frontier[topic][str(p)]]
        assert len(covered) + len(bad_covered) == cumulative
    assert covered == list(range(600))

    # Lag: per-partition end offset minus the committed end, as seen when the range was planned.
    first_lag = json.loads(summaries[0][SOURCE_LAG])
    assert first_lag["records"] == 603 - 250
    assert sum(first_lag["partitions"][topic].values()) == 603 - 250
    assert json.loads(summaries[-1][SOURCE_LAG])["records"] == 0

    # Malformed records go to the dead-letter table with topic/partition/offset and the reason.
    dead = catalog.load_table("sales.orders_dlq").scan().to_arrow().to_pylist()
    by_position = {(json.loads(r["position"])["partition"], json.loads(r["position"])["offset"]): r for r in dead}
    assert set(by_position) == set(bad)
    assert all(json.loads(r["position"])["topic"] == topic for r in dead)
    broken, mistyped, empty = (by_position[p] for p in bad)
    assert (broken["payload"], broken["reason"]) == ("{broken", "malformed JSON")
    assert mistyped["reason"] == "field id: value x is not a long"
    assert empty["reason"] == "empty record"


def test_a_partition_added_later_is_read_from_its_first_offset(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 2)
    produce_orders(kafka_broker, topic, range(100))
    sync = parse_spec(kafka_document(tmp_path, kafka_broker, topic))
    catalog = catalog_of(sync)
    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: len(table_ids(catalog.load_table("sales.orders"))) == 100, "the first 100 rows")
        add_partitions(kafka_broker, topic, 3)
        placed = produce_orders(kafka_broker, topic, range(100, 150), partition=2)
        assert {p for p, _ in placed.values()} == {2} and min(o for _, o in placed.values()) == 0
        running.wait_until(lambda: len(table_ids(catalog.load_table("sales.orders"))) == 150,
                           "the new partition's rows", timeout=120)
    table = catalog.load_table("sales.orders")
    assert table_ids(table) == list(range(150))
    assert last_frontier(table) == _frontier_of(kafka_broker.end_offsets(topic), topic)
    assert last_frontier(table)[topic]["2"] == 50  # type: ignore[index]


def test_offsets_deleted_by_retention_are_reported_in_the_log_and_the_commit(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker, caplog: pytest.LogCaptureFixture) -> None:
    topic = new_topic(kafka_broker, 2)
    produce_orders(kafka_broker, topic, range(100), partition=0)
    produce_orders(kafka_broker, topic, range(100, 200), partition=1)
    sync = parse_spec(kafka_document(tmp_path, kafka_broker, topic))
    catalog = catalog_of(sync)
    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: len(table_ids(catalog.load_table("sales.orders"))) == 200, "200 rows")
    produce_orders(kafka_broker, topic, range(200, 300), partition=0)  # offsets 100..199 of partition 0
    assert kafka_broker.delete_records(topic, 0, 150) == 150  # as retention would: ids 200..249 are gone
    caplog.set_level(logging.WARNING, logger="icebergsync.source.kafka")
    with BackgroundJob(SyncJob(sync, 2, spark)) as running:
        running.wait_until(lambda: len(table_ids(catalog.load_table("sales.orders"))) == 250, "the surviving rows")
    table = catalog.load_table("sales.orders")
    assert table_ids(table) == [*range(200), *range(250, 300)]
    notes = json.loads(data_summaries(table)[-1][SOURCE_NOTES])
    assert notes["lost-offsets"] == {topic: {"0": [100, 150]}} and notes["lost-records"] == 50
    lost_lines = [r.getMessage() for r in caplog.records if "LOST" in r.getMessage()]
    assert lost_lines == [f"kafka source: LOST 50 record(s) of {topic} partition 0: offsets [100, 150) were deleted "
                          "by the broker (retention) before they were synced; continuing at offset 150"]
    assert last_frontier(table) == {topic: {"0": 200, "1": 100}}


def test_starting_offsets_apply_only_without_progress(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 2)
    produce_orders(kafka_broker, topic, range(20), partition=0)
    produce_orders(kafka_broker, topic, range(20, 30), partition=1)

    def initial(starting: str) -> dict[str, object]:
        sync = parse_spec(kafka_document(tmp_path, kafka_broker, topic, source={"startingOffsets": starting}))
        return KafkaSource(spark, sync.spec).initial_frontier()

    assert initial("earliest") == {}
    assert initial("latest") == {topic: {"0": 20, "1": 10}}
    assert initial(json.dumps({topic: {"0": 5, "1": -2}})) == {topic: {"0": 5, "1": 0}}
    # With explicit offsets the sync starts there; once the table has progress it is ignored.
    sync = parse_spec(kafka_document(tmp_path, kafka_broker, topic,
                                     source={"startingOffsets": json.dumps({topic: {"0": 15, "1": 10}})}))
    catalog = catalog_of(sync)
    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        produce_orders(kafka_broker, topic, range(30, 35), partition=1)
        running.wait_until(lambda: len(table_ids(catalog.load_table("sales.orders"))) == 10, "10 rows")
    assert table_ids(catalog.load_table("sales.orders")) == [15, 16, 17, 18, 19, 30, 31, 32, 33, 34]
    with BackgroundJob(SyncJob(sync, 2, spark)) as running:
        produce_orders(kafka_broker, topic, range(35, 40), partition=0)
        running.wait_until(lambda: len(table_ids(catalog.load_table("sales.orders"))) == 15, "15 rows")
    assert table_ids(catalog.load_table("sales.orders"))[-5:] == [35, 36, 37, 38, 39]


@pytest.mark.slow
def test_exactly_once_across_kill_9_while_producing(tmp_path: Path, kafka_broker: KafkaBroker) -> None:
    """N keyed messages over 3 partitions, produced while jobs are killed at protocol boundaries and at
    random and restarted with the same and higher versions (never with a Spark checkpoint: there is
    none). After every crash the table holds exactly the records its frontier covers; at the end, N."""
    total = 9_000
    topic = new_topic(kafka_broker, 3)
    document = kafka_document(tmp_path, kafka_broker, topic, source={"maxRecordsPerTrigger": 1500},
                              commit={"interval": "500ms", "pollInterval": "200ms"})
    spec_path = write_spec(tmp_path, document)
    sync = parse_spec(document)
    rng = random.Random(4242)
    plan: list[tuple[int, str | None, float | None]] = [
        (1, "committed:1", None),         # killed right after a commit
        (1, "staged:1", None),            # the same version restarts, stages a range, killed before its commit
        (2, None, rng.uniform(16, 22)),   # a random moment, usually while executors stage
        (3, "fenced:1", None),            # killed right after its fence, before reading anything
    ]
    producer = Producer(kafka_broker, topic, total, chunk=300, pause=0.6).start()
    for version, crash_at, kill_after in plan:
        status, log = run_job_process(spec_path, version, crash_at=crash_at, kill_after=kill_after)
        assert status == -9, f"run v{version} {crash_at or 'random kill'} ended {status}:\n{log[-3000:]}"
        table = catalog_of(sync).load_table("sales.orders")
        ids = table_ids(table)
        assert len(ids) == len(set(ids)), "a crash made a record visible twice"
        assert ids == covered_ids(dict(producer.placed), last_frontier(table), topic), \
            "the rows differ from the records the frontier says the table holds"
    placed = producer.join()
    assert sorted(placed) == list(range(total))
    def all_in_and_v4_running() -> bool:  # earlier runs may have committed everything before v4 starts
        table = catalog_of(sync).load_table("sales.orders")
        return len(table_ids(table)) >= total and any(c.writer.version == 4 for c in sink_commits(table, "test/orders"))

    status, log = run_job_process(spec_path, 4, stop_when=all_in_and_v4_running)
    assert status == 0, log[-3000:]
    table = catalog_of(sync).load_table("sales.orders")
    assert table_ids(table) == list(range(total))
    assert last_frontier(table) == _frontier_of(kafka_broker.end_offsets(topic), topic)
    assert unreferenced_sink_files(table, "test/orders") == [], "staged files of crashed attempts were left behind"
    commits = sink_commits(table, "test/orders")
    assert {1, 2, 3, 4} == {c.writer.version for c in commits}
    assert not list(tmp_path.rglob("*checkpoint*")), "the job wrote a Spark checkpoint"


@pytest.mark.slow
def test_a_stale_job_on_the_same_topic_is_fenced_without_duplicates(tmp_path: Path, kafka_broker: KafkaBroker) -> None:
    """Version 1 keeps running while version 2 starts on the same topic and table: the first commit
    version 1 tries after version 2's fence fails, it exits 75, and no record lands twice."""
    topic = new_topic(kafka_broker, 3)
    document = kafka_document(tmp_path, kafka_broker, topic, commit={"interval": "500ms"})
    spec_path = write_spec(tmp_path, document)
    sync = parse_spec(document)
    producer = Producer(kafka_broker, topic, None, chunk=100, pause=0.3).start()  # until both have run

    def data_commits(version: int) -> int:
        return sum(1 for c in sink_commits(catalog_of(sync).load_table("sales.orders"), "test/orders")
                   if c.writer.version == version and c.kind == "data")

    with ThreadPoolExecutor(1) as pool:
        old = pool.submit(run_job_process, spec_path, 1)

        def finished() -> bool:
            if old.done() and data_commits(2) >= 1:
                producer.stop()
            return producer.done and len(table_ids(catalog_of(sync).load_table("sales.orders"))) >= len(producer.placed)

        wait_while_running(old, lambda: data_commits(1) >= 2, "the old version's commits")
        status, new_log = run_job_process(spec_path, 2, stop_when=finished)
        assert status == 0, new_log[-3000:]
        old_status, old_log = old.result(timeout=180)
    placed = producer.join()
    assert old_status == EXIT_FENCED, old_log[-3000:]
    fenced = [line for line in old_log.splitlines() if "FENCED" in line]
    assert len(fenced) == 1 and "version 1" in fenced[0] and "version 2" in fenced[0]
    table = catalog_of(sync).load_table("sales.orders")
    assert table_ids(table) == list(range(len(placed)))
    assert last_frontier(table) == _frontier_of(kafka_broker.end_offsets(topic), topic)
    commits = sink_commits(table, "test/orders")
    new_fence = next(i for i, c in enumerate(commits) if c.writer.version == 2)
    assert all(c.writer.version == 2 for c in commits[new_fence:]), "the stale job landed after the new fence"
    assert [uri for uri in unreferenced_sink_files(table, "test/orders") if "-v1-" in uri] == []
