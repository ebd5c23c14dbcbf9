"""Built-in table maintenance, run by the sink's driver after its commits, under the sink's fence.

Five parts (``spec.maintenance``, every one on unless its ``enabled`` is false; docs/operations.md
"Maintenance"), each scheduled by the table's state, checked after every data commit:

- **compaction** and **rewriteDeletes**: the current main snapshot's live files (manifests read once
  each and cached, position delete files once each) are planned by :mod:`spark_app.upkeep.plan`:
  piled-up small data files, data files deletes apply to, data files with several position delete
  files. The plan's files are written by :mod:`spark_app.upkeep.rewrite` (the driver, or Spark tasks
  when it is large) and committed as ONE ``replace`` snapshot of kind maintenance: it removes the
  rewritten data files, the position delete files merged and the delete files that no longer apply
  to any remaining data file (on format-version 3 tables each deletion vector on its own: those of
  rewritten data files go with them, the others of their Puffin file stay live as they are), and
  adds the replacements with the **data sequence number of the
  snapshot the run was planned on** (Iceberg's ``RewriteFiles`` with
  ``use-starting-sequence-number``): a delete committed later still applies to them, one committed
  at or before it has been applied by the rewrite. It carries the sink's frontier and checkpoint
  unchanged and goes through the committer's fenced compare-and-swap, so a fenced sink never lands
  it, and it is dropped (and planned again after the next commit) when main moved meanwhile.
- **rewriteManifests**: once main's current snapshot lists more than ``maxManifests`` manifests, its
  small ones are merged (:mod:`spark_app.upkeep.manifests` plans which) into ONE ``replace``
  snapshot of kind maintenance that adds and removes no file: every live entry keeps its snapshot
  id, data and file sequence numbers and (format 3) ``first_row_id``, so each delete applies to
  exactly the rows it did. Fenced, carrying the frontier, and dropped when main moved, as above.
  (Iceberg merges manifests either in its appends, ``commit.manifest-merge.enabled``, or with
  ``RewriteManifests``; the sink does it here so that a data commit stays a fast append.)
- **expireSnapshots**: every ``every``, snapshots older than ``olderThan`` beyond the newest
  ``retainLast`` of main are expired through the same fenced compare-and-swap (when there are any),
  and so, as soon as a commit finds main longer than ``maxSnapshots``, are those older than main's
  ``maxSnapshots``-th newest;
  then the files only they referenced (data, delete and manifest files, manifest lists) are deleted.
  Recovery does not need them: the checkpoint table property survives expiry (docs/protocol.md).
- **removeOrphans**: every ``every``, the files earlier attempts of the sink staged that no snapshot
  references and that are older than ``olderThan`` are deleted (as each attempt does once at start-up).

One run's cost is bounded by ``maxBytesPerRun`` and ``maxFilesPerRun`` (of data files, or of manifests);
each run logs one line and
adds to :class:`UpkeepTotals` (the job's run summary).

Crash points (spark_app/faults.py): ``maintenance-staged`` (replacements written, not committed) and
``maintenance-committed`` (right after the maintenance commit).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyspark.sql import SparkSession

from icebergsync import protocol
from icebergsync.errors import (
    CatalogUnreachableError,
    CommitStateUnknownError,
    IcebergSyncError,
    ObjectStoreUnreachableError,
)
from icebergsync.protocol import attempt_file_prefix
from icebergsync.spec import Maintenance
from icebergsync.transient.calls import last_line
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.references import file_references
from spark_app.commit.swap import MaintenanceConflictError
from spark_app.faults import crash_point
from spark_app.iceberg.applied_deletes import PositionReferences
from spark_app.iceberg.internals import LiveFile, live_files, manifest_files
from spark_app.staging.rewrite_rows import RewriteContext
from spark_app.upkeep.manifests import ManifestPlan, ManifestThresholds, plan_manifest_rewrite, target_bytes
from spark_app.upkeep.plan import TIER_FLOOR_BYTES, Thresholds, UpkeepPlan, plan_upkeep
from spark_app.upkeep.rewrite import Outcome, delete_written, run_plan

log = logging.getLogger("icebergsync.maintenance")
# What fails an upkeep step without stopping the sync: the catalog's or the object store's weather, and a
# maintenance commit whose outcome stayed unknown.
_UPKEEP_WEATHER = (CatalogUnreachableError, ObjectStoreUnreachableError, CommitStateUnknownError)


@dataclass
class UpkeepTotals:
    """What this attempt's maintenance did, added up (the job's run summary)."""

    runs: int = 0
    data_files_rewritten: int = 0
    data_files_written: int = 0
    bytes_rewritten: int = 0
    bytes_written: int = 0
    rows_dropped: int = 0
    delete_files_removed: int = 0
    manifest_runs: int = 0  # committed manifest rewrites (``runs`` counts compaction and rewriteDeletes)
    manifests_rewritten: int = 0
    manifests_written: int = 0
    snapshots_expired: int = 0
    orphans_removed: int = 0
    failures: int = 0  # steps that failed and run again after a later commit (never a stop of the sync)
    seconds: float = 0.0


@dataclass
class RewriteResult:
    """One committed run of compaction and rewriteDeletes."""

    snapshot_id: int
    compacted_files: int  # data files rewritten for being small
    files_due_to_deletes: int  # data files rewritten for the deletes applying to them
    added_files: int
    removed_delete_files: int
    merged_position_files: int  # position delete files merged into added_delete_files
    added_delete_files: int
    rows_read: int
    rows_written: int
    bytes_read: int
    bytes_written: int
    deferred_groups: int
    spark: bool
    seconds: float

    @property
    def rewritten_files(self) -> int:
        return self.compacted_files + self.files_due_to_deletes


@dataclass
class ManifestResult:
    """One committed manifest rewrite."""

    snapshot_id: int
    manifests_before: int  # listed by the planned snapshot
    rewritten: int
    written: int
    bytes_read: int
    deferred_bins: int
    seconds: float


@dataclass
class ExpiryResult:
    expired_snapshots: int
    deleted_files: int
    seconds: float


def thresholds(settings: Maintenance, target_file_bytes: int, rewrite_deletes: bool = True) -> Thresholds:
    """What the planner applies of ``settings``; ``rewrite_deletes`` False holds deletes back this run (spacing)."""
    compaction, deletes = settings.compaction, settings.rewrite_deletes
    return Thresholds(target_file_bytes,
                      target_file_bytes * compaction.small_file_percent // 100 if compaction.enabled else None,
                      compaction.min_input_files,
                      deletes.min_delete_files if deletes.enabled and rewrite_deletes else None,
                      deletes.deleted_rows_percent / 100, settings.max_rewrite_bytes, settings.max_files_per_run,
                      compaction.max_extra_files_percent / 100 if compaction.max_extra_files_percent else None,
                      TIER_FLOOR_BYTES)


class Maintainer:
    """Runs ``spec.maintenance`` between the sink's triggers (:meth:`after_commit`)."""

    def __init__(self, settings: Maintenance, committer: SinkCommitter, catalog: Catalog, identifier: str,
                 target_file_bytes: int, spark: Callable[[], SparkSession] | None = None,
                 clock: Callable[[], float] = time.monotonic, totals: UpkeepTotals | None = None):
        self.settings = settings
        self.committer = committer
        self.catalog = catalog
        self.identifier = identifier
        self.target_file_bytes = target_file_bytes
        self._spark = spark
        self._clock = clock
        self._commits_since_deletes = 0
        self._last_deletes = self._last_expiry = self._last_orphans = clock()
        self._manifests: dict[str, list[LiveFile]] = {}
        self._references = PositionReferences()
        self.totals = totals if totals is not None else UpkeepTotals()  # shared by the lanes of a sync

    def after_commit(self) -> None:
        """Called by the job loop after each data commit: run what the table's state (and ``every``) makes due.

        A fenced writer stops here as in a commit (``FencedError``); a run that found main moved
        (another writer committed while it was planned) is dropped and planned again after the next
        commit; any other failure of maintenance is logged and retried then, never stopping the sync.
        """
        self._commits_since_deletes += 1
        if self.settings.compaction.enabled or self.settings.rewrite_deletes.enabled:
            self._guarded("rewrite", self.rewrite)
        if self.settings.rewrite_manifests.enabled:
            self._guarded("rewriteManifests", self.rewrite_manifests)
        expire, orphans = self.settings.expire_snapshots, self.settings.remove_orphans
        if expire.enabled:
            self._guarded("expireSnapshots", self._expire_when_due)
        if orphans.enabled and self._clock() - self._last_orphans >= orphans.every_seconds:
            self._last_orphans = self._clock()
            self._guarded("removeOrphans", self.remove_orphans)

    def _expire_when_due(self) -> ExpiryResult | None:
        """Expire snapshots when ``every`` has passed or main holds more than ``maxSnapshots``."""
        expire = self.settings.expire_snapshots
        if self._clock() - self._last_expiry < expire.every_seconds and not self._too_many_snapshots():
            return None
        self._last_expiry = self._clock()
        return self.expire_snapshots()

    def _too_many_snapshots(self) -> bool:
        main = protocol.main_ancestry(self.catalog.load_table(self.identifier).metadata)
        return sum(1 for _ in main) > self.settings.expire_snapshots.max_snapshots

    def _guarded(self, what: str, run: Callable[[], object]) -> None:
        """Run one upkeep step; only what stops a data commit too (fenced, table changed, rolled back) stops the
        sync. A fault of the catalog or the object store, or a commit whose outcome stayed unknown, is logged,
        counted, and the step runs again after a later commit (a maintenance snapshot that did land is on main,
        which every data commit reads again)."""
        try:
            run()
        except MaintenanceConflictError as exc:
            log.info("%s: maintenance %s skipped: %s", self.committer.writer.sink_id, what, exc)
        except _UPKEEP_WEATHER as exc:
            self.totals.failures += 1
            log.warning("%s: maintenance %s failed (%s); the sync goes on and retries it after a later commit",
                        self.committer.writer.sink_id, what, last_line(exc))
        except IcebergSyncError:
            raise  # fenced, table changed, rolled back: as for a data commit
        except Exception:
            self.totals.failures += 1
            log.exception("%s: maintenance %s failed; the sync goes on and retries it after a later commit",
                          self.committer.writer.sink_id, what)

    def plan(self, table: Table) -> UpkeepPlan | None:
        """What compaction and rewriteDeletes would do now on ``table``'s main head (None: nothing is due)."""
        snapshot = table.metadata.current_snapshot()
        if snapshot is None:
            return None
        files = live_files(table, snapshot, self._manifests)
        references = self._references.of(
            table.io, (f for f in files if f.data_file.content == DataFileContent.POSITION_DELETES))
        deletes = self.settings.rewrite_deletes.allowed(self._commits_since_deletes, self._clock() - self._last_deletes)
        return plan_upkeep(snapshot, files, thresholds(self.settings, self.target_file_bytes, deletes),
                           sorted(table.schema().identifier_field_ids), table.metadata.specs(), references,
                           table.metadata.default_spec_id)

    def rewrite(self) -> RewriteResult | None:
        """Plan on main's head and, when something is due, write it and commit it as ONE fenced snapshot."""
        started = time.monotonic()
        table = self.catalog.load_table(self.identifier)
        plan = self.plan(table)
        if plan is None:
            return None
        self.totals.runs += 1
        prefix = f"{attempt_file_prefix(self.committer.writer)}-maint{self.totals.runs:04d}"
        outcomes, on_spark = run_plan(self._spark, RewriteContext.of(table, self.target_file_bytes), plan, prefix)
        failed = [outcome.error for outcome in outcomes if outcome.error is not None]
        if failed:
            delete_written(table.io, outcomes)
            raise RuntimeError(f"{len(failed)} of {len(outcomes)} rewrite(s) failed, nothing was committed: {failed[0]}")
        crash_point("maintenance-staged")
        added = [written for outcome in outcomes for written in outcome.files]
        merged = [d for merge in plan.merges for d in merge.deletes]
        removed = list({f.key: f.data_file for f in [*plan.rewritten, *merged, *plan.removable]}.values())
        try:
            commit = self.committer.commit_maintenance(plan.snapshot, removed, added)
        except CommitStateUnknownError:
            raise  # it may have landed: keep the replacements (orphan cleanup deletes them if it did not)
        except BaseException:
            delete_written(table.io, outcomes)  # certainly not committed: refused before it was sent
            raise
        crash_point("maintenance-committed")
        if any(group.due_to_deletes for group in plan.groups) or plan.merges:
            self._commits_since_deletes, self._last_deletes = 0, self._clock()
        return self._record(plan, outcomes, commit.snapshot.snapshot_id, on_spark, time.monotonic() - started)

    def _record(self, plan: UpkeepPlan, outcomes: list[Outcome], snapshot_id: int, on_spark: bool,
                seconds: float) -> RewriteResult:
        """The result of a committed run, added to the totals and logged in one line."""
        groups = [o for o in outcomes if o.index < len(plan.groups)]
        data = [f for o in groups for f in o.files]
        compacted = sum(len(g.files) for g in plan.groups if not g.due_to_deletes)
        result = RewriteResult(
            snapshot_id, compacted, len(plan.rewritten) - compacted, len(data), len(plan.removable),
            sum(len(m.deletes) for m in plan.merges), len(plan.merges), sum(o.rows_read for o in groups),
            sum(o.rows_written for o in groups), sum(f.data_file.file_size_in_bytes for f in plan.rewritten),
            sum(f.file_size_in_bytes for f in data), plan.deferred, on_spark, seconds)
        totals = self.totals
        totals.data_files_rewritten += result.rewritten_files
        totals.data_files_written += result.added_files
        totals.bytes_rewritten += result.bytes_read
        totals.bytes_written += result.bytes_written
        totals.rows_dropped += result.rows_read - result.rows_written
        totals.delete_files_removed += result.removed_delete_files + result.merged_position_files
        totals.seconds += seconds
        log.info("maintenance sink=%s version=%d snapshot=%d rewrote %d data file(s) (%d small, %d for deletes; "
                 "%d bytes) into %d (%d bytes), dropped %d row(s), removed %d delete file(s), merged %d position "
                 "delete file(s) into %d, left %d group(s) for a later run; %.1fs in %s", self.committer.writer.sink_id,
                 self.committer.writer.version, snapshot_id, result.rewritten_files, result.compacted_files,
                 result.files_due_to_deletes, result.bytes_read, result.added_files, result.bytes_written,
                 result.rows_read - result.rows_written, result.removed_delete_files, result.merged_position_files,
                 result.added_delete_files, result.deferred_groups, seconds,
                 "Spark tasks" if result.spark else "the driver")
        return result

    def plan_manifests(self, table: Table) -> ManifestPlan | None:
        """Which of main's manifests a manifest rewrite would merge now (None: nothing is due)."""
        snapshot = table.metadata.current_snapshot()
        if snapshot is None:
            return None
        return plan_manifest_rewrite(snapshot, manifest_files(table.io, snapshot), ManifestThresholds(
            self.settings.rewrite_manifests.max_manifests, target_bytes(table.metadata.properties),
            self.settings.max_files_per_run, self.settings.max_rewrite_bytes))

    def rewrite_manifests(self) -> ManifestResult | None:
        """Plan on main's head and, when a rewrite is due, commit it as ONE fenced snapshot."""
        started = time.monotonic()
        table = self.catalog.load_table(self.identifier)
        plan = self.plan_manifests(table)
        if plan is None:
            return None
        commit = self.committer.commit_manifest_rewrite(plan.snapshot, plan.bins)
        result = ManifestResult(commit.snapshot.snapshot_id, plan.listed, plan.manifests, len(plan.bins), plan.bytes,
                                plan.deferred, time.monotonic() - started)
        self.totals.manifest_runs += 1
        self.totals.manifests_rewritten += result.rewritten
        self.totals.manifests_written += result.written
        self.totals.seconds += result.seconds
        log.info("maintenance sink=%s version=%d snapshot=%d merged %d of %d manifest(s) (%d bytes) into %d, left %d "
                 "bin(s) for a later run; %.1fs", self.committer.writer.sink_id, self.committer.writer.version,
                 result.snapshot_id, result.rewritten, result.manifests_before, result.bytes_read, result.written,
                 result.deferred_bins, result.seconds)
        return result

    def expire_snapshots(self, now_ms: int | None = None) -> ExpiryResult:
        """Expire old snapshots under the fence (when there are any), then delete the files only they referenced."""
        started = time.monotonic()
        settings = self.settings.expire_snapshots
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        cutoff_ms = now_ms - int(settings.older_than_seconds * 1000)
        main = list(protocol.main_ancestry(self.catalog.load_table(self.identifier).metadata))
        if len(main) > settings.max_snapshots:  # down to a fifth below the limit: due again only after as many commits
            keep = max(settings.retain_last, settings.max_snapshots - settings.max_snapshots // 5)
            cutoff_ms = max(cutoff_ms, main[keep - 1].timestamp_ms)
        expired = self.committer.expire_snapshots(cutoff_ms, settings.retain_last)
        deleted = delete_unreferenced(self.catalog.load_table(self.identifier), expired) if expired else 0
        result = ExpiryResult(len(expired), deleted, time.monotonic() - started)
        self.totals.snapshots_expired += len(expired)
        self.totals.seconds += result.seconds
        if expired:
            log.info("maintenance sink=%s version=%d expired %d snapshot(s) and deleted %d file(s) only they "
                     "referenced in %.1fs", self.committer.writer.sink_id, self.committer.writer.version,
                     len(expired), deleted, result.seconds)
        return result

    def remove_orphans(self, now_ms: int | None = None) -> list[str]:
        """Delete earlier attempts' staged files that no snapshot references and are older than ``olderThan``."""
        started = time.monotonic()
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        older_than_ms = now_ms - int(self.settings.remove_orphans.older_than_seconds * 1000)
        removed = [path for identifier in filter(None, (self.identifier, self.committer.dead_letter_identifier))
                   for path in self.committer.cleanup_orphans(self.catalog.load_table(identifier), older_than_ms)]
        self.totals.orphans_removed += len(removed)
        self.totals.seconds += time.monotonic() - started
        return removed


def delete_unreferenced(table: Table, expired: list[Snapshot]) -> int:
    """After ``expired`` left ``table`` (the metadata after the expiry): delete the files they referenced that no
    remaining snapshot reads (data and delete files live in none of them, manifests and manifest lists none of
    them lists); return how many. A file a remaining snapshot only records as deleted is read by none."""
    gone = file_references(table, expired, live_only=False)
    kept = file_references(table, table.metadata.snapshots, live_only=True)
    deleted = 0
    for path in sorted(set(gone) - set(kept)):
        with contextlib.suppress(FileNotFoundError):
            table.io.delete(gone[path])
            deleted += 1
    return deleted
