"""Built-in maintenance of keyed tables (spark_app/upkeep/runner.py), read back by two independent readers.

Keyed triggers (ChangeStream, as tests/integration/test_keyed_commit.py commits them) leave equality
delete files; a run of ``rewriteDeletes`` (with compaction, as by default) rewrites the data files they
apply to and drops them in ONE fenced ``replace`` snapshot. After it Apache Iceberg's Spark reader must still show exactly the
model, and pyiceberg's reader (which refuses equality deletes) must read the same rows. Further
triggers (updating and deleting keys whose rows were just rewritten) stay equal to the model, a
fenced writer lands no maintenance, expiry keeps resume working, and kills before and after the
maintenance commit lose nothing.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table, Transaction
from pyspark.sql import SparkSession

from icebergsync import protocol
from icebergsync.catalog import ensure_table
from icebergsync.errors import FencedError
from icebergsync.protocol import Writer
from icebergsync.schema import iceberg_schema
from icebergsync.spec import ExpireSnapshots, Maintenance, RemoveOrphans, parse_spec
from icebergsync.storage import normalize
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.references import referenced_files
from spark_app.commit.swap import MaintenanceConflictError
from spark_app.iceberg.applied_deletes import PositionReferences
from spark_app.iceberg.internals import (
    FileKey,
    commit_transaction,
    is_deletion_vector,
    live_files,
    rewrite_files,
)
from spark_app.staging.rewrite_rows import RewriteContext
from spark_app.upkeep.plan import UpkeepPlan
from spark_app.upkeep.rewrite import run_plan
from spark_app.upkeep.runner import Maintainer
from tests.integration.keyed_support import COLUMNS, KEY, ChangeStream, Row, delete_contents, spark_rows
from tests.integration.sync_support import (
    catalog_of,
    run_job_process,
    sink_commits,
    sync_document,
    unreferenced_sink_files,
    write_spec,
)
from tests.integration.test_keyed_commit import SINK, open_catalog, stage

TARGET = 64 * 1024 * 1024


class WideStream(ChangeStream):
    """Mostly new keys, some updates (most move to another day) and deletes of older keys: unlike ChangeStream's
    small key space, most rows outlive many triggers, so a rewrite keeps most rows of the files it rewrites."""

    def records(self, count: int) -> tuple[list[bytes | None], list[bytes | None]]:
        values: list[bytes | None] = []
        live = list(self.model)
        for _ in range(count):
            roll = self.rng.random()
            if roll < 0.6 or len(live) < 10:
                key = self.next_key
                self.next_key += 1
                after, row = self._row(key)
                value, _ = self._emit("c", None, after)
                self.model[key] = row
                live.append(key)
            elif roll < 0.85:
                key = live[self.rng.randrange(len(live))]
                after, row = self._row(key)
                value, _ = self._emit("u", {"id": key, "name": self.model[key][0]}, after)
                self.model[key] = row
            else:
                index = self.rng.randrange(len(live))
                key = live[index]
                live[index] = live[-1]
                live.pop()
                value, _ = self._emit("d", {"id": key, "name": self.model[key][0]}, None)
                del self.model[key]
            values.append(value)
        return values, [None] * len(values)


def pyiceberg_rows(table: Table) -> dict[int, Row]:
    """The table as pyiceberg's own reader reads it (it refuses equality deletes)."""
    arrow = table.scan(selected_fields=("id", "name", "updated_at")).to_arrow()
    micros = pc.cast(arrow.column("updated_at"), "int64").to_pylist()
    rows = dict(zip(arrow.column("id").to_pylist(), zip(arrow.column("name").to_pylist(), micros, strict=True),
                    strict=True))
    assert len(rows) == arrow.num_rows, "a key is in the table twice"
    return rows


def live(table: Table, content: DataFileContent) -> list[str]:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return [f.path for f in live_files(table, snapshot) if f.data_file.content == content]


def timed_spark_read(spark: SparkSession, table: Table) -> tuple[dict[int, Row], float]:
    started = time.perf_counter()
    rows = spark_rows(spark, table)
    return rows, time.perf_counter() - started


def keyed_table(catalog: Catalog, format_version: int = 2) -> str:
    name = f"shop_{uuid.uuid4().hex[:8]}.customers"
    ensure_table(catalog, name, iceberg_schema(COLUMNS), ["day(updated_at)"], {"format-version": str(format_version)},
                 key=KEY)
    return name


