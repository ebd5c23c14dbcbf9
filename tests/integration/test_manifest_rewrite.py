"""Upkeep's manifest rewrite (spark_app/upkeep/runner.py, rewriteManifests), read back by two independent readers.

Keyed triggers add manifests commit after commit; with compaction and rewriteDeletes off their deletes
stay live, so every delete's reach hangs on the sequence numbers of the entries the rewrite moves: a
data file given a newer data sequence number would escape the deletes committed before the rewrite,
and a delete given one would reach rows written after it. The rewrite must leave fewer manifests and
every entry as it was (snapshot id, data and file sequence numbers, first_row_id), Apache Iceberg's
Spark reader and pyiceberg's must read the model before and after it and after later triggers, a
stale version's rewrite never lands, and one planned on a head main has moved past is refused.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from icebergsync.errors import FencedError
from icebergsync.protocol import Writer
from icebergsync.spec import Maintenance
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.swap import MaintenanceConflictError
from spark_app.iceberg.internals import FileKey, file_key, first_row_id, manifest_entries, manifest_files
from spark_app.upkeep.runner import Maintainer
from tests.integration.keyed_support import ChangeStream, spark_rows
from tests.integration.test_keyed_commit import SINK, open_catalog
from tests.integration.test_maintenance import (
    TARGET,
    Triggers,
    WideStream,
    keyed_table,
    pyiceberg_rows,
    spark_lineage,
)

Entry = tuple[int, int | None, int | None, int | None, int | None]  # status, snapshot, data seq, file seq, row id


def manifests_only(catalog: Catalog, name: str, committer: SinkCommitter, max_manifests: int = 2) -> Maintainer:
    """Upkeep with only the manifest rewrite on (deletes stay live, no snapshot expires)."""
    settings = Maintenance(compaction={"enabled": False}, rewrite_deletes={"enabled": False},  # type: ignore[arg-type]
                           rewrite_manifests={"max_manifests": max_manifests},
                           expire_snapshots={"enabled": False}, remove_orphans={"enabled": False})
    return Maintainer(settings, committer, catalog, name, TARGET)


def entries(table: Table) -> dict[FileKey, Entry]:
    """Every live content file of the head (by path and offset) with what its manifest entry says of it."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    found = {}
    for manifest in manifest_files(table.io, snapshot):
        for entry in manifest_entries(table.io, manifest):
            data_file = entry.data_file
            key = file_key(data_file)
            assert key not in found, f"{key} is live twice"
            found[key] = (int(data_file.content), entry.snapshot_id, entry.sequence_number, entry.file_sequence_number,
                          first_row_id(data_file))
    return found


def manifest_count(table: Table) -> int:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return len(manifest_files(table.io, snapshot))


@pytest.mark.parametrize(("catalog_kind", "format_version", "by_position"),
                         [("sql", 2, False), ("sql", 2, True), ("sql", 3, True), ("rest", 3, True)])
def test_the_rewrite_merges_manifests_keeping_every_entry_so_every_delete_reaches_what_it_did(
        tmp_path: Path, spark: SparkSession, catalog_kind: str, format_version: int, by_position: bool,
        request: pytest.FixtureRequest) -> None:
    """Equality deletes (format 2), position delete files (format 2), deletion vectors (format 3; with the REST
    catalog Iceberg's Java TableMetadata validates the snapshot's row lineage fields)."""
    catalog = request.getfixturevalue("rest_catalog").load() if catalog_kind == "rest" else open_catalog(tmp_path)
    name = keyed_table(catalog, format_version)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random(f"manifests-{format_version}")), by_position)
    sink = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    sink.start([])
    for _ in range(6):
        triggers.commit(sink, 300)
    table = catalog.load_table(name)
    before, listed = entries(table), manifest_count(table)
    lineage = spark_lineage(spark, table) if format_version == 3 else None
    assert spark_rows(spark, table) == triggers.stream.model

    maintenance = manifests_only(catalog, name, sink)
    result = maintenance.rewrite_manifests()
    assert result is not None and result.manifests_before == listed and result.rewritten > result.written
    table = catalog.load_table(name)
    assert manifest_count(table) == listed - result.rewritten + result.written <= 3  # one per content and spec
    assert entries(table) == before  # nothing added or removed, every entry's sequence numbers and row id kept
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None and snapshot.summary.operation.value == "replace"
    assert snapshot.summary["total-data-files"] == str(sum(1 for e in before.values() if e[0] == 0))
    assert spark_rows(spark, table) == triggers.stream.model
    if by_position:  # pyiceberg's reader refuses equality deletes
        assert pyiceberg_rows(table) == triggers.stream.model
    if lineage is not None:
        assert spark_lineage(spark, table) == lineage

    for _ in range(4):  # later deletes reach the rewritten entries; upkeep keeps the manifests few
        triggers.commit(sink, 300)
        maintenance.after_commit()
        table = catalog.load_table(name)
        assert manifest_count(table) <= 3
        assert spark_rows(spark, table) == triggers.stream.model
        if by_position:
            assert pyiceberg_rows(table) == triggers.stream.model
    totals = maintenance.totals
    assert totals.manifest_runs > 1 and totals.manifests_rewritten > result.rewritten and totals.runs == 0


def three_triggers(tmp_path: Path, seed: str) -> tuple[Catalog, str, Triggers, SinkCommitter]:
    """A keyed table (position deletes) and its sink, after three triggers: more manifests than ``manifests_only``
    allows."""
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog)
    triggers = Triggers(catalog, name, ChangeStream("debezium", random.Random(seed)), by_position=True)
    sink = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    sink.start([])
    for _ in range(3):
        triggers.commit(sink, 200)
    return catalog, name, triggers, sink


def test_a_stale_version_never_lands_a_manifest_rewrite(tmp_path: Path, spark: SparkSession) -> None:
    catalog, name, triggers, v1 = three_triggers(tmp_path, "manifests-fenced")
    SinkCommitter(catalog, name, Writer(SINK, 2, "attempt2")).start([])
    head = catalog.load_table(name).metadata.current_snapshot_id
    stale = manifests_only(catalog, name, v1)
    assert stale.plan_manifests(catalog.load_table(name)) is not None  # a rewrite is due: only the fence stops it
    with pytest.raises(FencedError):
        stale.rewrite_manifests()
    with pytest.raises(FencedError):
        stale.after_commit()
    table = catalog.load_table(name)
    assert table.metadata.current_snapshot_id == head
    assert spark_rows(spark, table) == triggers.stream.model


def test_a_rewrite_planned_before_main_moved_is_dropped_and_planned_again(tmp_path: Path, spark: SparkSession) -> None:
    catalog, name, triggers, sink = three_triggers(tmp_path, "manifests-moved")
    maintenance = manifests_only(catalog, name, sink)
    plan = maintenance.plan_manifests(catalog.load_table(name))
    assert plan is not None
    triggers.commit(sink, 200)  # main moves past the planned head
    moved = catalog.load_table(name).metadata.current_snapshot_id
    with pytest.raises(MaintenanceConflictError):
        sink.commit_manifest_rewrite(plan.snapshot, plan.bins)
    assert catalog.load_table(name).metadata.current_snapshot_id == moved
    maintenance.after_commit()  # planned again on the new head, it lands
    table = catalog.load_table(name)
    assert table.metadata.current_snapshot_id != moved and maintenance.totals.manifests_rewritten > 0
    assert spark_rows(spark, table) == triggers.stream.model and pyiceberg_rows(table) == triggers.stream.model
