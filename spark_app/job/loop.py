"""The job's driver loop: fence, then per trigger read one range, stage it, commit it once.

    spec → fence (schema evolution, claim) → [pending? due? → read range → executors stage files
         → ONE commit with sink id, version, frontier] → … → stop (bounded source done, or fenced)

A sync writes one table, or one table per source stream (``table.name`` a template): each table is a lane
(:mod:`spark_app.job.lane`), a single-table sink of its streams, and a trigger's commits to the tables
it touched are one cut (:mod:`spark_app.job.trigger`). The tables are the only durable record: the
loop starts from the frontiers they hold and keeps nothing else across restarts.
"""

from __future__ import annotations

import dataclasses
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
from pyspark.sql import SparkSession

from icebergsync import protocol
from icebergsync.catalog import open_catalog
from icebergsync.errors import (
    EXIT_OK,
    BadInputError,
    CatalogUnreachableError,
    FencedError,
    ProgressConflictError,
)
from icebergsync.protocol import Frontier, Progress, Writer, encode_json
from icebergsync.spec import IcebergSync
from icebergsync.table_routing import resume_frontier, table_for
from spark_app.commit.swap import Commit
from spark_app.commit.trigger_output import TriggerOutput
from spark_app.decoding.deadletter import Rejection
from spark_app.decoding.schema_drift.drift import SchemaDrift
from spark_app.decoding.source_positions import TRUNCATED_NOTE, Position
from spark_app.faults import crash_point
from spark_app.iceberg.internals import install_v3_metadata_writer
from spark_app.job.lane import Lane
from spark_app.job.metrics import JobMetrics
from spark_app.job.trigger import commit_trigger
from spark_app.sources.base import Pending, SessionProvider, Source
from spark_app.sources.registry import make_source
from spark_app.sources.transactions import (
    SPLIT_NOTE,
    TransactionAligner,
    Verdict,
    aligner_for,
    check_pending,
    check_planned,
)
from spark_app.sources.units import WorkUnit
from spark_app.staging.packing import merge_small_files
from spark_app.staging.pipeline import read_drift, run_transform, run_units
from spark_app.staging.writer import TaskResult, WritePlan
from spark_app.upkeep.runner import UpkeepTotals

log = logging.getLogger("icebergsync.job")

LANES_STAGED_AT_ONCE = 4  # a trigger's tables staged side by side (Spark jobs from driver threads share executors)


@dataclass(frozen=True)
class Written:
    """One table's part of a trigger's range as its tasks staged it, before the merge of small files."""

    lane: Lane
    results: list[TaskResult]
    pending: Pending  # the trigger's range, as this table sees it (its lag and notes)
    source_notes: dict[str, Any] | None
    plan: WritePlan
    drift: SchemaDrift = field(default_factory=SchemaDrift)  # what its records' Connect schemas ask of the table
    transactions: dict[tuple[str, int], dict[str, list[int]]] = field(default_factory=dict)  # UnitStats.transactions
    truncate: Position | None = None  # the newest source truncate its records hold (spark_app/decoding/source_positions.py)
    truncating: Position | None = None  # staged to empty the table at this truncate and hold what follows it

    @property
    def rejected(self) -> bool:
        return any(result.rejection is not None for result in self.results)


@dataclass(frozen=True)
class Trigger:
    """A trigger's range as staged: ``end`` is the sync's frontier after it, ``parts`` the tables it touched."""

    end: Frontier
    parts: list[Written]
    pending: Pending | None = None  # the range as planned

    @property
    def drifted(self) -> list[Written]:
        return [part for part in self.parts if part.drift]

    @property
    def transactions(self) -> dict[tuple[str, int], dict[str, list[int]]]:
        """The source transactions its tasks saw, per partition (spark_app/sources/transactions.py)."""
        return {tp: seen for part in self.parts for tp, seen in part.transactions.items()}

    def noting_split(self, transactions: tuple[str, ...]) -> Trigger:
        """This trigger with ``transaction-split`` (the transactions it holds only part of) in its source notes."""
        parts = [dataclasses.replace(part, source_notes={**(part.source_notes or {}), SPLIT_NOTE: list(transactions)})
                 for part in self.parts]
        return dataclasses.replace(self, parts=parts)

    @property
    def rejected(self) -> bool:
        return any(part.rejected for part in self.parts)