class Triggers:
    """Keyed triggers of one change stream, committed through a committer like the job does: the older rows
    deleted by equality deletes, or (``by_position``) by position: position delete files on a format-version 2
    table, deletion vectors on a format-version 3 one."""

    def __init__(self, catalog: Catalog, name: str, stream: ChangeStream, by_position: bool = False):
        self.catalog, self.name, self.stream, self.number = catalog, name, stream, 0
        self.by_position = by_position

    def commit(self, committer: SinkCommitter, records: int) -> None:
        output = stage(self.catalog.load_table(self.name), committer.writer, *self.stream.records(records),
                       self.stream.fmt, f"{self.number:05d}-0", self.by_position)
        committer.commit(output, {"after": f"t{self.number:04d}"})
        self.number += 1


def maintainer(committer: SinkCommitter, catalog: Catalog, name: str, **expiry: object) -> Maintainer:
    """The defaults, with the expiry given (none when not given)."""
    settings = Maintenance(expire_snapshots=ExpireSnapshots(**expiry) if expiry else ExpireSnapshots(enabled=False))  # type: ignore[arg-type]
    return Maintainer(settings, committer, catalog, name, TARGET)


def position_deletes_per_data_file(table: Table) -> Counter[str]:
    """How many live position delete files or DVs name each data file of the head (upkeep leaves at most one)."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    positions = [f for f in live_files(table, snapshot) if f.data_file.content == DataFileContent.POSITION_DELETES]
    return Counter(path for named in PositionReferences().of(table.io, positions).values() for path in named)


def spark_lineage(spark: SparkSession, table: Table) -> dict[int, tuple[int, int]]:
    """Key -> (``_row_id``, ``_last_updated_sequence_number``) of its row, as Iceberg's Spark runtime reads them."""
    frame = spark.read.format("iceberg").load(table.metadata_location)
    rows = frame.selectExpr("id", "_row_id", "_last_updated_sequence_number").collect()
    assert len({row["_row_id"] for row in rows}) == len(rows), "two rows share a row id"
    return {row["id"]: (row["_row_id"], row["_last_updated_sequence_number"]) for row in rows}


def live_dvs(table: Table) -> set[FileKey]:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return {f.key for f in live_files(table, snapshot) if is_deletion_vector(f.data_file)}


def staged_rewrite(committer: SinkCommitter, catalog: Catalog, name: str) -> tuple[UpkeepPlan, list[DataFile]]:
    """A run planned on main's head and its files written, not committed."""
    table = catalog.load_table(name)
    plan = maintainer(committer, catalog, name).plan(table)
    assert plan is not None
    outcomes, _ = run_plan(None, RewriteContext.of(table, TARGET), plan, "isync-test-rewrite")
    return plan, [written for outcome in outcomes for written in outcome.files]


