"""MariaDB change data capture: a real MariaDB through Debezium's MariaDB connector into ONE database-wide
sync, set up as examples/mariadb-debezium/ and docs/mysql-mariadb.md say, literally.

MariaDB 10.11 (Debian's packages, binary log in ROW format) is set up by the example's ``mariadb-setup.sql``;
Debezium's MariaDB connector runs with the example's ``debezium-connector.json`` (only where the database, the
broker and the offsets are differ); the sync is the example's ``icebergsync.yaml`` (no ``spec.schema``,
``table.name: shop.{1}`` over ``topicPattern``) on a SQLite catalog. A seeded workload writes every type of the
docs' table, NULLs, inserts, updates, deletes, primary-key updates and multi-table transactions, and runs
ADD, MODIFY (widening), DROP and RENAME COLUMN mid-stream; the job is SIGKILLed right after its first data
commit and right after a schema commit, each time restarted with a higher sink version. Then Apache Iceberg's
Spark runtime must return what ``SELECT *`` returns, row for row and value for value
(tests/integration/cdc_mariadb/tables.py), with no dead letter.

The pipeline runs once per module (:func:`pipeline`); each test checks one thing of its outcome. The workload's
seed is ``ICEBERGSYNC_MARIADB_SEED`` (default ``mariadb-cdc``): a seed gives one workload.
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pyiceberg.exceptions import NoSuchTableError
from pyspark.sql import SparkSession

from icebergsync import protocol
from icebergsync.spec import parse_spec
from spark_app.decoding.source_positions import TRUNCATED_NOTE
from spark_app.job.loop import SyncJob
from tests.infra.services import KafkaBroker
from tests.integration.cdc_mariadb.example import EXAMPLE, PASSWORD, example_sync, run_setup_sql
from tests.integration.cdc_mariadb.servers import MariaDB, connector_settings, start_debezium, start_mariadb
from tests.integration.cdc_mariadb.tables import SourceTable, iceberg_rows, mariadb_rows
from tests.integration.cdc_mariadb.workload import Workload
from tests.integration.sync_support import (
    BackgroundJob,
    catalog_of,
    job_process,
    kill_after_first_commit,
    sink_commits,
    source_settings,
    sync_document,
    write_spec,
)

PARTITIONS = 2


def sink_id(document: dict[str, Any]) -> str:
    return f"{document['metadata']['namespace']}/{document['metadata']['name']}"


def commits(document: dict[str, Any], table: str) -> list[Any]:
    try:
        return sink_commits(catalog_of(parse_spec(document)).load_table(document["spec"]["table"]["name"]
                                                                         .replace("{1}", table)), sink_id(document))
    except NoSuchTableError:
        return []


def message_key(table: SourceTable, key: tuple[Any, ...]) -> dict[str, Any]:
    """A key as Debezium's message key carries it (BIGINT UNSIGNED: a Connect Decimal, base64 of its bytes)."""
    def encode(name: str, value: Any) -> Any:
        if "BIGINT UNSIGNED" in table.columns[name]:
            return base64.b64encode(value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True)).decode()
        return value
    return {name: encode(name, part) for name, part in zip(table.key, key, strict=True)}


def wait_for_keys(broker: KafkaBroker, prefix: str, workload: Workload, marks: dict[str, tuple[Any, ...]]) -> None:
    """Until Debezium has written the change of each table's mark (the workload's last) to its topic."""
    deadline = time.monotonic() + 120
    for name, key in marks.items():
        expected = message_key(workload.tables[name], key)
        while not any(record.key is not None and json.loads(record.key)["payload"] == expected
                      for record in broker.consume(f"{prefix}.shop.{name}", timeout=10)):
            assert time.monotonic() < deadline, f"Debezium never wrote the change of {expected} to {name}'s topic"
            time.sleep(1)


