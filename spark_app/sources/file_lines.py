"""Files as work units, read in the tasks straight into Arrow (JSON lines, CSV, Parquet).

A unit is a file or, for a large uncompressed text file when a trigger has fewer files than
cores, a byte slice of one (a line belongs to the slice holding its first byte). Each task opens
its files through pyiceberg's FileIO, cuts text into blocks of whole lines and decodes each block
with :mod:`spark_app.decoding.arrow_decode`; every record keeps its file and 1-based line number (Parquet:
its row index). A file that cannot be used at all becomes ONE dead letter with the reason:

* a ``.gz`` file whose stream is corrupt or truncated (checked in full before any line is read,
  so a bad file never yields some of its lines);
* a CSV file whose header does not name the declared columns in order (case-insensitive, as Spark);
* a file that is not Parquet, or a Parquet file with a column the spec does not declare or of a
  type that cannot be read as the declared one.

Blank lines are skipped (they still count for line numbers).
"""

from __future__ import annotations

import csv
import gzip
import itertools
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO, load_file_io

from icebergsync.spec import Column as SpecColumn
from icebergsync.spec import IcebergSyncSpec
from spark_app.decoding.arrow_decode import (
    conform_table,
    decode_csv_block,
    decode_json_block,
    target_schema,
    whole_input_row,
)
from spark_app.decoding.changes import Truncates, decode_changes
from spark_app.decoding.schema_drift.drift import SchemaDrift
from spark_app.decoding.settings_seen import SettingsSeen
from spark_app.decoding.source_positions import Position
from spark_app.sources.units import FileUnit, UnitStats, WorkUnit, order_base

BLOCK_BYTES = 8 << 20
MIN_SLICE_BYTES = 8 << 20
_CHUNK_BYTES = 1 << 20
_CORRUPT_GZIP = (gzip.BadGzipFile, EOFError, zlib.error)


