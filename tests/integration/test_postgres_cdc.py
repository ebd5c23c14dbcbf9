"""A real PostgreSQL through Debezium into Iceberg.

PostgreSQL 15 (Debian's packages, ``wal_level=logical``) runs an application-like workload on three
tables (a bigint key, a composite key, a uuid key; every common type, NULLs, a TOASTed text, primary-key
updates, multi-row transactions) and a fourth, ``documents``, whose large TOASTed text most updates leave
untouched under REPLICA IDENTITY DEFAULT: Debezium sends ``__debezium_unavailable_value`` and the sync
keeps the stored value. Debezium's PostgreSQL connector (pgoutput, embedded engine) writes
its JSON change events to the suite's Kafka broker, one topic of two partitions per table, and a keyed
IcebergSync per table reads them; the jobs of ``customers`` and ``documents`` are SIGKILLed mid-stream
and restarted with a higher version. Acceptance: once every sync has caught up, Apache Iceberg's Spark reader returns
exactly what ``SELECT * FROM`` the PostgreSQL table returns, row for row and value for value
(normalized per type: tests/integration/cdc_postgres/tables.py), and no record is a dead letter.

Run for each Debezium configuration of :data:`VARIANTS` (with the records' schema and Debezium's
default type handling; without it, decimals and temporal values as text, and transaction metadata on).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from icebergsync.spec import parse_spec
from spark_app.decoding.changes import UNAVAILABLE
from spark_app.job.loop import SyncJob
from tests.infra.services import KafkaBroker
from tests.integration.cdc_postgres.progress import (
    caught_up,
    dead_letters,
    sink_id,
    wait_for_key,
)
from tests.integration.cdc_postgres.schema_changes import ACCOUNTS, EvolvingWorkload
from tests.integration.cdc_postgres.schema_changes import iceberg_rows as schema_iceberg_rows
from tests.integration.cdc_postgres.schema_changes import postgres_rows as schema_postgres_rows
from tests.integration.cdc_postgres.servers import Postgres, start_debezium, wait_streaming
from tests.integration.cdc_postgres.tables import (
    COLLECTIONS,
    CUSTOMERS,
    DOCUMENTS,
    TABLES,
    VARIANTS,
    SourceTable,
    Variant,
    postgres_rows,
    spark_rows,
)
from tests.integration.cdc_postgres.workload import Workload
from tests.integration.sync_support import (
    BackgroundJob,
    catalog_of,
    holds,
    job_process,
    kill_after_first_commit,
    sink_commits,
    source_settings,
    sync_document,
    write_spec,
)

PARTITIONS = 2


def topic_of(prefix: str, table: SourceTable) -> str:
    return f"{prefix}.public.{table.name}"


def sync_of(directory: Path, broker: KafkaBroker, prefix: str, table: SourceTable, variant: Variant) -> dict[str, Any]:
    """A keyed Debezium sync of one table's topic into ``cdc.<table>`` (SQLite catalog under ``directory``)."""
    directory.mkdir(parents=True, exist_ok=True)
    return sync_document(directory, {"kafka": {"bootstrapServers": broker.bootstrap_servers,
                                               "topic": topic_of(prefix, table)}},
                         name=table.name.replace("_", "-"), schema=table.spec_schema(variant),
                         table={"name": f"cdc.{table.name}", "key": table.key}, changes={"format": "debezium"},
                         deadLetter={"table": f"cdc.{table.name}_dlq"})


def kill_mid_stream(spec_path: Path, document: dict[str, Any], workload: Workload,
                    meanwhile: Callable[[], None] | None = None) -> None:
    """Run the job (version 1) in a process of its own while the workload goes on (``meanwhile``, by default
    :meth:`Workload.go_on`); SIGKILL it as soon as its first data commit has landed."""
    catalog = catalog_of(parse_spec(document))

    def committed_data() -> bool:
        commits = sink_commits(catalog.load_table(document["spec"]["table"]["name"]), sink_id(document))
        return any(commit.kind == "data" for commit in commits)

    kill_after_first_commit(spec_path, committed_data, meanwhile or workload.go_on)


