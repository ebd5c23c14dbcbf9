"""Vectorised, strict decoders from raw records to decoded Arrow tables (docs/dataplane.md, "Decoding").

Each decoder returns the declared columns in the table's Arrow types (:func:`target_schema`) plus the
control columns of :mod:`spark_app.decoding.deadletter`: ``_isync_error`` (null for a good record),
``_isync_raw`` and ``_isync_position`` (set for bad records, null for good ones). One output row per
input record, in input order.

Fast path and fallback
    A block of records is read with pyarrow's vectorised JSON reader (explicit schema, unknown fields an
    error) in chunks. A chunk the reader refuses is narrowed down: the reader names the row of a
    structural error ("... in row N"), that record is decoded alone and the rest is read again; an
    unknown field is located by reading the chunk once more with inferred extra columns; an error
    without a row (a value that does not convert) splits the chunk in halves. Records the cheap
    vectorised checks flag (below) are decoded one by one as well. The per-record decoder (the strict
    rules of :mod:`spark_app.decoding.json_values`, which the keyed path follows too) is the authority for
    every record it sees, and it accepts whatever the fast path accepts, reading texts to the same values,
    so a record's outcome never depends on its neighbours.

What pyarrow's JSON reader does silently (found by experiment, pyarrow 26) and how it is caught
    * a value that is not valid UTF-8 lands in a string column: the block (or each Kafka value) is
      validated as UTF-8 first;
    * two objects on one line become two rows, a value may span lines, a top-level ``null`` crashes the
      process (segfault): only lines whose first and last non-blank bytes are ``{`` and ``}`` are given
      to the reader, and its row count must equal the number of records;
    * bare ``NaN``/``Infinity`` tokens are read as floats, a float column overflows to infinity: a
      non-finite float flags the record;
    * a decimal is rescaled without a precision check (``123.4`` into ``decimal(4,2)``); decimals are
      read at a wider scale and a value that needs rounding or does not fit the precision flags the
      record;
    * a timestamp with an offset is shifted to UTC in a ``timestamp`` (no zone) column; dates are
      read as day counts from integers (and not at all from strings); binary columns take the text's
      bytes (Spark takes base64): these columns are read as strings and converted here (an offset in a
      ``timestamp`` value, a date that is not ``YYYY-MM-DD``, a string that is not padded base64 are
      not values of the column);
    * what it refuses (duplicate keys, a number into a string column, a decimal that would round) ends
      in the per-record decoder, which names every reason.

Timestamps
    As :mod:`spark_app.decoding.json_values` reads them (ISO-8601, a fraction truncated to microseconds,
    ``timestamptz`` without an offset is UTC as Spark's ``from_json`` in the job's UTC session, ``timestamp``
    refuses an offset; dates ``YYYY-MM-DD``). Numbers are not timestamps (Spark's ``from_json`` reads an
    integer as epoch seconds into ``timestamptz``; here it is a dead letter).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
from pyiceberg.io.pyarrow import schema_to_pyarrow

from icebergsync.schema import iceberg_schema
from icebergsync.spec import Column as SpecColumn
from spark_app.decoding.deadletter import ERROR_COLUMN, POSITION_COLUMN, RAW_COLUMN, encode_position
from spark_app.decoding.json_values import (
    JSON_TEXT,
    NOT_UTF8,
    BadJson,
    Refused,
    ValueType,
    converter,
    first_refusal,
    kind,
    loads,
    value_type,
)

EMPTY_RECORD = "empty record"
CSV_MISMATCH = "CSV row does not match the schema"

# Records per read of the vectorised reader: small enough that a bad record costs little, large
# enough that the per-call overhead does not show.
CHUNK_RECORDS = 16_384
# Once a chunk is refused, its rest is read in pieces this large, so each further bad record costs less.
_NARROW_RECORDS = 1_024
# A range this small (after narrowing) is decoded record by record.
_LEAF_RECORDS = 8
_ROW_IN_ERROR = re.compile(r" in row (\d+)\s*$")
# A conversion error names the value it could not convert, not its row.
_VALUE_IN_ERROR = [re.compile(r"couldn't parse:(.+)$", re.S), re.compile(r"Failed to convert JSON to [^:]+: (\S+) requires"),
                   re.compile(r"The string '(.*)' is not a valid", re.S)]
_OFFSET_SUFFIX = r"[T ]\d.*(?:Z|[+-]\d\d(?::?\d\d)?)$"  # a time, then an offset
_CSV_FLOAT_WORDS = {"NaN", "Inf", "-Inf", "+Inf", "Infinity", "-Infinity", "+Infinity"}
_JSON_WHITESPACE = b" \t\r\n"
_CSV_FIELD = r'(?:"(?:[^"]|"")*"|[^",][^,]*)?'
_CSV_QUOTED_LINE = rf"^{_CSV_FIELD}(?:,{_CSV_FIELD})*$"
REQUIRED_METADATA = {b"icebergsync.required": b"true"}
JSON_TEXT_METADATA = {b"icebergsync.json-text": b"true"}
_CONTROL_FIELDS = [pa.field(ERROR_COLUMN, pa.string()), pa.field(RAW_COLUMN, pa.string()),
                   pa.field(POSITION_COLUMN, pa.string())]


# -- schema -----------------------------------------------------------------------------------------


def target_schema(columns: list[SpecColumn]) -> pa.Schema:
    """The declared columns in the Arrow types the table's writer uses; every field nullable (a bad
    record's columns are null). A required column carries :data:`REQUIRED_METADATA`: the text
    decoders make a record without it a dead letter with its raw text and position; a ``jsonText`` column
    :data:`JSON_TEXT_METADATA`."""
    schema = schema_to_pyarrow(iceberg_schema(columns), include_field_ids=False)
    json_text = {column.name for column in columns if column.json_text}
    return pa.schema([pa.field(f.name, f.type, nullable=True, metadata={
        **(REQUIRED_METADATA if not f.nullable else {}), **(JSON_TEXT_METADATA if f.name in json_text else {})} or None)
        for f in schema])


def _output_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([*[pa.field(f.name, f.type, nullable=True) for f in schema], *_CONTROL_FIELDS])


def _required_present(table: pa.Table, schema: pa.Schema, records: _Records) -> pa.Table:
    """Mark good rows that lack a required column as dead letters, with the record's raw text and position."""
    required = [f.name for f in schema if (f.metadata or {}).get(b"icebergsync.required") == b"true"]
    if not required or table.num_rows == 0:
        return table
    errors = table.column(ERROR_COLUMN)
    flagged = np.zeros(table.num_rows, dtype=bool)
    for name in required:
        missing = pc.and_(pc.is_null(table.column(name)), pc.is_null(errors))
        if pc.any(missing).as_py():
            errors = pc.if_else(missing, pa.scalar(f"required field {name} is missing or null"), errors)
            flagged |= missing.to_numpy(zero_copy_only=False)
    if not flagged.any():
        return table
    raws = table.column(RAW_COLUMN).to_pylist()
    positions = table.column(POSITION_COLUMN).to_pylist()
    for i in np.flatnonzero(flagged):
        raw = records.raw(int(i))
        raws[i] = _raw_text(raw) if raw is not None else None
        positions[i] = records.position(int(i))
    table = table.set_column(table.schema.get_field_index(ERROR_COLUMN), ERROR_COLUMN, errors)
    table = table.set_column(table.schema.get_field_index(RAW_COLUMN), RAW_COLUMN, pa.array(raws, pa.string()))
    return table.set_column(table.schema.get_field_index(POSITION_COLUMN), POSITION_COLUMN,
                            pa.array(positions, pa.string()))


