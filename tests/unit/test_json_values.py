"""The strict JSON value rules both decoders share (spark_app/decoding/json_values.py): the same raw record gets the
same dead-letter reason on the append path and the keyed path, and a text the append path's vectorised reader
accepts is read to the same value by the per-value conversion (so a record's outcome does not depend on its
neighbours)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

from icebergsync.spec import Column
from spark_app.decoding.arrow_decode import _convert_text, decode_json_values, target_schema
from spark_app.decoding.changes import decode_changes
from spark_app.decoding.deadletter import ERROR_COLUMN
from spark_app.decoding.json_values import BadJson, JsonDecimal, Refused, converter, loads, value_type

COLUMNS = [Column(name="id", type="long", required=True), Column(name="name", type="string"),
           Column(name="n", type="int"), Column(name="amount", type="decimal(10,2)"),
           Column(name="at", type="timestamp"), Column(name="blob", type="binary"),
           Column(name="scores", type="array<int>")]


def _append_reason(raw: bytes) -> str | None:
    table = decode_json_values(pa.array([raw], pa.binary()), target_schema(COLUMNS), lambda i: {"offset": i})
    return table.column(ERROR_COLUMN)[0].as_py()


def _keyed_reason(raw: bytes) -> str | None:
    table = decode_changes([raw], None, lambda i: {"offset": i}, COLUMNS, ["id"], "upsert", 0)
    return table.column(ERROR_COLUMN)[0].as_py()


@pytest.mark.parametrize(("raw", "reason"), [
    (b'{"id": 1, "id": 2}', "duplicate key(s) in the record: id"),
    (b'{"id": 1, "scores": [1], "name": {"a": 1, "b": 2, "a": 3}}', "duplicate key(s) in a nested value: a"),
    (b'{"id": 1, "n": NaN}', "malformed JSON"),
    (b'{"id": 1, "name": "\\ud800"}', "malformed JSON"),
    (b'{"id": 1,', "malformed JSON"),
    (b'{"id": 1, "name": 42}', "field name: value 42 is a number, not a string"),
    (b'{"id": "x"}', "field id: value x is not a long"),
    (b'{"id": 1, "n": 2147483648}', "field n: value 2147483648 is not a int"),
    (b'{"id": 1, "n": 1.0}', "field n: value 1.0 is not a int"),
    (b'{"id": 1, "amount": 1.005}', "field amount: value 1.005 does not fit decimal(10,2) without rounding"),
    (b'{"id": 1, "amount": "1.005"}', "field amount: value 1.005 does not fit decimal(10,2) without rounding"),
    (b'{"id": 1, "amount": 123456789.5}', "field amount: value 123456789.5 does not fit decimal(10,2)"),
    (b'{"id": 1, "at": "soon"}', "field at: value soon is not a timestamp"),
    (b'{"id": 1, "at": "2024-03-01T10:00:00+01:00"}', "field at: value 2024-03-01T10:00:00+01:00 has a UTC offset; "
                                                      "a timestamp column takes local date-times (declare the column "
                                                      "timestamptz)"),
    (b'{"id": 1, "blob": "not base64!"}', "field blob: value not base64! is not base64 text (a binary column takes "
                                          "base64)"),
    (b'{"id": 1, "scores": [1, "two"]}', "field scores: value two is not a int (an element of array<int>)"),
    (b'{"id": 1, "scores": "x"}', "field scores: value x is not an array<int>"),
    (b'{"id": 1, "name": "\xff\xfe"}', "record is not valid UTF-8 (the payload is its bytes in base64)"),
    (b'[1, 2]', "record is an array, not a JSON object"),
    (b'17', "record is a number, not a JSON object"),
    # several bad values: a strictness refusal (a string column's kind) before the first plain mismatch
    (b'{"id": "x", "name": 5}', "field name: value 5 is a number, not a string"),
])
def test_the_same_record_gets_the_same_reason_on_the_append_and_the_keyed_path(raw: bytes, reason: str) -> None:
    assert _append_reason(raw) == reason
    assert _keyed_reason(raw) == reason


def test_a_good_record_decodes_on_both_paths_alike() -> None:
    raw = b'{"id": 1, "name": "a", "n": 2, "amount": "12.50", "at": "2024-03-01 10:00:00.123456", "blob": "AAE=", ' \
          b'"scores": [1, null]}'
    schema = target_schema(COLUMNS)
    append = decode_json_values(pa.array([raw], pa.binary()), schema, lambda i: {}).select(schema.names).to_pylist()
    keyed = decode_changes([raw], None, lambda i: {}, COLUMNS, ["id"], "upsert", 0).select(schema.names).to_pylist()
    assert append == keyed
    assert append[0]["at"] == datetime(2024, 3, 1, 10, 0, 0, 123456)
    assert append[0]["blob"] == b"\x00\x01" and append[0]["scores"] == [1, None]


def test_loads_keeps_numbers_exact_with_their_text() -> None:
    value = loads('{"a": 1.50, "b": 1e2, "c": 12345678901234567890123}')
    assert isinstance(value["a"], JsonDecimal) and value["a"].text == "1.50" and value["b"].text == "1e2"
    assert value["c"] == 12345678901234567890123 and type(value["c"]) is int
    with pytest.raises(BadJson, match="malformed JSON"):
        loads('{"a": Infinity}')


def _texts() -> list[str]:
    """ISO-8601-like texts around every edge of the grammar pyarrow's casts read (and random ones)."""
    dates = [f"{y:04d}-{m:02d}-{d:02d}" for y in (0, 1, 4, 100, 400, 1600, 1900, 1969, 1970, 2000, 2024, 9999)
             for m in (0, 1, 2, 12, 13) for d in (0, 1, 28, 29, 30, 31, 32)]
    times = ["", "T10", " 10", "T10:00", "T23:59:59", "T24:00", "T10:60", "T10:00:60", "T10:00:00.", "T10:00:00.1",
             "T10:00:00.123456", "T10:00:00.1234567", "T10:00:00.123456789", "T10:00:00.1234567891", "t10", "T1000"]
    zones = ["", "Z", "+01", "-01", "+0130", "-01:30", "+23:59", "+24:00", "+01:60", "+1", "+01:5", "z", "+01:00:00"]
    days = ["1677-09-21", "2262-04-11", "1960-01-01", "0000-01-01", "9999-12-31", "2024-02-29", "1969-12-31"]
    edges = ["1677-09-21T00:12:43.1452241", "1677-09-21T00:12:44.1452241", "2262-04-11T23:47:16.8547758",
             "2262-04-11T23:47:16.8547757-01:00", "1960-01-01T00:00:00.0000005", " 2024-03-01", "2024-03-01 ",
             "2024-3-1", "20240301", "2024-03-01T", "2024-03-01TZ", "2023-02-29"]
    r = random.Random(35)
    random_ones = [f"{r.choice(days)}T{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}."
                   f"{r.randint(0, 10**9 - 1):09d}"[:r.randint(21, 30)] + r.choice(zones) for _ in range(500)]
    return dates + [d + t + z for d in days for t in times for z in zones] + edges + random_ones