@pytest.mark.parametrize("variant", VARIANTS, ids=[variant.name for variant in VARIANTS])
def test_iceberg_returns_what_select_star_returns(tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker,
                                                  postgres: Postgres, variant: Variant) -> None:
    connection = postgres.connect()
    workload = Workload(connection, random.Random(f"postgres-cdc-{variant.name}"))
    workload.create()
    workload.create_documents()
    workload.snapshot_rows()
    tables = [*TABLES, DOCUMENTS]
    killed = (CUSTOMERS, DOCUMENTS)
    prefix = f"pg{uuid.uuid4().hex[:8]}"
    for table in tables:
        kafka_broker.create_topic(topic_of(prefix, table), PARTITIONS)
    kafka_broker.create_topic(f"{prefix}.transaction", 1)  # BEGIN/END records, with transaction metadata on
    (tmp_path / "debezium").mkdir()
    debezium = start_debezium(tmp_path / "debezium", postgres, kafka_broker, prefix, [t.name for t in tables],
                              variant.settings)
    try:
        documents = {table.name: sync_of(tmp_path / table.name, kafka_broker, prefix, table, variant) for table in tables}
        workload.round()
        workload.documents_round()
        for table in killed:
            kill_mid_stream(write_spec(tmp_path / table.name, documents[table.name]), documents[table.name], workload)
        workload.round()
        workload.documents_round()
        last = {**workload.last_row(), DOCUMENTS.name: workload.last_document()}
        for table in tables:
            topic = topic_of(prefix, table)
            wait_for_key(kafka_broker, topic, dict(zip(table.key, last[table.name], strict=True)))
            document = documents[table.name]
            version = 2 if table in killed else 1
            with BackgroundJob(SyncJob(parse_spec(document), version, spark)) as running:
                running.wait_until(lambda d=document, t=topic: caught_up(d, kafka_broker, t),  # type: ignore[misc]
                                   f"{table.name} caught up", 180)
        placeholders = [record.value for record in kafka_broker.consume(topic_of(prefix, DOCUMENTS), timeout=10)
                        if record.value and UNAVAILABLE.encode() in record.value]
        assert len(placeholders) >= 10, "Debezium sent too few unchanged TOASTed values to carry"
        if variant.settings.get("provide.transaction.metadata") == "true":
            assert all(json.loads(value)["transaction"]["id"] for value in placeholders)
        for table in tables:
            assert_equals_select_star(spark, connection, documents[table.name], table, variant)
            # The docs' value.converter.schemas.enable=true: without it a sync that follows the source's schema (the
            # default spec.schemaEvolution) warns, naming the setting (the SourceSettings condition)
            verdict = source_settings(documents[table.name], [f"cdc.{table.name}"])
            assert (verdict.ok, verdict.reason) == ((True, "AsDocumented") if variant.schemas
                                                    else (False, "RecordsWithoutSchema")), verdict.message
    finally:
        connection.close()
        debezium.stop()


@contextlib.contextmanager
def documents_sync(tmp_path: Path, kafka_broker: KafkaBroker, postgres: Postgres, seed: str, settings: dict[str, str],
                   max_records: int) -> Iterator[tuple[Workload, dict[str, Any], str]]:
    """The ``documents`` table (REPLICA IDENTITY DEFAULT, large bodies) captured by Debezium with ``settings`` (and
    the records' schema, transaction metadata), and a sync of it as the docs say for key moves and truncates: no
    ``spec.schema``, ``spec.changes.transactions``, at most ``max_records`` a trigger. Yields (workload, sync, topic)."""
    connection = postgres.connect()
    workload = Workload(connection, random.Random(seed))
    workload.create_documents()
    prefix = f"pg{uuid.uuid4().hex[:8]}"
    topic = topic_of(prefix, DOCUMENTS)
    kafka_broker.create_topic(topic, PARTITIONS)
    kafka_broker.create_topic(f"{prefix}.transaction", 1)
    (tmp_path / "debezium").mkdir()
    debezium = start_debezium(tmp_path / "debezium", postgres, kafka_broker, prefix, [DOCUMENTS.name],
                              {"converter.schemas.enable": "true", "provide.transaction.metadata": "true", **settings})
    try:
        wait_streaming(debezium)  # a TRUNCATE is a table rewrite: a snapshot still running would find no row
        document = sync_of(tmp_path / "documents", kafka_broker, prefix, DOCUMENTS, VARIANTS[0])
        document["spec"]["source"]["kafka"]["maxRecordsPerTrigger"] = max_records
        document["spec"]["changes"]["transactions"] = {"topic": f"{prefix}.transaction"}
        del document["spec"]["schema"]  # created from the records, as the example does
        yield workload, document, topic
    finally:
        connection.close()
        debezium.stop()


def catch_up(spark: SparkSession, kafka_broker: KafkaBroker, workload: Workload, document: dict[str, Any],
             topic: str) -> None:
    """Once Debezium sent the workload's last change: a job of version 2 until the sync's frontier is at the end."""
    wait_for_key(kafka_broker, topic, {"id": workload.last_document()[0]})
    with BackgroundJob(SyncJob(parse_spec(document), 2, spark)) as running:
        running.wait_until(lambda: caught_up(document, kafka_broker, topic), "documents caught up", 180)