def wait_for_snapshot(broker: KafkaBroker, topics: dict[str, str], workload: Workload) -> None:
    """Until Debezium's snapshot has written every seeded row (so the workload's later changes come from the binlog)."""
    deadline = time.monotonic() + 120
    for name, topic in topics.items():
        while sum(broker.end_offsets(topic).values()) < len(workload.keys[name]):
            assert time.monotonic() < deadline, f"Debezium's snapshot did not write every row of {name}"
            time.sleep(1)


def caught_up(document: dict[str, Any], broker: KafkaBroker, topics: dict[str, str]) -> bool:
    for table, topic in topics.items():
        done = commits(document, table)
        frontier = (done[-1].frontier or {}).get(topic, {}) if done else {}
        if any(int(frontier.get(str(p), 0)) != end for p, end in broker.end_offsets(topic).items()):
            return False
    return True


@dataclass
class Outcome:
    """What the pipeline left: the workload (the source's tables as they are now), the sync's document and the
    kinds of commit each kill came right after."""

    workload: Workload
    document: dict[str, Any]
    killed_after: list[str] = field(default_factory=list)
    connection: Any = None


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession,
             kafka_broker: KafkaBroker) -> Iterator[Outcome]:
    root = tmp_path_factory.mktemp("mariadb-cdc")
    for part in ("mariadb", "debezium", "sync"):
        (root / part).mkdir()
    mariadb = start_mariadb(root / "mariadb")
    debezium = None
    try:
        run_setup_sql(mariadb)
        connection = mariadb.connect(database="shop")
        workload = Workload(connection, random.Random(os.environ.get("ICEBERGSYNC_MARIADB_SEED", "mariadb-cdc")))
        workload.create()
        workload.seed(20)
        connector = connector_settings(EXAMPLE / "debezium-connector.json")
        prefix = connector["topic.prefix"]
        topics = {name: f"{prefix}.shop.{name}" for name in workload.tables}
        for topic in topics.values():
            kafka_broker.create_topic(topic, PARTITIONS)  # Kafka Connect's topic.creation.* does this for users
        debezium = start_debezium(root / "debezium", mariadb, kafka_broker, connector, connector["database.user"],
                                  PASSWORD)
        wait_for_snapshot(kafka_broker, topics, workload)
        document = example_sync(root / "sync", kafka_broker)
        outcome = Outcome(workload, document, connection=connection)
        spec_path = write_spec(root / "sync", document)
        workload.round()

        # Version 1, SIGKILLed right after its first data commit while the workload goes on.
        kill_after_first_commit(spec_path, lambda: any(c.kind == "data" for t in topics for c in commits(document, t)),
                                workload.go_on)
        outcome.killed_after.append(max((c for t in topics for c in commits(document, t)),
                                        key=lambda c: c.timestamp_ms).kind)
        workload.round()

        # Version 2, SIGKILLed right after the schema commit of an ADD COLUMN.
        with job_process(spec_path, 2, crash_at="schema-committed") as (process, log):
            deadline = time.monotonic() + 240
            while not any(c.writer.version == 2 for c in commits(document, "orders")):
                assert process.poll() is None, f"version 2 ended before fencing:\n{log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"version 2 did not fence within 240 s:\n{log.read_text()[-3000:]}"
                time.sleep(1)
            workload.add_column("orders", "coupon", "VARCHAR(16)")
            workload.round()
            assert process.wait(240) == -signal.SIGKILL, log.read_text()[-3000:]
        outcome.killed_after.append(commits(document, "orders")[-1].kind)

        workload.round()
        workload.modify_column("orders", "total", "DECIMAL(14,2)")
        workload.modify_column("order_lines", "qty", "BIGINT")
        workload.round()
        workload.drop_column("orders", "note")
        workload.round()
        workload.rename_column("order_lines", "sku", "product")
        workload.round()
        workload.truncate("order_lines")  # docs/connectors.md, "Truncates": binlog positions order it
        workload.round()
        workload.float_extremes()  # last: no later change deletes or moves them
        wait_for_keys(kafka_broker, prefix, workload, workload.last_keys())

        # Version 3 until every table's frontier is at its topic's end.
        with BackgroundJob(SyncJob(parse_spec(document), 3, spark)) as running:
            running.wait_until(lambda: caught_up(document, kafka_broker, topics), "every table caught up", 240)
        yield outcome
        connection.close()
    finally:
        if debezium is not None:
            debezium.stop()
        mariadb.server.stop()


