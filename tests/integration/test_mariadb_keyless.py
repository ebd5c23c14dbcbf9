"""MariaDB: a table WITHOUT a primary key through Debezium's MariaDB connector, as the docs say.

A real MariaDB (binary log ROW, ``binlog_row_image=FULL`` as the example's server settings say) set up by the
example's ``mariadb-setup.sql``; Debezium's MariaDB connector with the example's ``debezium-connector.json`` (but
for where the database, the broker and the offsets are, and a topic prefix and schema-history topic of the test's
own); the example's database-wide sync (examples/mariadb-debezium/icebergsync.yaml) with the table's own
``key: []`` in ``spec.tables`` and its topic of ONE partition. The workload deletes and updates single copies of
duplicated rows (``DELETE … LIMIT 1`` by null-safe equality), copies rows and inserts rows of NULLs; the job is
SIGKILLed right after its first data commit. Apache Iceberg's Spark runtime must return what ``SELECT *`` returns,
as a multiset, with no dead letter.
"""

from __future__ import annotations

import random
import re
import time
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from icebergsync.spec import parse_spec
from spark_app.job.loop import SyncJob
from tests.infra.services import KafkaBroker
from tests.integration.cdc_mariadb.example import EXAMPLE, PASSWORD, example_sync, run_setup_sql
from tests.integration.cdc_mariadb.servers import connector_settings, start_debezium, start_mariadb
from tests.integration.cdc_postgres.progress import caught_up, dead_letters, sink_id
from tests.integration.sync_support import (
    BackgroundJob,
    catalog_of,
    kill_after_first_commit,
    sink_commits,
    write_spec,
)

TABLE = "labels"
COLUMNS = ["name", "qty", "price", "note"]
Row = tuple[str | None, int | None, Decimal | None, str | None]


class Workload:
    """Changes that keep duplicates around: each update or delete hits ONE row equal to a chosen one (LIMIT 1)."""

    def __init__(self, connection: Any, rng: random.Random):
        self.connection = connection
        self.rng = rng
        self.counts: Counter[str] = Counter()

    def _row(self) -> list[Any]:
        rng = self.rng
        def maybe(value: Any) -> Any:
            return None if rng.random() < 0.3 else value
        return [maybe(rng.choice(["red", "green"])), maybe(rng.randint(0, 3)), maybe(Decimal(f"{rng.randint(0, 2)}.50")),
                maybe(rng.choice(["n", "ü ✓"]))]

    def _insert(self, cursor: Any, row: list[Any]) -> None:
        cursor.execute(f"INSERT INTO {TABLE} VALUES (%s, %s, %s, %s)", row)
        self.counts["insert"] += 1

    def create(self) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute(f"CREATE TABLE {TABLE} (name VARCHAR(32), qty INT, price DECIMAL(10,2), note TEXT)")
            for _ in range(10):
                row = self._row()
                for _ in range(self.rng.randint(1, 3)):
                    self._insert(cursor, row)
            for _ in range(2):
                self._insert(cursor, [None] * len(COLUMNS))

    def transaction(self) -> None:
        """A few changes in one transaction, each to one copy of a (preferably duplicated) row."""
        with self.connection.cursor() as cursor:
            cursor.execute("BEGIN")
            for _ in range(self.rng.randint(1, 4)):
                cursor.execute(f"SELECT {', '.join(COLUMNS)}, COUNT(*) FROM {TABLE} GROUP BY {', '.join(COLUMNS)} "
                               f"ORDER BY {', '.join(COLUMNS)}")
                groups = cursor.fetchall()
                duplicated = [g for g in groups if g[-1] > 1]
                pool = duplicated if duplicated and self.rng.random() < 0.8 else groups
                action = self.rng.choice(["delete", "delete", "update", "update", "copy", "copy", "insert"])
                if not pool or action == "insert":
                    self._insert(cursor, self._row())
                    continue
                row = list(self.rng.choice(pool)[:-1])
                equal = " AND ".join(f"{name} <=> %s" for name in COLUMNS)
                if action == "delete":
                    cursor.execute(f"DELETE FROM {TABLE} WHERE {equal} LIMIT 1", row)
                elif action == "update":
                    cursor.execute(f"UPDATE {TABLE} SET qty = COALESCE(qty, 0) + 1 WHERE {equal} LIMIT 1", row)
                else:
                    self._insert(cursor, row)
                self.counts[action] += 1
                self.counts["one copy of several"] += action in ("delete", "update") and row in [list(g[:-1])
                                                                                                 for g in duplicated]
            cursor.execute("COMMIT")

    def rounds(self, count: int) -> None:
        for _ in range(count):
            self.transaction()

    def mark_end(self) -> str:
        """A last row whose name no other row has: once Debezium sent it, it sent everything before it."""
        marker = f"end-{uuid.uuid4().hex[:8]}"
        with self.connection.cursor() as cursor:
            self._insert(cursor, [marker, None, None, None])
        return marker


