"""The sink's guarantees against a real Iceberg REST catalog whose warehouse is ``s3://`` on MinIO.

* Kafka → REST + S3: exactly-once across kill -9 (protocol boundaries and random), resume with the
  same and a higher version, and a fencing race between a stale and a new version.
* The REST commit semantics: a real 409 (another writer moved the head) and unknown outcomes
  (a 502 after the commit landed, a 503 before it was forwarded) through a proxy in front of the
  server: the committer finds its own snapshot instead of committing twice.

S3 credentials come from a mounted secret directory (``secretRef``), never from the spec text.
"""

from __future__ import annotations

import logging
import random
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from icebergsync.errors import EXIT_FENCED
from icebergsync.spec import parse_spec
from spark_app.job.loop import SyncJob
from tests.infra.services import KafkaBroker, RestCatalog, S3Server
from tests.integration.kafka_support import Producer, covered_ids, kafka_document, last_frontier, new_topic
from tests.integration.rest_proxy import RestProxy
from tests.integration.sync_support import (
    catalog_of,
    make_sync,
    run_job_process,
    sink_commits,
    table_ids,
    unreferenced_sink_files,
    wait_while_running,
    write_spec,
)

SECRET = "s3-creds"


@pytest.fixture
def s3_secret(tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """The S3 keys as a mounted Secret (one file per property), as the operator mounts it."""
    directory = tmp_path / "secrets" / SECRET
    directory.mkdir(parents=True)
    (directory / "s3.access-key-id").write_text(s3_server.access_key)
    (directory / "s3.secret-access-key").write_text(s3_server.secret_key + "\n")
    monkeypatch.setenv("ICEBERGSYNC_SECRETS_DIR", str(tmp_path / "secrets"))
    return SECRET


def rest_table(rest: RestCatalog, s3: S3Server, uri: str | None = None) -> dict[str, Any]:
    """spec.table for a fresh namespace on the REST catalog (optionally reached through ``uri``)."""
    return {
        "catalog": {
            "type": "rest", "name": "rest", "uri": uri or rest.uri, "warehouse": rest.warehouse,
            "properties": {"s3.endpoint": s3.endpoint, "s3.region": s3.region, "s3.path-style-access": "true"},
            "secretRef": {"name": SECRET},
        },
        "name": f"ns_{uuid.uuid4().hex[:8]}.orders",
    }


@pytest.mark.slow
def test_kafka_to_rest_s3_exactly_once_across_kill_9_and_a_fencing_race(
        tmp_path: Path, kafka_broker: KafkaBroker, rest_catalog_s3: RestCatalog, s3_server: S3Server,
        s3_secret: str) -> None:
    topic = new_topic(kafka_broker, 3)
    table_spec = rest_table(rest_catalog_s3, s3_server)
    name = table_spec["name"]
    document = kafka_document(tmp_path, kafka_broker, topic, source={"maxRecordsPerTrigger": 1200},
                              commit={"interval": "500ms"}, table=table_spec)
    spec_path = write_spec(tmp_path, document)
    sync = parse_spec(document)

    def load() -> Any:
        return catalog_of(sync).load_table(name)

    rng = random.Random(7)
    producer = Producer(kafka_broker, topic, 5_000, chunk=250, pause=0.4).start()
    for version, crash_at, kill_after in [
        (1, "staged:2", None),             # one commit landed, the next range staged on S3, killed before its commit
        (2, None, rng.uniform(15, 20)),    # a higher version, killed at a random moment
    ]:
        status, log = run_job_process(spec_path, version, crash_at=crash_at, kill_after=kill_after)
        assert status == -9, f"run v{version} {crash_at or 'random kill'} ended {status}:\n{log[-3000:]}"
        ids = table_ids(load())
        assert len(ids) == len(set(ids)), "a crash made a record visible twice"
        assert ids == covered_ids(dict(producer.placed), last_frontier(load()), topic)
    producer.join()

    # The race: version 3 runs while records keep coming; version 4 starts, version 3 is fenced.
    more = Producer(kafka_broker, topic, None, chunk=100, pause=0.3, first=5_000).start()

    def data_commits(version: int) -> int:
        return sum(1 for c in sink_commits(load(), "test/orders") if c.writer.version == version and c.kind == "data")

    with ThreadPoolExecutor(1) as pool:
        old = pool.submit(run_job_process, spec_path, 3)

        def finished() -> bool:
            if old.done() and data_commits(4) >= 1:
                more.stop()
            return more.done and len(table_ids(load())) >= 5_000 + len(more.placed)

        wait_while_running(old, lambda: data_commits(3) >= 1, "version 3's first commit")
        status, new_log = run_job_process(spec_path, 4, stop_when=finished)
        assert status == 0, new_log[-3000:]
        old_status, old_log = old.result(timeout=180)
    extra = more.join()
    assert old_status == EXIT_FENCED, old_log[-3000:]
    table = load()
    assert table_ids(table) == list(range(5_000 + len(extra)))
    commits = sink_commits(table, "test/orders")
    assert {c.writer.version for c in commits} == {1, 2, 3, 4}
    new_fence = next(i for i, c in enumerate(commits) if c.writer.version == 4)
    assert all(c.writer.version == 4 for c in commits[new_fence:]), "the stale version landed after the new fence"
    # Everything lives on S3, and no staged file of a crashed or fenced attempt is left there.
    assert table.metadata.location.startswith(f"s3://{s3_server.bucket}/")
    assert all(task.file.file_path.startswith("s3://") for task in table.scan().plan_files())
    assert unreferenced_sink_files(table, "test/orders") == []


def test_rest_conflicts_and_unknown_commit_outcomes_never_commit_twice(
        tmp_path: Path, spark: SparkSession, rest_catalog_s3: RestCatalog, s3_server: S3Server, s3_secret: str,
        caplog: pytest.LogCaptureFixture) -> None:
    direct_spec = rest_table(rest_catalog_s3, s3_server)
    name = direct_spec["name"]
    schema = [{"name": "id", "type": "long", "required": True}]
    source = {"generator": {"rowsPerSecond": 1_000_000, "totalRows": 40_000, "maxRowsPerTrigger": 10_000}}
    direct = catalog_of(make_sync(tmp_path, source, schema=schema, table=direct_spec))

    def another_writer_commits() -> None:
        table = direct.load_table(name)
        table.append(pa.Table.from_pylist([{"id": -1}], schema=table.schema().as_arrow()))

    faults = {1: "conflict", 3: "lost-response", 4: "unavailable"}
    with RestProxy(rest_catalog_s3.uri, faults, before_conflict=another_writer_commits) as proxy:
        sync = make_sync(tmp_path, source, schema=schema, table={**direct_spec, "catalog": {
            **direct_spec["catalog"], "uri": proxy.uri}})
        caplog.set_level(logging.INFO, logger="icebergsync.committer")
        summary = SyncJob(sync, 1, spark).run()
    # 1: a real 409 from the server (the head moved) -> re-check the fence, rebuild, 2: lands.
    # 3: landed but the client saw 502 -> found by snapshot id, no new request.
    # 4: 503 before forwarding -> not found -> 5: lands.
    assert proxy.actions == ["conflict", "forward", "lost-response", "unavailable", "forward", "forward"]
    assert proxy.statuses == [409, 200, 502, 503, 200, 200]
    assert summary.commits == 4 and summary.records == 40_000
    table = direct.load_table(name)
    assert table_ids(table) == [-1, *range(40_000)]
    data = [c for c in sink_commits(table, "test/orders") if c.kind == "data"]
    assert [c.frontier for c in data] == [{"next_id": n} for n in (10_000, 20_000, 30_000, 40_000)]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("commit conflict" in m for m in messages) == 1
    assert sum("unknown outcome" in m for m in messages) == 2
    assert unreferenced_sink_files(table, "test/orders") == []