def iceberg_table(outcome: Outcome, name: str) -> Any:
    return catalog_of(parse_spec(outcome.document)).load_table(f"shop.{name}")


def dead_letters(outcome: Outcome, name: str) -> list[dict[str, Any]]:
    try:
        return catalog_of(parse_spec(outcome.document)).load_table(f"shop.{name}_dead_letters").scan().to_arrow().to_pylist()
    except NoSuchTableError:
        return []


def item_of(dead_letter: dict[str, Any]) -> tuple[int] | None:
    """The items key a dead letter's change event is about (Debezium's base64 Decimal), if it has one."""
    try:
        change = json.loads(dead_letter["payload"])["payload"]
        row = change["after"] or change["before"]
        return (int.from_bytes(base64.b64decode(row["id"]), "big", signed=True),)
    except (TypeError, KeyError, ValueError):
        return None


def test_the_job_was_killed_after_a_data_commit_and_after_a_schema_commit(pipeline: Outcome) -> None:
    assert pipeline.killed_after == ["data", "schema"]


@pytest.mark.parametrize("name", ["items", "orders", "order_lines"])
def test_iceberg_returns_what_select_star_returns(pipeline: Outcome, spark: SparkSession, name: str) -> None:
    """Row for row and value for value on MariaDB's current columns; a column the source dropped or renamed stays in
    Iceberg, null in every row written after the change, its old value in the rows not written since (a renamed
    column's new name is null there: Debezium sends no event for rows a DDL does not rewrite)."""
    table = pipeline.workload.tables[name]
    expected = mariadb_rows(pipeline.connection, table)
    actual = iceberg_rows(spark, iceberg_table(pipeline, name).metadata_location, table)
    assert len(expected) >= 15, f"{name}: the workload left too few rows to compare"
    assert sorted(actual) == sorted(expected), f"{name}: the keys differ"
    renamed = {old: new for old, new in (("sku", "product"),) if name == "order_lines"}
    for key, row in expected.items():
        got = dict(actual[key])
        for old, new in renamed.items():
            if key not in pipeline.workload.written_after[f"{name}.{old}"]:
                assert got[new] is None, f"{name} {key}: {new} holds a value no event carried"
                got[new], got[old] = got[old], None
        current = {column: got[column] for column in row}
        assert current == row, f"{name} {key}:\n iceberg {current}\n mariadb {row}"[:3000]
        for gone in table.gone:
            if key in pipeline.workload.written_after[f"{name}.{gone}"]:
                assert got[gone] is None, f"{name} {key}: {gone} was written after the source dropped it"


EXPECTED_COLUMNS = {
    "items": {
        "id": "decimal(20, 0)", "i8": "int", "u8": "int", "i16": "int", "u16": "int", "i24": "int", "u24": "int",
        "i32": "int", "u32": "long", "i64": "long", "u64": "decimal(20, 0)", "price": "decimal(12, 2)",
        "exact": "decimal(30, 10)", "score": "float", "weight": "double", "flags": "binary", "flag": "boolean",
        "active": "int", "code": "string", "name": "string", "bio": "string", "avatar": "binary", "born": "date",
        "seen": "timestamp", "updated": "timestamptz", "opens": "long", "made": "int", "size": "string",
        "tags": "string", "prefs": "string", "note": "string"},
    "orders": {"id": "int", "customer": "string", "total": "decimal(14, 2)", "status": "string",
               "created": "timestamp", "note": "string", "coupon": "string"},
    "order_lines": {"order_id": "int", "line_no": "int", "sku": "string", "qty": "long", "price": "decimal(10, 3)",
                    "product": "string"},
}


