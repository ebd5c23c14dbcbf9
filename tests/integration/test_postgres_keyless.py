"""A PostgreSQL table WITHOUT a primary key through Debezium into Iceberg, as the docs say.

What a user does (docs/connectors.md, "Tables without a primary key"): the example's setup
(examples/postgres-debezium/postgres-setup.sql, run as it is), the table ``items`` (no primary key, duplicate rows,
NULLs in every column) set to ``REPLICA IDENTITY FULL`` and added to the example's publication; the example's
connector (examples/postgres-debezium/debezium-connector.json: only the connection, the offsets' storage,
``table.include.list`` and the topic prefix are overridden) writing to a topic of ONE partition (Debezium sends a
table without a primary key with null message keys); and the example's sync (examples/postgres-debezium/
icebergsync.yaml) with ``key: []``, no spec.schema (the table is created from the records' Kafka Connect schema).

The workload updates and deletes single copies of duplicated rows (by ``ctid``), copies rows, inserts rows of NULLs,
in multi-statement transactions; the job is SIGKILLed right after its first data commit while the workload goes on,
and a job of a higher version catches up. Acceptance: Apache Iceberg's Spark runtime returns what ``SELECT *``
returns on PostgreSQL as a multiset (every copy counted), value for value, and no record is a dead letter.
"""

from __future__ import annotations

import copy
import random
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from pyspark.sql import SparkSession

from icebergsync.spec import parse_spec
from spark_app.job.loop import SyncJob
from tests.infra.services import REPO_ROOT, KafkaBroker
from tests.integration.cdc_postgres.database import PUBLICATION, run_example_setup
from tests.integration.cdc_postgres.progress import caught_up, dead_letters, sink_id
from tests.integration.cdc_postgres.servers import Postgres, example_connector, run_debezium, wait_streaming
from tests.integration.cdc_postgres.tables import iceberg_table_rows, register_types, select_star_rows
from tests.integration.sync_support import (
    BackgroundJob,
    catalog_of,
    kill_after_first_commit,
    sink_commits,
    sync_document,
    write_spec,
)

EXAMPLE_SYNC = REPO_ROOT / "examples" / "postgres-debezium" / "icebergsync.yaml"
TABLE = "items"
# (PostgreSQL type, the Iceberg column type the records' Connect schema gives it: docs/connectors.md)
COLUMNS = {"name": ("text", "string"), "qty": ("integer", "int"), "price": ("numeric(10,2)", "decimal(10,2)"),
           "score": ("double precision", "double"), "seen": ("timestamptz", "timestamptz"),
           "tags": ("text[]", "array<string>")}
NAMES = ["alpha", "beta", "gamma"]


class KeylessWorkload:
    """Changes to ``items`` that keep duplicates around: each update or delete hits ONE physical row (its ctid)."""

    def __init__(self, connection: Any, rng: random.Random):
        self.connection = connection
        self.rng = rng
        self.counts: Counter[str] = Counter()

    def _row(self) -> list[Any]:
        rng = self.rng
        def maybe(value: Any) -> Any:
            return None if rng.random() < 0.3 else value
        return [maybe(rng.choice(NAMES)), maybe(rng.randint(0, 3)), maybe(f"{rng.randint(0, 2)}.50"),
                maybe(rng.choice([0.5, -0.0, 1e300])), maybe(f"2024-0{rng.randint(1, 3)}-01T10:00:00+00:00"),
                maybe(rng.choice([["a", None], [], ["b"]]))]

    def create(self) -> None:
        with self.connection, self.connection.cursor() as cursor:
            cursor.execute(f"CREATE TABLE {TABLE} ({', '.join(f'{n} {t}' for n, (t, _) in COLUMNS.items())})")
            cursor.execute(f"ALTER TABLE {TABLE} REPLICA IDENTITY FULL")
            cursor.execute(f"ALTER PUBLICATION {PUBLICATION} ADD TABLE public.{TABLE}")
            cursor.execute(f"GRANT SELECT ON public.{TABLE} TO debezium")
            for _ in range(12):
                self._insert(cursor, self._row(), copies=self.rng.randint(1, 3))
            self._insert(cursor, [None] * len(COLUMNS), copies=2)  # NULL in every column, twice

    def _insert(self, cursor: Any, row: list[Any], copies: int = 1) -> None:
        for _ in range(copies):
            cursor.execute(f"INSERT INTO {TABLE} VALUES (%s, %s, %s, %s, %s, %s::text[])", row)
        self.counts["insert"] += copies

    def _duplicated(self, cursor: Any) -> tuple[str, bool] | None:
        """The ctid of one copy of a row held more than once (any row when none is), and whether it has copies."""
        cursor.execute(f"SELECT ctid::text, count(*) OVER (PARTITION BY {', '.join(COLUMNS)}) FROM {TABLE}")
        rows = cursor.fetchall()
        duplicated = [ctid for ctid, count in rows if count > 1]
        pool = duplicated if duplicated and self.rng.random() < 0.8 else [ctid for ctid, _ in rows]
        if not pool:
            return None
        ctid = self.rng.choice(sorted(pool))
        return ctid, ctid in duplicated

    def transaction(self) -> None:
        """A few changes in one transaction: delete, update or copy one copy of a (duplicated) row, or a new row."""
        with self.connection, self.connection.cursor() as cursor:
            for _ in range(self.rng.randint(1, 4)):
                picked = self._duplicated(cursor)
                ctid = picked[0] if picked else None
                action = self.rng.choice(["delete", "delete", "update", "update-null", "copy", "copy", "copy",
                                          "insert"]) if ctid else "insert"
                if picked and picked[1] and action in ("delete", "update", "update-null"):
                    self.counts["one copy of several"] += 1
                if action == "delete":
                    cursor.execute(f"DELETE FROM {TABLE} WHERE ctid = %s::tid", [ctid])
                elif action == "update":
                    cursor.execute(f"UPDATE {TABLE} SET qty = coalesce(qty, 0) + 1 WHERE ctid = %s::tid", [ctid])
                elif action == "update-null":
                    cursor.execute(f"UPDATE {TABLE} SET name = NULL, tags = ARRAY[NULL]::text[] WHERE ctid = %s::tid",
                                   [ctid])
                elif action == "copy":
                    cursor.execute(f"INSERT INTO {TABLE} SELECT * FROM {TABLE} WHERE ctid = %s::tid", [ctid])
                else:
                    self._insert(cursor, self._row())
                self.counts[action] += 1

    def rounds(self, count: int) -> None:
        for _ in range(count):
            self.transaction()

    def mark_end(self) -> str:
        """A last row whose name no other row has: once Debezium sent it, it sent everything before it."""
        marker = f"end-{uuid.uuid4().hex[:8]}"
        with self.connection, self.connection.cursor() as cursor:
            self._insert(cursor, [marker, None, None, None, None, None])
        return marker