@pytest.mark.parametrize(("catalog_kind", "stream_kind"), [("sql", "narrow"), ("sql", "wide"), ("rest", "wide")])
def test_rewrite_leaves_no_deletes_and_both_readers_see_the_model(tmp_path: Path, spark: SparkSession, catalog_kind: str,
                                                                  stream_kind: str, request: pytest.FixtureRequest) -> None:
    """"narrow": ChangeStream's few keys, each touched by most triggers (re-inserts, key changes, tombstones);
    "wide": WideStream, most rows survive the rewrite. With the REST catalog, Iceberg's Java TableMetadata
    also validates the replace snapshot."""
    catalog = request.getfixturevalue("rest_catalog").load() if catalog_kind == "rest" else open_catalog(tmp_path)
    name = keyed_table(catalog)
    stream_type = WideStream if stream_kind == "wide" else ChangeStream
    triggers = Triggers(catalog, name, stream_type("debezium", random.Random(f"maint-{catalog_kind}-{stream_kind}")))
    v1 = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    v1.start([])
    for _ in range(6):
        triggers.commit(v1, 400)
    table = catalog.load_table(name)
    assert len(live(table, DataFileContent.EQUALITY_DELETES)) == 6
    spark_rows(spark, table)  # warm-up
    before, before_seconds = timed_spark_read(spark, table)
    assert before == triggers.stream.model
    head = table.current_snapshot()
    assert head is not None

    maintenance = maintainer(v1, catalog, name)
    result = maintenance.rewrite()
    assert result is not None and result.removed_delete_files == 6 and result.rows_written < result.rows_read
    if stream_kind == "wide":
        assert result.added_files > 0 and result.rows_written > result.rows_read // 2
    table = catalog.load_table(name)
    assert live(table, DataFileContent.EQUALITY_DELETES) == []
    after, after_seconds = timed_spark_read(spark, table)
    assert after == triggers.stream.model
    assert pyiceberg_rows(table) == triggers.stream.model
    print(f"\n[{catalog_kind}] spark read before maintenance {before_seconds * 1000:.0f} ms, after "
          f"{after_seconds * 1000:.0f} ms; rewrite {result.seconds * 1000:.0f} ms for {result.rewritten_files} files "
          f"({result.rows_read} rows, {result.bytes_read} bytes) into {result.added_files}")

    # ONE replace snapshot of kind maintenance carrying the frontier and checkpoint; the replacements
    # have the planned head's sequence number as their data sequence number.
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None and snapshot.parent_snapshot_id == head.snapshot_id
    assert snapshot.summary.operation.value == "replace"
    commit = protocol.parse_commit(snapshot)
    assert commit is not None and commit.kind == protocol.KIND_MAINTENANCE and commit.frontier == {"after": "t0005"}
    assert commit.writer == v1.writer and commit.records == 0
    checkpoint = protocol.parse_checkpoint(table.metadata, SINK)
    assert checkpoint is not None and checkpoint.snapshot_id == snapshot.snapshot_id
    assert checkpoint.frontier == {"after": "t0005"} and checkpoint.sequence_number == snapshot.sequence_number
    progress = protocol.read_progress(table.metadata, SINK)
    assert progress.frontier == {"after": "t0005"} and progress.resumed_from == "snapshot"
    added = [f for f in live_files(table, snapshot) if f.data_file.content == DataFileContent.DATA]
    assert {f.data_sequence_number for f in added} == {head.sequence_number}

    # More triggers update and delete keys whose rows were just rewritten: their deletes apply to the
    # replacements. Maintenance interleaved with them keeps both readers on the model.
    for round_number in range(3):
        for _ in range(2):
            triggers.commit(v1, 400)
            assert spark_rows(spark, catalog.load_table(name)) == triggers.stream.model
        assert maintenance.rewrite() is not None
        table = catalog.load_table(name)
        assert live(table, DataFileContent.EQUALITY_DELETES) == [], f"round {round_number}"
        assert spark_rows(spark, table) == triggers.stream.model
        assert pyiceberg_rows(table) == triggers.stream.model
    assert maintenance.rewrite() is None  # nothing to do
    assert [c.kind for c in sink_commits(catalog.load_table(name), SINK)][-1] == protocol.KIND_MAINTENANCE

    # A restart resumes from the maintenance snapshot's frontier and goes on.
    v2 = SinkCommitter(catalog, name, Writer(SINK, 2, "attempt2"))
    assert v2.start([]).frontier == {"after": f"t{triggers.number - 1:04d}"}
    triggers.commit(v2, 400)
    assert spark_rows(spark, catalog.load_table(name)) == triggers.stream.model


@pytest.mark.parametrize(("catalog_kind", "format_version"), [("sql", 2), ("sql", 3), ("rest", 3)])
def test_upkeep_of_deletes_by_position_keeps_the_model_with_fewer_files_and_one_delete_per_data_file(
        tmp_path: Path, spark: SparkSession, catalog_kind: str, format_version: int,
        request: pytest.FixtureRequest) -> None:
    """Keyed triggers deleting by position (position delete files on format 2, deletion vectors on format 3) pile
    up small files; a run compacts them, dropping the rows their deletes remove and the deletes with them; then
    upkeep after every trigger, as the job runs it. Both readers see the model throughout, and every data file
    has at most one position delete file or DV after each run; on format 3 every row keeps its row lineage
(``_row_id``, ``_last_updated_sequence_number``) through the rewrites. With the REST catalog, Iceberg's Java
    TableMetadata also validates the v3 replace snapshots (row lineage fields)."""
    catalog = request.getfixturevalue("rest_catalog").load() if catalog_kind == "rest" else open_catalog(tmp_path)
    name = keyed_table(catalog, format_version)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random(f"by-position-{format_version}")),
                        by_position=True)
    v1 = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    v1.start([])
    for _ in range(8):
        triggers.commit(v1, 300)
    table = catalog.load_table(name)
    assert set(delete_contents(table)) == {"deletion-vector" if format_version == 3 else "position"}
    files_before = len(live(table, DataFileContent.DATA))

    def lineage(table: Table) -> dict[int, tuple[int, int]] | None:
        return spark_lineage(spark, table) if format_version == 3 else None

    maintenance = maintainer(v1, catalog, name)
    before = lineage(table)
    result = maintenance.rewrite()
    assert result is not None and result.rewritten_files > result.added_files and result.rows_written < result.rows_read
    table = catalog.load_table(name)
    assert lineage(table) == before  # on format 3 the rows keep their row ids and last updated sequence numbers
    assert len(live(table, DataFileContent.DATA)) < files_before
    assert max(position_deletes_per_data_file(table).values(), default=0) <= 1
    assert spark_rows(spark, table) == triggers.stream.model and pyiceberg_rows(table) == triggers.stream.model
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None and snapshot.summary.operation.value == "replace"
    if format_version == 3:
        assert table.metadata.format_version == 3 and snapshot.summary["removed-dvs"] == str(result.removed_delete_files)

    for _ in range(4):  # the files rewritten before, lineage columns and all, are rewritten again
        triggers.commit(v1, 300)
        before = lineage(catalog.load_table(name))
        maintenance.after_commit()
        table = catalog.load_table(name)
        assert lineage(table) == before
        assert max(position_deletes_per_data_file(table).values(), default=0) <= 1
        assert spark_rows(spark, table) == triggers.stream.model and pyiceberg_rows(table) == triggers.stream.model
    assert maintenance.totals.runs > 1 and unreferenced_sink_files(catalog.load_table(name), SINK) == []


