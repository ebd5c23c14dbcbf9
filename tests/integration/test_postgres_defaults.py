"""PostgreSQL's DEFAULTs through Debezium and Kafka into Iceberg, on the real servers.

* NULL vs DEFAULT: Kafka's JsonConverter has ``replace.null.with.default=true`` by default and writes a column's
  default in place of an explicit NULL. With the settings of ``examples/postgres-debezium/debezium-connector.json``
  (which turn it off; only the connection, slot and offset-storage keys are the test's own) an explicit NULL
  stays NULL in the Iceberg table; with the converter's default it arrives as the default (so the test can tell).
* ``ALTER TABLE … ADD COLUMN … DEFAULT`` on a format-version 3 table: PostgreSQL writes no WAL for the existing
  rows; the column the sync adds gets the default as its initial-default, so Apache Iceberg's Spark runtime returns
  what ``SELECT *`` returns, the old rows included (but where docs/connectors.md says a default is not taken).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from icebergsync.spec import parse_spec
from spark_app.job.loop import SyncJob
from tests.infra.services import REPO_ROOT, KafkaBroker
from tests.integration.cdc_postgres.servers import Postgres, start_debezium
from tests.integration.sync_support import BackgroundJob, catalog_of, sink_commits, sync_document

EXAMPLE = REPO_ROOT / "examples" / "postgres-debezium"
# What the test sets itself: where the database is, the connector's name, topics, slot and publication (the
# embedded runner's offsets are its own, start_debezium), and a Connect worker's topic creation.
_OWN = ("name", "database.hostname", "database.port", "database.user", "database.password", "database.dbname",
        "topic.prefix", "table.include.list", "slot.name", "publication.name", "publication.autocreate.mode")


def example_settings(**changes: str | None) -> dict[str, str]:
    """The example connector's settings but those the test sets itself; ``changes`` set (None: remove) keys."""
    config: dict[str, str] = json.loads((EXAMPLE / "debezium-connector.json").read_text())["config"]
    settings = {key: value for key, value in config.items()
                if key not in _OWN and not key.startswith("topic.creation.")}
    for key, value in changes.items():
        key = key.replace("__", ".")
        if value is None:
            settings.pop(key, None)
        else:
            settings[key] = value
    return settings


def execute(postgres: Postgres, *statements: str) -> None:
    connection = postgres.connect()
    try:
        with connection, connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
    finally:
        connection.close()


def select_star(postgres: Postgres, table: str) -> dict[int, dict[str, Any]]:
    connection = postgres.connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT * FROM {table}")
            names = [d.name for d in cursor.description]
            return {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}
    finally:
        connection.close()


def spark_rows(spark: SparkSession, metadata_location: str) -> dict[int, dict[str, Any]]:
    rows = {}
    for row in spark.read.format("iceberg").load(metadata_location).collect():
        assert row["id"] not in rows, f"key {row['id']} is in the table twice"
        rows[row["id"]] = row.asDict()
    return rows


def keyed_sync(directory: Path, broker: KafkaBroker, topic: str, name: str,
               properties: dict[str, str] | None = None) -> dict[str, Any]:
    """A keyed Debezium sync of ``topic`` into table ``name`` without spec.schema: its columns come from the records."""
    directory.mkdir(parents=True, exist_ok=True)
    return sync_document(directory, {"kafka": {"bootstrapServers": broker.bootstrap_servers, "topic": topic}},
                         name=name.split(".")[-1].replace("_", "-"),
                         table={"name": name, "key": ["id"], "properties": properties or {}},
                         changes={"format": "debezium"}, deadLetter={"table": f"{name}_dlq"})


def caught_up(document: dict[str, Any], broker: KafkaBroker, topic: str) -> bool:
    table = catalog_of(parse_spec(document)).load_table(document["spec"]["table"]["name"])
    commits = sink_commits(table, f"test/{document['metadata']['name']}")
    frontier = (commits[-1].frontier or {}).get(topic, {}) if commits else {}
    return all(int(frontier.get(str(p), 0)) == end for p, end in broker.end_offsets(topic).items())


def wait_for_id(broker: KafkaBroker, topic: str, key: int, timeout: float = 120) -> None:
    """Until Debezium has written a change of row ``key`` (the workload's last) to ``topic``."""
    def keys() -> set[Any]:
        found = set()
        for record in broker.consume(topic, timeout=10):
            parsed = json.loads(record.key or b"null")
            found.add((parsed.get("payload", parsed) if isinstance(parsed, dict) else {}).get("id"))
        return found

    deadline = time.monotonic() + timeout
    while key not in keys():
        assert time.monotonic() < deadline, f"Debezium never wrote the change of id {key} to {topic}"
        time.sleep(1)


