"""The vectorised Arrow decoders (spark_app/decoding/arrow_decode.py): strict, one row per record, in order.

Every strictness rule is checked on the vectorised path (the record among many good ones, so the
reader sees it in a chunk) and on the per-record path (the record alone), and both must agree.
"""

from __future__ import annotations

import base64
import json
import random
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

import spark_app.decoding.arrow_decode as ad
import spark_app.decoding.json_values as json_values
from icebergsync.spec import Column
from spark_app.decoding.arrow_decode import (
    NOT_UTF8,
    conform_table,
    decode_csv_block,
    decode_json_block,
    decode_json_values,
    target_schema,
    whole_input_row,
)
from spark_app.decoding.deadletter import ERROR_COLUMN, POSITION_COLUMN, RAW_COLUMN

COLUMNS = [
    Column(name="id", type="long", required=True), Column(name="name", type="string"),
    Column(name="amount", type="decimal(10,2)"), Column(name="n", type="int"), Column(name="x", type="double"),
    Column(name="f", type="float"), Column(name="b", type="boolean"), Column(name="ts", type="timestamptz"),
    Column(name="tn", type="timestamp"), Column(name="d", type="date"), Column(name="bin", type="binary"),
    Column(name="small", type="decimal(4,2)"),
]
SCHEMA = target_schema(COLUMNS)
GOOD = ('{"id": 7, "name": "a", "amount": 1.5, "n": 3, "x": 2.5, "f": 0.5, "b": true, "ts": "2024-01-01T10:00:00Z", '
        '"tn": "2024-01-01T10:00:00", "d": "2024-01-05", "bin": "aGk=", "small": 9.99}')
GOOD_ROW = {"id": 7, "name": "a", "amount": Decimal("1.50"), "n": 3, "x": 2.5, "f": 0.5, "b": True,
            "ts": datetime(2024, 1, 1, 10, tzinfo=UTC), "tn": datetime(2024, 1, 1, 10), "d": date(2024, 1, 5),
            "bin": b"hi", "small": Decimal("9.99")}
PAD = 40  # good lines either side: enough for the vectorised reader to see the record in a chunk


def rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.to_pylist()


def declared(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if not k.startswith("_isync")}


def alone(line: bytes, schema: pa.Schema = SCHEMA) -> dict[str, Any]:
    """The record decoded on its own: the per-record decoder."""
    [row] = rows(decode_json_block(line + b"\n", schema, "f.json", 1))
    return row


def among_good(line: bytes, schema: pa.Schema = SCHEMA, good: str = GOOD,
               good_row: dict[str, Any] = GOOD_ROW) -> dict[str, Any]:
    """The record between good ones: the vectorised reader sees it; the good ones keep their values."""
    block = b"\n".join([good.encode()] * PAD + [line] + [good.encode()] * PAD) + b"\n"
    out = rows(decode_json_block(block, schema, "f.json", 1))
    assert len(out) == 2 * PAD + 1
    for i, row in enumerate(out):
        if i != PAD:
            assert row[ERROR_COLUMN] is None, (i, row[ERROR_COLUMN])
            assert declared(row) == good_row
    return out[PAD]


def both(line: bytes, schema: pa.Schema = SCHEMA, good: str = GOOD,
         good_row: dict[str, Any] = GOOD_ROW) -> dict[str, Any]:
    first, second = alone(line, schema), among_good(line, schema, good, good_row)
    assert repr(first) == repr({**second, POSITION_COLUMN: first[POSITION_COLUMN]})  # repr: NaN equals NaN
    assert json.loads(second[POSITION_COLUMN] or "null") in (None, {"file": "f.json", "line": PAD + 1})
    return second


# -- strictness: every rule on both paths -----------------------------------------------------------

RECORD_CASES = [
    (b"{not json", "malformed JSON"),
    (b'{"id": 1,}', "malformed JSON"),
    (b'{"id": 01}', "malformed JSON"),
    (b"{'id': 1}", "malformed JSON"),
    (b'{"id": NaN}', "malformed JSON"),
    (b'{"x": Infinity}', "malformed JSON"),
    (b'{"x": -Infinity}', "malformed JSON"),
    (b'{"name": "a\tb"}', "malformed JSON"),  # a raw control character in a string
    (b'{"name": "\\ud800"}', "malformed JSON"),  # a lone surrogate
    (b'{"id": 1} {"id": 2}', "malformed JSON"),  # two objects on one line
    (b'{"id": 1}x', "malformed JSON"),
    (b'{"id":\n1}', None),  # (split below: a value across lines is two bad lines)
    (b"[1, 2]", "record is an array, not a JSON object"),
    (b"17", "record is a number, not a JSON object"),
    (b'"s"', "record is a string, not a JSON object"),
    (b"true", "record is a boolean, not a JSON object"),
    (b"null", "record is null, not a JSON object"),
    (b'{"id": 1, "id": 2}', "duplicate key(s) in the record: id"),
    (b'{"b": 1, "a": 2, "b": 3, "a": 4}', "duplicate key(s) in the record: b, a"),
    (b'{"name": {"k": 1, "k": 2}}', "duplicate key(s) in a nested value: k"),
    (b'{"id": 1, "colour": "red", "size": 3}', "unknown field(s) not in spec.schema: colour, size"),
    (b'{"id": 1, "colour": null}', "unknown field(s) not in spec.schema: colour"),
    (b'{"ID": 1}', "unknown field(s) not in spec.schema: ID"),
    (b'{"id": 1, "\\u007a": null}', "unknown field(s) not in spec.schema: z"),
    (b'{"name": "\xff\xfe"}', NOT_UTF8),
]