@pytest.mark.parametrize("name", list(EXPECTED_COLUMNS))
def test_columns_are_the_documented_types(pipeline: Outcome, name: str) -> None:
    """docs/mysql-mariadb.md's type table, with the DDL applied: added and renamed columns last, widened in place."""
    schema = iceberg_table(pipeline, name).schema()
    assert {f.name: str(f.field_type) for f in schema.fields} == EXPECTED_COLUMNS[name]
    assert list(EXPECTED_COLUMNS[name]) == [f.name for f in schema.fields]


@pytest.mark.parametrize("name", ["items", "orders", "order_lines"])
def test_no_dead_letters(pipeline: Outcome, name: str) -> None:
    rows = dead_letters(pipeline, name)
    assert rows == [], f"{len(rows)} dead letters, e.g. {[(r['reason'], r['payload']) for r in rows[:2]]}"[:3000]


def test_the_examples_settings_leave_no_source_settings_warning(pipeline: Outcome) -> None:
    """The example's connector and sync are what docs/mysql-mariadb.md requires: the newest data commit of every
    table saw no event showing a documented Debezium setting missing (the SourceSettings condition is True)."""
    verdict = source_settings(pipeline.document, [f"shop.{name}" for name in pipeline.workload.tables])
    assert (verdict.ok, verdict.reason) == (True, "AsDocumented"), verdict.message


def test_the_truncate_was_applied_once_at_its_binlog_position(pipeline: Outcome) -> None:
    """``TRUNCATE TABLE order_lines`` (its rows before it gone, the lines after it kept: the row comparison) was one
    commit of order_lines noted with its binlog position (file number, pos, row), and no other table's."""
    def truncated(name: str) -> list[list[int]]:
        notes = [json.loads(s.summary.additional_properties.get(protocol.SOURCE_NOTES, "{}"))
                 for s in iceberg_table(pipeline, name).snapshots() if s.summary]
        return [note[TRUNCATED_NOTE] for note in notes if TRUNCATED_NOTE in note]

    assert pipeline.workload.truncates == 1
    [position] = truncated("order_lines")
    assert len(position) == 3 and position[0] >= 1
    assert truncated("orders") == truncated("items") == []


def test_float_and_double_extremes_land(pipeline: Outcome, spark: SparkSession) -> None:
    """FLOAT and DOUBLE at their largest magnitude (both signs), smallest normal and smallest subnormal: stored exactly
    (Debezium sends -3.4028235E38, which as a double is just beyond float32's range: it is float32's extreme)."""
    table = pipeline.workload.tables["items"]
    expected = mariadb_rows(pipeline.connection, table)
    actual = iceberg_rows(spark, iceberg_table(pipeline, "items").metadata_location, table)
    keys = pipeline.workload.float_extreme_keys
    assert [row["reason"] for row in dead_letters(pipeline, "items") if item_of(row) in keys] == []
    assert {key: actual.get(key) for key in keys} == {key: expected[key] for key in keys}