def test_a_table_without_a_primary_key_equals_select_star_as_a_multiset(tmp_path: Path, spark: SparkSession,
                                                                          kafka_broker: KafkaBroker) -> None:
    for part in ("mariadb", "debezium", "sync"):
        (tmp_path / part).mkdir()
    mariadb = start_mariadb(tmp_path / "mariadb")
    debezium = None
    try:
        run_setup_sql(mariadb)
        connection = mariadb.connect(database="shop")
        workload = Workload(connection, random.Random("mariadb-keyless"))
        workload.create()
        connector = connector_settings(EXAMPLE / "debezium-connector.json")
        prefix = f"mdb{uuid.uuid4().hex[:8]}"  # the suite's broker is shared: a prefix and history of the test's own
        connector.update({"topic.prefix": prefix, "schema.history.internal.kafka.topic": f"{prefix}.schema-history"})
        topic = f"{prefix}.shop.{TABLE}"
        kafka_broker.create_topic(topic, 1)  # a table without a primary key: ONE partition (null message keys)
        debezium = start_debezium(tmp_path / "debezium", mariadb, kafka_broker, connector, connector["database.user"],
                                  PASSWORD)
        deadline = time.monotonic() + 120
        while sum(kafka_broker.end_offsets(topic).values()) < workload.counts["insert"]:  # the snapshot
            assert time.monotonic() < deadline, "Debezium's snapshot did not write every row"
            time.sleep(1)
        document = example_sync(tmp_path / "sync", kafka_broker)
        kafka = document["spec"]["source"]["kafka"]
        kafka["topicPattern"] = kafka["topicPattern"].replace("dbserver1", re.escape(prefix))
        document["spec"]["tables"][f"shop.{TABLE}"] = {"key": []}
        name = f"shop.{TABLE}"
        catalog = catalog_of(parse_spec(document))

        def committed_data() -> bool:
            try:
                return any(c.kind == "data" for c in sink_commits(catalog.load_table(name), sink_id(document)))
            except Exception:  # not created yet
                return False

        workload.rounds(10)
        kill_after_first_commit(write_spec(tmp_path / "sync", document), committed_data, lambda: workload.rounds(2))
        workload.rounds(25)
        marker = workload.mark_end()
        debezium.wait_until(lambda: any(record.value and marker.encode() in record.value
                                        for record in kafka_broker.consume(topic, timeout=10)), 120,
                            "Debezium's event of the last row")
        with BackgroundJob(SyncJob(parse_spec(document), 2, spark)) as running:
            running.wait_until(lambda: caught_up(document, kafka_broker, topic, name), "labels caught up", 180)

        iceberg = catalog.load_table(name)
        assert not iceberg.schema().identifier_field_ids
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT * FROM {TABLE}")
            expected: Counter[Row] = Counter(tuple(row) for row in cursor.fetchall())  # type: ignore[misc]
        rows = spark.read.format("iceberg").load(iceberg.metadata_location).collect()
        actual: Counter[Row] = Counter(tuple(row[c] for c in COLUMNS) for row in rows)  # type: ignore[misc]
        assert actual == expected, f"only in iceberg: {actual - expected}\nonly in mariadb: {expected - actual}"
        assert any(count > 1 for count in expected.values()) and any(None in row for row in expected)
        assert workload.counts["one copy of several"] >= 10, workload.counts
        assert dead_letters(document, f"shop.{TABLE}_dead_letters") == []
        connection.close()
    finally:
        if debezium is not None:
            debezium.stop()
        mariadb.server.stop()