@pytest.mark.parametrize(("line", "reason"), [c for c in RECORD_CASES if c[1] is not None])
def test_a_record_that_is_not_one_json_object_of_declared_fields_is_a_dead_letter(line: bytes, reason: str) -> None:
    row = both(line)
    assert row[ERROR_COLUMN] == reason
    assert all(v is None for v in declared(row).values())
    expected_raw = line.decode() if reason != NOT_UTF8 else base64.b64encode(line).decode()
    assert row[RAW_COLUMN] == expected_raw


VALUE_CASES: list[tuple[str, str, Any]] = [
    # (field, JSON value, the decoded value or the dead letter's reason)
    ("name", '"café"', "café"),
    ("name", '""', ""),
    ("name", "5", "!field name: value 5 is a number, not a string"),
    ("name", "1.50", "!field name: value 1.5 is a number, not a string"),
    ("name", "1e2", "!field name: value 100.0 is a number, not a string"),
    ("name", "1.5e-30", "!field name: value 1.5E-30 is a number, not a string"),
    ("name", "-0.0", "!field name: value 0 is a number, not a string"),
    ("name", "true", "!field name: value true is a boolean, not a string"),
    ("name", '{"b": 2, "a": 1}', '!field name: value {"a":1,"b":2} is an object, not a string'),
    ("name", '[1, "a", null]', '!field name: value [1,"a",null] is an array, not a string'),
    ("id", "-0", 0),
    ("id", "9223372036854775807", 2**63 - 1),
    ("id", "9223372036854775808", "!field id: value 9223372036854775808 is not a long"),
    ("id", "1.0", "!field id: value 1.0 is not a long"),
    ("id", "1e2", "!field id: value 100.0 is not a long"),
    ("id", '"5"', "!field id: value 5 is not a long"),
    ("id", '"abc"', "!field id: value abc is not a long"),
    ("id", "true", "!field id: value true is not a long"),
    ("id", '{"b": 2, "a": 1}', '!field id: value {"b":2,"a":1} is not a long'),
    ("n", "-2147483648", -(2**31)),
    ("n", "2147483648", "!field n: value 2147483648 is not a int"),
    ("amount", "3.1400", Decimal("3.14")),
    ("amount", '"12.50"', Decimal("12.50")),
    ("amount", "1e2", Decimal("100.00")),
    ("amount", "2.5E+1", Decimal("25.00")),
    ("amount", "-99999999.99", Decimal("-99999999.99")),
    ("amount", "1.005", "!field amount: value 1.005 does not fit decimal(10,2) without rounding"),
    ("amount", "-1.005", "!field amount: value -1.005 does not fit decimal(10,2) without rounding"),
    ("amount", '"2.345"', "!field amount: value 2.345 does not fit decimal(10,2) without rounding"),
    ("amount", "1.5e-3", "!field amount: value 0.0015 does not fit decimal(10,2) without rounding"),
    ("amount", "1.5e-30", "!field amount: value 1.5E-30 does not fit decimal(10,2) without rounding"),
    ("amount", "1.0000000000000000000001", "!field amount: value 1.0000000000000000000001 does not fit decimal(10,2) without rounding"),
    ("amount", "123456789.1", "!field amount: value 123456789.1 does not fit decimal(10,2)"),
    ("amount", "1e20", "!field amount: value 1.0E20 does not fit decimal(10,2)"),
    ("amount", '" 12.5"', "!field amount: value  12.5 is not a decimal(10,2)"),
    ("amount", '"abc"', "!field amount: value abc is not a decimal(10,2)"),
    ("amount", "true", "!field amount: value true is not a decimal(10,2)"),
    ("small", "99.99", Decimal("99.99")),
    ("small", "123.4", "!field small: value 123.4 does not fit decimal(4,2)"),  # pyarrow keeps it silently
    ("small", "-99.995", "!field small: value -99.995 does not fit decimal(4,2)"),
    ("x", "3", 3.0),
    ("x", '"NaN"', "nan"),
    ("x", '"-Infinity"', float("-inf")),
    ("x", '"3.5"', "!field x: value 3.5 is not a double"),
    ("x", "1e400", "!field x: value Infinity is not a double"),
    ("f", "1e40", "!field f: value 1.0E40 is not a float"),  # pyarrow makes it inf silently
    ("b", "false", False),
    ("b", "1", "!field b: value 1 is not a boolean"),
    ("b", '"true"', "!field b: value true is not a boolean"),
    ("ts", '"2024-01-01T10:00:00+02:00"', datetime(2024, 1, 1, 8, tzinfo=UTC)),
    ("ts", '"2024-01-01T10:00:00+0100"', datetime(2024, 1, 1, 9, tzinfo=UTC)),
    ("ts", '"2024-01-01T10:00:00"', datetime(2024, 1, 1, 10, tzinfo=UTC)),  # no offset: UTC
    ("ts", '"2024-01-01 10:00:00.5Z"', datetime(2024, 1, 1, 10, 0, 0, 500000, tzinfo=UTC)),
    ("ts", '"2024-01-01T10:00:00.123456789Z"', datetime(2024, 1, 1, 10, 0, 0, 123456, tzinfo=UTC)),
    ("ts", '"2024-01-01"', datetime(2024, 1, 1, tzinfo=UTC)),
    ("ts", '"yesterday"', "!field ts: value yesterday is not a timestamptz"),
    ("ts", '"2024-01-01t10:00:00z"', "!field ts: value 2024-01-01t10:00:00z is not a timestamptz"),
    ("ts", '"2024-02-30T10:00:00Z"', "!field ts: value 2024-02-30T10:00:00Z is not a timestamptz"),
    ("ts", '""', "!field ts: value  is not a timestamptz"),
    ("ts", "1700000000", "!field ts: value 1700000000 is not a timestamptz"),
    ("ts", "1700000000.5", "!field ts: value 1.7000000005E9 is not a timestamptz"),
    ("tn", '"2024-01-01 10:00:00"', datetime(2024, 1, 1, 10)),
    ("tn", '"2024-01-01T10:00:00.000001"', datetime(2024, 1, 1, 10, 0, 0, 1)),
    ("tn", '"2024-01-01T10:00:00Z"', "!field tn: value 2024-01-01T10:00:00Z has a UTC offset; a timestamp column takes local date-times (declare the column timestamptz)"),  # pyarrow shifts it
    ("tn", '"2024-01-01T10:00:00+02:00"', "!field tn: value 2024-01-01T10:00:00+02:00 has a UTC offset; a timestamp column takes local date-times (declare the column timestamptz)"),
    ("d", '"2024-02-29"', date(2024, 2, 29)),
    ("d", "19000", "!field d: value 19000 is not a date"),  # pyarrow reads it as a day count
    ("d", '"2024-1-5"', "!field d: value 2024-1-5 is not a date"),
    ("d", '"2024-01-05T10:00:00"', "!field d: value 2024-01-05T10:00:00 is not a date"),
    ("d", '"2024-02-30"', "!field d: value 2024-02-30 is not a date"),
    ("bin", '"aGVsbG8="', b"hello"),
    ("bin", '""', b""),
    ("bin", '"aGVsbG8"', "!field bin: value aGVsbG8 is not base64 text (a binary column takes base64)"),  # pyarrow takes the text's bytes
    ("bin", '"not base64!"', "!field bin: value not base64! is not base64 text (a binary column takes base64)"),
    ("bin", "5", "!field bin: value 5 is not base64 text (a binary column takes base64)"),
]


