"""One sync, many tables, on a real Kafka broker and real Spark: one table per topic by a
template, tables created at their first record, topics created later picked up by the pattern, one
atomic cut per trigger on the SQL catalog, and exactly-once per table across restarts and upgrades."""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from icebergsync import protocol
from icebergsync.spec import parse_spec
from spark_app.job.loop import SyncJob
from tests.infra.services import KafkaBroker
from tests.integration.kafka_support import SCHEMA, LateBroker, produce_orders
from tests.integration.sync_support import BackgroundJob, catalog_of, sink_commits, sync_document, table_ids

SINK = "test/orders"


def _document(directory: Path, broker: KafkaBroker, prefix: str, **spec: Any) -> dict[str, Any]:
    source = {"kafka": {"bootstrapServers": broker.bootstrap_servers, "topicPattern": rf"{prefix}\.(\w+)"}}
    spec.setdefault("schema", SCHEMA)
    spec.setdefault("table", {"name": "shop.{1}"})
    return sync_document(directory, source, **spec)


def _topics(broker: KafkaBroker, prefix: str, names: list[str], partitions: int = 2) -> list[str]:
    topics = [f"{prefix}.{name}" for name in names]
    for topic in topics:
        broker.create_topic(topic, partitions)
    return topics


def _committed(catalog: Any, name: str, topic: str, broker: KafkaBroker) -> bool:
    commits = [c for c in sink_commits(catalog.load_table(name), SINK) if c.frontier is not None]
    ends = {str(p): o for p, o in broker.end_offsets(topic).items()}
    return bool(commits) and commits[-1].frontier == {topic: ends}


def test_each_topic_lands_once_in_its_own_table_and_a_trigger_is_one_atomic_cut(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    prefix = f"db{uuid.uuid4().hex[:6]}"
    names = ["orders", "lines", "customers", "idle"]
    topics = _topics(kafka_broker, prefix, names)
    sizes = {"orders": 300, "lines": 900, "customers": 40}
    for name, count in sizes.items():
        produce_orders(kafka_broker, f"{prefix}.{name}", range(count))
    sync = parse_spec(_document(tmp_path, kafka_broker, prefix))
    catalog = catalog_of(sync)
    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: all(_committed(catalog, f"shop.{n}", f"{prefix}.{n}", kafka_broker) for n in sizes),
                           "every topic committed to its table", timeout=240)
        # A topic created while the sync runs is found by the pattern and gets its table.
        [late] = _topics(kafka_broker, prefix, ["returns"])
        produce_orders(kafka_broker, late, range(25))
        running.wait_until(lambda: _committed(catalog, "shop.returns", late, kafka_broker), "the new topic's table", timeout=240)
    for name, count in {**sizes, "returns": 25}.items():
        assert table_ids(catalog.load_table(f"shop.{name}")) == list(range(count)), name
    # An idle topic costs no table and no commit.
    assert ("shop", "idle") not in catalog.list_tables("shop")
    # Every data snapshot records its cut; the tables a trigger touched share one cut id, all atomic.
    cuts: dict[str, set[str]] = {}
    for name in [*sizes, "returns"]:
        table = catalog.load_table(f"shop.{name}")
        data = {c.snapshot_id for c in sink_commits(table, SINK) if c.kind == "data"}
        for snapshot in table.metadata.snapshots:
            if snapshot.snapshot_id in data:
                cut = json.loads(snapshot.summary.additional_properties[protocol.CUT])  # type: ignore[union-attr]
                assert cut["atomic"] is True
                cuts.setdefault(cut["id"], set()).add(name)
    assert any(len(tables) > 1 for tables in cuts.values()), cuts
    assert topics  # the idle topic exists and matched the pattern