def test_primary_key_updates_keep_unchanged_toasted_values_without_replica_identity_full(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker, postgres: Postgres) -> None:
    """Under REPLICA IDENTITY DEFAULT a primary-key update of a row whose ~16 KB body is unchanged reaches
    Kafka as a delete of the old key and a create of the new key holding Debezium's placeholder. Configured as
    docs/connectors.md ("Primary-key updates") says (transaction metadata on, ``spec.changes.transactions``, so
    both halves are always in one trigger, here of at most 5 records), the new key keeps the old key's body; the
    job is killed mid-stream and restarted; Spark's rows equal ``SELECT *`` and nothing is a dead letter."""
    with documents_sync(tmp_path, kafka_broker, postgres, "postgres-key-moves", {}, 5) as (workload, document, topic):
        workload.move_documents()
        workload.documents_round()
        kill_mid_stream(write_spec(tmp_path / "documents", document), document, workload, workload.move_documents)
        workload.move_documents()
        workload.move_documents()
        catch_up(spark, kafka_broker, workload, document, topic)
        creates = [json.loads(record.value)["payload"] for record in kafka_broker.consume(topic, timeout=10)
                   if record.value and UNAVAILABLE.encode() in record.value]
        assert sum(create["op"] == "c" for create in creates) >= 10, "too few key moves with an unchanged body"
        assert_equals_select_star(spark, workload.connection, document, DOCUMENTS, VARIANTS[0])


def test_truncates_empty_the_table_where_postgres_did(tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker,
                                                      postgres: Postgres) -> None:
    """With ``skipped.operations=none`` (as the example sets it) a TRUNCATE reaches the sync, which empties
    the table at it: alone, and inside a transaction between inserts; updates and key moves around it; the job
    killed mid-stream. Spark's rows equal ``SELECT *`` and nothing is a dead letter."""
    with documents_sync(tmp_path, kafka_broker, postgres, "postgres-truncates", {"skipped.operations": "none"},
                        7) as (workload, document, topic):
        workload.documents_round()
        kill_mid_stream(write_spec(tmp_path / "documents", document), document, workload, workload.truncate_documents)
        workload.documents_round()
        workload.move_documents()
        workload.truncate_documents()
        workload.documents_round()
        workload.insert_documents(8)
        catch_up(spark, kafka_broker, workload, document, topic)
        truncates = [record for record in kafka_broker.consume(topic, timeout=10)
                     if record.value and json.loads(record.value)["payload"]["op"] == "t"]
        assert len(truncates) == workload.truncates >= 4, "Debezium sent every TRUNCATE"
        assert_equals_select_star(spark, workload.connection, document, DOCUMENTS, VARIANTS[0])


def assert_equals_select_star(spark: SparkSession, connection: Any, document: dict[str, Any], table: SourceTable,
                              variant: Variant) -> None:
    """Iceberg's Spark reader returns what ``SELECT *`` returns on PostgreSQL, and no record is a dead letter."""
    iceberg = catalog_of(parse_spec(document)).load_table(document["spec"]["table"]["name"])
    expected = postgres_rows(connection, table, variant)
    actual = spark_rows(spark, iceberg.metadata_location, table, variant)
    assert len(expected) >= 15, f"{table.name}: the workload left too few rows to compare"
    assert sorted(actual) == sorted(expected), f"{table.name}: the keys differ"
    for key, row in expected.items():
        assert actual[key] == row, f"{table.name} {key}:\n iceberg  {actual[key]}\n postgres {row}"[:3000]
    assert dead_letters(document) == [], f"{table.name}: dead letters"


@pytest.mark.parametrize("variant", VARIANTS, ids=[variant.name for variant in VARIANTS])
def test_arrays_equal_select_star(tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker,
                                  postgres: Postgres, variant: Variant) -> None:
    """Arrays: text[], integer[], numeric(8,2)[], date[] and bigint[] columns with NULL elements, empty and
    NULL arrays, updates that change them, and large TOASTed arrays that later updates leave untouched (Debezium
    sends its array placeholder; the sync keeps the stored array)."""
    connection = postgres.connect()
    workload = Workload(connection, random.Random(f"postgres-arrays-{variant.name}"))
    workload.create_collections()
    prefix = f"pg{uuid.uuid4().hex[:8]}"
    topic = topic_of(prefix, COLLECTIONS)
    kafka_broker.create_topic(topic, PARTITIONS)
    kafka_broker.create_topic(f"{prefix}.transaction", 1)
    (tmp_path / "debezium").mkdir()
    debezium = start_debezium(tmp_path / "debezium", postgres, kafka_broker, prefix, [COLLECTIONS.name],
                              variant.settings)
    try:
        document = sync_of(tmp_path / COLLECTIONS.name, kafka_broker, prefix, COLLECTIONS, variant)
        workload.collections_round()
        with BackgroundJob(SyncJob(parse_spec(document), 1, spark)) as running:
            running.wait_until(lambda: caught_up(document, kafka_broker, topic), "collections caught up (1)", 180)
            workload.collections_round()
            workload.collections_round()
            wait_for_key(kafka_broker, topic, dict(zip(COLLECTIONS.key, workload.last_collection(), strict=True)))
            running.wait_until(lambda: caught_up(document, kafka_broker, topic), "collections caught up", 180)
        assert_equals_select_star(spark, connection, document, COLLECTIONS, variant)
        as_numbers = json.dumps(list(UNAVAILABLE.encode()), separators=(",", ":")).encode()  # integer[], date[]
        placeholders = [record.value for record in kafka_broker.consume(topic, timeout=10) if record.value
                        and (UNAVAILABLE.encode() in record.value or as_numbers in record.value)]
        assert len(placeholders) >= 10, "Debezium sent too few unchanged TOASTed arrays to carry"
    finally:
        connection.close()
        debezium.stop()