@pytest.mark.parametrize(("field", "value", "expected"), VALUE_CASES)
def test_each_value_decodes_or_is_a_dead_letter_with_the_reason_on_both_paths(field: str, value: str, expected: Any) -> None:
    line = f'{{"id": 1, "{field}": {value}}}'.encode() if field != "id" else f'{{"id": {value}}}'.encode()
    row = both(line)
    if isinstance(expected, str) and expected.startswith("!"):
        assert row[ERROR_COLUMN] == expected[1:]
        assert row[RAW_COLUMN] == line.decode()
        assert all(v is None for v in declared(row).values())
    else:
        assert row[ERROR_COLUMN] is None, row[ERROR_COLUMN]
        got = row[field]
        if expected == "nan":
            assert got != got
        else:
            assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(("field", "value"), [
    ("amount", v) for v in ['"+1.5"', '".5"', '"5."', '"007.50"', '"1E2"', '"-.5"', '"NaN"', '"Infinity"', '"1,5"', '"0x10"',
                            '"1_000"', '"1e-2"', "0.10", "-0", "1E+1", "12345678.999"]] + [
    ("ts", v) for v in ['"2024-01-01T10:00:00.1234567Z"', '"2024-01-01T10:00Z"', '"2024-01-01T10:00:00+01"', '"20240101T100000Z"',
                        '"2024-01-01T10:00:00 Z"', '"1900-01-01T00:00:00Z"', '"9999-12-31T23:59:59.999999Z"', '"2262-04-12T00:00:00Z"']] + [
    ("tn", v) for v in ['"2024-01-01T10:00:00.1234567"', '"3000-01-01T00:00:00.123456789"', '"2024-01-01T25:00:00"']] + [
    ("d", v) for v in ['"0001-01-01"', '"9999-12-31"', '"2024-13-01"', '"+2024-01-01"', '" 2024-01-01"']] + [
    ("bin", v) for v in ['"aGk="', '"aGk"', '"a Gk="', '"aG\\nk="', '"____"']])
