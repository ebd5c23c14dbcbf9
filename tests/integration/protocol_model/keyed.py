"""The keyed configuration's world: a keyed table partitioned so that an update can move a row, each sink's
change stream, a trigger staged as the job stages it, and another engine's keyed writes.

The table is keyed by ``id`` (keys far apart) and partitioned by ``part``; a row's ``who`` says which attempt wrote it and from
which source position (``<attempt>@<position>``, another engine's ``foreign@<n>``), and its ``part`` follows from
``who`` (:func:`part_of`), so most updates move the key to another partition. The two sinks' key spaces
overlap: each deletes the other's rows of the keys it touches.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table, Transaction

from icebergsync.catalog import ensure_table
from icebergsync.protocol import Writer, attempt_file_prefix
from icebergsync.schema import iceberg_schema
from icebergsync.spec import Column
from spark_app.commit.committer import TriggerOutput
from spark_app.decoding.changes import decode_changes
from spark_app.iceberg.internals import live_files, rewrite_files, row_delta
from spark_app.iceberg.position_deletes.deletion_vector import DeletionVector
from spark_app.iceberg.position_deletes.stage import stage_position_deletes
from spark_app.staging.pipeline import KeyRouter, stage_changes
from spark_app.staging.writer import WritePlan, table_plan
from tests.integration.committer_support import stage_rows
from tests.integration.protocol_model.world import SinkProcess, is_bad

COLUMNS = [Column(name="id", type="long", required=True), Column(name="who", type="string"),
           Column(name="part", type="int")]
KEY = ("id",)
PARTS = 3
STRIDE = 1 << 40  # keys far apart: a file's and a row group's key bounds span a wide range
KEYS = {"ns/a": range(0, 12 * STRIDE, STRIDE), "ns/b": range(6 * STRIDE, 18 * STRIDE, STRIDE)}  # overlapping: the
# sinks touch each other's keys
FOREIGN_KEYS = range(0, 18 * STRIDE, STRIDE)
FOREIGN_ROW_GROUP_ROWS = 3  # another engine's rewrite writes a large file of several row groups beside small ones
TASKS = 2  # the key buckets a trigger's changes are routed to, one writer task each
FOREIGN_WRITER = Writer("another-engine", 0, "x")


def create_keyed_table(catalog: Catalog, identifier: str, format_version: str) -> None:
    ensure_table(catalog, identifier, iceberg_schema(COLUMNS), ["part"], {"format-version": format_version}, key=KEY)


def part_of(value: str) -> int:
    """The partition of a row whose ``who`` is ``value``."""
    return zlib.crc32(value.encode()) % PARTS


def change(sink: str, local_id: int) -> tuple[int, bool]:
    """The change at a sink's source position: (the key, whether it deletes the key rather than upserts it)."""
    mixed = zlib.crc32(f"{sink}#{local_id}".encode())
    keys = KEYS[sink]
    return keys[mixed % len(keys)], (mixed >> 16) % 4 == 0


def changes(sink: str, local: range, value: Callable[[int], str]) -> list[tuple[int, str | None]]:
    """The good changes at ``local`` as (key, the upserted row's ``who``, None for a delete), in source order."""
    return [(key, None if deletes else value(i)) for i in local if not is_bad(i) for key, deletes in [change(sink, i)]]


def _record(sink: str, source_id: int, local_id: int, value: str) -> bytes:
    if is_bad(local_id):
        return str(source_id).encode()  # not a JSON object: a dead letter whose payload is the source id
    key, deletes = change(sink, local_id)
    if deletes:
        return json.dumps({"id": key, "__deleted": True}).encode()
    return json.dumps({"id": key, "who": value, "part": part_of(value)}).encode()


def stage_keyed_trigger(process: SinkProcess, local: range, value: Callable[[int], str]) -> TriggerOutput:
    """Stage source positions ``local`` as the job does (spark_app/pipeline.py): upsert-format change records
    decoded, routed by key to the writer tasks, each collapsing its changes and writing its winning upserts and
    dead letters and returning the keys it touched, which the committer's deletes find on its head."""
    writer = process.committer.writer
    plan = WritePlan(writer.sink_id, writer.version, attempt_file_prefix(writer), process.plan, process.dead_plan,
                     1 << 30, 1 << 26, ("id",), None, key=KEY)
    records = [_record(writer.sink_id, process.base + i, i, value(i)) for i in local]
    decoded = decode_changes(records, None, lambda index: {"next_id": local.start + index}, COLUMNS, KEY, "upsert", 0)
    output = TriggerOutput()
    touched = []
    for bucket, rows in KeyRouter(KEY, TASKS).split(decoded.combine_chunks().to_batches()[0]):
        result = stage_changes(plan, [rows], f"{bucket:05d}-0")
        output.records += result.records
        output.dead_letters += result.dead_letters
        for staged in result.files:
            (output.dead_letter_files if staged.table == "dead_letter" else output.data_files).append(staged.data_file)
        if result.touched_keys is not None:
            touched.append(pa.ipc.open_stream(result.touched_keys).read_all())
    output.touched_keys = pa.concat_tables(touched) if touched else None
    return output


def foreign_rewrite(table: Table, add: Mapping[int, str]) -> None:
    """Another engine upserts ``add`` (key -> ``who``) and rewrites the table: every live row, but those of the keys
    it upserts, moves with the new rows into one new file per partition, in reverse order (every position changes),
    in row groups of ``FOREIGN_ROW_GROUP_ROWS`` rows whose key ranges overlap. On
    format 2 a rewrite removes the old data and delete files; on format 3 deletion vectors delete every row of
    the old data files (merged with the DVs they hold)."""
    current = table.scan().to_arrow()
    names = [f.name for f in table.schema().fields]
    kept = [row for row in current.select(names).to_pylist() if row["id"] not in add][::-1]
    new = [{"id": key, "who": who, "part": part_of(who)} for key, who in add.items()]
    rows: dict[str, list[Any]] = {name: [row.get(name) for row in kept + new] for name in names}
    added = stage_rows(table, FOREIGN_WRITER, rows, table_plan(table), FOREIGN_ROW_GROUP_ROWS) if kept or new else []
    snapshot = table.current_snapshot()
    live = live_files(table, snapshot) if snapshot is not None else []
    if not added and not live:
        return
    transaction = Transaction(table)
    if table.metadata.format_version < 3 and snapshot is not None:
        rewrite_files(transaction, {}, [f.data_file for f in live], added, snapshot.sequence_number or 0)
    else:
        every_row = {f.path: DeletionVector(range(f.data_file.record_count)) for f in live
                     if f.data_file.content == DataFileContent.DATA}
        deletes = stage_position_deletes(table, every_row, attempt_file_prefix(FOREIGN_WRITER))
        row_delta(transaction, {}, added, deletes.added, deletes.removed)
    transaction.commit_transaction()