@dataclass(frozen=True)
class Staged:
    """A staged table of a trigger: its output, its frontier, and the rejection of bad input (no dead-letter table)."""

    lane: Lane
    output: TriggerOutput
    end: Frontier
    rejection: Rejection | None

    @classmethod
    def of(cls, written: Written, results: list[TaskResult]) -> Staged:
        """The part ``written`` with the tasks' ``results`` (merged or not) added up."""
        output = TriggerOutput(source_lag=written.pending.lag, source_notes=written.source_notes,
                               truncate=written.truncating is not None)
        if written.truncating is not None:
            output.source_notes = {**(output.source_notes or {}), TRUNCATED_NOTE: list(written.truncating)}
        newest_event: int | None = None
        rejection: Rejection | None = None
        touched = [pa.ipc.open_stream(r.touched_keys).read_all() for r in results if r.touched_keys is not None]
        if touched:
            output.touched_keys = pa.concat_tables(touched)
        removed = [pa.ipc.open_stream(r.removed_copies).read_all() for r in results if r.removed_copies is not None]
        if removed:
            output.removed_copies = pa.concat_tables(removed)
        carried = [pa.ipc.open_stream(r.carried).read_all() for r in results if r.carried is not None]
        if carried:
            output.carried, output.carry_plan = pa.concat_tables(carried), written.plan
            moved = [pa.ipc.open_stream(r.moved).read_all() for r in results if r.moved is not None]
            output.moved = pa.concat_tables(moved) if moved else None
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
        return cls(written.lane, output, written.lane.part_of(written.pending.end), rejection)


@dataclass
class RunSummary:
    """What a run did, for the CLI and tests."""

    writer: Writer
    commits: int = 0  # data commits, one per table a trigger touched
    records: int = 0
    dead_letters: int = 0
    frontier: Frontier | None = None
    exit_status: int = EXIT_OK
    upkeep: UpkeepTotals = field(default_factory=UpkeepTotals)  # what maintenance did (spark_app/upkeep/runner.py)


@dataclass
class _Loop:
    """The driver loop's state from one step to the next (:meth:`SyncJob.run`)."""

    source: Source
    stager: ThreadPoolExecutor  # stages the next trigger while this one merges and commits
    summary: RunSummary
    frontier: Frontier
    last_commit: float = field(default_factory=time.monotonic)
    ahead: Future[Trigger | None] | None = None  # the next trigger, staged while this one merges and commits
    replanned: Pending | None = None  # a range to stage at once instead of polling (aligned with transactions)
    staged_waiting: Frontier | None = None  # where a range holding no whole transaction was last staged all the same
    finished: bool = False  # the bounded source is finished and every record committed