def test_the_dvs_a_run_leaves_in_a_puffin_file_stay_valid_through_expiry_and_orphan_removal(
        tmp_path: Path, spark: SparkSession) -> None:
    """Each keyed commit on a format-3 table writes one Puffin file with the DVs of data files of every day; a run
    bounded to a few files rewrites some of them: their DVs go, one by one, the others of the same Puffin files
    stay live. Expiry and orphan removal keep those Puffin files; later triggers replace such DVs."""
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog, 3)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random("shared-puffin")), by_position=True)
    v1 = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    v1.start([])
    for _ in range(6):
        triggers.commit(v1, 300)
    before = live_dvs(catalog.load_table(name))
    settings = Maintenance(max_files_per_run=6, expire_snapshots=ExpireSnapshots(older_than="0s", retain_last=1),
                           remove_orphans=RemoveOrphans(older_than="0s"))
    maintenance = Maintainer(settings, v1, catalog, name, TARGET)
    result = maintenance.rewrite()
    assert result is not None and result.deferred_groups > 0
    table = catalog.load_table(name)
    after = live_dvs(table)
    gone, kept = before - after, before & after
    shared = {path for path, _ in gone} & {path for path, _ in kept}
    assert gone and shared, "no Puffin file kept some of its DVs and lost others: the case is not exercised"
    assert spark_rows(spark, table) == triggers.stream.model and pyiceberg_rows(table) == triggers.stream.model

    now = int(time.time() * 1000) + 1000
    assert maintenance.expire_snapshots(now_ms=now).expired_snapshots > 0
    maintenance.remove_orphans(now_ms=now)
    table = catalog.load_table(name)
    assert len(table.metadata.snapshots) == 1 and all(Path(normalize(path)).exists() for path in shared)
    assert unreferenced_sink_files(table, SINK) == []
    assert spark_rows(spark, table) == triggers.stream.model and pyiceberg_rows(table) == triggers.stream.model

    for _ in range(3):  # their rows deleted again: a kept DV is replaced by its union with the new positions
        triggers.commit(v1, 300)
        maintenance.after_commit()
        table = catalog.load_table(name)
        assert max(position_deletes_per_data_file(table).values(), default=0) <= 1
        assert spark_rows(spark, table) == triggers.stream.model and pyiceberg_rows(table) == triggers.stream.model
    assert kept - live_dvs(table), "no DV kept by the run was replaced later"