@dataclass(frozen=True)
class _Col:
    """A declared column: its name and what it holds."""

    name: str
    value: ValueType


def _read_type(vtype: ValueType) -> pa.DataType:
    """The type the vectorised JSON reader reads a column of ``vtype`` as."""
    if vtype.element is not None:
        return pa.list_(_read_type(vtype.element))
    if vtype.kind == "struct":
        return pa.struct([pa.field(field.name, _read_type(field.type)) for field in vtype.fields])
    if vtype.kind in ("string", "date", "timestamp", "timestamptz", "binary"):
        return pa.string()
    if vtype.kind == "decimal":  # the column's scale (rounding is refused), any precision (checked here)
        return pa.decimal128(38, vtype.scale)
    return vtype.arrow


def _loose_scale(precision: int, scale: int) -> int:
    """A decimal scale wider than ``scale`` that still leaves the integer digits of ``precision``."""
    return max(scale, min(18, 38 - (precision - scale)))


def _plan(schema: pa.Schema) -> list[_Col]:
    cols = []
    for f in schema:
        try:
            json_text = (f.metadata or {}).get(b"icebergsync.json-text") == b"true"
            cols.append(_Col(f.name, replace(JSON_TEXT, arrow=f.type) if json_text else value_type(f.type)))
        except ValueError as exc:
            raise ValueError(f"column {f.name}: {exc}") from None
    return cols


# -- conversions shared by every path --------------------------------------------------------------


_PARSE_ERROR_VALUE = re.compile(r"Failed to parse string: '(.*)' as a scalar of type", re.S)


