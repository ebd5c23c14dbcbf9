"""Built-in table maintenance, run by the sink's driver between triggers, under the sink's fence.

Two jobs (``spec.maintenance``, docs/operations.md "Maintenance"):

- **rewriteDeletes** (keyed tables): every data file to which an equality delete file applies
  (delete sequence number > the file's data sequence number) is read with pyarrow, the rows whose
  key an applicable delete names are dropped, and the rest is written again with the rolling
  writer (same partition, target file size; files of one partition are merged). ONE ``replace``
  snapshot of kind ``maintenance`` removes the rewritten data files and the delete files that no
  longer apply to any remaining data file, and adds the replacements with the **data sequence
  number of the snapshot the rewrite was planned on** (Iceberg's ``RewriteFiles`` with
  ``use-starting-sequence-number``): a delete committed later still applies to them, one
  committed at or before it has been applied by the rewrite. It carries the sink's frontier and
  checkpoint unchanged and goes through the committer's fenced compare-and-swap, so a fenced sink
  never lands it and it never races the sink's own commits (the loop runs it between triggers).
  Once converged the table has no delete files, and pyiceberg's reader reads it.
- **expireSnapshots**: snapshots older than ``olderThan`` beyond the newest ``retainLast`` of main
  are expired through the same fenced compare-and-swap; then the files only they referenced
  (data, delete and manifest files, manifest lists) are deleted. Recovery does not need them: the
  checkpoint table property survives expiry (docs/protocol.md, "Recovery").

Crash points (spark_app/faults.py): ``maintenance-staged`` (replacements written, not committed) and
``maintenance-committed`` (right after the maintenance commit).

The rewrite runs in the driver (pyarrow, one batch of one file at a time, the live delete keys held in memory): it suits
tables up to a few GiB between runs; docs/operations.md gives the measured cost.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from icebergsync.errors import CommitStateUnknownError, IcebergSyncError
from icebergsync.spec import Maintenance
from icebergsync.storage import normalize
from spark_app.committer import MaintenanceConflictError, SinkCommitter, attempt_file_prefix
from spark_app.faults import crash_point
from spark_app.iceberg_internals import LiveFile, live_files
from spark_app.writer import PartitionedWriter, TablePlan, conform

log = logging.getLogger("icebergsync.maintenance")

REWRITE_MEMORY_BYTES = 256 * 1024 * 1024
REWRITE_BATCH_ROWS = 64 * 1024  # a data file is read a batch at a time
SEQUENCE_COLUMN = "__isync_delete_sequence"


@dataclass(frozen=True)
class RewritePlan:
    """What one rewrite does, planned on one main snapshot."""

    snapshot: Snapshot  # the replacements get its sequence number as their data sequence number
    data: list[LiveFile]  # data files some equality delete applies to: rewritten
    deletes: list[LiveFile]  # every live equality delete file (read to apply them)
    removable: list[LiveFile]  # delete files applying to no data file that remains: removed


@dataclass
class RewriteResult:
    snapshot_id: int
    rewritten_files: int
    removed_delete_files: int
    added_files: int
    rows_read: int
    rows_written: int
    bytes_read: int
    seconds: float


@dataclass
class ExpiryResult:
    expired_snapshots: int
    deleted_files: int
    seconds: float


def plan_rewrite(table: Table) -> RewritePlan | None:
    """The rewrite of ``table``'s main head, or None when no equality delete file is live.

    A delete file is removable when no data file that stays has a data sequence number below its
    own (it applies to none of them); the replacements do not count, their data sequence number
    is the planned snapshot's, at or above every live delete's. Only the sink's kind of delete is
    handled (equality deletes on the key under an unpartitioned spec): position deletes, partitioned
    equality deletes or deletes on other columns (another writer's) make it raise ``ValueError``.
    """
    snapshot = table.metadata.current_snapshot()
    if snapshot is None:
        return None
    files = live_files(table, snapshot)
    if any(f.data_file.content == DataFileContent.POSITION_DELETES for f in files):
        raise ValueError(f"table {table.name()} has position delete files: rewriteDeletes handles equality "
                         "deletes only; nothing was rewritten")
    deletes = [f for f in files if f.data_file.content == DataFileContent.EQUALITY_DELETES]
    schema = table.schema()
    key_ids = sorted(schema.identifier_field_ids)
    specs = table.metadata.specs()
    for delete in deletes:
        # Another writer's deletes (partitioned, or on other columns) have other rules: refused, not misapplied.
        if specs[delete.data_file.spec_id].fields or sorted(delete.data_file.equality_ids or []) != key_ids:
            raise ValueError(f"delete file {delete.path} is not a global equality delete on the key {key_ids} (spec "
                             f"{delete.data_file.spec_id}, equality ids {delete.data_file.equality_ids}): rewriteDeletes "
                             "handles the sink's own deletes only; nothing was rewritten")
    if not deletes:
        return None
    newest = max(d.data_sequence_number for d in deletes)
    data = [f for f in files if f.data_file.content == DataFileContent.DATA]
    rewritten = [f for f in data if f.data_sequence_number < newest]
    staying = [f.data_sequence_number for f in data if f.data_sequence_number >= newest]
    lowest_staying = min(staying, default=None)
    removable = [d for d in deletes if lowest_staying is None or lowest_staying >= d.data_sequence_number]
    return RewritePlan(snapshot, rewritten, deletes, removable)


def _read_parquet(table: Table, path: str, columns: list[str] | None = None) -> pa.Table:
    with table.io.new_input(path).open() as stream:
        return pq.read_table(stream, columns=columns)


def _delete_keys(table: Table, deletes: list[LiveFile], key: list[str], target: pa.Schema) -> pa.Table:
    """Every live delete's keys (cast to the table's key types), with the delete's sequence number."""
    key_schema = pa.schema([target.field(name).remove_metadata() for name in key])
    parts = []
    for delete in deletes:
        keys = _read_parquet(table, delete.path, key)
        columns = [keys.column(name).cast(key_schema.field(name).type) for name in key]
        sequence = pa.array([delete.data_sequence_number] * keys.num_rows, pa.int64())
        parts.append(pa.Table.from_arrays([*columns, sequence], names=[*key, SEQUENCE_COLUMN]))
    if not parts:
        return pa.Table.from_arrays([pa.array([], f.type) for f in key_schema] + [pa.array([], pa.int64())],
                                    names=[*key, SEQUENCE_COLUMN])
    return pa.concat_tables(parts)


