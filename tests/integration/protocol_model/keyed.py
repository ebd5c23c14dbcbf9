"""The keyed configuration's world: a keyed table partitioned so that an update can move a row, each sink's
change stream, a trigger staged as the job stages it, and another engine's keyed writes.

The table is keyed by ``id`` (keys far apart) and partitioned by ``part``; a row's ``who`` says which attempt wrote it and from
which source position (``<attempt>@<position>``, another engine's ``foreign@<n>``), its ``note`` says it again and its
``part`` follows from ``who`` (:func:`fresh`), so most updates move the key to another partition. Some upserts do not
send ``who``, ``note`` or both (Debezium's placeholder for an unchanged TOASTed value): the sink carries those from
the key's live row (spark_app/commit/carry/), so such a row's ``who`` and ``part`` disagree. The oracle's value of a row is
the tuple (``who``, ``note``, ``part``). The two sinks' key spaces overlap: each deletes the other's rows of the keys
it touches.

Records are Kafka Connect JSON (``{"schema", "payload"}``) whose schema is the source's shape at their position
(:class:`SourceShape`): a source gains columns as it goes, and from its first new column on it sends ``part`` as a
64-bit integer. The sink's drift detection (spark_app/decoding/schema_drift/) reads that from the records, as the job does.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table, Transaction

from icebergsync.catalog import ensure_table
from icebergsync.protocol import Writer, attempt_file_prefix
from icebergsync.schema import iceberg_schema
from icebergsync.spec import Column
from spark_app.commit.schema_changes import table_columns
from spark_app.commit.trigger_output import TriggerOutput
from spark_app.decoding.changes import UNAVAILABLE, decode_changes
from spark_app.decoding.schema_drift.drift import SchemaDrift
from spark_app.iceberg.internals import live_files, rewrite_files, row_delta
from spark_app.iceberg.position_deletes.deletion_vector import DeletionVector
from spark_app.iceberg.position_deletes.stage import stage_position_deletes
from spark_app.staging.pipeline import KeyRouter, stage_changes
from spark_app.staging.writer import WritePlan, table_plan
from tests.integration.committer_support import stage_rows
from tests.integration.protocol_model.oracle import CARRIED, Value
from tests.integration.protocol_model.world import TABLE, SinkProcess, is_bad

COLUMNS = [Column(name="id", type="long", required=True), Column(name="who", type="string"),
           Column(name="part", type="int"), Column(name="note", type="string")]
VALUE_COLUMNS = ("who", "note", "part")  # the oracle's value of a row, in this order
# The columns an upsert may leave unsent (Debezium's placeholder), by a change's draw: one upsert in four.
CARRIES = ((0,), (1,), (0, 1))
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


def part_of(who: str) -> int:
    """The partition of a row whose ``who`` is ``who``."""
    return zlib.crc32(who.encode()) % PARTS


def fresh(who: str) -> tuple[str, str, int]:
    """The value of a row whose ``who`` is ``who``, every column sent: (``who``, ``note``, ``part``)."""
    return who, f"{who}/note", part_of(who)


def change(sink: str, local_id: int) -> tuple[int, bool, tuple[int, ...]]:
    """The change at a sink's source position: (the key, whether it deletes the key rather than upserts it, the
    positions in the value of the columns an upsert does not send)."""
    mixed = zlib.crc32(f"{sink}#{local_id}".encode())
    keys = KEYS[sink]
    carries = (mixed >> 20) % 12
    return keys[mixed % len(keys)], (mixed >> 16) % 4 == 0, CARRIES[carries] if carries < len(CARRIES) else ()


@dataclass
class SourceShape:
    """The shape of a sink's records as its source changes it: each column it gained (optional text) and from which
    source position on, in the order gained, and from which position on it sends ``part`` as a 64-bit integer (from
    its first new column on)."""

    gained: list[tuple[int, str]] = field(default_factory=list)
    part_long_from: int | None = None

    def gain(self, position: int, column: str) -> None:
        self.gained.append((position, column))
        if self.part_long_from is None:
            self.part_long_from = position

    def has(self, column: str) -> bool:
        return any(name == column for _, name in self.gained)

    def columns_at(self, position: int) -> list[str]:
        return [column for start, column in self.gained if start <= position]

    def part_long_at(self, position: int) -> bool:
        return self.part_long_from is not None and self.part_long_from <= position


def _value(sink: str, local_id: int, who: str) -> Value:
    """The value the change at ``local_id`` upserts (``CARRIED`` where it does not send a column), None: a delete."""
    _, deletes, carries = change(sink, local_id)
    if deletes:
        return None
    return tuple(CARRIED if column in carries else item for column, item in enumerate(fresh(who)))


def changes(sink: str, local: range, value: Callable[[int], str]) -> list[tuple[int, Value]]:
    """The good changes at ``local`` as (key, the upserted value, None for a delete), in source order."""
    return [(change(sink, i)[0], _value(sink, i, value(i))) for i in local if not is_bad(i)]


def record_text(sink: str, source_id: int, local_id: int, who: str, shape: SourceShape) -> str:
    """The record at a source position as the sink reads it: upsert-format Connect JSON of the source's shape there
    (a column not sent holds Debezium's placeholder), or, for a bad record, its source id (not a JSON object: a dead
    letter whose payload it is)."""
    if is_bad(local_id):
        return str(source_id)
    key, deletes, _ = change(sink, local_id)
    value = _value(sink, local_id, who)
    gained = shape.columns_at(local_id)
    fields = [{"field": "id", "type": "int64", "optional": False}, {"field": "who", "type": "string"},
              {"field": "part", "type": "int64" if shape.part_long_at(local_id) else "int32"},
              {"field": "note", "type": "string"}, *({"field": column, "type": "string"} for column in gained)]
    if deletes or not isinstance(value, tuple):
        payload: dict[str, Any] = {"id": key, "__deleted": True}
        fields.append({"field": "__deleted", "type": "boolean"})
    else:
        payload = {"id": key, **{name: UNAVAILABLE if item == CARRIED else item
                                 for name, item in zip(VALUE_COLUMNS, value, strict=True)},
                   **{column: f"{column}@{local_id}" for column in gained}}
    return json.dumps({"schema": {"type": "struct", "fields": fields}, "payload": payload})


def _decode(process: SinkProcess, local: range, value: Callable[[int], str], shape: SourceShape,
            drift: SchemaDrift | None = None) -> pa.Table:
    """The changes of source positions ``local``, decoded into the columns of the attempt's table plan."""
    records = [record_text(process.claim.sink, process.base + i, i, value(i), shape).encode() for i in local]
    return decode_changes(records, None, lambda index: {"next_id": local.start + index},
                          table_columns(process.plan.schema, TABLE), KEY, "upsert", 0, drift)