def _masked(arr: pa.Array, attempt: Callable[[pa.Array], pa.Array], target: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """``attempt(arr)``; when it refuses the array, the values it refuses are null and flagged in the
    returned mask (found by the value the error names, else by halving)."""
    bad = np.zeros(len(arr), dtype=bool)
    for _ in range(16):
        try:
            return attempt(arr), bad
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            named = _PARSE_ERROR_VALUE.search(str(exc))
        if named is None or len(arr) < 2 or not pa.types.is_string(arr.type):
            break
        try:  # the named value must be refused on its own too (else halve)
            attempt(pa.array([named.group(1)], arr.type))
            break
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        hits = pc.fill_null(pc.equal(arr, named.group(1)), False)
        if not pc.any(hits).as_py():
            break
        bad |= hits.to_numpy(zero_copy_only=False)
        arr = pc.if_else(hits, pa.scalar(None, arr.type), arr)
    converted, halved = _halving(arr, attempt, target)
    return converted, bad | halved


def _halving(arr: pa.Array, attempt: Callable[[pa.Array], pa.Array], target: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    try:
        return attempt(arr), np.zeros(len(arr), dtype=bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    if len(arr) == 1:
        return pa.nulls(1, target), np.array([arr[0].is_valid])
    mid = len(arr) // 2
    left, left_bad = _halving(arr.slice(0, mid), attempt, target)
    right, right_bad = _halving(arr.slice(mid), attempt, target)
    return pa.concat_arrays([left, right]), np.concatenate([left_bad, right_bad])


def _first_of(arr: pa.Array, attempts: Sequence[Callable[[pa.Array], pa.Array]]) -> pa.Array:
    """The first attempt that converts all of ``arr``. When one fails on a value that no attempt
    converts on its own, that failure is raised at once (so that :func:`_masked` finds the value)."""
    error: Exception | None = None
    for attempt in attempts:
        try:
            return attempt(arr)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            error = exc
            named = _PARSE_ERROR_VALUE.search(str(exc))
            if named is not None and len(arr) > 1 and not _converts(named.group(1), attempts):
                raise
    assert error is not None
    raise error


def _converts(text: str, attempts: Sequence[Callable[[pa.Array], pa.Array]]) -> bool:
    one = pa.array([text], pa.string())
    for attempt in attempts:
        try:
            attempt(one)
            return True
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    return False


_US, _NS = pa.timestamp("us"), pa.timestamp("ns")
_US_UTC, _NS_UTC = pa.timestamp("us", tz="UTC"), pa.timestamp("ns", tz="UTC")


def _naive(arr: pa.Array) -> pa.Array:
    """ISO-8601 without offset; a fraction finer than microseconds is truncated (as Spark)."""
    return _first_of(arr, _NAIVE)


_NAIVE: list[Callable[[pa.Array], pa.Array]] = [lambda a: a.cast(_US), lambda a: a.cast(_NS).cast(_US, safe=False)]


def _zoned(arr: pa.Array) -> pa.Array:
    """ISO-8601 with an offset or Z; without one the value is UTC (Spark's from_json in the UTC session)."""
    attempts: list[Callable[[pa.Array], pa.Array]] = [
        lambda a: a.cast(_US_UTC), lambda a: a.cast(_NS_UTC).cast(_US_UTC, safe=False), *[
            lambda a, naive=naive: naive(a).cast(_US_UTC) for naive in _NAIVE]]
    try:
        return _first_of(arr, attempts)
    except pa.ArrowInvalid:
        if len(arr) < 2:
            raise
    # Mixed: with and without offsets.
    offset = pc.fill_null(pc.match_substring_regex(arr, _OFFSET_SUFFIX), False)
    zoned = _first_of(arr.filter(offset), attempts[:2])
    plain = _naive(arr.filter(pc.invert(offset))).cast(_US_UTC)
    order = np.argsort(np.concatenate([np.flatnonzero(offset.to_numpy(zero_copy_only=False)),
                                       np.flatnonzero(~offset.to_numpy(zero_copy_only=False))]), kind="stable")
    return pa.concat_arrays([zoned, plain]).take(pa.array(order))


def _base64(arr: pa.Array) -> pa.Array:
    """Padded base64 text to bytes (as Spark's from_json for a binary column)."""
    out: list[bytes | None] = []
    for text in arr.to_pylist():
        if text is None:
            out.append(None)
            continue
        try:
            out.append(binascii.a2b_base64(text.encode("ascii"), strict_mode=True))
        except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
            raise pa.ArrowInvalid(f"not base64: {exc}") from None
    return pa.array(out, pa.binary())


def _text_converter(vtype: ValueType) -> Callable[[pa.Array], pa.Array]:
    """String array -> the column's type, refusing (ArrowInvalid) any value that is not one."""
    if vtype.kind == "date":
        return lambda a: a.cast(pa.date32())
    if vtype.kind == "timestamp":
        return _naive
    if vtype.kind == "timestamptz":
        return _zoned
    if vtype.kind == "binary":
        return _base64
    raise AssertionError(vtype.kind)


def _convert_text(vtype: ValueType, arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    converted, bad = _masked(arr, _text_converter(vtype), pa.binary() if vtype.kind == "binary" else vtype.arrow)
    return converted.cast(vtype.arrow), bad


def _decimal_suspects(vtype: ValueType, arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """A wide decimal array -> the column's decimal; values that need rounding or overflow are flagged."""
    if arr.type.scale == vtype.scale:  # only the precision to check: cheaply, by the extremes
        bound = Decimal(10) ** (vtype.precision - vtype.scale)
        extremes = pc.min_max(arr).as_py()
        if extremes["min"] is None or (-bound < extremes["min"] and extremes["max"] < bound):
            return arr.view(pa.decimal128(vtype.precision, vtype.scale)).cast(vtype.arrow), np.zeros(len(arr), dtype=bool)
    try:
        return arr.cast(vtype.arrow), np.zeros(len(arr), dtype=bool)
    except pa.ArrowInvalid:
        pass
    rounds = pc.not_equal(pc.round(arr, vtype.scale), arr)
    bound = pa.scalar(Decimal(10) ** (vtype.precision - vtype.scale), arr.type)
    overflows = pc.greater_equal(pc.abs(arr), bound)
    bad = pc.fill_null(pc.or_(rounds, overflows), False)
    return pc.if_else(bad, pa.scalar(None, arr.type), arr).cast(vtype.arrow), bad.to_numpy(zero_copy_only=False)


def _check(vtype: ValueType, arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """What the JSON reader read for ``col`` in the column's type, and the values the cheap vectorised checks
    flag (see the module's notes); an array's flagged elements flag it."""
    bad = np.zeros(len(arr), dtype=bool)
    element = vtype.element
    if element is not None:
        arr, bad = _by_elements(arr, lambda elements: _check(element, elements))
    elif vtype.kind == "struct":
        arr, bad = _by_fields(vtype, arr)
    elif vtype.kind in ("float", "double"):
        finite = pc.fill_null(pc.is_finite(arr), True)
        if not pc.all(finite).as_py():
            bad = ~finite.to_numpy(zero_copy_only=False)
    elif vtype.kind == "decimal":
        arr, bad = _decimal_suspects(vtype, arr)
    elif vtype.kind in ("date", "timestamp", "timestamptz", "binary"):
        arr, bad = _convert_text(vtype, arr)
    return (arr.cast(vtype.arrow) if arr.type != vtype.arrow else arr), bad


def _by_fields(vtype: ValueType, arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """A struct array with each declared field checked as a column is (fields the reader inferred beyond them left
    out), and the structs holding a flagged value or a required field that is null."""
    valid = pc.is_valid(arr).to_numpy(zero_copy_only=False)
    bad = np.zeros(len(arr), dtype=bool)
    children = []
    for field in vtype.fields:
        child, child_bad = _check(field.type, _combine(pc.struct_field(arr, field.name)))
        bad |= child_bad
        if field.required:
            bad |= valid & pc.is_null(child).to_numpy(zero_copy_only=False)
        children.append(child)
    assert isinstance(vtype.arrow, pa.StructType)
    return pa.StructArray.from_arrays(children, fields=list(vtype.arrow), mask=pc.invert(pc.is_valid(arr))), bad


def _declared(arr: pa.Array, declared: pa.DataType) -> pa.Array:
    """``arr`` (what the reader read) without the struct fields it inferred beyond ``declared``, at any depth."""
    if pa.types.is_struct(arr.type) and pa.types.is_struct(declared):
        children = [_declared(arr.field(declared.field(i).name), declared.field(i).type)
                    for i in range(declared.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(declared), mask=pc.is_null(arr))
    if pa.types.is_list(arr.type) and pa.types.is_list(declared):
        return pa.ListArray.from_arrays(arr.offsets, _declared(arr.values, declared.value_type), mask=pc.is_null(arr))
    return arr


def _inferred_fields(read: pa.DataType, declared: pa.DataType, found: set[str]) -> None:
    """Add to ``found`` the names of struct fields in ``read`` (what the reader read) that ``declared`` lacks."""
    if pa.types.is_struct(read) and pa.types.is_struct(declared):
        names = {declared.field(i).name: declared.field(i).type for i in range(declared.num_fields)}
        for i in range(read.num_fields):
            child = read.field(i)
            if child.name not in names:
                found.add(child.name)
            else:
                _inferred_fields(child.type, names[child.name], found)
    elif (pa.types.is_list(read) or pa.types.is_large_list(read)) and (
            pa.types.is_list(declared) or pa.types.is_large_list(declared)):
        _inferred_fields(read.value_type, declared.value_type, found)


def _by_elements(arr: pa.Array, convert: Callable[[pa.Array], tuple[pa.Array, np.ndarray]]) -> tuple[pa.Array, np.ndarray]:
    """A list array with its elements (flattened) converted by ``convert``, and the lists holding an element
    ``convert`` flags. (Arrow casts a sliced list array's whole child array: lists are never converted sliced.)"""
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
    elements, bad_elements = convert(_combine(pc.list_flatten(arr)))
    bad = np.zeros(len(arr), dtype=bool)
    bad[np.repeat(np.arange(len(arr)), lengths)[bad_elements]] = True
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]), pa.int64())
    return pa.LargeListArray.from_arrays(offsets, elements, mask=pc.is_null(arr)), bad


def _combine(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


# -- the per-record JSON decoder (the authority) ------------------------------------------------------


def _decode_records(cols: list[_Col], converters: list[Callable[[Any], Any]], declared: set[str],
                    raws: list[bytes | None]) -> tuple[list[str | None], list[list[Any]]]:
    """Reasons (None: good) and columns of JSON records, each decoded alone."""
    reasons: list[str | None] = []
    columns: list[list[Any]] = [[] for _ in cols]
    for raw in raws:
        reason, values = _decode_record(cols, converters, declared, raw)
        reasons.append(reason)
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    return reasons, columns


def _decode_record(cols: list[_Col], converters: list[Callable[[Any], Any]], declared: set[str],
                   raw: bytes | None) -> tuple[str | None, list[Any]]:
    """(reason or None, values) of one JSON record, with the JVM decoder's checks in its order: the record's
    own problems, then its values' (:func:`~spark_app.decoding.json_values.first_refusal`)."""
    nulls: list[Any] = [None] * len(cols)
    if raw is None:
        return EMPTY_RECORD, nulls
    try:
        record = loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return NOT_UTF8, nulls
    except BadJson as bad:
        return str(bad), nulls
    if not isinstance(record, dict):
        return f"record is {kind(record)}, not a JSON object", nulls
    unknown = [key for key in record if key not in declared]
    if unknown:
        return "unknown field(s) not in spec.schema: " + ", ".join(unknown), nulls
    values: list[Any] = []
    refusals: list[tuple[str, Refused]] = []
    for col, convert in zip(cols, converters, strict=True):
        value = record.get(col.name)
        try:
            values.append(None if value is None else convert(value))
        except Refused as refused:
            refusals.append((col.name, refused))
            values.append(None)
    if refusals:
        return first_refusal(refusals), nulls
    return None, values


# -- records: where they come from ---------------------------------------------------------------


def _raw_text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii")


class _Records:
    """The records of one call: their bytes, how to assemble a range for the reader, their positions."""

    count: int
    gated: np.ndarray  # first and last non-blank bytes are { and }
    valid_utf8: np.ndarray
    newlines: bool = False

    def raw(self, i: int) -> bytes | None:
        raise NotImplementedError

    def data(self, idx: np.ndarray) -> Any:
        """The records ``idx`` as one input for the vectorised reader (one record per row)."""
        return io.BytesIO(b"\n".join(self.raw(int(i)) or b"" for i in idx))

    def position(self, i: int) -> str:
        raise NotImplementedError

    def locate(self, idx: np.ndarray, text: bytes, pattern: re.Pattern[bytes] | None = None) -> np.ndarray:
        """Which of the records ``idx`` contain ``text`` (where ``pattern`` matches, when given)."""
        pattern = pattern or re.compile(re.escape(text))
        return np.array([text in (raw := self.raw(int(i)) or b"") and pattern.search(raw) is not None for i in idx],
                        dtype=bool)


def _offsets_of(buf: np.ndarray, byte: int, step: int = 1 << 20) -> np.ndarray:
    """Offsets of ``byte`` in ``buf`` (in slices: one big temporary array costs more in page faults)."""
    scratch = np.empty(min(step, len(buf)), dtype=bool)
    found = []
    for start in range(0, len(buf), step):
        part = buf[start:start + step]
        np.equal(part, byte, out=scratch[:len(part)])
        found.append(np.flatnonzero(scratch[:len(part)]) + start)
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


class _Lines(_Records):
    def __init__(self, block: bytes, file: str, first_line: int) -> None:
        self.block, self.file = block, file
        buf = np.frombuffer(block, dtype=np.uint8) if block else np.zeros(1, dtype=np.uint8)[:0]
        newline = _offsets_of(buf, 10)
        starts = np.concatenate([[0], newline + 1]).astype(np.int64)
        ends = np.concatenate([newline, [len(buf)]]).astype(np.int64)
        numbers = np.arange(first_line, first_line + len(starts), dtype=np.int64)
        if len(buf) == 0 or starts[-1] == len(buf):  # nothing after the last line end
            starts, ends, numbers = starts[:-1], ends[:-1], numbers[:-1]
        cr = (ends > starts) & (buf[np.maximum(ends - 1, 0)] == 13) if len(buf) else np.zeros(0, dtype=bool)
        ends = ends - cr
        # Fast test: '{' first and '}' last; the other lines are looked at one by one.
        nonempty = ends > starts
        simple = np.zeros(len(starts), dtype=bool)
        simple[nonempty] = (buf[starts[nonempty]] == 123) & (buf[ends[nonempty] - 1] == 125)
        keep = np.ones(len(starts), dtype=bool)
        gated = simple.copy()
        for i in np.flatnonzero(~simple):
            line = block[starts[i]:ends[i]]
            if not line.strip():  # blank (as the file reader): skipped, still counted
                keep[i] = False
            else:
                core = line.strip(_JSON_WHITESPACE)
                gated[i] = core[:1] == b"{" and core[-1:] == b"}"
        if not keep.all():
            starts, ends, numbers, gated = starts[keep], ends[keep], numbers[keep], gated[keep]
        self.starts, self.ends, self.numbers, self.gated = starts, ends, numbers, gated
        self.count = len(self.starts)
        self.blanks = not keep.all()
        self.valid_utf8 = _utf8_mask(block, self.starts, self.ends)

    def raw(self, i: int) -> bytes:
        return self.block[self.starts[i]:self.ends[i]]

    def with_byte(self, byte: int) -> np.ndarray:
        """Which records contain ``byte``."""
        where = _offsets_of(np.frombuffer(self.block, dtype=np.uint8), byte) if self.block else np.zeros(0, np.int64)
        record = np.searchsorted(self.starts, where, side="right") - 1
        inside = (record >= 0) & (where < self.ends[np.maximum(record, 0)]) if len(self.starts) else record < -1
        found = np.zeros(self.count, dtype=bool)
        found[record[inside]] = True
        return found

    def data(self, idx: np.ndarray) -> Any:
        first, last = int(idx[0]), int(idx[-1])
        if self.numbers[last] - self.numbers[first] + 1 == len(idx):  # adjacent lines: a zero-copy slice
            start, end = int(self.starts[first]), int(self.ends[last])
            return pa.BufferReader(pa.py_buffer(self.block).slice(start, end - start))
        return super().data(idx)

    def position(self, i: int) -> str:
        return encode_position({"file": self.file, "line": int(self.numbers[i])})

    def locate(self, idx: np.ndarray, text: bytes, pattern: re.Pattern[bytes] | None = None) -> np.ndarray:
        first, last = int(idx[0]), int(idx[-1])
        if last - first + 1 != len(idx):
            return super().locate(idx, text, pattern)
        starts = self.starts[first:last + 1]
        found = np.zeros(len(idx), dtype=bool)
        at, end = int(starts[0]), int(self.ends[last])
        while (at := self.block.find(text, at, end)) >= 0:  # a fast literal scan, then the record's own check
            record = int(np.searchsorted(starts, at, side="right")) - 1
            if not found[record]:
                found[record] = pattern is None or pattern.search(self.raw(first + record)) is not None
            at += 1
        return found


def _is_utf8(data: bytes) -> bool:
    """Whether ``data`` is valid UTF-8 (Arrow's validation, without copying the bytes)."""
    offsets = pa.py_buffer(np.array([0, len(data)], dtype=np.int64))
    try:
        pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, pa.py_buffer(data)]).validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _utf8_mask(block: bytes, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which of the lines ``[starts, ends)`` of ``block`` are valid UTF-8 (the whole block is checked at once)."""
    valid = np.ones(len(starts), dtype=bool)
    if _is_utf8(block):
        return valid
    for i in range(len(starts)):
        try:
            block[starts[i]:ends[i]].decode("utf-8")
        except UnicodeDecodeError:
            valid[i] = False
    return valid


class _Values(_Records):
    def __init__(self, values: pa.Array, positions: Callable[[int], dict[str, Any]]) -> None:
        self.values = _combine(values).cast(pa.large_binary())
        self.positions = positions
        self.count = len(self.values)
        self.items: list[bytes | None] = self.values.to_pylist()
        # Fast test: '{' first and '}' last; the other values are looked at one by one.
        first = pc.equal(pc.binary_slice(self.values, 0, 1), pa.scalar(b"{", pa.large_binary()))
        last = pc.equal(pc.binary_slice(self.values, -1), pa.scalar(b"}", pa.large_binary()))
        gated = pc.fill_null(pc.and_(first, last), False).to_numpy(zero_copy_only=False).copy()
        valid = np.ones(self.count, dtype=bool)
        for j in np.flatnonzero(~gated):
            item = self.items[j]
            if item is not None:
                core = item.strip(_JSON_WHITESPACE)
                gated[j] = core[:1] == b"{" and core[-1:] == b"}"
        try:
            self.values.view(pa.large_string()).validate(full=True)
        except pa.ArrowInvalid:
            for i, item in enumerate(self.items):
                if item is not None:
                    try:
                        item.decode("utf-8")
                    except UnicodeDecodeError:
                        valid[i] = False
        self.gated, self.valid_utf8 = gated, valid
        self.newlines = bool(pc.any(pc.match_substring(self.values, "\n")).as_py())

    def raw(self, i: int) -> bytes | None:
        return self.items[i]

    def data(self, idx: np.ndarray) -> Any:
        first, last = int(idx[0]), int(idx[-1])
        if last - first + 1 == len(idx):  # adjacent (and gated, so none is null)
            return io.BytesIO(b"\n".join(self.items[first:last + 1]))  # type: ignore[arg-type]
        return super().data(idx)

    def position(self, i: int) -> str:
        return encode_position(self.positions(i))


# -- assembling output ---------------------------------------------------------------------------


@dataclass
class _Piece:
    idx: np.ndarray  # record indices, ascending
    table: pa.Table  # output rows for them


def _control(n: int, errors: list[str | None] | None = None, raws: list[str | None] | None = None,
             positions: list[str | None] | None = None) -> list[pa.Array]:
    return [pa.nulls(n, pa.string()) if values is None else pa.array(values, pa.string())
            for values in (errors, raws, positions)]


def _assemble(out: pa.Schema, pieces: list[_Piece], count: int) -> pa.Table:
    pieces = sorted((p for p in pieces if len(p.idx)), key=lambda p: int(p.idx[0]))
    if not pieces:
        return out.empty_table()
    table = pa.concat_tables([p.table for p in pieces]) if len(pieces) > 1 else pieces[0].table
    order = np.concatenate([p.idx for p in pieces])
    assert len(order) == count, (len(order), count)
    if len(order) > 1 and not bool(np.all(order[1:] > order[:-1])):
        table = table.take(pa.array(np.argsort(order, kind="stable")))
    return table


@dataclass
class _Found:
    """What narrowing a chunk found: ranges the reader read (with records flagged so far) and records
    to decode alone."""

    reads: list[tuple[np.ndarray, pa.Table, np.ndarray]]
    alone: list[np.ndarray]


class _JsonDecoder:
    def __init__(self, schema: pa.Schema, records: _Records) -> None:
        self.schema = schema
        self.cols = _plan(schema)
        self.declared = {c.name for c in self.cols}
        self.out = _output_schema(schema)
        self.records = records
        self.read_schema = pa.schema([pa.field(c.name, _read_type(c.value)) for c in self.cols])
        self.converters = [converter(c.value) for c in self.cols]
        # Records per first read in a chunk: smaller while chunks keep needing narrowing (a value the
        # reader cannot convert is found only after it parsed the whole read).
        self.first_read = CHUNK_RECORDS

    def decode(self) -> pa.Table:
        r = self.records
        # Maps and JSON-text columns are read record by record (the authority): the vectorised reader reads no maps.
        vectorised = r.count and all(c.value.vectorised for c in self.cols)
        fast = r.gated & r.valid_utf8 if vectorised else np.zeros(r.count, dtype=bool)
        pieces = [self._chunk(start, min(start + CHUNK_RECORDS, r.count), fast) for start in range(0, r.count, CHUNK_RECORDS)]
        return _required_present(_assemble(self.out, pieces, r.count), self.schema, r)

    def _chunk(self, start: int, end: int, fast: np.ndarray) -> _Piece:
        """Decode the records ``[start, end)``: read those the reader may see, narrow down what it
        refuses, check what it read (in one go), decode the rest alone."""
        found = _Found([], [])
        window = fast[start:end]
        if not window.all():
            found.alone.append(np.flatnonzero(~window) + start)
        self._solve(self._pieces(np.flatnonzero(window) + start, self.first_read), found)
        narrowed = len(found.reads) > 1 or bool(found.alone)
        self.first_read = max(_NARROW_RECORDS, self.first_read // 4) if narrowed else min(CHUNK_RECORDS, self.first_read * 2)
        parts = []
        if found.reads:
            read_idx = np.concatenate([i for i, _, _ in found.reads])
            tables = [t for _, t, _ in found.reads]
            table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
            checked, suspect = self._checked(table, np.concatenate([m for _, _, m in found.reads]))
            if suspect.any():  # flagged records are decoded alone
                found.alone.append(read_idx[suspect])
                read_idx, checked = read_idx[~suspect], checked.filter(pa.array(~suspect))
            parts.append(_Piece(read_idx, checked))
        if found.alone:
            parts.append(self._one_by_one(np.sort(np.concatenate(found.alone))))
        if len(parts) == 1:
            return parts[0]
        order = np.concatenate([p.idx for p in parts])
        table = pa.concat_tables([p.table for p in parts])
        sort = np.argsort(order, kind="stable")
        return _Piece(order[sort], table.take(pa.array(sort)))

    def _read(self, idx: np.ndarray) -> pa.Table:
        """The records ``idx`` by the vectorised reader; a field the schema does not declare gets a column."""
        data = self.records.data(idx)
        size = data.size() if isinstance(data, pa.BufferReader) else len(data.getbuffer())
        return pa_json.read_json(
            data,
            read_options=pa_json.ReadOptions(use_threads=False, block_size=max(size + 1, 1 << 16)),
            parse_options=pa_json.ParseOptions(explicit_schema=self.read_schema, unexpected_field_behavior="infer",
                                               newlines_in_values=self.records.newlines),
        )

    def _solve(self, parts: list[np.ndarray], found: _Found) -> None:
        """Solve ``parts`` in order, and what each step leaves to solve before the parts after it (a work list, not
        recursion: a long run of records the reader refuses one by one would exceed Python's recursion limit)."""
        pending = list(reversed(parts))
        while pending:
            pending.extend(reversed(self._step(pending.pop(), found)))

    def _step(self, idx: np.ndarray, found: _Found) -> list[np.ndarray]:
        """Read ``idx`` (or set it aside to decode alone); the ranges still to solve, in order."""
        if not len(idx):
            return []
        if len(idx) <= _LEAF_RECORDS:
            found.alone.append(idx)
            return []
        try:
            table = self._read(idx)
        except pa.ArrowInvalid as exc:
            return self._narrow(idx, str(exc), found)
        if table.num_rows != len(idx):  # cannot happen with gated records; be safe
            return self._halves(idx)
        flagged = np.zeros(len(idx), dtype=bool)
        extra = [name for name in table.column_names if name not in self.declared]
        for name in extra:
            flagged |= self._unknown_field(idx, name, table.column(name))
        inferred = self.nested_unknown(table)
        for name in inferred:
            flagged |= self.records.locate(idx, json.dumps(name).encode("utf-8")) | self.records.locate(idx, b"\\u")
        if inferred:  # every read of a chunk in the declared read types, to be checked as one
            table = pa.table({name: _declared(_combine(table.column(name)), self.read_schema.field(name).type)
                              if name in self.declared else table.column(name) for name in table.column_names})
        found.reads.append((idx, table.drop_columns(extra) if extra else table, flagged))
        return []

    @staticmethod
    def _pieces(idx: np.ndarray, size: int | None = None) -> list[np.ndarray]:
        """``idx`` in runs of adjacent records of at most ``size`` (default ``_NARROW_RECORDS``)."""
        size = size or _NARROW_RECORDS
        if not len(idx):
            return []
        return [run[start:start + size] for run in np.split(idx, np.flatnonzero(np.diff(idx) != 1) + 1)
                for start in range(0, len(run), size)]

    @staticmethod
    def _halves(idx: np.ndarray) -> list[np.ndarray]:
        mid = len(idx) // 2
        return [idx[:mid], idx[mid:]]

    def _narrow(self, idx: np.ndarray, message: str, found: _Found) -> list[np.ndarray]:
        """The reader refused ``idx``: set aside the records it refuses (to decode alone); the rest to solve."""
        row = _ROW_IN_ERROR.search(message)
        if row is not None and int(row.group(1)) < len(idx):
            n = int(row.group(1))
            found.alone.append(idx[n:n + 1])
            return [idx[:n], *self._pieces(idx[n + 1:])]
        for pattern in _VALUE_IN_ERROR:
            value = pattern.search(message)
            if value is not None:
                # The records holding that value (as a whole JSON value, perhaps quoted) go alone.
                text = value.group(1).encode("utf-8")
                token = re.compile(rb'[:,\[]\s*"?' + re.escape(text) + rb'"?\s*[,}\]]')
                suspect = self.records.locate(idx, text, token)
                if 0 < suspect.sum() <= len(idx) // 2:
                    found.alone.append(idx[suspect])
                    return self._pieces(idx[~suspect])
                break
        return self._halves(idx)

    def _checked(self, table: pa.Table, suspect: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        """The read records in the output's types, and which of them (besides those ``suspect``
        already) the cheap vectorised checks of what the reader accepts silently flag."""
        suspect = suspect.copy()
        arrays = []
        for col in self.cols:
            arr, bad = _check(col.value, _combine(table.column(col.name)))
            suspect |= bad
            arrays.append(arr)
        return pa.Table.from_arrays([*arrays, *_control(table.num_rows)], schema=self.out), suspect

    def nested_unknown(self, table: pa.Table) -> set[str]:
        """The names of fields the reader found inside structs beyond those declared (any depth): a record holding
        one is decoded alone (which names it)."""
        found: set[str] = set()
        for field in self.read_schema:
            if field.name in table.column_names:
                _inferred_fields(table.schema.field(field.name).type, field.type, found)
        return found

    def _unknown_field(self, idx: np.ndarray, name: str, column: pa.ChunkedArray) -> np.ndarray:
        """The records that have the undeclared field ``name`` (the reader inferred a column for it): a
        value in the column, or a null there and the key (or an escape) in the raw record."""
        present = pc.is_valid(column).to_numpy(zero_copy_only=False)
        return present | self.records.locate(idx, json.dumps(name).encode("utf-8")) | self.records.locate(idx, b"\\u")

    def _one_by_one(self, idx: np.ndarray) -> _Piece:
        records = [self.records.raw(int(i)) for i in idx]
        errors, columns = _decode_records(self.cols, self.converters, self.declared, records)
        raws = [_raw_text(raw) if reason is not None and raw is not None else None
                for raw, reason in zip(records, errors, strict=True)]
        positions = [self.records.position(int(i)) if reason is not None else None
                     for i, reason in zip(idx, errors, strict=True)]
        arrays = [pa.array(values, col.value.arrow) for col, values in zip(self.cols, columns, strict=True)]
        return _Piece(np.asarray(idx), pa.Table.from_arrays([*arrays, *_control(len(idx), errors, raws, positions)],
                                                            schema=self.out))


# -- public: JSON ---------------------------------------------------------------------------------


def decode_json_block(block: bytes, schema: pa.Schema, file: str, first_line: int) -> pa.Table:
    """Decode newline-delimited JSON (whole lines; ``first_line`` is the 1-based number of the block's
    first line; blank lines are skipped but counted; ``\\r\\n`` allowed): one row per non-blank line."""
    return _JsonDecoder(schema, _Lines(block, file, first_line)).decode()


def decode_json_values(values: pa.Array | pa.ChunkedArray, schema: pa.Schema,
                       positions: Callable[[int], dict[str, Any]]) -> pa.Table:
    """Decode independent JSON records (Kafka values; a record may span lines; null is an "empty
    record"): one row per value; ``positions(i)`` is value i's position (asked for bad records only)."""
    return _JsonDecoder(schema, _Values(values, positions)).decode()


# -- public: CSV ----------------------------------------------------------------------------------


def _csv_convert(col: _Col, arr: pa.Array) -> tuple[pa.Array, np.ndarray, list[str | None]]:
    """A CSV text column -> the column's type, the mask of bad values and their reasons (None: not bad)."""
    vtype = col.value
    n = len(arr)
    reasons: list[str | None] = [None] * n
    if vtype.kind in ("string", "json"):
        return arr.cast(vtype.arrow), np.zeros(n, dtype=bool), reasons
    if vtype.kind == "boolean":
        lower = pc.utf8_lower(arr)
        true, false = pc.equal(lower, "true"), pc.equal(lower, "false")
        bad = pc.fill_null(pc.invert(pc.or_(true, false)), False).to_numpy(zero_copy_only=False)
        converted = pc.if_else(pa.array(bad), pa.scalar(None, pa.bool_()), true)
    elif vtype.kind in ("int", "long", "float", "double"):
        converted, bad = _masked(arr, lambda a: a.cast(vtype.arrow), vtype.arrow)
        if vtype.kind in ("float", "double"):
            words = pc.is_in(arr, value_set=pa.array(sorted(_CSV_FLOAT_WORDS)))
            odd = pc.fill_null(pc.and_(pc.invert(pc.is_finite(converted)), pc.invert(words)), False)
            bad = bad | odd.to_numpy(zero_copy_only=False)
            converted = pc.if_else(pa.array(bad), pa.scalar(None, vtype.arrow), converted)
    elif vtype.kind == "decimal":
        wide_type = pa.decimal128(38, _loose_scale(vtype.precision, vtype.scale))
        wide, bad = _masked(arr, lambda a: a.cast(wide_type), wide_type)
        converted, suspect = _decimal_suspects(vtype, wide)
        to_decimal = converter(vtype)
        for i in np.flatnonzero(suspect):
            try:
                to_decimal(arr[int(i)].as_py())
            except Refused as refused:
                reasons[i] = f"{CSV_MISMATCH}: {refused.reason(col.name)}"
        bad = bad | suspect
    else:
        converted, bad = _convert_text(vtype, arr)
    for i in np.flatnonzero(bad):
        if reasons[i] is None:
            reasons[i] = f"{CSV_MISMATCH}: field {col.name}: value {arr[int(i)].as_py()} is not a {vtype.label}"
    return converted.cast(vtype.arrow), bad, reasons


def decode_csv_block(block: bytes, schema: pa.Schema, file: str, first_line: int) -> pa.Table:
    """Decode CSV lines without a header (the caller strips and checks it): one row per non-blank line.

    An empty field is null (quoted or not, as Spark); quoting as RFC 4180 within a line (each line is a
    record: a quoted line end is not supported). A line that is not UTF-8 is a dead letter with
    :data:`NOT_UTF8`; a line with the wrong number of fields, an unterminated quote or a value that is
    not one of its column's type (a decimal that would round included) is a dead letter
    ``CSV row does not match the schema: <detail>``.
    """
    cols = _plan(schema)
    out = _output_schema(schema)
    lines = _Lines(block, file, first_line)
    errors: dict[int, str] = {int(i): NOT_UTF8 for i in np.flatnonzero(~lines.valid_utf8)}
    # pyarrow reads quotes leniently (text after a closing quote is kept; an open quote swallows the
    # next lines): a line with a quote must be fields as RFC 4180 writes them.
    quoted = [i for i in np.flatnonzero(lines.with_byte(ord('"')) & lines.valid_utf8)]
    if quoted:
        paired = pc.match_substring_regex(pa.array([lines.raw(int(i)) for i in quoted], pa.binary()), _CSV_QUOTED_LINE)
        for i, ok in zip(quoted, paired.to_pylist(), strict=True):
            if not ok:
                errors[int(i)] = f"{CSV_MISMATCH}: quotes do not pair up (RFC 4180)"
    usable = np.array([i for i in range(lines.count) if i not in errors], dtype=np.int64)
    texts, rows = _csv_read(cols, lines, usable, errors)
    pieces = []
    if texts is not None and len(rows):
        arrays = []
        bad = np.zeros(len(rows), dtype=bool)
        for col in cols:
            converted, col_bad, reasons = _csv_convert(col, _combine(texts.column(col.name)))
            arrays.append(converted)
            for j in np.flatnonzero(col_bad & ~bad):
                errors[int(rows[j])] = reasons[j] or CSV_MISMATCH
            bad |= col_bad
        good = pa.Table.from_arrays([*arrays, *_control(len(rows))], schema=out)
        pieces.append(_Piece(rows[~bad], good.filter(pa.array(~bad)) if bad.any() else good))
    if errors:
        bad_idx = np.array(sorted(errors), dtype=np.int64)
        control = _control(len(bad_idx), [errors[int(i)] for i in bad_idx],
                           [_raw_text(lines.raw(int(i))) for i in bad_idx], [lines.position(int(i)) for i in bad_idx])
        pieces.append(_Piece(bad_idx, pa.Table.from_arrays([*[pa.nulls(len(bad_idx), c.value.arrow) for c in cols], *control],
                                                           schema=out)))
    return _required_present(_assemble(out, pieces, lines.count), schema, lines)


def _csv_read(cols: list[_Col], lines: _Lines, idx: np.ndarray,
              errors: dict[int, str]) -> tuple[pa.Table | None, np.ndarray]:
    """The lines ``idx`` as text columns, one row per line, and the lines those rows are; a line the
    reader refuses gets its reason in ``errors``."""
    if not len(idx):
        return None, idx
    names = [c.name for c in cols]
    refused: list[int] = []

    def invalid(row: Any) -> str:
        refused.append(row.number)
        return "skip"

    table = pa_csv.read_csv(
        lines.data(idx),
        read_options=pa_csv.ReadOptions(column_names=names, use_threads=False, block_size=1 << 30),
        parse_options=pa_csv.ParseOptions(newlines_in_values=False, ignore_empty_lines=False, invalid_row_handler=invalid),
        # Only an empty field is null (pyarrow's default also nulls "NULL", "NA", "nan" ...; Spark does not).
        convert_options=pa_csv.ConvertOptions(column_types={name: pa.string() for name in names}, null_values=[""],
                                              strings_can_be_null=True, quoted_strings_can_be_null=True),
    )
    skipped = np.array(sorted(refused), dtype=np.int64) - 1  # the handler numbers rows from 1
    if table.num_rows + len(skipped) != len(idx) or (len(skipped) and (skipped[0] < 0 or skipped[-1] >= len(idx))):
        if len(idx) == 1:
            errors[int(idx[0])] = f"{CSV_MISMATCH}: not one CSV row"
            return None, idx[:0]
        # The reader's rows do not map to the lines: read them line by line.
        tables, kept = [], []
        for i in idx:
            one, rows = _csv_read(cols, lines, np.array([i], dtype=np.int64), errors)
            if one is not None and len(rows):
                tables.append(one)
                kept.append(int(i))
        return (pa.concat_tables(tables) if tables else None), np.array(kept, dtype=np.int64)
    keep = np.ones(len(idx), dtype=bool)
    keep[skipped] = False
    for i in idx[~keep]:
        errors[int(i)] = f"{CSV_MISMATCH}: expected {len(cols)} field(s)"
    return table, idx[keep]


# -- public: already typed rows and whole inputs ----------------------------------------------------


def _safe_cast(target: pa.DataType) -> Callable[[pa.Array], pa.Array]:
    return lambda a: a.cast(target, safe=True)


def _cast_masked(target: pa.DataType) -> Callable[[pa.Array], tuple[pa.Array, np.ndarray]]:
    """:func:`_masked` safe casting to ``target``."""
    return lambda arr: _masked(arr, _safe_cast(target), target)


def conform_table(table: pa.Table, schema: pa.Schema, position: Callable[[int], dict[str, Any]]) -> pa.Table:
    """Conform typed rows (a Parquet file's) to ``schema``: absent declared columns are null, others are
    cast; a value that does not fit (overflow, lossy) makes its row a dead letter ``field X: value V is
    not a T``, whose raw payload is the row as read, as JSON. Columns ``schema`` does not declare are
    the caller's problem (a whole-file dead letter)."""
    cols = _plan(schema)
    out = _output_schema(schema)
    extra = [name for name in table.column_names if name not in {c.name for c in cols}]
    if extra:
        raise ValueError(f"columns not in the schema: {extra}")
    n = table.num_rows
    arrays, bad = [], np.zeros(n, dtype=bool)
    reasons: list[str | None] = [None] * n
    for col in cols:
        if col.name not in table.column_names:
            arrays.append(pa.nulls(n, col.value.arrow))
            continue
        source = _combine(table.column(col.name))
        element = col.value.element
        if element is not None and (pa.types.is_list(source.type) or pa.types.is_large_list(source.type)):
            converted, col_bad = _by_elements(source, _cast_masked(element.arrow))
            converted = converted.cast(col.value.arrow)
        else:
            converted, col_bad = _cast_masked(col.value.arrow)(source)
        for i in np.flatnonzero(col_bad & ~bad):
            value = source[int(i)]
            try:
                text = value.cast(pa.string()).as_py()
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                text = str(value.as_py())
            reasons[i] = f"field {col.name}: value {text} is not {'an' if element is not None else 'a'} {col.value.label}"
        bad |= col_bad
        arrays.append(converted)
    mask = pa.array(bad)
    rows = [pc.if_else(mask, pa.scalar(None, a.type), a) if bad.any() else a for a in arrays]
    positions = [encode_position(position(int(i))) if bad[i] else None for i in range(n)] if bad.any() else None
    raws = [json.dumps(table.slice(int(i), 1).to_pylist()[0], sort_keys=True, default=str) if bad[i] else None
            for i in range(n)] if bad.any() else None
    return pa.Table.from_arrays([*rows, *_control(n, reasons if bad.any() else None, raws, positions)], schema=out)


def whole_input_row(schema: pa.Schema, reason: str, position: dict[str, Any]) -> pa.Table:
    """One dead-letter row for an unusable input: declared columns null, no raw record."""
    out = _output_schema(schema)
    return pa.Table.from_arrays(
        [*[pa.nulls(1, f.type) for f in schema], *_control(1, [reason], None, [encode_position(position)])],
        schema=out)