def test_what_debezium_sends_for_values_mariadb_holds_but_it_cannot_carry(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker, mariadb: MariaDB) -> None:
    """docs/mysql-mariadb.md's warnings, as Debezium 3.5.0's MariaDB connector behaves (the example's settings, but
    ``bigint.unsigned.handling.mode`` left at its default ``long`` and topics of their own): a row read by the
    snapshot and the same row streamed from the binlog. Zero dates arrive as null, or as the column's DEFAULT when
    it is NOT NULL (a wrong value nothing in the event betrays, so the sync stores it); an ENUM label outside the
    Basic Multilingual Plane is ``?`` in the schema's ``allowed`` and in streamed values; the snapshot sends a FLOAT
    as MariaDB prints it (6 significant digits); a BIGINT UNSIGNED above 2^63 wraps negative."""
    run_setup_sql(mariadb)
    connection = mariadb.connect(database="shop")
    row = {"zd": "0000-00-00", "zdn": "0000-00-00", "zdt": "0000-00-00 00:00:00", "mood": "😀", "score": 1.2345678,
           "big": 2**64 - 1}
    insert = f"INSERT INTO edges (id, {', '.join(row)}) VALUES (%s{', %s' * len(row)})"
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION sql_mode = ''")  # MariaDB's default mode (strict) takes zero dates too
        cursor.execute("CREATE TABLE edges (id INT PRIMARY KEY, zd DATE NULL, zdn DATE NOT NULL DEFAULT '2000-01-01', "
                       "zdt DATETIME NULL, mood ENUM('ok','😀'), score FLOAT, big BIGINT UNSIGNED)")
        cursor.execute(insert, [1, *row.values()])
    connector = {key: value for key, value in connector_settings(EXAMPLE / "debezium-connector.json").items()
                 if key != "bigint.unsigned.handling.mode"}
    connector.update({"topic.prefix": "edges1", "schema.history.internal.kafka.topic": "edges1.schema-history"})
    kafka_broker.create_topic("edges1.shop.edges", 1)
    (tmp_path / "debezium").mkdir()
    debezium = start_debezium(tmp_path / "debezium", mariadb, kafka_broker, connector, "debezium", PASSWORD)
    try:
        for rows in (1, 2):  # the snapshot's row, then the same row from the binlog
            if rows == 2:
                with connection.cursor() as cursor:
                    cursor.execute("SET SESSION sql_mode = ''")
                    cursor.execute(insert, [2, *row.values()])
                    cursor.execute("SELECT zd, zdn, zdt FROM edges")
                    assert set(cursor.fetchall()) == {("0000-00-00", "0000-00-00", "0000-00-00 00:00:00")}
            deadline = time.monotonic() + 120
            while len(records := kafka_broker.consume("edges1.shop.edges", timeout=10)) < rows:
                assert time.monotonic() < deadline, f"Debezium did not send row {rows}"
                time.sleep(1)
        events = {event["payload"]["op"]: event for event in (json.loads(r.value) for r in records if r.value)}
        after = {op: events[op]["payload"]["after"] for op in ("r", "c")}
        fields = {f["field"]: f for f in events["c"]["schema"]["fields"][1]["fields"]}
        assert fields["mood"]["parameters"]["allowed"] == "ok,?"
        assert {op: (a["zd"], a["zdn"], a["zdt"]) for op, a in after.items()} == {"r": (None, 10957, None),
                                                                               "c": (None, 10957, None)}
        assert {op: (a["mood"], a["score"], a["big"]) for op, a in after.items()} == {
            "r": ("😀", 1.23457, -1), "c": ("?", 1.2345678, -1)}
        # The sync stores what arrived: nothing in these events tells them from real values.
        document = sync_document(tmp_path / "sync", {"kafka": {"bootstrapServers": kafka_broker.bootstrap_servers,
                                                               "topic": "edges1.shop.edges"}},
                                 name="edges", table={"name": "shop.edges", "key": ["id"]},
                                 changes={"format": "debezium"}, deadLetter={"table": "shop.edges_dead_letters"})
        with BackgroundJob(SyncJob(parse_spec(document), 1, spark)) as running:
            running.wait_until(lambda: caught_up(document, kafka_broker, {"edges": "edges1.shop.edges"}), "edges", 120)
        table = catalog_of(parse_spec(document)).load_table("shop.edges")
        stored = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
        assert {key: (r["zd"], r["zdn"], r["zdt"], r["mood"], r["big"]) for key, r in stored.items()} == {
            1: (None, date(2000, 1, 1), None, "😀", -1), 2: (None, date(2000, 1, 1), None, "?", -1)}
        assert [stored[1]["score"], stored[2]["score"]] == [float(np.float32(1.23457)), float(np.float32(1.2345678))]
        assert not catalog_of(parse_spec(document)).table_exists("shop.edges_dead_letters") or \
            catalog_of(parse_spec(document)).load_table("shop.edges_dead_letters").scan().to_arrow().num_rows == 0
    finally:
        debezium.stop()
        connection.close()
