"""Dead letters: records (or whole inputs) that cannot be ingested, with the reason and the source position.

One module owns them end to end:

* marking — every frame handed to the writer carries three control columns: ``_isync_error`` (why
  the row is a dead letter, null when it is good), ``_isync_raw`` (the raw record) and
  ``_isync_position`` (its source position as compact JSON, :func:`encode_position`). Decoders set
  them per record; a source that finds a whole input unusable (a file that is not Parquet, a CSV with
  the wrong header) adds ONE row for it (``arrow_decode.whole_input_row``);
* splitting and building — the executors split each batch into good rows and dead letters and turn
  the dead letters into rows of :data:`DEAD_LETTER_SCHEMA` (:func:`split_dead_letters`,
  :func:`dead_letter_rows`);
* rejecting — without a dead-letter table a bad record stops the job: the task records a
  :class:`Rejection` instead of writing, and the driver raises :class:`BadInputError` (exit 65)
  with one line naming the position and the reason, after discarding the trigger's staged files.

Committing dead-letter files (after the main commit, recovered after a crash) is the committer's job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from icebergsync.errors import BadInputError

DEAD_LETTER_SCHEMA = Schema(
    NestedField(1, "sink_id", StringType(), required=True),
    NestedField(2, "sink_version", LongType(), required=True),
    NestedField(3, "payload", StringType(), required=False, doc="the raw record, or the row as JSON"),
    NestedField(4, "reason", StringType(), required=True),
    NestedField(5, "position", StringType(), required=False, doc="source position as JSON"),
    NestedField(6, "failed_at", TimestamptzType(), required=True),
)

ERROR_COLUMN = "_isync_error"
RAW_COLUMN = "_isync_raw"
POSITION_COLUMN = "_isync_position"
CONTROL_COLUMNS = (ERROR_COLUMN, RAW_COLUMN, POSITION_COLUMN)

_REASON_KEY_CHARS = 80


def encode_position(position: Mapping[str, object]) -> str:
    """A source position as the compact JSON every dead letter carries (keys sorted)."""
    return json.dumps(position, sort_keys=True, separators=(",", ":"), default=str)


# -- marking (driver, Spark) ----------------------------------------------------------------------


def with_control_columns(frame: DataFrame) -> DataFrame:
    """Add empty control columns to a frame of already-typed good rows."""
    return frame.select("*", *[F.lit(None).cast("string").alias(name) for name in CONTROL_COLUMNS])


# -- splitting and building (executors, Arrow) ----------------------------------------------------


def with_control_columns_arrow(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with every control column (absent ones added as nulls)."""
    for name in CONTROL_COLUMNS:
        if name not in batch.schema.names:
            batch = batch.append_column(name, pa.nulls(batch.num_rows, pa.string()))
    return batch


def split_dead_letters(batch: pa.RecordBatch, required: tuple[str, ...]) -> tuple[pa.RecordBatch, pa.Array, pa.Array]:
    """Return (good rows, mask of bad rows, reasons) where reasons explain each bad row.

    The common case, a batch without a bad row, is returned as it is (no copy).
    """
    reasons = batch.column(ERROR_COLUMN) if ERROR_COLUMN in batch.schema.names else pa.nulls(batch.num_rows, pa.string())
    present = [name for name in required if name in batch.schema.names]
    if reasons.null_count == batch.num_rows and all(batch.column(name).null_count == 0 for name in present):
        return batch, pa.repeat(pa.scalar(False), batch.num_rows), reasons
    for name in present:
        missing = pc.is_null(batch.column(name))
        reasons = pc.if_else(
            pc.and_(missing, pc.is_null(reasons)), pa.scalar(f"required field {name} is missing or null"), reasons
        )
    bad = pc.is_valid(reasons)
    return batch.filter(pc.invert(bad)), bad, reasons


def _row_payloads(batch: pa.RecordBatch) -> list[str | None]:
    """Each row as JSON (for records without a raw form); a row with no value at all (a whole bad input) has none."""
    data = batch.drop_columns([name for name in CONTROL_COLUMNS if name in batch.schema.names])
    return [json.dumps(row, default=str, sort_keys=True) if any(v is not None for v in row.values()) else None
            for row in data.to_pylist()]


def _control(batch: pa.RecordBatch, name: str) -> pa.Array:
    return batch.column(name) if name in batch.schema.names else pa.nulls(batch.num_rows, pa.string())


def dead_letter_rows(sink_id: str, sink_version: int, batch: pa.RecordBatch, bad: pa.Array, reasons: pa.Array) -> pa.Table:
    """Rows for the dead-letter table: sink, payload (raw record, or the row as JSON), reason, position, time."""
    rows = batch.filter(bad)
    raw = _control(rows, RAW_COLUMN)
    payload = pc.if_else(pc.is_valid(raw), pc.cast(raw, pa.string()), pa.array(_row_payloads(rows), pa.string()))
    now = datetime.now(UTC)
    return pa.table({
        "sink_id": pa.array([sink_id] * rows.num_rows, pa.string()),
        "sink_version": pa.array([sink_version] * rows.num_rows, pa.int64()),
        "payload": payload,
        "reason": reasons.filter(bad),
        "position": pc.cast(_control(rows, POSITION_COLUMN), pa.string()),
        "failed_at": pa.array([now] * rows.num_rows, pa.timestamp("us", tz="UTC")),
    })


def count_reasons(reasons: list[str], counts: dict[str, int]) -> None:
    """Add each reason's kind (the text before the first colon) to ``counts``, for the commit log line."""
    for reason in reasons:
        key = reason.split(":", 1)[0][:_REASON_KEY_CHARS]
        counts[key] = counts.get(key, 0) + 1


# -- rejecting (no dead-letter table) -------------------------------------------------------------


@dataclass(frozen=True)
class Rejection:
    """The first bad record a task met when there is no dead-letter table, and how many it met."""

    reason: str
    position: str | None
    records: int

    @staticmethod
    def first(batch: pa.RecordBatch, bad: pa.Array, reasons: pa.Array) -> Rejection:
        rows = batch.filter(bad)
        position = _control(rows, POSITION_COLUMN)[0].as_py()
        return Rejection(reasons.filter(bad)[0].as_py(), position, rows.num_rows)

    def adding(self, other: Rejection) -> Rejection:
        """This (earlier) rejection, counting ``other``'s records too."""
        return Rejection(self.reason, self.position, self.records + other.records)

    def error(self) -> BadInputError:
        """The job's error: one line with the position and the reason, nothing committed."""
        where = self.position or "unknown position"
        return BadInputError(
            f"bad input at {where}: {self.reason} ({self.records} bad record(s) in this trigger); spec.deadLetter is not "
            "set, so nothing of this trigger is committed. Fix or remove the input, or set spec.deadLetter.table"
        )