class SyncJob:
    """One attempt of a sink: construct, then ``run()`` until done, stopped or fenced."""

    def __init__(self, sync: IcebergSync, version: int, spark: SparkSession | SessionProvider,
                 catalog: Catalog | None = None, stop_requested: threading.Event | None = None):
        install_v3_metadata_writer()  # its tables may be format-version 3, created and committed by this process
        self.sync = sync
        self.spec = sync.spec
        self._session = spark
        self.writer = Writer(sync.sink_id, version, uuid.uuid4().hex[:12])
        self.stop_requested = stop_requested or threading.Event()
        self.catalog = catalog or open_catalog(self.spec.table.catalog_or_default)
        self.upkeep = UpkeepTotals()
        self.metrics = JobMetrics(sync.sink_id, version, self.upkeep)  # served by the CLI (spec.metrics)
        self.lanes: dict[str, Lane] = {}
        self.aligner: TransactionAligner | None = None  # spec.changes.transactions (spark_app/sources/transactions.py)

    @property
    def spark(self) -> SparkSession:
        """The session; when given as a provider (still starting), waits for it on first use (after the fence)."""
        if not isinstance(self._session, SparkSession):
            self._session = self._session()
        return self._session

    @property
    def many_tables(self) -> bool:
        return self.spec.table.is_template

    def table_of(self, stream: str | None) -> str:
        """The table ``stream`` goes to (the one table of a sync that is not a template)."""
        if not self.many_tables or stream is None:
            return self.spec.table.name
        kafka = self.spec.source.kafka
        return table_for(self.spec.table.name, stream, kafka.pattern if kafka is not None else None)

    def lane(self, stream: str | None) -> Lane:
        """The lane of ``stream``'s table, set up (not claimed) when first needed."""
        name = self.table_of(stream)
        lane = self.lanes.get(name)
        if lane is None:
            owns = (lambda other: self.table_of(other) == name) if self.many_tables else None
            lane = Lane(self.spec, self.spec.table_settings(name, stream), owns, self.writer, self.catalog,
                        lambda: self.spark, self.upkeep)
            self.lanes[name] = lane
        return lane

    def run(self) -> RunSummary:
        """Fence, resume from the tables' frontiers and commit until the source ends or a stop is requested (an
        error stopping the run is counted in the metrics, and raised)."""
        try:
            return self._run()
        except BaseException as stop:
            self.metrics.stopped(stop_reason(stop))
            raise

    def _run(self) -> RunSummary:
        summary = RunSummary(self.writer, upkeep=self.upkeep)
        source = make_source(lambda: self.spark, self.spec)
        self.aligner = aligner_for(source, self.spec)
        frontier = self._start(source)
        summary.frontier = frontier
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="isync-stage") as stager:
            loop = _Loop(source, stager, summary, frontier)
            try:
                while not loop.finished and not self.stop_requested.is_set():
                    self._step(loop)
            finally:
                self._wind_down(loop)
        return summary

    def _start(self, source: Source) -> Frontier:
        """The frontier the run starts from (:meth:`_resume`), logged."""
        frontier = self._resume(source)
        log.info("%s v%d attempt %s resumes from %s", self.writer.sink_id, self.writer.version, self.writer.attempt,
                 encode_json(frontier))
        return frontier

    def _step(self, loop: _Loop) -> None:
        """One turn of the loop: the next trigger committed, or its schema followed, or its range re-planned,
        or a wait (nothing due yet)."""
        trigger = self._next_trigger(loop)
        if trigger is None or self._followed_schema(trigger) or self._found_truncate(trigger):
            return
        verdict = self._check_transactions(trigger)
        if self._postponed(loop, trigger, verdict):
            return
        if verdict is not None and verdict.split:
            trigger = trigger.noting_split(verdict.split)
        self._commit_trigger(loop, trigger, verdict)

    def _next_trigger(self, loop: _Loop) -> Trigger | None:
        """The trigger staged ahead, else the range due now staged; None when there is none to commit yet (after
        a wait, or a claim that moved the frontier) or the source is finished (``loop.finished``)."""
        ahead, loop.ahead = loop.ahead, None
        trigger = ahead.result() if ahead is not None else None
        if trigger is not None:
            return trigger
        if loop.source.exhausted(loop.frontier):
            log.info("%s v%d: source finished at %s; every record is committed", self.writer.sink_id,
                     self.writer.version, encode_json(loop.frontier))
            loop.finished = True
            return None
        pending = self._due_range(loop)
        if pending is None:
            return None
        with self.metrics.phase("plan"):
            pending = self._aligned(loop.source, self._with_truncates(loop.source, pending), loop)
            if pending is not None:
                units = self._units_by_lane(loop.source, loop.frontier, pending)
                claimed = self._claim(loop.source, loop.frontier, units)
        if pending is None:  # nothing whole is pending yet (source transactions)
            self.stop_requested.wait(self.spec.commit.poll_seconds)
            return None
        if claimed != loop.frontier:  # a table's claim read a frontier other than the one planned from
            loop.frontier = claimed
            return None
        return self._stage(loop.source, loop.frontier, pending, units)

    def _due_range(self, loop: _Loop) -> Pending | None:
        """The range to stage now: the one re-planned for source transactions, else the source's pending range
        once the trigger is due; None after waiting (nothing pending, or not due yet)."""
        if loop.replanned is not None:
            replanned, loop.replanned = loop.replanned, None
            return replanned
        commit_settings = self.spec.commit
        pending = loop.source.pending(loop.frontier, commit_settings.max_staged_bytes)
        self._report_backlog(loop.source, loop.frontier, pending)
        if pending is None:
            self.stop_requested.wait(commit_settings.poll_seconds)
            return None
        until_due = 0.0 if self._cannot_grow(pending) else (
            commit_settings.interval_seconds - (time.monotonic() - loop.last_commit))
        if until_due > 0:  # poll again for more, but stage as soon as the interval is up
            self.stop_requested.wait(min(commit_settings.poll_seconds, until_due))
            return None
        return pending

    def _report_backlog(self, source: Source, frontier: Frontier, pending: Pending | None) -> None:
        """The source's lag beyond each claimed table's frontier now, as metrics."""
        for lane in self.lanes.values():
            if lane.claimed:
                self.metrics.backlog(lane.name, source.backlog(frontier, pending, lane.owns))

    def _followed_schema(self, trigger: Trigger) -> bool:
        """Whether the source's schema changed in ``trigger``: then it is discarded and each drifted table follows
        the change (the same range is staged again)."""
        if not trigger.drifted:
            return False
        self._discard(trigger)
        for drifted in trigger.drifted:
            drifted.lane.follow_schema(drifted.drift)
        return True

    def _found_truncate(self, trigger: Trigger) -> bool:
        """Whether ``trigger`` holds a source truncate of a table: then it is discarded, and the range staged next
        empties that table at the truncate and holds what follows it (:meth:`_with_truncates`)."""
        found = [part for part in trigger.parts if part.truncate is not None]
        if not found:
            return False
        self._discard(trigger)
        for part in found:
            log.info("%s v%d: %s was truncated at the source (position %s): its next commit empties it and holds the "
                     "changes after the truncate", self.writer.sink_id, self.writer.version, part.lane.name,
                     list(part.truncate or ()))
            part.lane.truncated_at = part.lane.truncate_pending = part.truncate
        return True

    def _with_truncates(self, source: Source, pending: Pending) -> Pending:
        """``pending`` read for the tables with a truncate due: from the first change after it in every stream."""
        for lane in self.lanes.values():
            if lane.truncate_pending is not None:
                pending = source.after_truncate(pending, lane.owns, lane.truncate_pending)
                pending = dataclasses.replace(pending, truncating={**(pending.truncating or {}),
                                                                   lane.name: lane.truncate_pending})
        return pending

    def _postponed(self, loop: _Loop, trigger: Trigger, verdict: Verdict | None) -> bool:
        """Whether ``trigger`` is not committed because of its source transactions: then it is discarded and
        its range re-planned (``loop.replanned``), or a poll interval waited out."""
        if verdict is None or verdict.action == "commit":
            return False
        self._discard(trigger)
        if verdict.action == "restage" and trigger.pending is not None:
            loop.replanned = loop.source.within(trigger.pending, verdict.end or {})
        else:
            self.stop_requested.wait(self.spec.commit.poll_seconds)
        return True

    def _commit_trigger(self, loop: _Loop, trigger: Trigger, verdict: Verdict | None) -> None:
        """Phase 2: merge, commit and count ``trigger`` (the next one staged meanwhile), then upkeep."""
        with self.metrics.phase("commit"):
            staged = self._merged(loop, trigger)
            self._raise_rejection(staged)
            crash_point("staged")
            commits = self._commit(staged)  # on refusal it deletes what it staged
            crash_point("committed")
        loop.last_commit = time.monotonic()
        loop.frontier = trigger.end
        for part in staged:
            if part.output.truncate:
                part.lane.truncate_pending = None
        if self.aligner is not None:
            self.aligner.committed(trigger.transactions, verdict.split if verdict is not None else ())
        for part in staged:
            self._log_commit(loop.summary, part, commits[part.lane.name])
        loop.summary.frontier = loop.frontier
        with self.metrics.phase("upkeep"):
            for part in staged:  # between triggers, under the fence (spark_app/upkeep/runner.py)
                assert part.lane.maintainer is not None
                part.lane.maintainer.after_commit()

    def _merged(self, loop: _Loop, trigger: Trigger) -> list[Staged]:
        """``trigger``'s tables with their small files merged, the next trigger staged meanwhile; a refused
        trigger is neither followed nor merged."""
        if trigger.rejected:
            return [Staged.of(part, part.results) for part in trigger.parts]
        loop.ahead = self._stage_ahead(loop.stager, loop.source, trigger.end)
        merged = [merge_small_files(self.spark, part.plan, part.results) for part in trigger.parts]
        return [Staged.of(part, results) for part, results in zip(trigger.parts, merged, strict=True)]

    @staticmethod
    def _raise_rejection(staged: list[Staged]) -> None:
        """Bad input with no dead-letter table: discard what the trigger staged and raise the first rejection."""
        rejected = [part.rejection for part in staged if part.rejection is not None]
        if rejected:
            for refused in staged:
                refused.lane.committer.discard(refused.output)
            raise rejected[0].error()

    def _wind_down(self, loop: _Loop) -> None:
        """At the end of a run: discard a trigger staged ahead (stopped, failed or fenced: never committed) and
        close the transaction aligner."""
        ahead, loop.ahead = loop.ahead, None
        try:
            following = ahead.result() if ahead is not None else None
            if following is not None:
                self._discard(following)
        finally:
            if self.aligner is not None:
                self.aligner.close()

    def _aligned(self, source: Source, pending: Pending, loop: _Loop | None) -> Pending | None:
        """``pending`` narrowed or grown to hold every source transaction it touches whole, learnt from its records'
        transaction ids before anything is staged (spec.changes.transactions; ``pending`` itself without); None when
        nothing whole is pending yet (spark_app/sources/transactions.py). Then the range is staged all the same once
        at each frontier: its tasks may find a source truncate or a schema change, which come first (a truncate's
        replay may leave the pending transaction out). Without ``loop``, a range staged ahead: planned before the
        trigger it follows is committed, so before the aligner knows which transactions that trigger split, it is
        not grown nor staged while nothing whole is pending, but planned again once that trigger is committed."""
        if self.aligner is None:
            return pending
        verdict = check_planned(self.aligner, pending)
        while verdict.action == "restage" and not (loop is None and verdict.grows):
            self._log_postponed(verdict, "the planned range")
            pending = source.within(pending, verdict.end or {})
            verdict = check_planned(self.aligner, pending)
        if verdict.action == "commit":
            return pending
        if loop is None:
            return None
        self._log_postponed(verdict, "the planned range")
        if loop.staged_waiting != loop.frontier:
            loop.staged_waiting = loop.frontier
            return pending
        return None

    def _check_transactions(self, trigger: Trigger) -> Verdict | None:
        """Whether a staged trigger holds every source transaction it touches whole, as its tasks saw them
        (spec.changes.transactions; None without): commit it, or discard it and stage another range or wait
        (spark_app/sources/transactions.py). Its range was aligned before staging (:meth:`_aligned`), so this
        commits but when the tasks saw otherwise (a record only the strict decoder refuses names no transaction)
        or the transaction topic changed in between."""
        if self.aligner is None or trigger.rejected or trigger.pending is None:
            return None
        verdict = check_pending(self.aligner, trigger.pending, trigger.transactions)
        self._log_postponed(verdict, "the staged trigger (discarded)")
        if verdict.split:
            log.warning("%s v%d: committing source transaction(s) %s SPLIT across commits (larger than one trigger, or "
                        "not complete after spec.changes.transactions.maxWait); noted as %s in the commit",
                        self.writer.sink_id, self.writer.version, ", ".join(verdict.split[:10]), SPLIT_NOTE)
        return verdict

    def _log_postponed(self, verdict: Verdict, what: str) -> None:
        """The log line of a verdict that stages another range, or waits, instead of ``what``."""
        if verdict.action == "restage":
            log.info("%s v%d: %s splits a source transaction; staging %s instead", self.writer.sink_id,
                     self.writer.version, what,
                     encode_json(verdict.end and {f"{t}/{p}": o for (t, p), o in verdict.end.items()}))
        elif verdict.action == "wait":
            log.info("%s v%d: waiting for source transaction(s) %s: not all their events are in Kafka yet (%s)",
                     self.writer.sink_id, self.writer.version, ", ".join(sorted(verdict.waiting)[:5]), what)

    def _resume(self, source: Source) -> Frontier:
        """The sync's frontier at start. A sync of one table claims it now when its columns are known (declared,
        or the table's); a table created from its first records, and every table of a sync of many, is claimed
        when a trigger first has records for it (:meth:`_claim`). A sync of many resumes each stream from the
        frontier its table holds, read here without a claim."""
        initial = source.initial_frontier()
        if not self.many_tables:
            lane = self.lane(None)
            if not lane.columns:  # spec.schema is empty: the table's columns come from the records
                lane.columns = lane.existing_columns() or []
            if not lane.columns:
                return initial
            claimed = self._claimed(lane, lane.claim(source.identity(), source.check_frontier)).frontier
            return claimed if claimed is not None else initial
        while (streams := source.streams()) is None:  # the source is unreachable: wait for it, or a stop
            if self.stop_requested.wait(self.spec.commit.poll_seconds):
                return initial
        routed = {stream: self.table_of(stream) for stream in streams}
        progress: dict[str, Frontier | None] = {}
        for name in sorted(set(routed.values())):
            try:
                metadata = self.catalog.load_table(name).metadata
            except NoSuchTableError:
                continue
            progress[name] = protocol.read_progress(metadata, self.writer.sink_id).frontier
        return resume_frontier(routed, progress, initial)

    def _claimed(self, lane: Lane, progress: Progress) -> Progress:
        """``progress``, after reporting the freshness the table's fence of ``lane`` carries to the metrics."""
        fence = lane.committer.last_snapshot
        last = progress.last_commit
        self.metrics.resumed(lane.name, fence.timestamp_ms if fence is not None else None,
                             last.max_event_time if last is not None else None)
        return progress

    def _units_by_lane(self, source: Source, frontier: Frontier, pending: Pending) -> dict[str, list[WorkUnit]]:
        """``[frontier, pending.end)`` as work units, by the table each unit's stream goes to."""
        units: dict[str, list[WorkUnit]] = {}
        for unit in source.plan_units(frontier, pending):
            units.setdefault(self.lane(source.stream_of(unit)).name, []).append(unit)
        return units

    def _claim(self, source: Source, frontier: Frontier, units: dict[str, list[WorkUnit]]) -> Frontier:
        """Claim each table of a trigger not claimed yet (creating it, from its first records when no columns
        are declared); the sync's frontier with each claimed table's part as its claim read it."""
        claimed = dict(frontier)
        for name in sorted(units):
            lane = self.lanes[name]
            if lane.claimed:
                continue
            if not lane.columns:
                lane.columns = lane.existing_columns() or []
            if not lane.columns:
                lane.columns_from_drift(read_drift(self.spark, units[name], source.unit_reader([], lane.settings.key,
                                                                                        lane.truncated_at)))
            progress = self._claimed(lane, lane.claim(source.identity(), source.check_frontier))
            if progress.frontier is None:  # no progress of the sink on the table: its streams start where planned
                continue
            if lane.owns is None:
                claimed = dict(progress.frontier)
            else:
                claimed = {stream: position for stream, position in claimed.items() if not lane.owns(stream)}
                claimed.update(lane.part_of(progress.frontier))
        return claimed

    def _stage_ahead(self, stager: ThreadPoolExecutor, source: Source, frontier: Frontier) -> Future[Trigger | None] | None:
        """Start staging the trigger after ``frontier`` while the current one merges and commits, when that
        trigger cannot grow (and touches only tables already claimed)."""
        if self.stop_requested.is_set() or source.exhausted(frontier):
            return None
        pending = source.pending(frontier, self.spec.commit.max_staged_bytes)
        if pending is None or not self._cannot_grow(pending):
            return None
        pending = self._aligned(source, pending, None)
        if pending is None:
            return None
        units = self._units_by_lane(source, frontier, pending)
        if not all(self.lanes[name].claimed for name in units):
            return None
        return stager.submit(self._stage, source, frontier, pending, units)

    def _cannot_grow(self, pending: Pending) -> bool:
        """A trigger is as large as it gets (so it is due now, and may be staged ahead): it reached the
        staging size or the source's per-trigger cap with more waiting, or a bounded source's end."""
        return pending.full or pending.reaches_end or pending.estimated_bytes >= self.spec.commit.max_staged_bytes

    def _stage(self, source: Source, frontier: Frontier, pending: Pending, units: dict[str, list[WorkUnit]]) -> Trigger:
        """Phase 1: stage ``[frontier, pending.end)``, planned as ``units`` by table: each touched table's units
        as files (side by side when there are several)."""
        with self.metrics.phase("stage"):
            trigger = self._stage_lanes(source, pending, units)
        self.metrics.read(pending.estimated_bytes)
        for part in trigger.parts:
            self.metrics.staged(part.lane.name, sum(result.records + result.dead_letters for result in part.results))
        return trigger

    def _stage_lanes(self, source: Source, pending: Pending, units: dict[str, list[WorkUnit]]) -> Trigger:
        """Each touched table's units staged as files (side by side when there are several)."""
        lanes = [self.lanes[name] for name in sorted(units)]
        if len(lanes) == 1:
            return Trigger(pending.end, [self._stage_lane(source, pending, lanes[0], units[lanes[0].name])], pending)
        with ThreadPoolExecutor(max_workers=LANES_STAGED_AT_ONCE, thread_name_prefix="isync-lane") as lanes_pool:
            futures = [lanes_pool.submit(self._stage_lane, source, pending, lane, units[lane.name]) for lane in lanes]
            parts: list[Written] = []
            failure: BaseException | None = None
            for future in futures:  # every lane's staging finishes, so that a failure leaves nothing unknown
                try:
                    parts.append(future.result())
                except BaseException as exc:
                    failure = failure or exc
        if failure is not None:
            self._discard(Trigger(pending.end, parts))
            raise failure
        return Trigger(pending.end, parts, pending)

    def _stage_lane(self, source: Source, pending: Pending, lane: Lane, units: list[WorkUnit]) -> Written:
        """One table's units staged as files by the tasks.

        The tasks' results may hold the rejection of bad input when there is no dead-letter table (the
        caller discards the output then). Their small files are merged afterwards, while the next
        trigger's tasks already run (:meth:`run`).
        """
        assert lane.plan is not None
        if self.spec.transform:
            record_columns = source.record_columns()
            reader = source.unit_reader(record_columns, lane.settings.key, lane.truncated_at)
            results, stats = run_transform(self.spark, units, reader, lane.plan, lane.columns, record_columns,
                                           self.spec.transform)
        else:
            reader = source.unit_reader(lane.columns, lane.settings.key, lane.truncated_at)
            results, stats = run_units(self.spark, units, reader, lane.plan)
        seen = source.restricted(pending, lane.owns) if lane.owns is not None else pending
        return Written(lane, results, seen, source.trigger_notes(seen, stats), lane.plan, stats.drift,
                       stats.transactions, stats.truncate, (pending.truncating or {}).get(lane.name))

    def _commit(self, staged: list[Staged]) -> dict[str, Commit]:
        """The trigger's data commits: one table's, or the cut of every table it touched."""
        if not self.many_tables:
            [part] = staged
            return {part.lane.name: part.lane.committer.commit(part.output, part.end)}
        return commit_trigger([(part.lane.committer, part.output, part.end) for part in staged])

    @staticmethod
    def _discard(trigger: Trigger) -> None:
        for part in trigger.parts:
            part.lane.committer.discard(Staged.of(part, part.results).output)

    def _log_commit(self, summary: RunSummary, staged: Staged, commit: Commit) -> None:
        output = staged.output
        self.metrics.committed(staged.lane.name, commit.snapshot.timestamp_ms, commit.commit_ms / 1000, output.records,
                               output.dead_letters, output.bytes, output.max_event_time, output.source_lag)
        summary.commits += 1
        summary.records += output.records
        summary.dead_letters += output.dead_letters
        if output.dead_letter_reasons:
            log.warning("%s v%d: %d record(s) of %s went to the dead-letter table: %s", self.writer.sink_id,
                        self.writer.version, output.dead_letters, staged.lane.name,
                        encode_json(output.dead_letter_reasons))
        log.info(
            "commit sink=%s version=%d table=%s snapshot=%d records=%d dead_letters=%d files=%d bytes=%d "
            "commit_ms=%.0f frontier=%s", self.writer.sink_id, self.writer.version, staged.lane.name,
            commit.snapshot.snapshot_id, output.records, output.dead_letters,
            len(output.data_files) + len(output.dead_letter_files), output.bytes, commit.commit_ms,
            encode_json(staged.end),
        )


# How a run's error is counted in the metrics (icebergsync.metrics.names.STOP_REASONS); any other: "failed".
STOP_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    (FencedError, "fenced"), (ProgressConflictError, "progress_conflict"), (BadInputError, "bad_input"),
    (CatalogUnreachableError, "catalog_unreachable"))


def stop_reason(stop: BaseException) -> str:
    """The metrics' reason for a run that stops on ``stop``."""
    return next((reason for kind, reason in STOP_REASONS if isinstance(stop, kind)), "failed")


def install_stop_handlers(stop_requested: threading.Event) -> None:
    """SIGTERM/SIGINT finish the current trigger (commit included) and stop cleanly.

    Installed before anything slow starts, so a stop during start-up is clean too.
    """

    def request_stop(signum: int, _frame: Any) -> None:
        log.info("received signal %d: stopping after the current trigger", signum)
        stop_requested.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