def test_replacements_keep_the_planned_sequence_number_so_later_deletes_apply(tmp_path: Path,
                                                                               spark: SparkSession) -> None:
    """A rewrite planned on S0 that lands after a trigger updating its keys: with the data sequence number of
    S0 the trigger's deletes still apply to the replacements (with the new snapshot's they would not)."""
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random("sequence")))
    v1 = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    v1.start([])
    for _ in range(4):
        triggers.commit(v1, 300)
    plan, added = staged_rewrite(v1, catalog, name)
    assert plan.rewritten and len(plan.removable) == 4 and added
    triggers.commit(v1, 300)  # updates and deletes of keys the rewrite holds, committed after S0
    assert spark_rows(spark, catalog.load_table(name)) == triggers.stream.model

    # The committer refuses to land a rewrite planned on a head main has moved past.
    with pytest.raises(MaintenanceConflictError):
        v1.commit_maintenance(plan.snapshot, [f.data_file for f in plan.rewritten + list(plan.removable)], added)

    def land(sequence_number: int) -> list[tuple[int, str, int]]:
        """The rows Spark reads with the rewrite landed with this data sequence number (then main is set back)."""
        table = catalog.load_table(name)
        head = table.metadata.current_snapshot_id
        assert head is not None
        transaction = Transaction(table)
        rewrite_files(transaction, {}, [f.data_file for f in plan.rewritten + list(plan.removable)], added, sequence_number)
        commit_transaction(catalog, table, transaction)
        frame = spark.read.format("iceberg").load(catalog.load_table(name).metadata_location)
        rows = sorted(tuple(row) for row in frame.selectExpr("id", "name", "unix_micros(updated_at)").collect())
        catalog.load_table(name).manage_snapshots().set_current_snapshot(snapshot_id=head).commit()
        return rows

    model = sorted((key, *row) for key, row in triggers.stream.model.items())
    assert plan.snapshot.sequence_number is not None
    assert land(plan.snapshot.sequence_number) == model
    wrong = catalog.load_table(name).metadata.next_sequence_number()
    assert land(wrong) != model  # the rule matters: updated keys would show twice, deleted ones live again


@pytest.mark.parametrize(("format_version", "by_position"), [(2, False), (3, True)])
def test_a_fenced_writer_lands_no_maintenance(tmp_path: Path, spark: SparkSession, format_version: int,
                                              by_position: bool) -> None:
    """Equality deletes on format 2, deletion vectors on format 3: a stale version's run is refused by the fence
    and leaves nothing behind."""
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog, format_version)
    triggers = Triggers(catalog, name, ChangeStream("debezium", random.Random("fenced")), by_position)
    v1 = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    v1.start([])
    for _ in range(3):
        triggers.commit(v1, 300)
    SinkCommitter(catalog, name, Writer(SINK, 2, "attempt2")).start([])
    head = catalog.load_table(name).metadata.current_snapshot_id
    stale = maintainer(v1, catalog, name, older_than="0s", retain_last=1)
    assert stale.plan(catalog.load_table(name)) is not None  # a run is due: only the fence stops it
    with pytest.raises(FencedError):
        stale.rewrite()
    with pytest.raises(FencedError):
        stale.after_commit()
    with pytest.raises(FencedError):
        stale.expire_snapshots()
    table = catalog.load_table(name)
    assert table.metadata.current_snapshot_id == head and len(table.metadata.snapshots) == 5
    assert unreferenced_sink_files(table, SINK) == []  # the stale rewrite's replacements were deleted
    assert spark_rows(spark, table) == triggers.stream.model


def test_commits_beyond_max_snapshots_expire_at_once_whatever_their_age(tmp_path: Path, spark: SparkSession) -> None:
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random("max-snapshots")))
    sink = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    sink.start([])
    maintenance = Maintainer(Maintenance(compaction={"enabled": False}, rewrite_deletes={"enabled": False},
                                         expire_snapshots={"max_snapshots": 4, "retain_last": 2}),
                             sink, catalog, name, 64 * 1024 * 1024)
    counts = []
    for _ in range(8):
        triggers.commit(sink, 50)
        maintenance.after_commit()  # the 10-minute period has not passed: only the count makes expiry due
        counts.append(sum(1 for _ in protocol.main_ancestry(catalog.load_table(name).metadata)))
    assert max(counts) <= 4 and counts[-1] == 4, counts
    table = catalog.load_table(name)
    assert len(table.metadata.snapshots) == 4 and maintenance.totals.snapshots_expired > 0
    assert spark_rows(spark, table) == triggers.stream.model
    resumed = SinkCommitter(catalog, name, Writer(SINK, 2, "attempt2"))
    assert resumed.start([]).frontier == {"after": f"t{triggers.number - 1:04d}"}


