"""The job's driver loop: fence, then per trigger read one range, stage it, commit it once.

    spec → fence (schema evolution, claim) → [pending? due? → read range → executors stage files
         → ONE commit with sink id, version, frontier] → … → stop (bounded source done, or fenced)

The table is the only durable record: the loop starts from the frontier the table holds and
keeps nothing else across restarts.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.typedef import Record
from pyspark.sql import SparkSession

from icebergsync.catalog import ensure_table, open_catalog, partition_spec
from icebergsync.errors import EXIT_OK, IcebergSyncError
from icebergsync.protocol import Frontier, Writer, encode_json
from icebergsync.schema import iceberg_schema, plan_evolution, spark_ddl
from icebergsync.spec import Column, IcebergSync, effective_columns
from spark_app.committer import Commit, SinkCommitter, TriggerOutput, attempt_file_prefix
from spark_app.deadletter import DEAD_LETTER_SCHEMA, Rejection
from spark_app.deletes import delete_plan, table_key
from spark_app.faults import crash_point
from spark_app.maintenance import Maintainer, UpkeepTotals
from spark_app.merge import merge_small_files
from spark_app.pipeline import read_drift, run_transform, run_units
from spark_app.schema_drift.drift import SchemaDrift
from spark_app.schema_drift.plan import new_table_columns, schema_changes, table_columns
from spark_app.sources.base import Pending, SessionProvider, Source
from spark_app.sources.registry import make_source
from spark_app.writer import TablePlan, TaskResult, WritePlan, data_file_from_footer

log = logging.getLogger("icebergsync.job")

WRITER_MEMORY_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Written:
    """A trigger's range as its tasks staged it, before the merge of small files."""

    results: list[TaskResult]
    pending: Pending
    source_notes: dict[str, Any] | None
    plan: WritePlan
    drift: SchemaDrift = field(default_factory=SchemaDrift)  # what its records' Connect schemas ask of the table

    @property
    def rejected(self) -> bool:
        return any(result.rejection is not None for result in self.results)


@dataclass(frozen=True)
class Staged:
    """A staged trigger: its output, the range's end, and the rejection of bad input (no dead-letter table)."""

    output: TriggerOutput
    end: Frontier
    rejection: Rejection | None

    @classmethod
    def of(cls, written: Written, results: list[TaskResult]) -> Staged:
        """The trigger of ``written`` with the tasks' ``results`` (merged or not) added up."""
        output = TriggerOutput(source_lag=written.pending.lag, source_notes=written.source_notes)
        newest_event: int | None = None
        rejection: Rejection | None = None
        touched = [pa.ipc.open_stream(r.touched_keys).read_all() for r in results if r.touched_keys is not None]
        if touched:
            output.touched_keys = pa.concat_tables(touched)
        carried = [pa.ipc.open_stream(r.carried).read_all() for r in results if r.carried is not None]
        if carried:
            output.carried, output.carry_plan = pa.concat_tables(carried), written.plan
        for result in results:
            if result.rejection is not None:
                rejection = result.rejection if rejection is None else rejection.adding(result.rejection)
            output.records += result.records
            output.dead_letters += result.dead_letters
            for reason, count in result.dead_letter_reasons.items():
                output.dead_letter_reasons[reason] = output.dead_letter_reasons.get(reason, 0) + count
            for staged in result.files:
                {"data": output.data_files, "delete": output.delete_files,
                 "dead_letter": output.dead_letter_files}[staged.table].append(staged.data_file)
            if result.max_event_time_us is not None and (newest_event is None or result.max_event_time_us > newest_event):
                newest_event = result.max_event_time_us
        if newest_event is not None:
            output.max_event_time = datetime.fromtimestamp(newest_event / 1e6, tz=UTC).isoformat()
        return cls(output, written.pending.end, rejection)


@dataclass
class RunSummary:
    """What a run did, for the CLI and tests."""

    writer: Writer
    commits: int = 0
    records: int = 0
    dead_letters: int = 0
    frontier: Frontier | None = None
    exit_status: int = EXIT_OK
    upkeep: UpkeepTotals = field(default_factory=UpkeepTotals)  # what maintenance did (spark_app/maintenance.py)


