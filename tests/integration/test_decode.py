"""The strict JSON and CSV decoders on real Spark: what is a dead letter, with which reason, and what is kept."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from icebergsync.spec import Column
from spark_app.deadletter import ERROR_COLUMN, POSITION_COLUMN, RAW_COLUMN
from spark_app.decode import NOT_UTF8, decode_csv, decode_json

COLUMNS = [Column(name="id", type="long", required=True), Column(name="name", type="string"),
           Column(name="amount", type="decimal(10,2)")]


def decoded(spark: SparkSession, values: list[bytes], decode: Any = decode_json) -> list[dict[str, Any]]:
    frame = spark.createDataFrame([(value, index) for index, value in enumerate(values)], "value binary, n long")
    rows = decode(frame, "value", COLUMNS, F.to_json(F.struct(F.col("n")))).collect()
    return sorted((row.asDict() for row in rows), key=lambda row: json.loads(row[POSITION_COLUMN])["n"])


def test_json_decoding_is_strict_and_names_the_reason(spark: SparkSession) -> None:
    records = [
        b'{"id": 1, "name": "a", "amount": 1.5}',
        b'{"id": 2, "name": {"first": "b"}}',
        b'{"id": 3, "name": [1, 2]}',
        b'{"id": 4, "name": 42}',
        b'{"id": 5, "name": "\xff\xfe"}',
        b'{"id": 6, "amount": 1.005}',
        b'{"id": 7, "amount": "2.345"}',
        b'{"id": 8, "id": 9}',
        b"[1, 2]",
        b"17",
        b'{"id": 10, "colour": "red", "size": 3}',
        b'{"id": 11, "amount": "12.50"}',
        b'{"id": 12, "amount": 1e2, "name": null}',
        b'{"id": 13, "amount": 1.5e-3}',
        b"{not json",
        b'{"id": "x"}',
        b'{"id": 14, "amount": 3.1400}',
    ]
    rows = decoded(spark, records)
    errors = [row[ERROR_COLUMN] for row in rows]
    assert errors == [
        None,
        'field name: value {"first":"b"} is an object, not a string',
        "field name: value [1,2] is an array, not a string",
        "field name: value 42 is a number, not a string",
        NOT_UTF8,
        "field amount: value 1.005 does not fit decimal(10,2) without rounding",
        "field amount: value 2.345 does not fit decimal(10,2) without rounding",
        "duplicate key(s) in the record: id",
        "record is an array, not a JSON object",
        "record is a number, not a JSON object",
        "unknown field(s) not in spec.schema: colour, size",
        None,
        None,
        "field amount: value 0.0015 does not fit decimal(10,2) without rounding",
        "malformed JSON",
        "field id: value x is not a long",
        None,
    ]
    good = {row["id"]: row for row in rows if row[ERROR_COLUMN] is None}
    assert good[1]["name"] == "a" and good[1]["amount"] == Decimal("1.50")
    assert good[11]["amount"] == Decimal("12.50") and good[12]["amount"] == Decimal("100.00")
    assert good[14]["amount"] == Decimal("3.14")
    # The raw record is kept for the dead-letter table; bytes that are not UTF-8 as base64.
    assert rows[4][RAW_COLUMN] == "eyJpZCI6IDUsICJuYW1lIjogIv/+In0="
    assert rows[7][RAW_COLUMN] == '{"id": 8, "id": 9}'


def test_csv_lines_that_do_not_fit_or_are_not_utf8_are_dead_letters(spark: SparkSession) -> None:
    rows = decoded(spark, [b"1,a,2.50", b"two,b,1", b"3,\xff,1", b"4,d,1,extra"], decode_csv)
    assert [row[ERROR_COLUMN] for row in rows] == [
        None, "CSV row does not match the schema", NOT_UTF8, "CSV row does not match the schema"]
    assert (rows[0]["id"], rows[0]["name"], rows[0]["amount"]) == (1, "a", Decimal("2.50"))
