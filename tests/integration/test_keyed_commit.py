"""Keyed tables end to end below the job loop, read back by an independent reader.

Change records are decoded and collapsed (spark_app/decoding/changes.py), staged as data files and equality
delete files (spark_app/staging/writer.py, spark_app/staging/equality_deletes.py) and committed trigger by trigger through
SinkCommitter, on a table partitioned by ``day(updated_at)``: inserts, updates that move a row to
another day, deletes, re-inserts, key changes, tombstones and broken records, a crash with staged
files, a restart with a higher version and a fenced stale writer. After each step Apache Iceberg's
own Spark reader must show exactly the reference model (a dict key -> row built from the change
stream). pyiceberg's reader refuses such a table (it does not apply equality deletes).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFileContent, ManifestContent
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from icebergsync.catalog import ensure_table
from icebergsync.errors import FencedError, IcebergSyncError
from icebergsync.protocol import Writer, attempt_file_prefix
from icebergsync.schema import iceberg_schema
from icebergsync.storage import normalize
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.references import referenced_files
from spark_app.commit.trigger_output import TriggerOutput
from spark_app.decoding.changes import collapse, decode_changes
from spark_app.decoding.deadletter import ERROR_COLUMN
from spark_app.iceberg.internals import unpartitioned_spec_id
from spark_app.sources.units import ORDER_UNIT_SHIFT
from spark_app.staging.equality_deletes import delete_plan, write_equality_deletes
from spark_app.staging.writer import PartitionedWriter, TablePlan, conform
from tests.integration.keyed_support import COLUMNS, KEY, ChangeStream, spark_rows

SINK = "test/customers"


def open_catalog(directory: Path) -> Catalog:
    return SqlCatalog("test", uri=f"sqlite:///{directory}/catalog.db", warehouse=(directory / "warehouse").as_uri())


def table_plan(table: Table) -> TablePlan:
    return TablePlan(table.metadata.location, dict(table.metadata.properties), table.schema(), table.spec(),
                     dict(table.io.properties))


def stage(table: Table, writer: Writer, values: list[bytes | None], keys: list[bytes | None], fmt: str,
          task: str, by_position: bool = False) -> TriggerOutput:
    """What the tasks of one trigger stage: records decoded in two units, collapsed, written as data and deletes
    (an equality delete file; ``by_position``: the touched keys, whose rows the commit deletes by position)."""
    half = len(values) // 2
    units = [(0, values[:half], keys[:half]), (1, values[half:], keys[half:])]
    changes = pa.concat_tables([
        decode_changes(unit_values, unit_keys if fmt == "upsert" else None, lambda i: {"record": i}, COLUMNS, KEY,
                       fmt, index << ORDER_UNIT_SHIFT)
        for index, unit_values, unit_keys in units
    ])
    bad = changes.filter(pc.is_valid(changes.column(ERROR_COLUMN))).num_rows
    inserts, deletes, _, _ = collapse(changes, KEY)
    prefix = f"{attempt_file_prefix(writer)}-{task}"
    plan = table_plan(table)
    data = PartitionedWriter(plan, prefix, 1 << 30, 1 << 26)
    for batch in inserts.to_batches():
        data.write(conform(batch, plan.arrow_schema()))
    if by_position:
        return TriggerOutput(data_files=data.finish(), touched_keys=deletes if deletes.num_rows else None,
                             records=inserts.num_rows, dead_letters=bad)
    delete_file = write_equality_deletes(delete_plan(table), deletes, prefix)
    return TriggerOutput(data_files=data.finish(), delete_files=[delete_file] if delete_file else [],
                         records=inserts.num_rows, dead_letters=bad)


@pytest.mark.parametrize(("fmt", "catalog_kind"), [("debezium", "sql"), ("upsert", "sql"), ("debezium", "rest")])
def test_spark_reads_exactly_the_model_of_the_change_stream(tmp_path: Path, spark: SparkSession, fmt: str,
                                                            catalog_kind: str, request: pytest.FixtureRequest) -> None:
    """With the REST catalog, Iceberg's Java TableMetadata also validates every update the sink sends
    (the added unpartitioned spec, snapshots with delete manifests)."""
    if catalog_kind == "rest":
        catalog = request.getfixturevalue("rest_catalog").load()
    else:
        catalog = open_catalog(tmp_path)
    name = f"shop_{uuid.uuid4().hex[:8]}.customers"
    ensure_table(catalog, name, iceberg_schema(COLUMNS), ["day(updated_at)"], {}, key=KEY)
    stream = ChangeStream(fmt, random.Random(fmt))
    v1 = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    assert v1.start([]).frontier is None
    table = catalog.load_table(name)
    assert table.spec().fields and unpartitioned_spec_id(table.metadata) not in (None, table.spec().spec_id)

    def trigger(committer: SinkCommitter, number: int, values: list[bytes | None], keys: list[bytes | None]) -> None:
        output = stage(catalog.load_table(name), committer.writer, values, keys, fmt, f"{number:05d}-0")
        committer.commit(output, {"after": f"t{number:04d}"})

    dead = 0
    for number in range(6):
        trigger(v1, number, *stream.records(400))
        assert spark_rows(spark, catalog.load_table(name)) == stream.model, f"after trigger {number}"
    dead = stream.dead

    # A crash after staging a trigger: its files are never committed. A restart with a higher version
    # resumes from the table, deletes the leftovers (data and delete files) and replays the trigger.
    before_crash = dict(stream.model)
    values, keys = stream.records(400)
    crashed = stage(catalog.load_table(name), v1.writer, values, keys, fmt, "00006-0")
    assert crashed.delete_files and crashed.data_files
    v2 = SinkCommitter(catalog, name, Writer(SINK, 2, "attempt2"))
    assert v2.start([]).frontier == {"after": "t0005"}
    assert spark_rows(spark, catalog.load_table(name)) == before_crash
    removed = {normalize(path) for path in v2.cleanup_orphans(catalog.load_table(name))}
    assert {normalize(path) for path in crashed.all_paths()} <= removed
    trigger(v2, 6, values, keys)
    assert spark_rows(spark, catalog.load_table(name)) == stream.model

    # The stale writer is fenced: nothing of its trigger lands, its staged delete file is discarded.
    committed_model = dict(stream.model)
    stale = stage(catalog.load_table(name), v1.writer, *stream.records(50), fmt, "00007-0")
    assert stale.delete_files
    with pytest.raises(FencedError):
        v1.commit(stale, {"after": "t0007"})
    assert not any(Path(path.removeprefix("file://")).exists() for path in stale.all_paths())
    stream.model = committed_model  # the stale trigger's changes never landed
    assert spark_rows(spark, catalog.load_table(name)) == stream.model

    for number in range(7, 10):
        trigger(v2, number, *stream.records(400))
    table = catalog.load_table(name)
    assert spark_rows(spark, table) == stream.model
    assert stream.dead > dead >= 0

    # Every committed delete file sits in a delete manifest under the unpartitioned spec; none was cleaned up.
    unpartitioned = unpartitioned_spec_id(table.metadata)
    assert len(table.metadata.partition_specs) == 2  # the fences of v1 and v2 added it once
    assert table.metadata.default_spec_id != unpartitioned
    snapshot = table.current_snapshot()
    assert snapshot is not None
    delete_manifests = [m for m in snapshot.manifests(table.io) if m.content == ManifestContent.DELETES]
    assert delete_manifests and {m.partition_spec_id for m in delete_manifests} == {unpartitioned}
    entries = [e for m in delete_manifests for e in m.fetch_manifest_entry(table.io)]
    assert {e.data_file.content for e in entries} == {DataFileContent.EQUALITY_DELETES}
    assert all(Path(e.data_file.file_path.removeprefix("file://")).exists() for e in entries)
    assert {normalize(e.data_file.file_path) for e in entries} <= referenced_files(table)
    assert v2.cleanup_orphans(table) == []
    operations = [s.summary.operation.value for s in table.snapshots() if s.summary is not None]
    assert operations[0] == "append" and set(operations[1:]) <= {"append", "overwrite", "delete"}

    # pyiceberg's own reader does not apply equality deletes: it refuses the table rather than show deleted rows.
    with pytest.raises(ValueError, match="does not yet support equality deletes"):
        table.scan().to_arrow()


def test_delete_files_under_a_partitioned_spec_are_refused_before_anything_lands(tmp_path: Path) -> None:
    """A partitioned equality delete would not reach a row that moved partition: the committer refuses it."""
    catalog = open_catalog(tmp_path)
    name = "shop.customers"
    ensure_table(catalog, name, iceberg_schema(COLUMNS), ["day(updated_at)"], {}, key=KEY)
    committer = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    committer.start([])
    table = catalog.load_table(name)
    plan = delete_plan(table)
    wrong = replace(plan, spec_id=table.spec().spec_id)
    delete_file = write_equality_deletes(wrong, pa.table({"id": pa.array([1], pa.int64())}),
                                         attempt_file_prefix(committer.writer) + "-00000-0")
    assert delete_file is not None
    head = table.metadata.current_snapshot_id
    with pytest.raises(IcebergSyncError, match="not an unpartitioned spec"):
        committer.commit(TriggerOutput(delete_files=[delete_file]), {"after": "t0000"})
    assert catalog.load_table(name).metadata.current_snapshot_id == head