@pytest.mark.parametrize("type_name", ["date", "timestamp", "timestamptz", "binary"])
def test_a_text_the_vectorised_reader_accepts_converts_to_the_same_value_alone(type_name: str) -> None:
    texts = ["", "QQ==", "QQ", "QUJD", "QQ==QQ==", "Q===", "QUI=", "é", "QU JD"] if type_name == "binary" else _texts()
    columns = [Column(name="v", type=type_name)]
    schema = target_schema(columns)
    records = pa.array([f'{{"v": "{text}"}}'.encode() for text in texts], pa.binary())
    decoded = decode_json_values(records, schema, lambda i: {})
    convert = converter(value_type(schema.field("v").type))
    # dates as days and timestamps as µs since 1970 (year 0 is beyond Python's dates)
    storage = {"date": pa.int32(), "binary": pa.binary()}.get(type_name, pa.int64())
    values = decoded.column("v").cast(storage).to_pylist()
    for text, value, error in zip(texts, values, decoded.column(ERROR_COLUMN).to_pylist(), strict=True):
        try:
            alone: Any = convert(text)
        except Refused:
            alone = None
        assert (text, value) == (text, alone if error is None else None)
        assert error is None or alone is None
    # and the vectorised conversion reads what the per-value one reads, to the same value
    vectorised, refused = _convert_text(value_type(schema.field("v").type), pa.array(texts, pa.string()))
    read = vectorised.cast(storage).to_pylist()
    assert [(text, None if bad else value) for text, value, bad in zip(texts, read, refused, strict=True)] == \
        [(text, value) for text, value in zip(texts, values, strict=True)]
    errors = decoded.column(ERROR_COLUMN).null_count
    assert 0 < errors < len(texts)  # both read and refused texts
    if type_name == "timestamptz":
        assert values[texts.index("2024-02-29T10:00-01:30")] == \
            (datetime(2024, 2, 29, 11, 30, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


@pytest.mark.parametrize(("type_name", "text", "append", "reason"), [
    ("double", "NaN", "nan", 'field v: value NaN is not a double'),
    ("timestamptz", "2024-03-01T10:00:00", datetime(2024, 3, 1, 10, tzinfo=UTC),
     "field v: value 2024-03-01T10:00:00 has no UTC offset (a timestamptz needs one)"),
    ("timestamp", "2024-03-01T10:00:00.1234567", datetime(2024, 3, 1, 10, 0, 0, 123456),
     "field v: value 2024-03-01T10:00:00.1234567 has more than microsecond precision"),
])
def test_the_keyed_path_reads_exactly_what_the_append_path_reads_as_spark(type_name: str, text: str, append: Any,
                                                                            reason: str) -> None:
    """Spark's from_json (the append path) takes NaN words, UTC for a missing offset and truncates below
    microseconds; Debezium writes values exactly, so on the keyed path each is a dead letter."""
    columns = [Column(name="id", type="long", required=True), Column(name="v", type=type_name)]
    raw = f'{{"id": 1, "v": "{text}"}}'.encode()
    appended = decode_json_values(pa.array([raw], pa.binary()), target_schema(columns), lambda i: {}).to_pylist()[0]
    value = appended["v"]
    assert (str(value) if isinstance(value, float) else value, appended[ERROR_COLUMN]) == (append, None)
    keyed = decode_changes([raw], None, lambda i: {}, columns, ["id"], "upsert", 0).to_pylist()[0]
    assert (keyed["v"], keyed[ERROR_COLUMN]) == (None, reason)