@pytest.mark.parametrize("enabled", ["compaction", "rewrite_deletes"])
def test_either_of_compaction_and_rewrite_deletes_alone_runs_the_rewrite(tmp_path: Path, enabled: str) -> None:
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog)
    triggers = Triggers(catalog, name, ChangeStream("debezium", random.Random(f"alone-{enabled}")))
    sink = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    sink.start([])
    off = {"compaction": {"enabled": enabled == "compaction"},
           "rewrite_deletes": {"enabled": enabled == "rewrite_deletes"}}
    maintenance = Maintainer(Maintenance(**off, expire_snapshots={"enabled": False}),  # type: ignore[arg-type]
                             sink, catalog, name, TARGET)
    for _ in range(12):
        triggers.commit(sink, 50)
        maintenance.after_commit()
    assert maintenance.totals.runs > 0


def test_expiry_by_count_goes_a_fifth_below_max_snapshots_so_it_is_not_due_after_every_commit(
        tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random("max-snapshots-margin")))
    sink = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    sink.start([])
    maintenance = Maintainer(Maintenance(compaction={"enabled": False}, rewrite_deletes={"enabled": False},
                                         expire_snapshots={"max_snapshots": 10, "retain_last": 2}),
                             sink, catalog, name, 64 * 1024 * 1024)
    counts = []
    for _ in range(20):
        triggers.commit(sink, 20)
        maintenance.after_commit()
        counts.append(sum(1 for _ in protocol.main_ancestry(catalog.load_table(name).metadata)))
    # 10 is the most kept; a commit that finds more expires down to 8, so it is due again only two commits later
    # (down to 10, it would be due after every commit once main reached the limit).
    expiries = [i for i in range(1, len(counts)) if counts[i] < counts[i - 1]]
    assert max(counts) <= 10 and expiries and all(counts[i] == 8 for i in expiries), counts
    assert len(expiries) <= 6 and maintenance.totals.snapshots_expired >= 3 * len(expiries), counts


def test_expiry_under_the_fence_keeps_resume_and_deletes_only_dead_files(tmp_path: Path, spark: SparkSession) -> None:
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random("expiry")))
    v1 = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    v1.start([])
    for _ in range(4):
        triggers.commit(v1, 300)
    maintenance = maintainer(v1, catalog, name, older_than="0s", retain_last=1)
    assert maintenance.rewrite() is not None
    before = catalog.load_table(name)
    ever = referenced_files(before)
    expiry = maintenance.expire_snapshots(now_ms=int(time.time() * 1000) + 1000)
    table = catalog.load_table(name)
    assert expiry.expired_snapshots == len(before.metadata.snapshots) - 1 and len(table.metadata.snapshots) == 1
    assert expiry.deleted_files > 0
    live_paths = {normalize(p) for p in live(table, DataFileContent.DATA)}
    assert live_paths and all(Path(path).exists() for path in live_paths)
    # The files the rewrite removed (recorded as deleted by the head, read by no remaining snapshot) are gone.
    assert not any(Path(path).exists() for path in ever - referenced_files(table))
    assert spark_rows(spark, table) == triggers.stream.model and pyiceberg_rows(table) == triggers.stream.model
    assert unreferenced_sink_files(table, SINK) == []

    # The sink goes on after expiry; a restart resumes from the head (its maintenance snapshot).
    triggers.commit(v1, 300)
    table = catalog.load_table(name)
    maintenance.expire_snapshots(now_ms=int(time.time() * 1000) + 1000)
    table = catalog.load_table(name)
    assert len(table.metadata.snapshots) == 1
    v2 = SinkCommitter(catalog, name, Writer(SINK, 2, "attempt2"))
    assert v2.start([]).frontier == {"after": f"t{triggers.number - 1:04d}"}
    triggers.commit(v2, 300)
    assert spark_rows(spark, catalog.load_table(name)) == triggers.stream.model

    # Another writer's snapshot on top, then expiry of everything but it: the checkpoint still resumes.
    table = catalog.load_table(name)
    with table.transaction() as foreign, foreign.update_snapshot().fast_append():
        pass  # an empty append by another writer
    assert protocol.read_progress(catalog.load_table(name).metadata, SINK).foreign_snapshots_on_top == 1
    v2_maintenance = maintainer(v2, catalog, name, older_than="0s", retain_last=1)
    v2_maintenance.expire_snapshots(now_ms=int(time.time() * 1000) + 1000)
    table = catalog.load_table(name)
    progress = protocol.read_progress(table.metadata, SINK)
    assert progress.frontier == {"after": f"t{triggers.number - 1:04d}"}
    v3 = SinkCommitter(catalog, name, Writer(SINK, 3, "attempt3"))
    assert v3.start([]).frontier == {"after": f"t{triggers.number - 1:04d}"}
    triggers.commit(v3, 300)
    assert spark_rows(spark, catalog.load_table(name)) == triggers.stream.model