def test_the_vectorised_and_per_record_paths_agree_on_edge_values(field: str, value: str) -> None:
    both(f'{{"id": 1, "{field}": {value}}}'.encode())


def test_strict_errors_come_before_type_mismatches_and_columns_in_order() -> None:
    assert both(b'{"id": "x", "name": 5}')[ERROR_COLUMN] == "field name: value 5 is a number, not a string"
    assert both(b'{"id": "x", "amount": 1.005}')[ERROR_COLUMN] == (
        "field amount: value 1.005 does not fit decimal(10,2) without rounding")
    assert both(b'{"n": 1.5, "id": "x"}')[ERROR_COLUMN] == "field id: value x is not a long"
    assert both(b'{"id": 1, "id": 2, "zz": 1}')[ERROR_COLUMN] == "duplicate key(s) in the record: id"


def test_json_null_and_absent_fields_are_null_and_a_missing_required_one_is_a_dead_letter_with_its_record() -> None:
    row = both(b'{"id": 1, "name": null}')
    assert row[ERROR_COLUMN] is None and row["id"] == 1 and all(v is None for k, v in declared(row).items() if k != "id")
    for record in (b'{"name": null}', b"{}", b'{"id": null, "name": "x"}'):
        row = both(record)
        assert row[ERROR_COLUMN] == "required field id is missing or null"
        assert row[RAW_COLUMN] == record.decode()
        assert json.loads(row[POSITION_COLUMN]) == {"file": "f.json", "line": PAD + 1}


def test_timestamps_with_and_without_offsets_in_one_block() -> None:
    values = ["2024-01-01T10:00:00Z", "2024-01-01", "2024-01-01T10:00:00", "2024-01-01T10:00:00.123456789+01:00",
              "2024-01-01 10:00:00-05", "2024-01-01T10", "nope", "2024-01-01T10:00:00.5"]
    lines = [json.dumps({"id": i, "ts": value}).encode() for i, value in enumerate(values * 5)]
    out = rows(decode_json_block(b"\n".join(lines), SCHEMA, "f", 1))
    expected = [alone(line) for line in lines]
    assert [(r["ts"], r[ERROR_COLUMN]) for r in out] == [(r["ts"], r[ERROR_COLUMN]) for r in expected]
    assert [r["ts"] for r in out[:8]] == [
        datetime(2024, 1, 1, 10, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, 10, tzinfo=UTC),
        datetime(2024, 1, 1, 9, 0, 0, 123456, tzinfo=UTC), datetime(2024, 1, 1, 15, tzinfo=UTC),
        datetime(2024, 1, 1, 10, tzinfo=UTC), None, datetime(2024, 1, 1, 10, 0, 0, 500000, tzinfo=UTC)]
    assert out[6][ERROR_COLUMN] == "field ts: value nope is not a timestamptz"


# -- lines, positions, raw records ----------------------------------------------------------------


def test_blank_lines_are_skipped_but_counted_and_crlf_is_a_line_end() -> None:
    block = b'{"id": 1}\r\n\r\n   \n{"id": "x"}\r\n\t\n{"id": 3}\r\n[1]'
    table = decode_json_block(block, SCHEMA, "s3://b/f.json", 10)
    out = rows(table)
    assert [r["id"] for r in out] == [1, None, 3, None]
    assert [r[ERROR_COLUMN] for r in out] == [None, "field id: value x is not a long", None,
                                              "record is an array, not a JSON object"]
    assert [json.loads(r[POSITION_COLUMN]) if r[POSITION_COLUMN] else None for r in out] == [
        None, {"file": "s3://b/f.json", "line": 13}, None, {"file": "s3://b/f.json", "line": 16}]
    assert out[1][POSITION_COLUMN] == '{"file":"s3://b/f.json","line":13}'  # compact, keys sorted
    assert out[1][RAW_COLUMN] == '{"id": "x"}'  # without the \r


def test_output_has_one_row_per_non_blank_line_in_order_with_the_declared_types() -> None:
    assert decode_json_block(b"", SCHEMA, "f", 1).num_rows == 0
    assert decode_json_block(b"\n\n \r\n", SCHEMA, "f", 1).num_rows == 0
    table = decode_json_block((GOOD + "\n{bad\n" + GOOD).encode(), SCHEMA, "f", 1)
    assert table.num_rows == 3
    assert table.schema == pa.schema([*SCHEMA, pa.field(ERROR_COLUMN, pa.string()), pa.field(RAW_COLUMN, pa.string()),
                                      pa.field(POSITION_COLUMN, pa.string())])
    assert [f.type for f in SCHEMA] == [
        pa.int64(), pa.large_string(), pa.decimal128(10, 2), pa.int32(), pa.float64(), pa.float32(), pa.bool_(),
        pa.timestamp("us", tz="UTC"), pa.timestamp("us"), pa.date32(), pa.large_binary(), pa.decimal128(4, 2)]
    assert declared(rows(table)[2]) == GOOD_ROW


