"""The real job (in-process Spark) when it is fenced between its two commits, or pointed at another
source's progress: it deletes nothing that is committed and persists nothing it should refuse."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from icebergsync.errors import FencedError, ProgressConflictError
from icebergsync.protocol import Writer
from icebergsync.spec import GENERATOR_COLUMNS
from spark_app.commit import data_commit as data_commit_module
from spark_app.commit.committer import SinkCommitter
from spark_app.job.loop import SyncJob
from spark_app.staging.writer import rebuild_data_file
from tests.integration.sync_support import catalog_of, make_sync, sink_commits, table_ids


def stops(job: SyncJob) -> dict[str, float]:
    """The job's stops counted in its metrics, by reason (those above 0)."""
    counts = {sample.labels["reason"]: sample.value for metric in job.metrics.stops.collect()
              for sample in metric.samples if sample.name.endswith("_total")}
    return {reason: count for reason, count in counts.items() if count}

def test_a_dead_letter_commit_fenced_after_the_main_commit_deletes_nothing_committed(
        tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "batch-1.json").write_text("\n".join(['{"id": 1}', "not json", '{"id": 2}', '{"id": "three"}']))
    sync = make_sync(tmp_path, {"files": {"path": str(inbox)}}, schema=[{"name": "id", "type": "long", "required": True}],
                     deadLetter={"table": "sales.orders_dlq"})
    catalog = catalog_of(sync)
    newer: list[SinkCommitter] = []

    def newer_version_fences_between_the_commits(point: str) -> None:
        if point == "main-committed" and not newer:
            newer.append(SinkCommitter(catalog, "sales.orders", Writer(sync.sink_id, 2, "newer"), "sales.orders_dlq",
                                       rebuild_data_file))
            newer[0].start([])

    monkeypatch.setattr(data_commit_module, "crash_point", newer_version_fences_between_the_commits)
    job = SyncJob(sync, 1, spark)
    with pytest.raises(FencedError) as fenced:
        job.run()
    assert fenced.value.by_version == 2
    assert stops(job) == {"fenced": 1}  # the job's metrics count the stop
    assert table_ids(catalog.load_table("sales.orders")) == [1, 2], "the landed main commit must stay readable"
    payloads = catalog.load_table("sales.orders_dlq").scan().to_arrow().column("payload").to_pylist()
    assert sorted(payloads) == sorted(["not json", '{"id": "three"}']), "the newer version recovered the dead letters"


def test_a_files_sync_refuses_the_frontier_of_a_generator_sync_with_the_same_sink_id(
        tmp_path: Path, spark: SparkSession) -> None:
    generator = make_sync(tmp_path, {"generator": {"rowsPerSecond": 1_000_000, "totalRows": 100}})
    SyncJob(generator, 1, spark).run()
    catalog = catalog_of(generator)
    before = catalog.load_table("sales.orders").metadata
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.json").write_text('{"id": 1000, "ts": "2026-01-01T00:00:00Z", "vendor": "x"}\n')
    schema = [{"name": c.name, "type": c.type, "required": c.required} for c in GENERATOR_COLUMNS]
    files = make_sync(tmp_path, {"files": {"path": str(inbox)}}, schema=schema)
    assert files.sink_id == generator.sink_id
    files_job = SyncJob(files, 2, spark)
    with pytest.raises(ProgressConflictError, match="share a sinkId"):
        files_job.run()
    assert stops(files_job) == {"progress_conflict": 1}
    after = catalog.load_table("sales.orders").metadata
    assert after.snapshots == before.snapshots and after.properties == before.properties, "nothing was persisted"
    assert table_ids(catalog.load_table("sales.orders")) == list(range(100))
    assert sink_commits(catalog.load_table("sales.orders"), generator.sink_id)[-1].writer.version == 1