def test_a_broker_unreachable_at_start_is_waited_for(tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A sync of a topic pattern started while nothing listens at its bootstrap address keeps listing the topics
    until the broker answers there, then syncs every record exactly once: those produced before it came up and
    after."""
    caplog.set_level(logging.WARNING, logger="icebergsync.source.kafka")
    prefix = f"db{uuid.uuid4().hex[:6]}"
    _topics(kafka_broker, prefix, ["a", "b"])
    produce_orders(kafka_broker, f"{prefix}.a", range(40))
    with contextlib.closing(LateBroker(kafka_broker)) as late:
        document = _document(tmp_path, kafka_broker, prefix)
        document["spec"]["source"]["kafka"]["bootstrapServers"] = late.bootstrap_servers
        sync = parse_spec(document)
        catalog = catalog_of(sync)
        with BackgroundJob(SyncJob(sync, 1, spark)) as running:
            running.wait_until(lambda: any("cannot read the topics" in r.getMessage() for r in caplog.records),
                               "the job to find the broker unreachable", timeout=120)
            late.open()
            produce_orders(kafka_broker, f"{prefix}.a", range(40, 60))
            produce_orders(kafka_broker, f"{prefix}.b", range(30))
            running.wait_until(lambda: all(_committed(catalog, f"shop.{n}", f"{prefix}.{n}", kafka_broker)
                                           for n in "ab"), "both tables caught up", timeout=240)
    assert table_ids(catalog.load_table("shop.a")) == list(range(60))
    assert table_ids(catalog.load_table("shop.b")) == list(range(30))


def test_restarts_and_upgrades_resume_each_table_from_its_own_frontier(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    prefix = f"db{uuid.uuid4().hex[:6]}"
    _topics(kafka_broker, prefix, ["a", "b", "c"])
    document = _document(tmp_path, kafka_broker, prefix)
    document["spec"]["source"]["kafka"]["maxRecordsPerTrigger"] = 200
    sync = parse_spec(document)
    catalog = catalog_of(sync)
    produce_orders(kafka_broker, f"{prefix}.a", range(500))
    produce_orders(kafka_broker, f"{prefix}.b", range(50))
    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: _committed(catalog, "shop.b", f"{prefix}.b", kafka_broker), "b committed")
    produce_orders(kafka_broker, f"{prefix}.b", range(50, 120))
    produce_orders(kafka_broker, f"{prefix}.c", range(70))
    for version in (1, 2):  # the same version restarted, then an upgrade
        with BackgroundJob(SyncJob(sync, version, spark)) as running:
            running.wait_until(lambda: all(_committed(catalog, f"shop.{n}", f"{prefix}.{n}", kafka_broker)
                                           for n in "abc"), "every table caught up", timeout=240)
        produce_orders(kafka_broker, f"{prefix}.c", range(70 + version * 10, 80 + version * 10))
    with BackgroundJob(SyncJob(sync, 2, spark)) as running:
        running.wait_until(lambda: _committed(catalog, "shop.c", f"{prefix}.c", kafka_broker), "c caught up")
    assert table_ids(catalog.load_table("shop.a")) == list(range(500))
    assert table_ids(catalog.load_table("shop.b")) == list(range(120))
    assert table_ids(catalog.load_table("shop.c")) == [*range(70), *range(80, 90), *range(90, 100)]
    # Each table's commits carry only its own topic's positions. Claims are lazy: version 2 claimed only c,
    # the one table that got records after the upgrade; a and b cost it no commit.
    for name, newest in {"a": 1, "b": 1, "c": 2}.items():
        commits = sink_commits(catalog.load_table(f"shop.{name}"), SINK)
        assert {topic for c in commits if c.frontier for topic in c.frontier} == {f"{prefix}.{name}"}
        assert commits[-1].writer.version == newest, name


def test_each_table_has_its_own_dead_letters_and_settings(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker) -> None:
    prefix = f"db{uuid.uuid4().hex[:6]}"
    _topics(kafka_broker, prefix, ["good", "mixed"], partitions=1)
    produce_orders(kafka_broker, f"{prefix}.good", range(30))
    produce_orders(kafka_broker, f"{prefix}.mixed", range(20))
    kafka_broker.produce(f"{prefix}.mixed", [("k", "{broken", 0), ("k", '{"id": "x"}', 0)])
    sync = parse_spec(_document(tmp_path, kafka_broker, prefix, deadLetter={"table": "shop.{1}_dlq"},
                                tables={"shop.mixed": {"partitionBy": ["bucket(4, id)"],
                                                       "properties": {"comment": "mixed"}}}))
    catalog = catalog_of(sync)
    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: all(_committed(catalog, f"shop.{n}", f"{prefix}.{n}", kafka_broker)
                                       for n in ("good", "mixed")), "both topics committed")
    assert table_ids(catalog.load_table("shop.good")) == list(range(30))
    assert table_ids(catalog.load_table("shop.mixed")) == list(range(20))
    dead = catalog.load_table("shop.mixed_dlq").scan().to_arrow()
    assert dead.num_rows == 2
    assert ("shop", "good_dlq") in catalog.list_tables("shop") and \
        catalog.load_table("shop.good_dlq").scan().to_arrow().num_rows == 0
    mixed = catalog.load_table("shop.mixed")
    assert [str(f.transform) for f in mixed.spec().fields] == ["bucket[4]"]
    assert mixed.metadata.properties["comment"] == "mixed"
    assert not catalog.load_table("shop.good").spec().fields


def _drop(directory: Path, name: str, ids: range) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    staging = directory / f".{name}"
    staging.write_text("".join(json.dumps({"id": i, "customer": f"c{i % 7}", "amount": i * 0.5}) + "\n" for i in ids))
    staging.rename(directory / name)  # moved into place whole, as files must be


def test_a_directory_per_table_of_the_files_source(tmp_path: Path, spark: SparkSession) -> None:
    inbox = tmp_path / "inbox"
    _drop(inbox / "orders", "0001.json", range(0, 40))
    _drop(inbox / "orders", "0002.json", range(40, 70))
    _drop(inbox / "lines", "0001.json", range(100))
    (inbox / "stray.json").write_text('{"id": 1}\n')  # not in a directory: no table's file
    document = sync_document(tmp_path, {"files": {"path": str(inbox), "maxFilesPerTrigger": 2}}, schema=SCHEMA,
                             table={"name": "shop.{topic}"}, deadLetter={"table": "shop.{topic}_dlq"})
    sync = parse_spec(document)
    catalog = catalog_of(sync)

    def holds_ids(name: str, count: int) -> bool:
        return table_ids(catalog.load_table(name)) == list(range(count))

    with BackgroundJob(SyncJob(sync, 1, spark)) as running:
        running.wait_until(lambda: holds_ids("shop.orders", 70) and holds_ids("shop.lines", 100), "both directories")
        _drop(inbox / "returns", "0001.json", range(5))  # a new directory is a new table
        _drop(inbox / "lines", "0002.json", range(100, 130))
        running.wait_until(lambda: holds_ids("shop.returns", 5) and holds_ids("shop.lines", 130), "the new files")
    _drop(inbox / "orders", "0003.json", range(70, 75))
    with BackgroundJob(SyncJob(sync, 2, spark)) as running:  # an upgrade resumes each directory where it was
        running.wait_until(lambda: holds_ids("shop.orders", 75), "orders after the upgrade")
    assert holds_ids("shop.lines", 130) and holds_ids("shop.returns", 5)
    assert sorted(catalog.list_tables("shop")) == sorted(
        ("shop", name) for name in ("orders", "lines", "returns", "orders_dlq", "lines_dlq", "returns_dlq"))
    for name, last in {"orders": "0003.json", "lines": "0002.json", "returns": "0001.json"}.items():
        commits = sink_commits(catalog.load_table(f"shop.{name}"), SINK)
        assert commits[-1].frontier == {name: {"after": last}}, name
