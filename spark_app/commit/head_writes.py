"""What a trigger's commit writes for the head it is built on, again in each round: the position deletes (or
deletion vectors) of the rows its keys or its removed copies take, the small files written again instead
(copy-on-write), and its carried rows completed from their keys' live rows."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from icebergsync.protocol import attempt_file_prefix
from spark_app.commit.carry.fill import fill
from spark_app.commit.carry.live_rows import live_positions, read_live_rows
from spark_app.commit.carry.moves import fill_from_moves, matching_moves, old_keys_to_read
from spark_app.commit.copy_on_write import CopyOnWrite, copy_on_write
from spark_app.commit.key_index.file_keys import FileKeysCache
from spark_app.commit.key_index.key_columns import DRIVER_KEY_COLUMNS
from spark_app.commit.key_index.locate import LocateStats, locate_rows
from spark_app.commit.keyless_locate import locate_copies
from spark_app.commit.sink import Sink
from spark_app.commit.trigger_output import TriggerOutput
from spark_app.decoding.changes import CARRY_COLUMN
from spark_app.decoding.row_identity import COUNT_COLUMN
from spark_app.iceberg.internals import LiveFile
from spark_app.iceberg.position_deletes.deletion_vector import DeletionVector
from spark_app.iceberg.position_deletes.stage import PositionDeleteDelta, stage_position_deletes
from spark_app.staging.writer import TaskResult, stage_partition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("icebergsync.committer")


class HeadWrites:
    """Writes a sink's triggers need on the head their commit is built on, with what it keeps across triggers (the
    key index's data file summaries, the key columns of the row groups it read, the head's live files by
    manifest).

    ``copy_on_write_bytes``: touched data files smaller than this are written again instead of getting position
    deletes (changes.copyOnWriteBelow); ``unmatched_copies``: of the last keyless locate, rows the source removed
    that the table did not hold.
    """

    def __init__(self, sink: Sink, spark: Callable[[], SparkSession] | None, copy_on_write_bytes: int):
        self._sink = sink
        self._file_keys = FileKeysCache()
        self._key_columns = DRIVER_KEY_COLUMNS
        self._spark = spark  # runs a large locate's reads as tasks (spark_app/commit/key_index/tasks.py)
        self._live_manifests: dict[str, list[LiveFile]] = {}
        self.copy_on_write_bytes = copy_on_write_bytes
        self.unmatched_copies = 0

    def position_deletes(self, table: Table, output: TriggerOutput) -> tuple[PositionDeleteDelta, CopyOnWrite]:
        """The position deletes (or deletion vectors) of the rows ``output.touched_keys`` hold on ``table``'s head,
        but for the small files written again instead, with the trigger's new rows of their partitions
        (:mod:`spark_app.commit.copy_on_write`, below ``copy_on_write_bytes``)."""
        snapshot = table.current_snapshot()
        if snapshot is None:
            return PositionDeleteDelta(), CopyOnWrite({})
        prefix = f"{attempt_file_prefix(self._sink.writer)}-{snapshot.snapshot_id}"
        located = self._locate(table, snapshot, output.touched_keys)
        located.update(self._locate_copies(table, snapshot, output.removed_copies))
        cow = CopyOnWrite(located)
        if self.copy_on_write_bytes > 0 and not output.delete_files and (located or output.data_files):
            started = time.monotonic()
            cow = copy_on_write(table, located, output.data_files, self.copy_on_write_bytes, f"{prefix}-cow",
                                self._live_manifests)
            if cow.added:
                log.info("%s: wrote %d small data file(s) again in %.2fs (%d row(s), %d staged file(s) merged) "
                         "instead of position deletes", self._sink.writer.sink_id, len(cow.removed_data),
                         time.monotonic() - started, cow.rows_rewritten, len(cow.replaced_staged))
        try:
            return stage_position_deletes(table, cow.located, prefix), cow
        except BaseException:
            self._sink.delete_files(cow.added)
            raise

    def _locate(self, table: Table, snapshot: Snapshot, touched_keys: pa.Table | None) -> dict[str, DeletionVector]:
        """Data file path -> the positions of the rows ``touched_keys`` hold on ``snapshot``."""
        if touched_keys is None or touched_keys.num_rows == 0:
            return {}
        started, stats = time.monotonic(), LocateStats()
        located = locate_rows(table, snapshot, touched_keys, self._file_keys, stats, self._spark, self._key_columns)
        log.info("%s: located %d key(s) in %.2fs: %d of %d file(s) past bounds, %d of %d row group(s) searched "
                 "(%d skipped by statistics, %d by Bloom filters), %d key rows in memory, %d read (%d by Spark tasks), "
                 "%d file(s) with deletes", self._sink.writer.sink_id, touched_keys.num_rows,
                 time.monotonic() - started, stats.files - stats.files_skipped_by_bounds, stats.files,
                 stats.row_groups - stats.row_groups_skipped_by_statistics - stats.row_groups_skipped_by_bloom,
                 stats.row_groups, stats.row_groups_skipped_by_statistics, stats.row_groups_skipped_by_bloom,
                 stats.rows_in_memory, stats.rows_read, stats.rows_read_in_tasks, len(located))
        return dict(located)

    def _locate_copies(self, table: Table, snapshot: Snapshot, removed: pa.Table | None) -> dict[str, DeletionVector]:
        """Data file path -> the positions of the live copies ``removed`` (a keyless trigger's) takes on ``snapshot``;
        copies the table does not hold are counted in ``unmatched_copies`` and warned about."""
        self.unmatched_copies = 0
        if removed is None or removed.num_rows == 0:
            return {}
        started, stats = time.monotonic(), LocateStats()
        located = locate_copies(table, snapshot, removed, self._file_keys, stats, self._spark)
        log.info("%s: located %d row(s) to remove (%d copies) in %.2fs: %d of %d file(s) read (%d row(s)), "
                 "%d file(s) with deletes", self._sink.writer.sink_id, removed.num_rows,
                 sum(removed.column(COUNT_COLUMN).to_pylist()), time.monotonic() - started,
                 stats.files - stats.files_skipped_by_bounds, stats.files, stats.rows_read, len(located.positions))
        if located.unmatched:
            self.unmatched_copies = located.unmatched
            log.warning("%s: the source removed %d row(s) of %s that the table does not hold as live rows (a table "
                        "without a primary key: a delete or update removes one live row equal to its before image); "
                        "nothing else was removed for them", self._sink.writer.sink_id, located.unmatched,
                        table.name())
        return located.positions

    def carry(self, table: Table, output: TriggerOutput) -> TaskResult | None:
        """The files of ``output.carried`` completed from their keys' live rows on ``table``'s head (data files, and
        dead letters of keys without one); raises ``BadInputError`` for those without a dead-letter table."""
        carried, plan = output.carried, output.carry_plan
        if carried is None or carried.num_rows == 0 or plan is None or plan.key is None:
            return None
        snapshot = None if output.truncate else table.current_snapshot()  # emptied first: no row lives on
        names = sorted({name for names in carried.column(CARRY_COLUMN).to_pylist() if names for name in names})
        moves = matching_moves(carried, output.moved)  # the old keys of primary-key updates (spark_app/commit/carry/moves.py)
        keys = carried.select(list(plan.key))
        if (old_keys := old_keys_to_read(moves, plan.key)) is not None:
            keys = pa.concat_tables([keys, old_keys.cast(keys.schema)])
        located = locate_rows(table, snapshot, keys, self._file_keys, LocateStats(),
                              self._spark, self._key_columns) if snapshot is not None else {}
        rows = live_positions(table, snapshot, located) if snapshot is not None else []
        live = read_live_rows(table, rows, plan.key, names, self._spark)
        moved, rest = fill_from_moves(carried, moves, live, plan.key)
        completed = pa.concat_tables([moved, fill(rest, live, plan.key)])
        result = stage_partition(plan, iter(completed.to_batches()),
                                 f"carry-{snapshot.snapshot_id if snapshot else 0}-{uuid.uuid4().hex[:8]}")
        if result.rejection is not None:
            raise result.rejection.error()
        log.info("%s: carried %d row(s)' unsent values from %d live row(s), %d dead letter(s)",
                 self._sink.writer.sink_id, carried.num_rows, live.num_rows, result.dead_letters)
        return result