def plan_file_units(files: list[tuple[str, int]], file_format: str, cores: int) -> list[WorkUnit]:
    """Units for ``(uri, size)`` files in order: one per file, and byte slices of large uncompressed
    text files when there are fewer files than cores (so that every core has work)."""
    total = sum(size for _, size in files)
    share = max(MIN_SLICE_BYTES, -(-total // max(1, cores)))
    units: list[WorkUnit] = []
    for uri, size in files:
        sliceable = file_format != "parquet" and not uri.endswith(".gz") and len(files) < cores
        slices = max(1, size // share) if sliceable else 1
        bounds = [size * i // slices for i in range(slices + 1)]
        for start, end in itertools.pairwise(bounds):
            units.append(FileUnit(len(units), uri, start, end if slices > 1 else None, 1 if start == 0 else None))
    return units


def _open(io: FileIO, uri: str) -> Any:
    stream: Any = io.new_input(uri).open()
    return gzip.GzipFile(fileobj=stream) if uri.endswith(".gz") else stream


def corrupt_compression(io: FileIO, uri: str) -> str | None:
    """Why a compressed file cannot be decompressed in full, or None (also for an uncompressed file)."""
    if not uri.endswith(".gz"):
        return None
    try:
        with _open(io, uri) as stream:
            while stream.read(_CHUNK_BYTES):
                pass
    except _CORRUPT_GZIP as exc:
        return f"corrupt gzip file: {exc}"
    return None


def header_mismatch(first_line: bytes, expected: tuple[str, ...]) -> str | None:
    """Why a CSV header line does not name ``expected`` in order, or None."""
    try:
        found = next(csv.reader([first_line.decode("utf-8-sig")]), [])
    except UnicodeDecodeError:
        return "CSV header is not valid UTF-8"
    if [name.strip().lower() for name in found] == [name.lower() for name in expected]:
        return None
    return f"CSV header {found} does not match the declared columns {list(expected)}"


def _lines_before(io: FileIO, uri: str, offset: int) -> int:
    """How many line ends the file has before byte ``offset``."""
    count, left = 0, offset
    with _open(io, uri) as stream:
        while left > 0 and (chunk := stream.read(min(_CHUNK_BYTES, left))):
            count += chunk.count(b"\n")
            left -= len(chunk)
    return count


def _first_line_start(stream: Any, start: int) -> int | None:
    """The offset of the first line that begins at or after ``start`` (> 0), or None at the end of the file."""
    stream.seek(start - 1)
    offset = start - 1
    while chunk := stream.read(_CHUNK_BYTES):
        cut = chunk.find(b"\n")
        if cut >= 0:
            return offset + cut + 1
        offset += len(chunk)
    return None


def _slice_blocks(io: FileIO, unit: FileUnit) -> Iterator[tuple[bytes, int]]:
    """``(block of whole lines, number of its first line)`` for the lines whose first byte lies in the unit."""
    end = unit.end
    with _open(io, unit.uri) as stream:
        position, line = 0, 1
        if unit.start > 0:
            begin = _first_line_start(stream, unit.start)
            if begin is None or (end is not None and begin >= end):
                return  # no line begins in this slice
            line = _lines_before(io, unit.uri, begin) + 1
            stream.seek(begin)
            position = begin
        rest = b""
        while True:
            chunk = stream.read(BLOCK_BYTES)
            data = rest + chunk
            if not chunk:
                if data and (end is None or position < end):
                    yield data, line  # the last line, without a line end
                return
            cut = data.rfind(b"\n")
            if cut < 0:
                rest = data
                continue
            block, rest = data[:cut + 1], data[cut + 1:]
            if end is not None and position + len(block) >= end:
                # Keep the lines that begin before ``end``: up to the line end at or after byte end - 1.
                yield block[:block.find(b"\n", end - position - 1) + 1], line
                return
            yield block, line
            line += block.count(b"\n")
            position += len(block)


@dataclass(frozen=True)
class ChangeReading:
    """How a keyed sync decodes lines: each non-blank line is one change record (docs/dataplane.md)."""

    columns: tuple[SpecColumn, ...]
    key: tuple[str, ...]
    format: str
    follow_schema: bool = False  # spec.schemaEvolution evolve: note the records' schema drift in the stats
    transactions: bool = False  # spec.changes.transactions: note each record's source transaction in the stats
    truncated_at: Position | None = None  # the truncate the table applied: skip what precedes it, note newer ones

    @classmethod
    def of(cls, spec: IcebergSyncSpec, columns: list[SpecColumn], key: list[str] | None = None,
           truncated_at: Position | None = None) -> ChangeReading | None:
        """How ``spec``'s change records decode into ``columns`` by ``key`` (default ``spec.table.key``; a table's own
        in a sync of many); None for a sync of appends."""
        if spec.changes is None:
            return None
        return cls(tuple(columns), tuple(key if key is not None else spec.table.key or ()), spec.changes.format,
                   spec.follows_source_schema,
                   spec.changes.transactions is not None, truncated_at)

    def decode_lines(self, block: bytes, uri: str, first_line: int, base: int,
                     stats: UnitStats) -> tuple[pa.Table, int]:
        """The changes of a block of whole lines and the number of records (non-blank lines) in it;
        record ``i`` of the block is ordered ``base + i``."""
        numbered = [(first_line + i, line.removesuffix(b"\r")) for i, line in enumerate(block.split(b"\n"))]
        records = [(number, line) for number, line in numbered if line.strip()]
        truncates = Truncates(self.truncated_at)
        changes = decode_changes([line for _, line in records], None,
                                 lambda i: {"file": uri, "line": records[i][0]},
                                 list(self.columns), list(self.key), self.format, base, self._drift(stats),
                                 truncates=truncates, settings=self._settings(stats))
        stats.saw_truncate(truncates.seen)
        return changes, len(records)

    def decode_records(self, values: pa.Array | pa.ChunkedArray, keys: pa.Array | pa.ChunkedArray | None,
                       positions: Callable[[int], dict[str, Any]], base: int, stats: UnitStats,
                       transactions: list[tuple[int, str]] | None = None) -> pa.Table:
        """The changes of Kafka records (values, message keys) in offset order; record ``i`` is ordered ``base + i``;
        with ``transactions``, ``(i, transaction id)`` of each record that names one (see :func:`decode_changes`)."""
        truncates = Truncates(self.truncated_at)
        changes = decode_changes(values, keys, positions, list(self.columns), list(self.key), self.format, base,
                                 self._drift(stats), transactions, truncates, self._settings(stats))
        stats.saw_truncate(truncates.seen)
        return changes

    def _drift(self, stats: UnitStats) -> SchemaDrift | None:
        return stats.drift if self.follow_schema else None

    def _settings(self, stats: UnitStats) -> SettingsSeen:
        """Counts what the events show of the documented Debezium settings into ``stats`` (the source notes)."""
        return SettingsSeen(self.follow_schema, self.transactions, stats.add)


@dataclass(frozen=True)
class FileReader:
    """Reads file units in the tasks (see the module doc)."""

    io_properties: dict[str, str]
    file_format: str
    header: tuple[str, ...] | None
    columns: tuple[SpecColumn, ...]
    changes: ChangeReading | None = None  # keyed syncs: each line is a change record

    def __call__(self, unit: WorkUnit, stats: UnitStats) -> Iterator[pa.RecordBatch]:
        assert isinstance(unit, FileUnit)
        io = load_file_io(self.io_properties, unit.uri)
        schema = target_schema(list(self.columns))
        if self.file_format == "parquet":
            yield from self._parquet(io, unit.uri, schema)
            return
        problem = corrupt_compression(io, unit.uri)
        if problem is not None:
            yield from whole_input_row(schema, problem, {"file": unit.uri}).to_batches()
            return
        decode = decode_csv_block if self.file_format == "csv" else decode_json_block
        decoded = 0
        for block, first_line in _slice_blocks(io, unit):
            if first_line == 1 and self.header is not None:
                head, _, block = block.partition(b"\n")
                problem = header_mismatch(head.removesuffix(b"\r"), self.header)
                if problem is not None:
                    yield from whole_input_row(schema, problem, {"file": unit.uri}).to_batches()
                    return
                first_line = 2
            if block and self.changes is not None:
                # Count records, not rows: a tombstone yields no row and a key change two, and the
                # next block's orders must come after every order of this one.
                changes, records = self.changes.decode_lines(block, unit.uri, first_line, order_base(unit) + decoded,
                                                             stats)
                decoded += records
                yield from changes.to_batches()
            elif block:
                yield from decode(block, schema, unit.uri, first_line).to_batches()

    def _parquet(self, io: FileIO, uri: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        declared = {c.name for c in self.columns}
        with io.new_input(uri).open() as stream:
            try:
                parquet = pq.ParquetFile(stream)
            except pa.ArrowInvalid as exc:
                yield from whole_input_row(schema, f"not a Parquet file: {exc}", {"file": uri}).to_batches()
                return
            unknown = [name for name in parquet.schema_arrow.names if name not in declared]
            if unknown:
                reason = f"Parquet file has columns that spec.schema does not declare: {unknown}"
                yield from whole_input_row(schema, reason, {"file": uri}).to_batches()
                return
            mismatched = _uncastable(parquet.schema_arrow, schema)
            if mismatched:
                reason = f"Parquet column(s) cannot be read as declared: {'; '.join(mismatched)}"
                yield from whole_input_row(schema, reason, {"file": uri}).to_batches()
                return
            first_row = 0
            for batch in parquet.iter_batches(batch_size=131_072):
                yield from conform_table(pa.Table.from_batches([batch]), schema, _row_positions(uri, first_row)).to_batches()
                first_row += batch.num_rows


def _row_positions(uri: str, first_row: int) -> Callable[[int], dict[str, Any]]:
    """Position of row ``i`` of a batch that starts at row ``first_row`` of a Parquet file."""
    return lambda i: {"file": uri, "row": first_row + i}


def _uncastable(found: pa.Schema, declared: pa.Schema) -> list[str]:
    """Columns of ``found`` whose type cannot be cast to the declared one at all."""
    problems = []
    for field in found:
        target = declared.field(field.name).type
        try:
            pa.array([], field.type).cast(target)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            problems.append(f"{field.name} is {field.type}, not {target}")
    return problems