def source_drift(process: SinkProcess, local: range, value: Callable[[int], str], shape: SourceShape) -> SchemaDrift:
    """What the records at ``local`` ask of the attempt's table, as the job's decoding collects it."""
    drift = SchemaDrift()
    _decode(process, local, value, shape, drift)
    return drift


def stage_keyed_trigger(process: SinkProcess, local: range, value: Callable[[int], str],
                        shape: SourceShape) -> TriggerOutput:
    """Stage source positions ``local`` as the job does (spark_app/staging/pipeline.py): upsert-format change records
    decoded, routed by key to the writer tasks, each collapsing its changes and writing its winning upserts and
    dead letters and returning the keys it touched, which the committer's deletes find on its head, and the upserts
    still missing values, which the committer carries from the live rows of the head it lands on."""
    writer = process.committer.writer
    plan = WritePlan(writer.sink_id, writer.version, attempt_file_prefix(writer), process.plan, process.dead_plan,
                     1 << 30, 1 << 26, ("id",), None, key=KEY)
    decoded = _decode(process, local, value, shape)
    output = TriggerOutput()
    touched, carried = [], []
    for bucket, rows in KeyRouter(KEY, TASKS).split(decoded.combine_chunks().to_batches()[0]):
        result = stage_changes(plan, [rows], f"{bucket:05d}-0")
        output.records += result.records
        output.dead_letters += result.dead_letters
        for staged in result.files:
            (output.dead_letter_files if staged.table == "dead_letter" else output.data_files).append(staged.data_file)
        if result.touched_keys is not None:
            touched.append(pa.ipc.open_stream(result.touched_keys).read_all())
        if result.carried is not None:
            carried.append(pa.ipc.open_stream(result.carried).read_all())
    output.touched_keys = pa.concat_tables(touched) if touched else None
    if carried:
        output.carried, output.carry_plan = pa.concat_tables(carried), plan
    return output


def foreign_rewrite(table: Table, add: Mapping[int, tuple[str, str, int]]) -> None:
    """Another engine upserts ``add`` (key -> its value, :func:`fresh`) and rewrites the table: every live row, but those of the keys
    it upserts, moves with the new rows into one new file per partition, in reverse order (every position changes),
    in row groups of ``FOREIGN_ROW_GROUP_ROWS`` rows whose key ranges overlap. On
    format 2 a rewrite removes the old data and delete files; on format 3 deletion vectors delete every row of
    the old data files (merged with the DVs they hold)."""
    current = table.scan().to_arrow()
    names = [f.name for f in table.schema().fields]
    kept = [row for row in current.select(names).to_pylist() if row["id"] not in add][::-1]
    new = [{"id": key, **dict(zip(VALUE_COLUMNS, value, strict=True))} for key, value in add.items()]
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