def dead_letters(document: dict[str, Any]) -> list[dict[str, Any]]:
    catalog = catalog_of(parse_spec(document))
    name = document["spec"]["deadLetter"]["table"]
    return catalog.load_table(name).scan().to_arrow().to_pylist() if catalog.table_exists(name) else []


def test_an_explicit_null_in_a_column_with_a_default_stays_null(tmp_path: Path, spark: SparkSession,
                                                              kafka_broker: KafkaBroker, postgres: Postgres) -> None:
    execute(postgres, (EXAMPLE / "postgres-setup.sql").read_text(),
            "ALTER TABLE customers ALTER COLUMN notes SET DEFAULT 'n/a', ALTER COLUMN balance SET DEFAULT 10.00, "
            "ALTER COLUMN active SET DEFAULT true",
            "INSERT INTO customers (id, email, notes, balance, active) VALUES (1, 'a@x', NULL, NULL, NULL)")
    configurations = {"example": example_settings(),  # replace.null.with.default=false
                      "converter-default": example_settings(key__converter__replace__null__with__default=None,
                                                            value__converter__replace__null__with__default=None)}
    servers, documents = [], {}
    try:
        for name, settings in configurations.items():
            prefix = f"pg{uuid.uuid4().hex[:8]}"
            topic = f"{prefix}.public.customers"
            kafka_broker.create_topic(topic, 2)
            kafka_broker.create_topic(f"{prefix}.transaction", 1)  # the example's transaction metadata
            (tmp_path / name).mkdir()
            servers.append(start_debezium(tmp_path / name, postgres, kafka_broker, prefix, ["customers"], {
                **settings, "publication.name": "icebergsync_customers", "publication.autocreate.mode": "disabled"}))
            documents[name] = (topic, keyed_sync(tmp_path / name / "sync", kafka_broker, topic, f"cdc.{name.replace('-', '_')}"))
        execute(postgres,
                "INSERT INTO customers (id, email, notes, balance, active) VALUES (2, 'b@x', NULL, NULL, NULL)",
                "INSERT INTO customers (id, email) VALUES (3, 'c@x')",  # omitted: PostgreSQL's default
                "INSERT INTO customers (id, email, notes, balance, active) VALUES (4, 'd@x', 'mine', 1.50, false)",
                "UPDATE customers SET notes = NULL, balance = NULL WHERE id = 4",
                "UPDATE customers SET email = 'a2@x' WHERE id = 1",
                "INSERT INTO customers (id, email) VALUES (5, 'last@x')")
        expected = select_star(postgres, "customers")
        assert [expected[i]["notes"] for i in (1, 2, 3, 4)] == [None, None, "n/a", None]
        for topic, document in documents.values():
            wait_for_id(kafka_broker, topic, 5)
            with BackgroundJob(SyncJob(parse_spec(document), 1, spark)) as running:
                running.wait_until(lambda d=document, t=topic: caught_up(d, kafka_broker, t),  # type: ignore[misc]
                                   f"{topic} caught up", 180)
            assert dead_letters(document) == []
        tables = {name: catalog_of(parse_spec(document)).load_table(document["spec"]["table"]["name"])
                  for name, (_, document) in documents.items()}
        columns = ("notes", "balance", "active")
        example = spark_rows(spark, tables["example"].metadata_location)
        assert {i: {c: example[i][c] for c in columns} for i in expected} == {
            i: {c: row[c] for c in columns} for i, row in expected.items()}
        replaced = spark_rows(spark, tables["converter-default"].metadata_location)
        # the JsonConverter's default turns each explicit NULL into the column's default: silently wrong
        assert {i: {c: replaced[i][c] for c in columns} for i in (1, 2, 4)} == {
            1: {"notes": "n/a", "balance": Decimal("10.00"), "active": True},
            2: {"notes": "n/a", "balance": Decimal("10.00"), "active": True},
            4: {"notes": "n/a", "balance": Decimal("10.00"), "active": False}}
        assert configurations["example"]["value.converter.replace.null.with.default"] == "false"
        assert configurations["example"]["key.converter.replace.null.with.default"] == "false"
    finally:
        for server in servers:
            server.stop()