def table_plan(table: Table) -> TablePlan:
    return TablePlan(
        location=table.metadata.location,
        properties=dict(table.metadata.properties),
        schema=table.schema(),
        spec=table.spec(),
        io_properties=dict(table.io.properties),
    )


def rebuild_data_file(table: Table, path: str) -> DataFile:
    """A DataFile for an unpartitioned table's staged file, from its Parquet footer (dead-letter recovery)."""
    import pyarrow.parquet as pq

    input_file = table.io.new_input(path)
    with input_file.open() as stream:
        metadata = pq.ParquetFile(stream).metadata
    return data_file_from_footer(table_plan(table), path, len(input_file), Record(), metadata)


class SyncJob:
    """One attempt of a sink: construct, then ``run()`` until done, stopped or fenced."""

    def __init__(self, sync: IcebergSync, version: int, spark: SparkSession | SessionProvider,
                 catalog: Catalog | None = None, stop_requested: threading.Event | None = None):
        self.sync = sync
        self.spec = sync.spec
        self._session = spark
        self.writer = Writer(sync.sink_id, version, uuid.uuid4().hex[:12])
        self.stop_requested = stop_requested or threading.Event()
        self.columns = effective_columns(self.spec)
        self.catalog = catalog or open_catalog(self.spec.table.catalog_or_default)

    @property
    def spark(self) -> SparkSession:
        """The session; when given as a provider (still starting), waits for it on first use (after the fence)."""
        if not isinstance(self._session, SparkSession):
            self._session = self._session()
        return self._session

    def _open_tables(self) -> tuple[Table, Table | None]:
        table = ensure_table(self.catalog, self.spec.table.name, iceberg_schema(self.columns),
                             self.spec.table.partition_by, self.spec.table.properties, key=self.spec.table.key)
        dead = None
        if self.spec.dead_letter:
            dead = ensure_table(self.catalog, self.spec.dead_letter.table, DEAD_LETTER_SCHEMA, [], {})
        return table, dead

    def run(self) -> RunSummary:
        """Fence, resume from the table's frontier and commit until the source ends or a stop is requested."""
        summary = RunSummary(self.writer)
        source = make_source(lambda: self.spark, self.spec)
        if not self.columns:  # spec.schema is empty: the table's columns come from the records
            columns = self._existing_columns() or self._columns_from_records(source)
            if columns is None:
                return summary  # stopped before the first record arrived
            self.columns = columns
        table, dead = self._open_tables()
        self._warn_on_partition_change(table)
        changes = plan_evolution(table.schema(), self.columns, self.spec.table.name,
                                 followed=self.spec.follows_source_schema)
        committer = SinkCommitter(self.catalog, self.spec.table.name, self.writer,
                                  self.spec.dead_letter.table if self.spec.dead_letter else None, rebuild_data_file,
                                  lambda: self.spark)
        progress = committer.start(changes, source.identity(), source.check_frontier)
        crash_point("fenced")
        if changes:
            log.info("%s v%d: evolved the schema of %s: %s", self.writer.sink_id, self.writer.version,
                     self.spec.table.name, ", ".join(change.describe() for change in changes))
        table, dead = self._open_tables()
        committer.cleanup_orphans(table)
        if dead is not None:
            committer.cleanup_orphans(dead)
        frontier = progress.frontier if progress.frontier is not None else source.initial_frontier()
        log.info("%s v%d attempt %s fenced the table; resuming from %s (%s)", self.writer.sink_id,
                 self.writer.version, self.writer.attempt, encode_json(frontier), progress.resumed_from)
        summary.frontier = frontier
        self._decode_into(table)
        plan = self._write_plan(table, dead)
        maintainer = Maintainer(self.spec.maintenance, committer, self.catalog, self.spec.table.name,
                                self.spec.commit.target_file_bytes, lambda: self.spark)
        summary.upkeep = maintainer.totals
        last_commit = time.monotonic()
        commit_settings = self.spec.commit
        ahead: Future[Written] | None = None  # the next trigger, written while this one merges and commits
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="isync-stage") as stager:
            try:
                while not self.stop_requested.is_set():
                    if ahead is not None:
                        written, ahead = ahead.result(), None
                    else:
                        if source.exhausted(frontier):
                            log.info("%s v%d: source finished at %s; every record is committed", self.writer.sink_id,
                                     self.writer.version, encode_json(frontier))
                            break
                        pending = source.pending(frontier, commit_settings.max_staged_bytes)
                        if pending is None:
                            self.stop_requested.wait(commit_settings.poll_seconds)
                            continue
                        until_due = 0.0 if self._cannot_grow(pending) else (
                            commit_settings.interval_seconds - (time.monotonic() - last_commit))
                        if until_due > 0:  # poll again for more, but stage as soon as the interval is up
                            self.stop_requested.wait(min(commit_settings.poll_seconds, until_due))
                            continue
                        written = self._stage(source, frontier, pending, plan)
                    if written.drift:  # the source's schema changed: follow it, then stage the same range again
                        committer.discard(Staged.of(written, written.results).output)
                        table = self._follow_schema(committer, written.drift)
                        plan = self._write_plan(table, dead)
                        continue
                    results = written.results
                    if not written.rejected:  # a refused trigger is discarded: neither followed nor merged
                        ahead = self._stage_ahead(stager, source, written.pending.end, plan)
                        results = merge_small_files(self.spark, plan, results)
                    staged = Staged.of(written, results)
                    if staged.rejection is not None:
                        committer.discard(staged.output)
                        raise staged.rejection.error()
                    crash_point("staged")
                    commit = committer.commit(staged.output, staged.end)  # on refusal it deletes what it staged
                    crash_point("committed")
                    last_commit = time.monotonic()
                    frontier = staged.end
                    self._log_commit(summary, staged, commit)
                    maintainer.after_commit()  # between triggers, under the fence (spark_app/maintenance.py)
            finally:
                if ahead is not None:  # stopped, failed or fenced while the next trigger was staged: not committed
                    following = ahead.result()
                    committer.discard(Staged.of(following, following.results).output)
        return summary

    def _existing_columns(self) -> list[Column] | None:
        try:
            table = self.catalog.load_table(self.spec.table.name)
        except NoSuchTableError:
            return None
        return table_columns(table.schema(), self.spec.table.name)

    def _columns_from_records(self, source: Source) -> list[Column] | None:
        """A new table's columns from the Connect schema of the source's first records (key columns required);
        None when a stop is requested before there are any."""
        frontier = source.initial_frontier()
        while (pending := source.pending(frontier, self.spec.commit.max_staged_bytes)) is None:
            if self.stop_requested.wait(self.spec.commit.poll_seconds):
                return None
        drift = read_drift(self.spark, source.plan_units(frontier, pending), source.unit_reader([]))
        columns = new_table_columns(drift, self.spec.table.name, self.spec.table.key or [])
        log.info("%s: spec.schema is empty; creating %s with the columns of the first records: %s",
                 self.writer.sink_id, self.spec.table.name, spark_ddl(columns))
        return columns

    def _decode_into(self, table: Table) -> None:
        """A sync following the source's schema decodes into the table's columns (the spec's, evolved)."""
        if self.spec.follows_source_schema:
            self.columns = table_columns(table.schema(), self.spec.table.name)

    def _follow_schema(self, committer: SinkCommitter, drift: SchemaDrift) -> Table:
        """Commit the schema change a trigger's records asked for (its own fenced commit); the table after it."""
        changes = schema_changes(drift, self.spec.table.name)  # raises, naming the columns, when Iceberg cannot
        if not changes:
            raise IcebergSyncError(f"{self.spec.table.name}: records asked for a schema change the table already "
                                   f"has ({drift.describe()}); nothing was committed")
        commit = committer.evolve_schema(changes)
        crash_point("schema-committed")
        log.info("%s v%d: the source's schema changed; %s now has: %s (snapshot %d, frontier unchanged)",
                 self.writer.sink_id, self.writer.version, self.spec.table.name,
                 ", ".join(change.describe() for change in changes), commit.snapshot.snapshot_id)
        table = self.catalog.load_table(self.spec.table.name)
        self._decode_into(table)
        return table

    def _stage_ahead(self, stager: ThreadPoolExecutor, source: Source, frontier: Frontier,
                     plan: WritePlan) -> Future[Written] | None:
        """Start staging the trigger after ``frontier`` while the current one merges and commits, when that
        trigger cannot grow."""
        if self.stop_requested.is_set() or source.exhausted(frontier):
            return None
        pending = source.pending(frontier, self.spec.commit.max_staged_bytes)
        if pending is None or not self._cannot_grow(pending):
            return None
        return stager.submit(self._stage, source, frontier, pending, plan)

    def _cannot_grow(self, pending: Pending) -> bool:
        """A trigger is as large as it gets (so it is due now, and may be staged ahead): it reached the
        staging size or the source's per-trigger cap with more waiting, or a bounded source's end."""
        return pending.full or pending.reaches_end or pending.estimated_bytes >= self.spec.commit.max_staged_bytes

    def _log_commit(self, summary: RunSummary, staged: Staged, commit: Commit) -> None:
        output = staged.output
        summary.commits += 1
        summary.records += output.records
        summary.dead_letters += output.dead_letters
        summary.frontier = staged.end
        if output.dead_letter_reasons:
            log.warning("%s v%d: %d record(s) went to the dead-letter table: %s", self.writer.sink_id,
                        self.writer.version, output.dead_letters, encode_json(output.dead_letter_reasons))
        log.info(
            "commit sink=%s version=%d snapshot=%d records=%d dead_letters=%d files=%d bytes=%d "
            "commit_ms=%.0f frontier=%s", self.writer.sink_id, self.writer.version, commit.snapshot.snapshot_id,
            output.records, output.dead_letters, len(output.data_files) + len(output.dead_letter_files),
            output.bytes, commit.commit_ms, encode_json(staged.end),
        )

    def _warn_on_partition_change(self, table: Table) -> None:
        """``partitionBy`` applies when the table is created; say so loudly when the spec now differs."""
        wanted = partition_spec(table.schema(), self.spec.table.partition_by)
        current = [(f.source_id, str(f.transform)) for f in table.spec().fields]
        if [(f.source_id, str(f.transform)) for f in wanted.fields] != current:
            log.warning("%s: spec.table.partitionBy %s differs from the partitioning of %s (%s); the table keeps "
                        "its partitioning (partition evolution is not applied by IcebergSync)", self.writer.sink_id,
                        self.spec.table.partition_by, self.spec.table.name, table.spec())

    def _write_plan(self, table: Table, dead: Table | None) -> WritePlan:
        return WritePlan(
            sink_id=self.writer.sink_id,
            sink_version=self.writer.version,
            file_prefix=attempt_file_prefix(self.writer),
            table=table_plan(table),
            dead_letter=table_plan(dead) if dead is not None else None,
            target_file_bytes=self.spec.commit.target_file_bytes,
            writer_memory_bytes=WRITER_MEMORY_BYTES,
            required_columns=tuple(f.name for f in table.schema().fields if f.required),
            event_time_column=self.spec.event_time_column,
            key=table_key(table) if self.spec.changes else None,
            deletes=delete_plan(table) if self.spec.changes and self.spec.changes.deletes == "equality" else None,
        )

    def _stage(self, source: Source, frontier: Frontier, pending: Pending, plan: WritePlan) -> Written:
        """Phase 1: plan ``[frontier, pending.end)`` as work units and let the tasks stage them as files.

        The tasks' results may hold the rejection of bad input when there is no dead-letter table (the
        caller discards the output then). Their small files are merged afterwards, while the next
        trigger's tasks already run (:meth:`run`).
        """
        units = source.plan_units(frontier, pending)
        if self.spec.transform:
            record_columns = source.record_columns()
            results, stats = run_transform(self.spark, units, source.unit_reader(record_columns), plan, self.columns,
                                           record_columns, self.spec.transform)
        else:
            results, stats = run_units(self.spark, units, source.unit_reader(self.columns), plan)
        return Written(results, pending, source.trigger_notes(pending, stats), plan, stats.drift)


def install_stop_handlers(stop_requested: threading.Event) -> None:
    """SIGTERM/SIGINT finish the current trigger (commit included) and stop cleanly.

    Installed before anything slow starts, so a stop during start-up is clean too.
    """

    def request_stop(signum: int, _frame: Any) -> None:
        log.info("received signal %d: stopping after the current trigger", signum)
        stop_requested.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
