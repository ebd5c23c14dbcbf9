"""The Arrow decoders against today's JVM decoders (spark_app/decode.py) on the same records: the same
good rows and the same bad records with the same reasons, except the differences listed here on
purpose (each where the JVM decoder coerces silently or names a wrong reason)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_app.arrow_decode import decode_csv_block, decode_json_block, target_schema
from spark_app.deadletter import ERROR_COLUMN
from spark_app.decode import decode_csv, decode_json
from tests.unit.test_arrow_decode import COLUMNS, CSV_COLUMNS, GOOD, RECORD_CASES, VALUE_CASES

# line -> (the JVM decoder's reason or None, the Arrow decoder's reason)
JSON_DIFFERENCES = {
    # The JVM reads the first object of the line and drops the rest.
    b'{"id": 1} {"id": 2}': (None, "malformed JSON"),
    b'{"id": 1}x': (None, "malformed JSON"),
    # The JVM names a wrong reason.
    b"null": ("record is a number, not a JSON object", "record is null, not a JSON object"),
    b"{'id': 1}": ("duplicate keys in a nested value", "malformed JSON"),
    b'{"name": "a\tb"}': ("duplicate keys in a nested value", "malformed JSON"),
    # The JVM replaces a lone surrogate with "?".
    b'{"name": "\\ud800"}': (None, "malformed JSON"),
    # The JVM overflows to infinity.
    b'{"id": 1, "x": 1e400}': (None, "field x: value Infinity is not a double"),
    b'{"id": 1, "f": 1e40}': (None, "field f: value 1.0E40 is not a float"),
    # The JVM reads an integer as epoch seconds.
    b'{"id": 1, "ts": 1700000000}': (None, "field ts: value 1700000000 is not a timestamptz"),
    # The JVM takes more date forms than YYYY-MM-DD.
    b'{"id": 1, "d": "2024-1-5"}': (None, "field d: value 2024-1-5 is not a date"),
    b'{"id": 1, "d": "2024-01-05T10:00:00"}': (None, "field d: value 2024-01-05T10:00:00 is not a date"),
}


def _lines() -> list[bytes]:
    lines = [GOOD.encode()] + [line for line, reason in RECORD_CASES if reason is not None]
    for field, value, _ in VALUE_CASES:
        lines.append(f'{{"id": 1, "{field}": {value}}}'.encode() if field != "id" else f'{{"id": {value}}}'.encode())
    return lines


def _jvm(spark: SparkSession, lines: list[bytes], decode: Any, columns: Any) -> list[dict[str, Any]]:
    frame = spark.createDataFrame([(line, i) for i, line in enumerate(lines)], "value binary, k long")
    rows = decode(frame, "value", columns, F.to_json(F.struct(F.col("k")))).collect()
    return [row.asDict() for row in sorted(rows, key=lambda row: json.loads(row["_isync_position"])["k"])]


def _comparable(row: dict[str, Any], names: list[str]) -> dict[str, Any]:
    out = {}
    for name in names:
        value = row[name]
        if isinstance(value, bytearray):
            value = bytes(value)
        if name == "ts" and isinstance(value, datetime):
            # Spark gives naive local times (the session and the test process are UTC).
            value = (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
        out[name] = repr(value)
    return out


def test_json_decoders_agree_on_every_rule(spark: SparkSession) -> None:
    lines = _lines()
    assert all(line in lines for line in JSON_DIFFERENCES)
    jvm = _jvm(spark, lines, decode_json, COLUMNS)
    arrow = decode_json_block(b"\n".join(lines), target_schema(COLUMNS), "f", 1).to_pylist()
    names = [c.name for c in COLUMNS]
    assert len(jvm) == len(arrow) == len(lines)
    for line, theirs, ours in zip(lines, jvm, arrow, strict=True):
        expected = JSON_DIFFERENCES.get(line, (theirs[ERROR_COLUMN], theirs[ERROR_COLUMN]))
        assert (theirs[ERROR_COLUMN], ours[ERROR_COLUMN]) == expected, line
        if ours[ERROR_COLUMN] is None and theirs[ERROR_COLUMN] is None:
            assert _comparable(ours, names) == _comparable(theirs, names), line


CSV_LINES = [
    b"1,a,2.50,true,2024-01-01T10:00:00Z,2024-01-05,1.5",
    b'2,"x,y",1,TRUE,2024-01-01T10:00:00,,-1',
    b'3,"x",1e2,tRuE,2024-01-01 10:00:00+01:00,2024-02-29,0',
    b"4,,,,,,",
    b'5,"",,,,,',
    b"6, a ,,,,,",
    b"two,b,1,,,,",
    b"3,\xff,1,,,,",
    b"4,d,1,,,,,extra",
    b"5,e",
    b"8,g,123456789.5,,,,",
    b"9,h,1,yes,,,",
    b"10,i,1,,1700000000,,",
    b" 12,k,1,,,,",
    b"1.0,l,1,,,,",
]
# line -> (the JVM decoder's reason or None, the Arrow decoder's reason)
CSV_DIFFERENCES = {
    b"7,f,1.005,,,,": (None, "CSV row does not match the schema: field amount: value 1.005 does not fit decimal(10,2) "
                             "without rounding"),  # the JVM rounds
    b"11,j,1,,,2024-1-5,": (None, "CSV row does not match the schema: field d: value 2024-1-5 is not a date"),
    # Quotes: RFC 4180 (a quote doubled in a quoted field), not Spark's default backslash escape.
    b'12,"a \\"b\\" c",1,,,,': (None, "CSV row does not match the schema: quotes do not pair up (RFC 4180)"),
}
CSV_VALUE_DIFFERENCES = {
    # Spark keeps the quotes (its escape character is a backslash); here the value is: he said "hi"
    b'13,"he said ""hi""",1,,,,': ('"he said ""hi"""', 'he said "hi"'),
}


def test_csv_decoders_agree(spark: SparkSession) -> None:
    lines = CSV_LINES + list(CSV_DIFFERENCES) + list(CSV_VALUE_DIFFERENCES)
    jvm = _jvm(spark, lines, decode_csv, CSV_COLUMNS)
    arrow = decode_csv_block(b"\n".join(lines), target_schema(CSV_COLUMNS), "f", 1).to_pylist()
    names = [c.name for c in CSV_COLUMNS]
    for line, theirs, ours in zip(lines, jvm, arrow, strict=True):
        if line in CSV_DIFFERENCES:
            assert (theirs[ERROR_COLUMN], ours[ERROR_COLUMN]) == CSV_DIFFERENCES[line], line
            continue
        if line in CSV_VALUE_DIFFERENCES:
            assert (theirs["name"], ours["name"]) == CSV_VALUE_DIFFERENCES[line], line
            continue
        # The Arrow decoder adds the detail after the JVM's reason.
        assert (ours[ERROR_COLUMN] or "").split(":")[0] == (theirs[ERROR_COLUMN] or ""), line
        if ours[ERROR_COLUMN] is None:
            assert _comparable(ours, names) == _comparable(theirs, names), line