def test_add_column_with_a_default_on_a_format_3_table_gives_older_rows_the_default(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker, postgres: Postgres,
        caplog: pytest.LogCaptureFixture) -> None:
    execute(postgres, "CREATE TABLE items (id bigint PRIMARY KEY, name text, qty integer)",
            "INSERT INTO items SELECT i, 'item ' || i, i * 10 FROM generate_series(1, 6) AS i")  # Debezium's snapshot
    prefix = f"pg{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.public.items"
    kafka_broker.create_topic(topic, 2)
    kafka_broker.create_topic(f"{prefix}.transaction", 1)  # the example's transaction metadata
    (tmp_path / "debezium").mkdir()
    debezium = start_debezium(tmp_path / "debezium", postgres, kafka_broker, prefix, ["items"], example_settings())
    try:
        document = keyed_sync(tmp_path / "sync", kafka_broker, topic, "cdc.items",
                              properties={"format-version": "3"})
        with caplog.at_level(logging.WARNING, "icebergsync.job"), \
                BackgroundJob(SyncJob(parse_spec(document), 1, spark)) as running:
            execute(postgres, "INSERT INTO items VALUES (7, 'seven', 70), (8, 'eight', NULL)",
                    "UPDATE items SET qty = 21 WHERE id = 2")
            wait_for_id(kafka_broker, topic, 8)
            running.wait_until(lambda: caught_up(document, kafka_broker, topic), "the rows before the ALTER", 180)
            execute(postgres, "ALTER TABLE items ADD COLUMN c integer DEFAULT 7, ADD COLUMN t text DEFAULT 'hello', "
                    "ADD COLUMN n numeric(10,2) DEFAULT 12.50, ADD COLUMN d date DEFAULT '2024-03-01', "
                    "ADD COLUMN z integer DEFAULT 0")
            execute(postgres, "INSERT INTO items (id, name) VALUES (9, 'nine')",  # the defaults
                    "INSERT INTO items VALUES (10, 'ten', 100, NULL, NULL, NULL, '2025-01-02', NULL)",
                    "INSERT INTO items VALUES (11, 'eleven', 110, 3, 'x', 1.25, NULL, 5)",
                    "UPDATE items SET name = 'three' WHERE id = 3",  # the update carries the defaults
                    "UPDATE items SET c = NULL, t = 'four' WHERE id = 4",
                    "INSERT INTO items (id, name) VALUES (12, 'last')")
            wait_for_id(kafka_broker, topic, 12)
            running.wait_until(lambda: caught_up(document, kafka_broker, topic), "the rows after the ALTER", 180)
        assert dead_letters(document) == []
        table = catalog_of(parse_spec(document)).load_table("cdc.items")
        assert table.metadata.format_version == 3
        fields = {f.name: f for f in table.schema().fields}
        assert {name: (fields[name].initial_default, fields[name].write_default) for name in "ctndz"} == {
            "c": (7, 7), "t": ("hello", "hello"), "d": (date(2024, 3, 1), date(2024, 3, 1)),
            "n": (None, None), "z": (None, None)}  # a decimal and the zero of a type take no default
        warned = " ".join(record.getMessage() for record in caplog.records if record.levelno == logging.WARNING)
        assert "new column 'n'" in warned and "apache/iceberg#16502" in warned
        assert "new column 'z'" in warned and "zero of its type" in warned

        expected = select_star(postgres, "items")
        actual = spark_rows(spark, table.metadata_location)
        assert sorted(actual) == sorted(expected) == list(range(1, 13))
        untouched = {1, 2, 5, 6, 7, 8}  # no change since the ALTER: the table holds them in files without c..z
        assert {i: (expected[i]["c"], expected[i]["t"], expected[i]["n"], expected[i]["z"]) for i in untouched} == {
            i: (7, "hello", Decimal("12.50"), 0) for i in untouched}
        for key, row in expected.items():
            documented = {"n": None, "z": None} if key in untouched else {}  # old rows read null there
            assert actual[key] == {**row, **documented}, f"id {key}:\n iceberg  {actual[key]}\n postgres {row}"
        scanned = {row["id"]: row for row in table.scan().to_arrow().to_pylist()}
        assert {i: (scanned[i]["c"], scanned[i]["t"], scanned[i]["d"]) for i in expected} == {
            i: (row["c"], row["t"], row["d"]) for i, row in expected.items()}
    finally:
        debezium.stop()
