"""Tags and branches of other writers stay readable through everything the sink's upkeep does.

A write-audit-publish flow tags a snapshot the sink committed and writes to a branch of its own while the sink
goes on committing on main, compacting, rewriting deletes, rewriting manifests, expiring snapshots and removing
orphans. The tagged snapshot and the branch's head must read the same rows afterwards — by pyiceberg and by
Apache Iceberg's Spark runtime — and every file they reference must still exist.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from icebergsync.protocol import Writer
from icebergsync.spec import Compaction, ExpireSnapshots, Maintenance, RewriteDeletes, RewriteManifests
from icebergsync.storage import normalize
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.references import file_references
from spark_app.upkeep.runner import Maintainer
from tests.integration.keyed_support import Row
from tests.integration.test_keyed_commit import SINK, open_catalog
from tests.integration.test_maintenance import TARGET, Triggers, WideStream, keyed_table

TAG, BRANCH = "audited", "wap"


def pyiceberg_rows_at(table: Table, snapshot_id: int) -> dict[int, Row]:
    arrow = table.scan(snapshot_id=snapshot_id, selected_fields=("id", "name", "updated_at")).to_arrow()
    micros = pa.compute.cast(arrow.column("updated_at"), "int64").to_pylist()
    rows = dict(zip(arrow.column("id").to_pylist(), zip(arrow.column("name").to_pylist(), micros, strict=True),
                    strict=True))
    assert len(rows) == arrow.num_rows, "a key is in the snapshot twice"
    return rows


def spark_rows_at(spark: SparkSession, table: Table, ref: str) -> dict[int, Row]:
    frame = spark.read.format("iceberg").option("tag" if ref == TAG else "branch", ref).load(table.metadata_location)
    rows = frame.selectExpr("id", "name", "unix_micros(updated_at) AS micros").collect()
    assert len(rows) == len({row["id"] for row in rows}), "a key is in the snapshot twice"
    return {row["id"]: (row["name"], row["micros"]) for row in rows}


def every_upkeep_step() -> Maintenance:
    """Compaction, rewriteDeletes and manifest rewrites at once, expiry of all but main's head, orphans at once."""
    return Maintenance(
        compaction=Compaction(min_input_files=2), rewrite_deletes=RewriteDeletes(min_delete_files=1),
        rewrite_manifests=RewriteManifests(max_manifests=1),
        expire_snapshots=ExpireSnapshots(older_than="0s", retain_last=1),
    )


@pytest.mark.parametrize("format_version", [2, 3])
def test_a_tag_and_a_branch_stay_readable_through_every_upkeep_step(tmp_path: Path, spark: SparkSession,
                                                                      format_version: int) -> None:
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog, format_version)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random(f"refs-{format_version}")), by_position=True)
    sink = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"), copy_on_write_bytes=0)
    sink.start([])
    for _ in range(2):
        triggers.commit(sink, 300)
    branch = dict(triggers.stream.model)
    branched_id = catalog.load_table(name).metadata.current_snapshot_id
    triggers.commit(sink, 300)
    tagged = dict(triggers.stream.model)
    table = catalog.load_table(name)
    tagged_id = table.metadata.current_snapshot_id
    assert tagged_id is not None and branched_id is not None
    table.manage_snapshots().create_tag(tagged_id, TAG).create_branch(branched_id, BRANCH).commit()
    if format_version == 2:  # another writer's snapshot on its branch only (pyiceberg writes no v3 manifests)
        table = catalog.load_table(name)
        audit = pa.Table.from_pylist([{"id": -7, "name": "audit", "updated_at": None}], schema=table.schema().as_arrow())
        table.append(audit, branch=BRANCH)
        branch[-7] = ("audit", None)

    for _ in range(4):
        triggers.commit(sink, 300)
    upkeep = Maintainer(every_upkeep_step(), sink, catalog, name, TARGET)
    assert upkeep.rewrite() is not None
    assert upkeep.rewrite_manifests() is not None
    expiry = upkeep.expire_snapshots(now_ms=int(time.time() * 1000) + 1000)
    assert expiry.expired_snapshots > 0 and expiry.deleted_files > 0
    upkeep.remove_orphans(now_ms=int(time.time() * 1000) + 10 * 24 * 3600 * 1000)

    table = catalog.load_table(name)
    assert table.metadata.refs[TAG].snapshot_id == tagged_id
    branch_head = table.metadata.refs[BRANCH].snapshot_id
    for snapshot_id in (tagged_id, branch_head):  # every file the refs read is still there
        snapshot = table.metadata.snapshot_by_id(snapshot_id)
        assert snapshot is not None
        paths = file_references(table, [snapshot], live_only=True).values()
        missing = [path for path in paths if not Path(normalize(path).removeprefix("file://")).exists()]
        assert not missing, f"{len(missing)} file(s) of snapshot {snapshot_id} were deleted"
    assert pyiceberg_rows_at(table, tagged_id) == tagged
    assert pyiceberg_rows_at(table, branch_head) == branch
    assert spark_rows_at(spark, table, TAG) == tagged
    assert spark_rows_at(spark, table, BRANCH) == branch
    assert pyiceberg_rows_at(table, table.metadata.current_snapshot_id) == triggers.stream.model  # main, as ever