def test_a_line_that_is_not_utf8_is_kept_as_base64_and_good_lines_around_it_keep_their_values() -> None:
    bad = b'{"id": 5, "name": "\xc3\x28"}'
    block = b"\n".join([b'{"id": 1}'] * 30 + [bad] + [b'{"id": 2}'] * 30)
    out = rows(decode_json_block(block, SCHEMA, "f", 1))
    assert out[30][ERROR_COLUMN] == NOT_UTF8
    assert base64.b64decode(out[30][RAW_COLUMN]) == bad
    assert [r["id"] for r in out[:30]] == [1] * 30 and [r["id"] for r in out[31:]] == [2] * 30
    assert all(r[RAW_COLUMN] is None and r[POSITION_COLUMN] is None for i, r in enumerate(out) if i != 30)


def test_a_value_spread_over_lines_is_two_bad_lines_not_one_record() -> None:
    block = b"\n".join([GOOD.encode()] * 20 + [b'{"id":', b"1}"] + [GOOD.encode()] * 20)
    out = rows(decode_json_block(block, SCHEMA, "f", 1))
    assert len(out) == 42
    assert [out[20][ERROR_COLUMN], out[21][ERROR_COLUMN]] == ["malformed JSON", "malformed JSON"]


def test_a_null_unknown_field_is_found_among_good_lines_even_where_another_line_gives_it_a_value() -> None:
    lines = [GOOD.encode()] * 50
    lines[10] = b'{"id": 1, "zz": 5}'
    lines[20] = b'{"id": 2, "zz": null}'
    lines[30] = b'{"id": 3, "z\\u007a": null}'
    lines[40] = b'{"id": 4, "yy": null}'
    out = rows(decode_json_block(b"\n".join(lines), SCHEMA, "f", 1))
    assert {i: r[ERROR_COLUMN] for i, r in enumerate(out) if r[ERROR_COLUMN]} == {
        10: "unknown field(s) not in spec.schema: zz", 20: "unknown field(s) not in spec.schema: zz",
        30: "unknown field(s) not in spec.schema: zz", 40: "unknown field(s) not in spec.schema: yy"}