SCHEMA = [{"name": "id", "type": "long", "required": True}, {"name": "name", "type": "string"},
          {"name": "updated_at", "type": "timestamptz"}]


def write_change_files(inbox: Path, stream: ChangeStream, files: int, records: int,
                       first: int = 0) -> list[dict[int, Row]]:
    """Debezium change files ``first``… and the model after each of them."""
    models = []
    for number in range(first, first + files):
        values, _ = stream.records(records)
        (inbox / f"{number:04d}.json").write_text("\n".join((value or b"null").decode() for value in values) + "\n")
        models.append(dict(stream.model))
    return models


@pytest.mark.parametrize(("format_version", "deletes", "first_run"), [("2", "equality", 2), ("3", "position", 1)])
def test_kills_before_and_after_the_maintenance_commit_lose_nothing(tmp_path: Path, spark: SparkSession,
                                                                    format_version: str, deletes: str,
                                                                    first_run: int) -> None:
    """The job with maintenance after every commit, SIGKILLed with the rewrite staged, then right after the
    maintenance commit; a higher version resumes, cleans up and ends with the model, no equality delete files and
    at most one position delete per data file. Equality deletes on format 2 (the first trigger's run drops its
    delete file, so the second trigger's is the run killed); deletion vectors on format 3 (the first trigger
    deletes nothing, so the first run is the second trigger's)."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    stream = WideStream("debezium", random.Random("maintenance-crash"))
    models = write_change_files(inbox, stream, 3, 500)
    document = sync_document(tmp_path, {"files": {"path": str(inbox), "maxFilesPerTrigger": 1}}, schema=SCHEMA,
                             table={"key": ["id"], "partitionBy": ["day(updated_at)"],
                                    "properties": {"format-version": format_version}},
                             # (position deletes, not the commit's copy-on-write: the run must have deletes to rewrite)
                             changes={"format": "debezium", "deletes": deletes, "copyOnWriteBelow": "0"},
                             deadLetter={"table": "sales.orders_dlq"},
                             maintenance={"rewriteDeletes": {"afterCommits": 1},
                                          "expireSnapshots": {"olderThan": "0s", "retainLast": 1, "every": "1ms"}})
    spec_path = write_spec(tmp_path, document)
    catalog = catalog_of(parse_spec(document))
    name, sink = "sales.orders", "test/orders"

    # The second trigger's run rewrites the first trigger's files and is killed before its commit.
    status, log = run_job_process(spec_path, 1, crash_at=f"maintenance-staged:{first_run}", timeout=180)
    assert status == -9, log[-3000:]
    table = catalog.load_table(name)
    head = sink_commits(table, sink)[-1]
    assert head.kind == protocol.KIND_DATA and head.frontier == {"after": "0001.json"}
    assert unreferenced_sink_files(table, sink), "the killed rewrite's replacements were staged"
    assert spark_rows(spark, table) == models[1]

    status, log = run_job_process(spec_path, 1, crash_at="maintenance-committed:1", timeout=180)
    assert status == -9, log[-3000:]
    table = catalog.load_table(name)
    kinds = [c.kind for c in sink_commits(table, sink)]
    assert kinds[-1] == protocol.KIND_MAINTENANCE and kinds.count("data") >= 1
    assert sink_commits(table, sink)[-1].frontier == {"after": "0002.json"}
    assert live(table, DataFileContent.EQUALITY_DELETES) == []
    assert max(position_deletes_per_data_file(table).values(), default=0) <= 1
    assert spark_rows(spark, table) == models[2] and pyiceberg_rows(table) == models[2]

    write_change_files(inbox, stream, 2, 500, first=3)

    def done() -> bool:
        commits = sink_commits(catalog.load_table(name), sink)
        return bool(commits) and commits[-1].frontier == {"after": "0004.json"} \
            and (deletes == "position" or commits[-1].kind == protocol.KIND_MAINTENANCE)  # no equality delete left

    status, log = run_job_process(spec_path, 2, stop_when=done, timeout=240)
    assert status == 0, log[-3000:]
    table = catalog.load_table(name)
    assert spark_rows(spark, table) == stream.model
    assert pyiceberg_rows(table) == stream.model
    assert live(table, DataFileContent.EQUALITY_DELETES) == []
    assert max(position_deletes_per_data_file(table).values(), default=0) <= 1
    assert unreferenced_sink_files(table, sink) == []
    assert len(table.metadata.snapshots) <= 2  # expired down to the newest (plus at most the stop's last commit)
    assert json.loads(table.metadata.properties[protocol.checkpoint_key(sink)])["frontier"] == {"after": "0004.json"}


def test_figures_read_time_before_and_after_and_the_cost_of_a_rewrite(tmp_path: Path, spark: SparkSession) -> None:
    """Prints (never asserts) what docs/operations.md reports: Spark's read time of a keyed table with the
    delete files of 20 triggers and after ``rewriteDeletes``, and what the rewrite cost. Asserts the rows."""
    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random("figures")))
    v1 = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    v1.start([])
    initial = int(os.environ.get("ICEBERGSYNC_FIGURES_ROWS", "100000"))  # larger runs: docs/operations.md
    triggers.commit(v1, initial)
    for _ in range(20):
        triggers.commit(v1, max(2_000, initial // 50))

    def read_seconds() -> float:
        location = catalog.load_table(name).metadata_location
        timings = []
        for _ in range(3):
            started = time.perf_counter()
            spark.read.format("iceberg").load(location).selectExpr("sum(hash(id, name, updated_at))").collect()
            timings.append(time.perf_counter() - started)
        return min(timings)

    table = catalog.load_table(name)
    deletes = len(live(table, DataFileContent.EQUALITY_DELETES))
    data_files = len(live(table, DataFileContent.DATA))
    before = read_seconds()
    result = maintainer(v1, catalog, name).rewrite()
    assert result is not None
    after = read_seconds()
    table = catalog.load_table(name)
    started = time.perf_counter()
    assert pyiceberg_rows(table) == triggers.stream.model
    pyiceberg_seconds = time.perf_counter() - started
    assert spark_rows(spark, table) == triggers.stream.model
    print(f"\nfigures: {len(triggers.stream.model)} rows, {data_files} data files and {deletes} delete files; Spark read "
          f"{before * 1000:.0f} ms before rewriteDeletes, {after * 1000:.0f} ms after; rewrite {result.seconds:.2f} s "
          f"({result.rewritten_files} files, {result.rows_read} rows, {result.bytes_read / 1e6:.1f} MB read, "
          f"{result.rows_read - result.rows_written} rows dropped, {result.added_files} files written, "
          f"commit included); pyiceberg read after {pyiceberg_seconds * 1000:.0f} ms "
          f"({len(live(table, DataFileContent.DATA))} data files)")


def test_another_writers_deletes_pin_the_files_they_apply_to(tmp_path: Path, spark: SparkSession) -> None:
    """An equality delete on other columns than the key (another writer's) is not the sink's: the files it
    applies to are never rewritten and it stays; the rows it deletes stay deleted, the others readable."""
    import dataclasses

    import pyarrow as pa

    from spark_app.iceberg.internals import row_delta
    from spark_app.staging.equality_deletes import delete_plan, write_equality_deletes

    catalog = open_catalog(tmp_path)
    name = keyed_table(catalog)
    triggers = Triggers(catalog, name, WideStream("debezium", random.Random("foreign")))
    v1 = SinkCommitter(catalog, name, Writer(SINK, 1, "attempt1"))
    v1.start([])
    for _ in range(2):
        triggers.commit(v1, 200)
    table = catalog.load_table(name)
    victim = sorted(triggers.stream.model)[0]
    by_name = dataclasses.replace(delete_plan(table), key=("name",))
    foreign = write_equality_deletes(by_name, pa.table({"name": [triggers.stream.model[victim][0]]}), "foreign")
    assert foreign is not None
    transaction = Transaction(table)
    row_delta(transaction, {}, [], [foreign])
    commit_transaction(catalog, table, transaction)
    data_before = set(live(catalog.load_table(name), DataFileContent.DATA))
    result = maintainer(v1, catalog, name).rewrite()  # at most drops the sink's delete that applies to nothing
    table = catalog.load_table(name)
    assert set(live(table, DataFileContent.DATA)) == data_before and foreign.file_path in live(
        table, DataFileContent.EQUALITY_DELETES)
    assert result is None or result.rewritten_files == 0
    expected = {key: row for key, row in triggers.stream.model.items() if key != victim}
    assert spark_rows(spark, table) == expected and unreferenced_sink_files(table, SINK) == []