def keyless_sync(directory: Path, broker: KafkaBroker, prefix: str) -> dict[str, Any]:
    """examples/postgres-debezium/icebergsync.yaml for ``items``: ``key: []`` (docs/connectors.md, "Tables without a
    primary key"), the test's topic and transaction topic, a SQLite catalog under ``directory`` (no catalogRef, no
    Kafka credentials, the test's commit interval)."""
    example = next(document for document in yaml.safe_load_all(EXAMPLE_SYNC.read_text())
                   if document and document["kind"] == "IcebergSync")
    spec = copy.deepcopy(example["spec"])
    assert "schema" not in spec and spec["changes"]["format"] == "debezium"
    kafka = spec["source"]["kafka"]
    del kafka["secretRef"]
    kafka.update(bootstrapServers=broker.bootstrap_servers, topic=f"{prefix}.public.{TABLE}")
    table = spec.pop("table")
    del table["catalogRef"]
    table.update(name=f"shop.{TABLE}", key=[])
    spec["deadLetter"] = {"table": f"shop.{TABLE}_dead_letters"}
    spec["changes"]["transactions"]["topic"] = f"{prefix}.transaction"
    del spec["commit"]  # the example's 1m: the test commits every second (sync_document)
    directory.mkdir(parents=True, exist_ok=True)
    return sync_document(directory, spec.pop("source"), name="shop-items", table=table, **spec)


def hashable(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(tuple(value) if isinstance(value, list) else value for value in row.values())


def test_a_table_without_a_primary_key_equals_select_star_as_a_multiset(
        tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker, postgres: Postgres) -> None:
    connection = postgres.create_database("shop")
    connection.autocommit = True
    with connection.cursor() as cursor:
        run_example_setup(cursor)
    connection.autocommit = False
    register_types(connection)
    workload = KeylessWorkload(connection, random.Random("postgres-keyless"))
    workload.create()
    prefix = f"pg{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.public.{TABLE}"
    (tmp_path / "debezium").mkdir()
    connector = example_connector(tmp_path / "debezium", postgres, "shop", prefix, [TABLE], {})
    kafka_broker.create_topic(topic, 1)  # a table without a primary key: ONE partition (null message keys)
    kafka_broker.create_topic(f"{prefix}.transaction", connector.partitions)
    debezium = run_debezium(tmp_path / "debezium", kafka_broker, connector.config)
    try:
        wait_streaming(debezium)
        document = keyless_sync(tmp_path / "sync", kafka_broker, prefix)
        workload.rounds(15)
        catalog = catalog_of(parse_spec(document))

        def committed_data() -> bool:
            try:
                commits = sink_commits(catalog.load_table(f"shop.{TABLE}"), sink_id(document))
            except Exception:  # not created yet
                return False
            return any(commit.kind == "data" for commit in commits)

        kill_after_first_commit(write_spec(tmp_path / "sync", document), committed_data,
                                lambda: workload.rounds(2))
        workload.rounds(25)
        marker = workload.mark_end()
        debezium.wait_until(lambda: any(record.value and marker.encode() in record.value
                                        for record in kafka_broker.consume(topic, timeout=10)), 120,
                            "Debezium's event of the last row")
        with BackgroundJob(SyncJob(parse_spec(document), 2, spark)) as running:
            running.wait_until(lambda: caught_up(document, kafka_broker, topic), "items caught up", 180)
        iceberg = catalog.load_table(f"shop.{TABLE}")
        assert [(f.name, str(f.field_type)) for f in iceberg.schema().fields] == [
            ("name", "string"), ("qty", "int"), ("price", "decimal(10, 2)"), ("score", "double"),
            ("seen", "timestamptz"), ("tags", "list<string>")], iceberg.schema()
        assert not iceberg.schema().identifier_field_ids
        expected = Counter(map(hashable, select_star_rows(connection, TABLE, COLUMNS)))
        actual = Counter(map(hashable, iceberg_table_rows(spark, iceberg.metadata_location, COLUMNS)))
        assert actual == expected, f"only in iceberg: {actual - expected}\nonly in postgres: {expected - actual}"
        assert any(count > 1 for count in expected.values()), "no duplicate row left to compare"
        assert expected[(None,) * len(COLUMNS)] >= 1, "no all-NULL row left"
        assert workload.counts["delete"] >= 5 and workload.counts["update"] + workload.counts["update-null"] >= 5, \
            workload.counts
        assert workload.counts["one copy of several"] >= 10, workload.counts
        assert dead_letters(document) == []
    finally:
        connection.close()
        debezium.stop()