BAD_LINES = [line for line, reason in RECORD_CASES if reason is not None and b"\n" not in line] + [
    f'{{"id": 1, "{field}": {value}}}'.encode() for field, value, expected in VALUE_CASES
    if isinstance(expected, str) and expected.startswith("!") and field != "id"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_large_block_with_scattered_bad_lines_decodes_each_line_as_it_would_alone(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Small chunks so that every way of narrowing a refused chunk runs.
    monkeypatch.setattr(ad, "CHUNK_RECORDS", 97)
    monkeypatch.setattr(ad, "_NARROW_RECORDS", 23)
    r = random.Random(seed)
    goods = [GOOD, '{"id": 2, "ts": "2024-03-01T00:00:00"}', '{"id": 3, "ts": "2024-03-01T00:00:00.123456789+01:00"}',
             '{"id": 4, "amount": "7.10", "tn": "2024-03-01 12:00:00"}', '{"id": 5}', '   {"id": 6}   ']
    lines = [r.choice(goods).encode() if r.random() > 0.03 else r.choice(BAD_LINES) for _ in range(1500)]
    lines[r.randrange(1500)] = b""  # a blank line
    table = decode_json_block(b"\n".join(lines) + b"\n", SCHEMA, "f", 1)
    expected = [alone(line) for line in lines if line.strip()]
    got = rows(table)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g[ERROR_COLUMN] == e[ERROR_COLUMN], (i, g[RAW_COLUMN])
        assert repr(declared(g)) == repr(declared(e)), i
        assert g[RAW_COLUMN] == e[RAW_COLUMN]
    assert sum(1 for g in got if g[ERROR_COLUMN]) > 20


# -- independent records (Kafka values) -----------------------------------------------------------


def test_values_may_span_lines_and_a_null_value_is_an_empty_record() -> None:
    pretty = json.dumps({"id": 1, "name": "a\nb", "amount": 2.5}, indent=2).encode()
    values = [pretty, None, b'{"id": 2}', b'{\n  "id": "x"\n}', b"", b'{"id": 3,\n "id": 4}', b"\xff"] + [b'{"id": 9}'] * 30
    positions = {i: {"topic": "t", "partition": 0, "offset": 100 + i} for i in range(len(values))}
    for array in (pa.array(values, pa.binary()), pa.array(values, pa.large_binary())):
        out = rows(decode_json_values(array, SCHEMA, positions.__getitem__))
        assert len(out) == len(values)
        assert (out[0]["id"], out[0]["name"], out[0]["amount"], out[0][ERROR_COLUMN]) == (1, "a\nb", Decimal("2.50"), None)
        assert [r[ERROR_COLUMN] for r in out[1:7]] == [
            "empty record", None, "field id: value x is not a long", "malformed JSON",
            "duplicate key(s) in the record: id", NOT_UTF8]
        assert out[1][RAW_COLUMN] is None and out[3][RAW_COLUMN] == '{\n  "id": "x"\n}' and out[6][RAW_COLUMN] == "/w=="
        assert json.loads(out[3][POSITION_COLUMN]) == {"topic": "t", "partition": 0, "offset": 103}
        assert out[3][POSITION_COLUMN] == json.dumps(positions[3], sort_keys=True, separators=(",", ":"))
        assert [r["id"] for r in out[7:]] == [9] * 30


def test_values_decode_like_lines() -> None:
    lines = [GOOD.encode()] * 10 + BAD_LINES + [GOOD.encode()] * 10
    from_values = rows(decode_json_values(pa.array(lines, pa.binary()), SCHEMA, lambda i: {"offset": i}))
    from_block = rows(decode_json_block(b"\n".join(lines), SCHEMA, "f", 1))
    assert repr([declared(r) for r in from_values]) == repr([declared(r) for r in from_block])
    assert [r[ERROR_COLUMN] for r in from_values] == [r[ERROR_COLUMN] for r in from_block]


# -- CSV ------------------------------------------------------------------------------------------

CSV_COLUMNS = [Column(name="id", type="long"), Column(name="name", type="string"), Column(name="amount", type="decimal(10,2)"),
               Column(name="b", type="boolean"), Column(name="ts", type="timestamptz"), Column(name="d", type="date"),
               Column(name="x", type="double")]
CSV_SCHEMA = target_schema(CSV_COLUMNS)
MISMATCH = "CSV row does not match the schema"


def test_csv_quoting_empty_fields_and_types() -> None:
    block = (b'1,a,2.50,true,2024-01-01T10:00:00Z,2024-01-05,1.5\r\n'
             b'2,"x,y",1,TRUE,2024-01-01T10:00:00,,NaN\n'
             b'\n'
             b'3,"he said ""hi""",1e2,tRuE,2024-01-01 10:00:00+01:00,2024-02-29,-Infinity\n'
             b'4,,,,,,\n'
             b'5,"",,,,,\n'
             b'6, a ,,,,,\n'
             b'7,NULL,,,,,\n'
             b'8,NA,,,,,\n')
    out = rows(decode_csv_block(block, CSV_SCHEMA, "f.csv", 2))
    assert [r[ERROR_COLUMN] for r in out] == [None] * 8
    # Only an empty field is null: not "NULL" or "NA" (pyarrow's default null values).
    assert [r["name"] for r in out] == ["a", "x,y", 'he said "hi"', None, None, " a ", "NULL", "NA"]
    assert out[0]["amount"] == Decimal("2.50") and out[2]["amount"] == Decimal("100.00")
    assert [r["b"] for r in out[:3]] == [True, True, True]
    assert out[1]["ts"] == datetime(2024, 1, 1, 10, tzinfo=UTC) and out[2]["ts"] == datetime(2024, 1, 1, 9, tzinfo=UTC)
    assert out[2]["d"] == date(2024, 2, 29) and out[1]["d"] is None
    assert out[1]["x"] != out[1]["x"] and out[2]["x"] == float("-inf")


def test_csv_lines_that_do_not_fit_are_dead_letters_with_their_line() -> None:
    lines = [
        b"1,a,2.50,true,,,",
        b"two,b,1,,,,",
        b"3,\xff,1,,,,",
        b"4,d,1,,,,,extra",
        b"5,e",
        b'6,"unterminated,1,,,,',
        b"7,f,1.005,,,,",
        b"8,g,123456789.5,,,,",
        b"9,h,1,yes,,,",
        b"10,i,1,,1700000000,,",
        b"11,j,1,,,2024-1-5,",
        b" 12,k,1,,,,",
        b"13,l,1,,,,1e400",
        b"14,m,1,false,,,",
        b'15,"a \\"b\\" c",1,,,,',
        b'16,"a"b,1,,,,',
        b'17,a"b,1,,,,',
    ]
    out = rows(decode_csv_block(b"\n".join(lines) + b"\n", CSV_SCHEMA, "f.csv", 2))
    assert [r[ERROR_COLUMN] for r in out] == [
        None,
        f"{MISMATCH}: field id: value two is not a long",
        NOT_UTF8,
        f"{MISMATCH}: expected 7 field(s)",
        f"{MISMATCH}: expected 7 field(s)",
        f"{MISMATCH}: quotes do not pair up (RFC 4180)",
        f"{MISMATCH}: field amount: value 1.005 does not fit decimal(10,2) without rounding",
        f"{MISMATCH}: field amount: value 123456789.5 does not fit decimal(10,2)",
        f"{MISMATCH}: field b: value yes is not a boolean",
        f"{MISMATCH}: field ts: value 1700000000 is not a timestamptz",
        f"{MISMATCH}: field d: value 2024-1-5 is not a date",
        f"{MISMATCH}: field id: value  12 is not a long",
        f"{MISMATCH}: field x: value 1e400 is not a double",
        None,
        f"{MISMATCH}: quotes do not pair up (RFC 4180)",  # a backslash does not escape a quote
        f"{MISMATCH}: quotes do not pair up (RFC 4180)",
        None,  # a quote inside an unquoted field is text
    ]
    assert [r["id"] for r in out] == [1, *[None] * 12, 14, None, None, 17]
    assert out[-1]["name"] == 'a"b'
    assert [json.loads(r[POSITION_COLUMN])["line"] for r in out[1:13]] == list(range(3, 15))
    assert out[2][RAW_COLUMN] == base64.b64encode(lines[2]).decode() and out[5][RAW_COLUMN] == lines[5].decode()


# -- typed rows and whole inputs ------------------------------------------------------------------


def test_conform_table_casts_what_fits_and_makes_rows_that_do_not_fit_dead_letters() -> None:
    schema = target_schema([Column(name="id", type="long"), Column(name="n", type="int"),
                            Column(name="amount", type="decimal(10,2)"), Column(name="name", type="string"),
                            Column(name="ts", type="timestamptz")])
    table = pa.table({
        "n": pa.array([1, 3_000_000_000, 2, None], pa.int64()),
        "amount": pa.array([Decimal("1.5"), Decimal("1"), Decimal("2.345"), None], pa.decimal128(12, 3)),
        "name": pa.array(["a", "b", "c", None], pa.string()),
        "ts": pa.array([0, 1, 2, 3], pa.timestamp("ns")),
    })
    out = rows(conform_table(table, schema, lambda i: {"file": "p.parquet", "row": i}))
    assert [r[ERROR_COLUMN] for r in out] == [
        None, "field n: value 3000000000 is not a int", "field amount: value 2.345 is not a decimal(10,2)",
        "field ts: value 1970-01-01 00:00:00.000000003 is not a timestamptz"]
    assert out[0] == {"id": None, "n": 1, "amount": Decimal("1.50"), "name": "a",
                      "ts": datetime(1970, 1, 1, tzinfo=UTC), ERROR_COLUMN: None, RAW_COLUMN: None, POSITION_COLUMN: None}
    assert all(v is None for r in out[1:] for v in declared(r).values())
    assert [json.loads(r[POSITION_COLUMN]) for r in out[1:]] == [{"file": "p.parquet", "row": i} for i in (1, 2, 3)]
    assert conform_table(table, schema, lambda i: {}).schema == decode_json_block(b"", schema, "f", 1).schema
    with pytest.raises(ValueError, match="not in the schema"):
        conform_table(pa.table({"other": [1]}), schema, lambda i: {})


def test_conform_table_refuses_a_float_that_would_lose_its_fraction() -> None:
    schema = target_schema([Column(name="id", type="long")])
    out = rows(conform_table(pa.table({"id": pa.array([2.0, 2.5])}), schema, lambda i: {"row": i}))
    assert [(r["id"], r[ERROR_COLUMN]) for r in out] == [(2, None), (None, "field id: value 2.5 is not a long")]


def test_whole_input_row() -> None:
    out = whole_input_row(SCHEMA, "not a Parquet file: x", {"file": "a.parquet"})
    assert out.schema == decode_json_block(b"", SCHEMA, "f", 1).schema
    assert rows(out) == [{**{f.name: None for f in SCHEMA}, ERROR_COLUMN: "not a Parquet file: x", RAW_COLUMN: None,
                          POSITION_COLUMN: '{"file":"a.parquet"}'}]


# -- reasons' text of values, as the JVM writes them ---------------------------------------------------


@pytest.mark.parametrize(("value", "text"), [
    (100.0, "100.0"), (0.0015, "0.0015"), (1e-3, "0.001"), (9999999.0, "9999999.0"), (1e7, "1.0E7"),
    (123456789.1, "1.234567891E8"), (1.5e-30, "1.5E-30"), (-2.5e20, "-2.5E20"), (0.0, "0.0"), (-0.0, "-0.0"),
])
def test_java_double_text(value: float, text: str) -> None:
    assert json_values._java_double(value) == text


# -- arrays -------------------------------------------------------------------------------------------

ARRAY_SCHEMA = target_schema([
    Column(name="id", type="long", required=True), Column(name="tags", type="array<string>"),
    Column(name="n", type="array<int>"), Column(name="prices", type="array<decimal(6,2)>"),
    Column(name="days", type="array<date>"), Column(name="at", type="array<timestamptz>"),
    Column(name="bin", type="array<binary>"), Column(name="x", type="array<double>")])
ARRAY_GOOD = ('{"id": 1, "tags": ["a", null], "n": [1, 2], "prices": [1.5, null], "days": ["2024-02-29"], '
              '"at": ["2024-03-01T10:00:00+02:00"], "bin": ["aGk="], "x": []}')
ARRAY_GOOD_ROW = {"id": 1, "tags": ["a", None], "n": [1, 2], "prices": [Decimal("1.50"), None],
                  "days": [date(2024, 2, 29)], "at": [datetime(2024, 3, 1, 8, tzinfo=UTC)], "bin": [b"hi"], "x": []}


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("tags", '[]', []), ("tags", 'null', None), ("tags", '[null, null]', [None, None]),
    ("tags", '["x", 1]', "field tags: value 1 is a number, not a string (an element of array<string>)"),
    ("tags", '"x"', "field tags: value x is not an array<string>"),
    ("tags", '{"a": 1}', 'field tags: value {"a":1} is not an array<string>'),
    ("tags", '[["x"]]', 'field tags: value ["x"] is an array, not a string (an element of array<string>)'),
    ("n", '[2147483648]', "field n: value 2147483648 is not a int (an element of array<int>)"),
    ("n", '[1.5]', "field n: value 1.5 is not a int (an element of array<int>)"),
    ("prices", '["2.25", 3]', [Decimal("2.25"), Decimal("3.00")]),
    ("prices", '[1.234]', "field prices: value 1.234 does not fit decimal(6,2) without rounding "
                          "(an element of array<decimal(6,2)>)"),
    ("prices", '[12345.6]', "field prices: value 12345.6 does not fit decimal(6,2) (an element of array<decimal(6,2)>)"),
    ("days", '["2024-02-30"]', "field days: value 2024-02-30 is not a date (an element of array<date>)"),
    ("days", '[19782]', "field days: value 19782 is not a date (an element of array<date>)"),
    ("at", '["2024-03-01T10:00:00", null]', [datetime(2024, 3, 1, 10, tzinfo=UTC), None]),
    ("at", '["soon"]', "field at: value soon is not a timestamptz (an element of array<timestamptz>)"),
    ("bin", '["a Gk="]', "field bin: value a Gk= is not base64 text (a binary column takes base64) (an element of array<binary>)"),
    ("x", '[1e400]', "field x: value Infinity is not a double (an element of array<double>)"),
])
def test_array_values_decode_or_are_dead_letters_naming_the_field_on_both_paths(field: str, value: str,
                                                                                expected: Any) -> None:
    row = both(f'{{"id": 2, "{field}": {value}}}'.encode(), ARRAY_SCHEMA, ARRAY_GOOD, ARRAY_GOOD_ROW)
    if isinstance(expected, str):
        assert row[ERROR_COLUMN] == expected
    else:
        assert row[ERROR_COLUMN] is None and row[field] == expected


