"""Nested JSON values converted by the one strict decoder: structs, maps and arrays of anything, with the path of
a bad value in the reason, on the append and the keyed path alike."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from icebergsync.spec import Column
from spark_app.decoding.arrow_decode import target_schema
from spark_app.decoding.json_values import Refused, converter, loads, value_type


def convert(type_name: str, text: str) -> Any:
    arrow = target_schema([Column.model_construct(name="c", type=type_name, required=False)]).field("c").type
    return converter(value_type(arrow))(loads(text))


def refusal(type_name: str, text: str) -> str:
    with pytest.raises(Refused) as caught:
        convert(type_name, text)
    return caught.value.reason("c")


def test_structs_maps_and_arrays_convert_to_what_arrow_takes() -> None:
    value = convert("struct<id: long not null, at: date, tags: array<string>, m: map<string, decimal(5,2)>, "
                    "deep: struct<x: array<array<int>>>>",
                    '{"id": 7, "at": "2024-02-29", "tags": ["a", null], "m": {"k": "1.5", "n": null}, '
                    '"deep": {"x": [[1, null], []]}}')
    assert value == {"id": 7, "at": 19782, "tags": ["a", None], "m": [("k", Decimal("1.50")), ("n", None)],
                     "deep": {"x": [[1, None], []]}}
    arrow = target_schema([Column.model_construct(name="c", required=False, type=(
        "struct<id: long not null, at: date, tags: array<string>, m: map<string, decimal(5,2)>, "
        "deep: struct<x: array<array<int>>>>"))]).field("c").type
    assert pa.array([value], arrow).to_pylist()[0]["at"] == date(2024, 2, 29)


def test_map_keys_of_other_types_and_connects_pair_form() -> None:
    assert convert("map<long, string>", '{"12": "a", "-3": "b"}') == [(12, "a"), (-3, "b")]
    assert convert("map<long, string>", '[[12, "a"], [-3, null]]') == [(12, "a"), (-3, None)]
    assert convert("map<date, int>", '{"2024-03-01": 1}') == [(19783, 1)]
    assert refusal("map<long, string>", '{"x": "a"}') == 'field c["x"]: value x is not a long'


@pytest.mark.parametrize(("type_name", "text", "reason"), [
    ("struct<a: int>", '{"a": 1, "b": 2}', "field c: unknown field(s) not in its struct: b"),
    ("struct<a: int not null>", '{"a": null}', "required field c.a is missing or null"),
    ("struct<a: int not null>", "{}", "required field c.a is missing or null"),
    ("struct<a: struct<b: string>>", '{"a": {"b": 1}}', "field c.a.b: value 1 is a number, not a string"),
    ("array<struct<b: int>>", '[{"b": 1}, {"b": "x"}]', "field c[1].b: value x is not a int"),
    ("array<array<int>>", '[[1], ["x"]]', "field c[1]: value x is not a int (an element of array<int>)"),
    ("map<string, struct<b: date>>", '{"k": {"b": "2024-13-01"}}', 'field c["k"].b: value 2024-13-01 is not a date'),
    ("struct<a: int>", "[1]", "field c: value [1] is not a struct<a: int>"),
    ("map<string, int>", '"x"', "field c: value x is not a map<string, int>"),
    ("array<struct<b: int>>", '{"b": 1}', 'field c: value {"b":1} is not an array<struct<b: int>>'),
])
def test_a_bad_nested_value_is_named_by_its_path(type_name: str, text: str, reason: str) -> None:
    assert refusal(type_name, text) == reason


def test_a_json_text_column_keeps_any_value_as_its_text_on_both_paths() -> None:
    from spark_app.decoding.changes import decode_value

    column = Column(name="payload", type="string", jsonText=True)
    for text, kept in [('{"b": [1, 2.50, "x"], "a": null}', '{"b":[1,2.50,"x"],"a":null}'), ('"plain"', "plain"),
                       ("1e2", "1e2"), ("[true]", "[true]")]:
        assert decode_value(column, loads(text), None) == kept
    from spark_app.decoding.arrow_decode import decode_json_block

    schema = target_schema([Column(name="id", type="long"), column])
    table = decode_json_block(b'{"id": 1, "payload": {"b": [1, 2.50]}}\n{"id": 2, "payload": "x"}\n', schema, "f", 1)
    assert table.column("payload").to_pylist() == ['{"b":[1,2.50]}', "x"]


def test_json_text_is_for_string_columns() -> None:
    from icebergsync.errors import SpecError
    from icebergsync.spec import parse_spec

    with pytest.raises(SpecError, match="jsonText keeps a value's JSON text: the column's type must be string"):
        parse_spec({"apiVersion": "icebergsync.io/v1alpha1", "kind": "IcebergSync", "metadata": {"name": "x"},
                    "spec": {"source": {"files": {"path": "/in"}}, "table": {"name": "a.b"},
                             "schema": [{"name": "p", "type": "long", "jsonText": True}]}})


NESTED_SCHEMA = [Column(name="id", type="long"), Column.model_construct(name="e", required=False, type=(
    "struct<name: string, qty: int not null, price: decimal(9,2), at: timestamptz, day: date, raw: binary, "
    "tags: array<string>, inner: struct<x: double>>")),
    Column.model_construct(name="items", required=False, type="array<struct<sku: string not null, n: long>>"),
    Column.model_construct(name="grid", required=False, type="array<array<int>>")]
TRICKY = [
    '{"id": 1, "e": {"name": "a", "qty": 1, "price": "1.50", "at": "2024-03-01T10:00:00+02:00", "day": "2024-02-29",'
    ' "raw": "AQI=", "tags": ["x", null], "inner": {"x": 1.5}}, "items": [{"sku": "s", "n": 2}], "grid": [[1], []]}',
    '{"id": 2, "e": null, "items": null, "grid": null}', '{"id": 3}', '{"id": 4, "e": {"qty": 7}}',
    '{"id": 5, "e": {"qty": 1, "extra": 1}}', '{"id": 6, "e": {"qty": 1, "extra": null}}',
    '{"id": 7, "e": {"name": 5, "qty": 1}}', '{"id": 8, "e": {"name": "a"}}', '{"id": 9, "e": {"qty": null}}',
    '{"id": 10, "e": {"qty": 1, "price": 1.234}}', '{"id": 11, "e": {"qty": 1, "at": "2024-03-01T10:00:00"}}',
    '{"id": 12, "e": {"qty": 1, "day": "2024-13-01"}}', '{"id": 13, "e": {"qty": 1, "raw": "not base64!"}}',
    '{"id": 14, "e": {"qty": 1, "inner": {"x": "NaN"}}}', '{"id": 15, "e": {"qty": 1, "inner": {"y": 1}}}',
    '{"id": 16, "items": [{"sku": "a"}, {"n": 1}]}', '{"id": 17, "items": [{"sku": "a", "z": 1}]}',
    '{"id": 18, "grid": [[1, "x"]]}', '{"id": 19, "e": {"qty": 1, "qty": 2}}', '{"id": 20, "e": [1]}',
    '{"id": 21, "e": {"qty": 2147483648}}', '{"id": 22, "e": {"qty": 1, "tags": "x"}}',
    '{"id": 23, "e": {"qty": 1, "inner": {"x": 1e400}}}', '{"id": 24, "e": {"qty": 1, "\\u0065xtra": 1}}',
]


def test_the_vectorised_reader_gives_nested_columns_what_the_per_record_authority_gives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Structs, arrays of structs and arrays of arrays are read by the vectorised reader; for every record, good or
    bad (unknown nested fields, null or missing required fields, wrong types at depth, duplicates, rounding,
    offsets, escapes), the table equals the one the per-record decoder gives."""
    import random

    from spark_app.decoding import arrow_decode, json_values

    rng = random.Random(7)
    lines = [*TRICKY, *(TRICKY[rng.randrange(len(TRICKY))] for _ in range(300)),
             *(f'{{"id": {n}, "e": {{"qty": {n}, "tags": [{chr(34) + "t" + chr(34) if n % 2 else ""}]}}, '
               f'"items": [{{"sku": "s{n}"}}]}}' for n in range(100, 400))]
    block = ("\n".join(lines) + "\n").encode()
    schema = target_schema(NESTED_SCHEMA)
    fast = arrow_decode.decode_json_block(block, schema, "f.json", 1)
    monkeypatch.setattr(json_values.ValueType, "vectorised", property(lambda self: False))
    authority = arrow_decode.decode_json_block(block, schema, "f.json", 1)
    assert repr(fast.to_pylist()) == repr(authority.to_pylist())  # repr: NaN ("NaN" is a double) equals itself
    assert sum(error is not None for error in fast.column("_isync_error").to_pylist()[:len(TRICKY)]) == 18


def test_rows_with_nested_values_have_identities_equal_exactly_when_the_rows_are() -> None:
    """A keyless table's rows are matched by every column: structs and maps too (they are dicts and entry lists)."""
    from spark_app.decoding.row_identity import row_identities

    arrow = target_schema([Column.model_construct(name="e", required=False,
                                                  type="struct<x: double, m: map<string, double>>")])
    rows = pa.table({"e": pa.array([{"x": 1.0, "m": [("a", float("nan"))]}, {"x": 1.0, "m": [("a", float("nan"))]},
                                    {"x": -0.0, "m": []}, {"x": 0.0, "m": []}, None], arrow.field("e").type)})
    first, second, negative, positive, null = row_identities(rows, ["e"])
    assert first == second and hash(first) == hash(second)
    assert negative != positive and null == (None,)