def _table_plan(table: Table, spec_id: int) -> TablePlan:
    return TablePlan(table.metadata.location, dict(table.metadata.properties), table.schema(),
                     table.metadata.specs()[spec_id], dict(table.io.properties))


def rewrite_data_files(table: Table, plan: RewritePlan, name_prefix: str, target_file_bytes: int
                       ) -> tuple[list[DataFile], int, int, int]:
    """Write ``plan.data`` again without the rows its applicable deletes remove.

    Returns the replacement files (same partition spec and partition as the rows' originals; files
    of one partition are merged up to the target size), rows read, rows written and bytes read. On
    failure every replacement written so far is deleted.
    """
    key = list(table.schema().identifier_field_names())
    ordered_key = [f.name for f in table.schema().fields if f.name in key]
    target = table.schema().as_arrow()
    deletes = _delete_keys(table, plan.deletes, ordered_key, target)
    applicable_cache: dict[int, pa.Table] = {}
    writers: dict[int, PartitionedWriter] = {}
    rows_read = rows_written = bytes_read = 0
    try:
        for data in sorted(plan.data, key=lambda f: (f.data_file.spec_id, f.path)):
            spec_id = data.data_file.spec_id
            if spec_id not in writers:
                writers[spec_id] = PartitionedWriter(_table_plan(table, spec_id), f"{name_prefix}-s{spec_id}",
                                                     target_file_bytes, REWRITE_MEMORY_BYTES)
            writer = writers[spec_id]
            arrow_schema = _table_plan(table, spec_id).arrow_schema()
            sequence = data.data_sequence_number
            if sequence not in applicable_cache:
                later = deletes.filter(pc.greater(deletes.column(SEQUENCE_COLUMN), sequence))
                applicable_cache[sequence] = later.select(ordered_key).group_by(ordered_key).aggregate([])
            applicable = applicable_cache[sequence]
            bytes_read += data.data_file.file_size_in_bytes
            with table.io.new_input(data.path).open() as stream:
                for batch in pq.ParquetFile(stream).iter_batches(batch_size=REWRITE_BATCH_ROWS):
                    rows = pa.Table.from_batches([batch])
                    rows_read += rows.num_rows
                    if applicable.num_rows:
                        keys = [rows.column(k).cast(applicable.schema.field(k).type) for k in ordered_key]
                        keep = pa.Table.from_arrays([*keys, pa.array(np.arange(rows.num_rows, dtype=np.int64))],
                                                    names=[*ordered_key, "__isync_row"])
                        survivors = keep.join(applicable, keys=ordered_key, join_type="left anti").column("__isync_row")
                        rows = rows.take(pc.take(survivors, pc.sort_indices(survivors)))  # in file order
                    for conformed in (conform(b, arrow_schema) for b in rows.to_batches()):
                        rows_written += conformed.num_rows
                        writer.write(conformed)
        added = [data_file for writer in writers.values() for data_file in writer.finish()]
    except BaseException:
        for writer in writers.values():
            with contextlib.suppress(Exception):
                writer.abort()
        raise
    return added, rows_read, rows_written, bytes_read