def test_array_columns_have_the_tables_list_types() -> None:
    table = decode_json_block(ARRAY_GOOD.encode() + b"\n", ARRAY_SCHEMA, "f.json", 1)
    assert table.schema.field("prices").type == pa.large_list(pa.field("element", pa.decimal128(6, 2)))
    assert declared(rows(table)[0]) == ARRAY_GOOD_ROW


def test_conform_table_checks_a_parquet_list_by_its_elements() -> None:
    """A list element that does not fit makes its row a dead letter; its neighbours (sliced apart by the search for
    the bad value) keep theirs."""
    table = pa.table({"id": [1, 2, 3, 4], "n": pa.array([[1, None], [2**40], None, []], pa.list_(pa.int64()))})
    schema = target_schema([Column(name="id", type="long", required=True), Column(name="n", type="array<int>")])
    out = conform_table(table, schema, lambda i: {"row": i}).to_pylist()
    assert [(row["id"], row["n"], row[ERROR_COLUMN]) for row in out] == [
        (1, [1, None], None), (None, None, "field n: value [1099511627776] is not an array<int>"), (3, None, None),
        (4, [], None)]


def test_a_long_run_of_records_the_reader_refuses_one_by_one_is_decoded_record_by_record() -> None:
    """Thousands of consecutive records the vectorised reader refuses each in turn (a number in a string column):
    every one a dead letter with its reason, the good ones after them rows (narrowing is a work list, not
    recursion, which stopped the job with a RecursionError here)."""
    schema = target_schema([Column(name="id", type="long"), Column(name="name", type="string")])
    lines = [json.dumps({"id": n, "name": 5}) for n in range(3000)] + [json.dumps({"id": n, "name": "x"})
                                                                       for n in range(3000, 3050)]
    table = decode_json_block(("\n".join(lines) + "\n").encode(), schema, "f.json", 1)
    errors = table.column(ERROR_COLUMN).to_pylist()
    assert errors[:3000] == ["field name: value 5 is a number, not a string"] * 3000
    assert errors[3000:] == [None] * 50 and table.column("id").to_pylist()[3000:] == list(range(3000, 3050))
