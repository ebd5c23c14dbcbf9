"""Text files (JSON lines, CSV) read line by line in the executors, each line with its file and line number.

Spark's text and CSV readers know neither a line's number nor what to do with a file that cannot
be read (a corrupt ``.gz`` fails the whole trigger). Here each task opens whole files through
pyiceberg's FileIO and yields ``(value, file, line, _isync_error)`` rows: ``value`` is the line's
bytes (decoded strictly later), ``line`` is its 1-based number in the file. A file that cannot be
used at all gives ONE row with ``_isync_error`` set and no line, which becomes one dead letter:

* a ``.gz`` file whose stream is corrupt or truncated (checked in full before any line is read,
  so a bad file never yields some of its lines);
* a CSV file whose header does not name the declared columns in order (case-insensitive, as Spark).

Blank lines are skipped (they still count for line numbers).
"""

from __future__ import annotations

import csv
import gzip
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.io import FileIO, load_file_io
from pyspark.sql import DataFrame, SparkSession

from spark_app.deadletter import ERROR_COLUMN

LINES_SCHEMA = f"value binary, file string, line long, {ERROR_COLUMN} string"
_ARROW_SCHEMA = pa.schema([("value", pa.binary()), ("file", pa.string()), ("line", pa.int64()),
                           (ERROR_COLUMN, pa.string())])
_BATCH_LINES = 10_000
_CHUNK_BYTES = 1 << 20
_CORRUPT_GZIP = (gzip.BadGzipFile, EOFError, zlib.error)


@dataclass(frozen=True)
class LineReading:
    """What a task needs to read its files: the FileIO properties and the CSV header to expect (None: no header)."""

    io_properties: dict[str, str]
    header: tuple[str, ...] | None


def _open(io: FileIO, uri: str) -> Any:
    stream: Any = io.new_input(uri).open()
    return gzip.GzipFile(fileobj=stream) if uri.endswith(".gz") else stream


def _split_lines(stream: Any) -> Iterator[bytes]:
    """The stream's lines without their line ends (FileIO streams have no ``readline``)."""
    rest = b""
    while chunk := stream.read(_CHUNK_BYTES):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        yield from lines
    if rest:
        yield rest


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


def file_lines(io: FileIO, uri: str, reading: LineReading) -> Iterator[tuple[bytes | None, int | None, str | None]]:
    """``(line, number, None)`` for each non-blank line, or a single ``(None, None, reason)`` for an unusable file."""
    problem = corrupt_compression(io, uri)
    if problem is not None:
        yield None, None, problem
        return
    with _open(io, uri) as stream:
        for number, line in enumerate(_split_lines(stream), start=1):
            text = line.removesuffix(b"\r")
            if number == 1 and reading.header is not None:
                problem = header_mismatch(text, reading.header)
                if problem is not None:
                    yield None, None, problem
                    return
                continue
            if text.strip():
                yield text, number, None


def _line_function(reading: LineReading) -> Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]:
    def read(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        io: FileIO | None = None
        for batch in batches:
            for uri in batch.column("file").to_pylist():
                io = io or load_file_io(reading.io_properties, uri)
                rows: list[tuple[bytes | None, int | None, str | None]] = []
                for row in file_lines(io, uri, reading):
                    rows.append(row)
                    if len(rows) == _BATCH_LINES:
                        yield _batch(uri, rows)
                        rows = []
                if rows:
                    yield _batch(uri, rows)

    return read


def _batch(uri: str, rows: list[tuple[bytes | None, int | None, str | None]]) -> pa.RecordBatch:
    values, numbers, errors = zip(*rows, strict=True)
    return pa.RecordBatch.from_arrays(
        [pa.array(values, pa.binary()), pa.array([uri] * len(rows), pa.string()), pa.array(numbers, pa.int64()),
         pa.array(errors, pa.string())], schema=_ARROW_SCHEMA)


def read_lines(spark: SparkSession, uris: list[str], reading: LineReading, tasks: int) -> DataFrame:
    """A frame of every line of ``uris`` (see the module doc), the files spread over ``tasks`` tasks."""
    files = spark.createDataFrame([(uri,) for uri in uris], "file string").repartition(max(1, min(tasks, len(uris))))
    return files.mapInArrow(_line_function(reading), LINES_SCHEMA)