class Maintainer:
    """Runs ``spec.maintenance`` between the sink's triggers; does nothing when it is not declared."""

    def __init__(self, settings: Maintenance | None, committer: SinkCommitter, catalog: Catalog, identifier: str,
                 target_file_bytes: int, clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.committer = committer
        self.catalog = catalog
        self.identifier = identifier
        self.target_file_bytes = target_file_bytes
        self._clock = clock
        self._commits_since_rewrite = 0
        self._last_rewrite = clock()
        self._last_expiry = clock()
        self._runs = 0
        self.rewrites: list[RewriteResult] = []
        self.expiries: list[ExpiryResult] = []

    def after_commit(self) -> None:
        """Called by the job loop after each data commit: run what is due.

        A fenced writer stops here as in a commit (``FencedError``); a rewrite that found main moved
        (another writer committed while it was planned) is dropped and retried when next due; any
        other failure of maintenance is logged and retried when next due, never stopping the sync.
        """
        if self.settings is None:
            return
        self._commits_since_rewrite += 1
        rewrite = self.settings.rewrite_deletes
        if rewrite is not None and rewrite.due(self._commits_since_rewrite, self._clock() - self._last_rewrite):
            self._commits_since_rewrite = 0
            self._last_rewrite = self._clock()
            self._guarded("rewriteDeletes", self.rewrite_deletes)
        expire = self.settings.expire_snapshots
        if expire is not None and self._clock() - self._last_expiry >= expire.every_seconds:
            self._last_expiry = self._clock()
            self._guarded("expireSnapshots", self.expire_snapshots)

    def _guarded(self, what: str, run: Callable[[], object]) -> None:
        try:
            run()
        except MaintenanceConflictError as exc:
            log.info("%s: maintenance %s skipped: %s", self.committer.writer.sink_id, what, exc)
        except IcebergSyncError:
            raise  # fenced, table changed, rolled back, unknown outcome: as for a data commit
        except Exception:
            log.exception("%s: maintenance %s failed; the sync goes on and retries when it is next due",
                          self.committer.writer.sink_id, what)

    def rewrite_deletes(self) -> RewriteResult | None:
        """Rewrite the data files equality deletes apply to and drop those deletes, in ONE fenced snapshot.

        None when the table holds fewer live delete files than ``minDeleteFiles`` (1 when not configured).
        """
        started = time.monotonic()
        minimum = self.settings.rewrite_deletes.min_delete_files \
            if self.settings is not None and self.settings.rewrite_deletes is not None else 1
        table = self.catalog.load_table(self.identifier)
        head = table.metadata.current_snapshot()
        summary = head.summary.additional_properties if head is not None and head.summary is not None else {}
        if "total-delete-files" in summary and int(summary["total-delete-files"]) < minimum:
            return None
        plan = plan_rewrite(table)
        if plan is None or len(plan.deletes) < minimum:
            return None
        self._runs += 1
        prefix = f"{attempt_file_prefix(self.committer.writer)}-maint{self._runs:04d}-{int(time.time() * 1000)}"
        added, rows_read, rows_written, bytes_read = rewrite_data_files(table, plan, prefix, self.target_file_bytes)
        crash_point("maintenance-staged")
        removed = [f.path for f in plan.data] + [f.path for f in plan.removable]
        try:
            commit = self.committer.commit_maintenance(plan.snapshot, removed, added)
        except CommitStateUnknownError:
            raise  # it may have landed: keep the replacements (orphan cleanup deletes them if it did not)
        except BaseException:
            for data_file in added:  # certainly not committed: refused before it was sent
                with contextlib.suppress(FileNotFoundError):
                    table.io.delete(data_file.file_path)
            raise
        crash_point("maintenance-committed")
        result = RewriteResult(commit.snapshot.snapshot_id, len(plan.data), len(plan.removable), len(added),
                               rows_read, rows_written, bytes_read, time.monotonic() - started)
        self.rewrites.append(result)
        log.info("maintenance sink=%s version=%d snapshot=%d rewrote %d data file(s) (%d rows, %d bytes) into %d, "
                 "dropped %d row(s) and %d delete file(s) in %.1fs", self.committer.writer.sink_id,
                 self.committer.writer.version, result.snapshot_id, result.rewritten_files, rows_read, bytes_read,
                 result.added_files, rows_read - rows_written, result.removed_delete_files, result.seconds)
        return result

    def expire_snapshots(self, now_ms: int | None = None) -> ExpiryResult:
        """Expire old snapshots under the fence, then delete the files only they referenced."""
        started = time.monotonic()
        assert self.settings is not None and self.settings.expire_snapshots is not None
        settings = self.settings.expire_snapshots
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        expired = self.committer.expire_snapshots(now_ms - int(settings.older_than_seconds * 1000), settings.retain_last)
        deleted = delete_unreferenced(self.catalog.load_table(self.identifier), expired) if expired else 0
        result = ExpiryResult(len(expired), deleted, time.monotonic() - started)
        self.expiries.append(result)
        if expired:
            log.info("maintenance sink=%s version=%d expired %d snapshot(s) and deleted %d file(s) only they "
                     "referenced in %.1fs", self.committer.writer.sink_id, self.committer.writer.version,
                     len(expired), deleted, result.seconds)
        return result


def _references(table: Table, snapshots: list[Snapshot], live_only: bool) -> dict[str, str]:
    """Normalized path -> URI of the files ``snapshots`` reference: manifest lists, manifests, and their data and
    delete files (``live_only``: only those live in a snapshot, not those it records as deleted)."""
    referenced: dict[str, str] = {}
    for snapshot in snapshots:
        referenced[normalize(snapshot.manifest_list)] = snapshot.manifest_list
        for manifest in snapshot.manifests(table.io):
            if normalize(manifest.manifest_path) in referenced:
                continue
            referenced[normalize(manifest.manifest_path)] = manifest.manifest_path
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=live_only):
                referenced[normalize(entry.data_file.file_path)] = entry.data_file.file_path
    return referenced


def delete_unreferenced(table: Table, expired: list[Snapshot]) -> int:
    """After ``expired`` left ``table`` (the metadata after the expiry): delete the files they referenced that no
    remaining snapshot reads (data and delete files live in none of them, manifests and manifest lists none of
    them lists); return how many. A file a remaining snapshot only records as deleted is read by none."""
    gone = _references(table, expired, live_only=False)
    kept = _references(table, list(table.metadata.snapshots), live_only=True)
    deleted = 0
    for path in sorted(set(gone) - set(kept)):
        with contextlib.suppress(FileNotFoundError):
            table.io.delete(gone[path])
            deleted += 1
    return deleted