def test_schema_changes_mid_stream_are_followed_across_a_kill(tmp_path: Path, spark: SparkSession,
                                                             kafka_broker: KafkaBroker, postgres: Postgres) -> None:
    """Schema changes: ``ADD COLUMN``, widening ``ALTER COLUMN … TYPE`` (integer → bigint, numeric(10,2) →
    numeric(14,2)) and ``DROP COLUMN`` while a sync without ``spec.schema`` runs; the job is SIGKILLed right
    after its first schema commit and restarted with a higher version. Iceberg then returns what ``SELECT *``
    returns on PostgreSQL's current columns; the dropped column stays, null in every row written after the drop."""
    connection = postgres.connect()
    workload = EvolvingWorkload(connection, random.Random("postgres-schema-changes"))
    workload.create()
    workload.changes(inserts=10, updates=0, deletes=0)  # read by Debezium's snapshot
    prefix = f"pg{uuid.uuid4().hex[:8]}"
    topic = topic_of(prefix, ACCOUNTS)
    kafka_broker.create_topic(topic, PARTITIONS)
    (tmp_path / "debezium").mkdir()
    debezium = start_debezium(tmp_path / "debezium", postgres, kafka_broker, prefix, [ACCOUNTS.name],
                              VARIANTS[0].settings)
    try:
        document = sync_of(tmp_path / ACCOUNTS.name, kafka_broker, prefix, ACCOUNTS, VARIANTS[0])
        del document["spec"]["schema"]  # the table's columns come from the records
        catalog = catalog_of(parse_spec(document))
        spec_path = write_spec(tmp_path / ACCOUNTS.name, document)
        workload.changes()
        with job_process(spec_path, 1, crash_at="schema-committed") as (process, log):
            deadline = time.monotonic() + 240
            while not holds(lambda: any(c.kind == "data" for c in sink_commits(
                    catalog.load_table("cdc.accounts"), sink_id(document)))):
                assert process.poll() is None, f"the job ended before its first commit:\n{log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"no data commit within 240 s:\n{log.read_text()[-3000:]}"
                time.sleep(1)
            workload.add_column("extra", "text")
            workload.changes()
            assert process.wait(240) == -signal.SIGKILL, log.read_text()[-3000:]
        kinds = [c.kind for c in sink_commits(catalog.load_table("cdc.accounts"), sink_id(document))]
        assert kinds[-1] == "schema", kinds
        workload.changes()
        workload.widen("qty", "bigint")
        workload.changes()
        workload.widen("price", "numeric(14,2)")
        workload.changes()
        workload.drop_column("note")
        workload.changes()
        last = workload.last_key()
        wait_for_key(kafka_broker, topic, {"id": last})
        with BackgroundJob(SyncJob(parse_spec(document), 2, spark)) as running:
            running.wait_until(lambda: caught_up(document, kafka_broker, topic), "accounts caught up", 180)
        table = catalog.load_table("cdc.accounts")
        assert [(f.name, str(f.field_type)) for f in table.schema().fields] == [
            ("id", "long"), ("name", "string"), ("qty", "long"), ("price", "decimal(14, 2)"), ("note", "string"),
            ("extra", "string")]
        expected = schema_postgres_rows(connection)
        actual = schema_iceberg_rows(spark, table.metadata_location)
        assert sorted(actual) == sorted(expected)
        for key, row in expected.items():
            assert {name: actual[key][name] for name in row} == row, f"{key}:\n {actual[key]}\n {row}"
        after_drop = workload.written_after_drop["note"] & set(actual)
        assert after_drop and all(actual[key]["note"] is None for key in after_drop)
        assert any(row["note"] is not None for row in actual.values())  # rows not written since keep theirs
        assert dead_letters(document) == []
    finally:
        connection.close()
        debezium.stop()
