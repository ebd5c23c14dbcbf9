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
