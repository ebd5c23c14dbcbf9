"""Spec column types as a tree: parsed, written back, mapped to Iceberg and Spark, evolved field by field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.types import (
    DecimalType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
)

from icebergsync.errors import IncompatibleSchemaError
from icebergsync.schema import iceberg_schema, iceberg_type, plan_evolution, spark_type
from icebergsync.spec import Column
from icebergsync.types.grammar import (
    MAX_DEPTH,
    PRIMITIVE_TYPES,
    ArrayOf,
    Decimal,
    MapOf,
    Primitive,
    SpecType,
    StructField,
    StructOf,
    TypeSyntaxError,
    is_primitive,
    parse_type,
)

_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True) | st.from_regex(r"[a-z][a-z -]{0,5}[a-z]",
                                                                                       fullmatch=True)
_primitives = st.sampled_from(PRIMITIVE_TYPES).map(Primitive) | st.builds(
    lambda p, s: Decimal(p, min(s, p)), st.integers(1, 38), st.integers(0, 38))


def _nested(children: st.SearchStrategy[SpecType]) -> st.SearchStrategy[SpecType]:
    fields = st.lists(st.tuples(_names, children, st.booleans()), min_size=1, max_size=4,
                      unique_by=lambda f: f[0]).map(lambda fs: StructOf(tuple(StructField(*f) for f in fs)))
    return st.one_of(children.map(ArrayOf), st.builds(MapOf, _primitives, children), fields)


spec_types = st.recursive(_primitives, _nested, max_leaves=12)


@given(spec_types)
def test_any_type_written_back_parses_to_itself(spec_type: SpecType) -> None:
    assert parse_type(str(spec_type)) == spec_type


@given(spec_types)
def test_nested_field_ids_are_numbered_as_icebergs_own_assignment_does(spec_type: SpecType) -> None:
    columns = [Column(name="id", type="long"), Column.model_construct(name="c", type=str(spec_type), required=False)]
    schema = iceberg_schema(columns)
    fresh = assign_fresh_schema_ids(schema)
    assert schema == fresh


def test_whitespace_case_and_quoted_names() -> None:
    parsed = parse_type("struct< id :long NOT NULL , `user-agent` : string, tags: array< decimal( 8 , 2 ) > >")
    assert parsed == StructOf((StructField("id", Primitive("long"), True), StructField("user-agent", Primitive("string")),
                               StructField("tags", ArrayOf(Decimal(8, 2)))))
    assert str(parsed) == "struct<id: long not null, `user-agent`: string, tags: array<decimal(8,2)>>"
    assert is_primitive("decimal(8,2)") and not is_primitive("map<string, long>")


@pytest.mark.parametrize(("text", "expected"), [
    ("integer", "expected a type (boolean, int"),
    ("array<>", "expected a type"),
    ("array<int", "expected '>' at position 10, found 'the end'"),
    ("map<array<int>, long>", "a primitive map key"),
    ("map<string>", "expected ','"),
    ("struct<>", "expected a field name"),
    ("struct<a: int, a: long>", "struct field 'a' is declared twice"),
    ("struct<a int>", "expected ':'"),
    ("struct<`a.b`: int>", "expected a field name"),
    ("decimal(39,2)", "needs 1 <= precision <= 38"),
    ("decimal(4,6)", "scale <= precision"),
    ("long long", "expected end of the type"),
    ("array<" * (MAX_DEPTH + 1) + "int" + ">" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
])
def test_a_bad_type_says_where_and_what_was_expected(text: str, expected: str) -> None:
    with pytest.raises(TypeSyntaxError, match=None) as caught:
        parse_type(text)
    assert expected in str(caught.value)


def test_nested_types_in_iceberg_and_spark() -> None:
    text = "struct<id: long not null, items: array<struct<sku: string, qty: int>>, attrs: map<string, decimal(9,2)>>"
    assert iceberg_type(text, 10) == StructType(
        NestedField(10, "id", LongType(), required=True),
        NestedField(11, "items", ListType(13, StructType(NestedField(14, "sku", StringType(), required=False),
                                                         NestedField(15, "qty", IntegerType(), required=False)),
                                          element_required=False), required=False),
        NestedField(12, "attrs", MapType(16, StringType(), 17, DecimalType(9, 2), value_required=False),
                    required=False))
    assert spark_type(text) == ("struct<`id`:bigint NOT NULL,`items`:array<struct<`sku`:string,`qty`:int>>,"
                                "`attrs`:map<string,decimal(9,2)>>")


def _table(*columns: Column) -> Schema:
    return assign_fresh_schema_ids(iceberg_schema(list(columns)))


def test_nested_fields_evolve_by_path_and_keep_their_ids() -> None:
    table = _table(Column.model_construct(name="e", required=False, type=(
        "struct<id: int not null, tags: array<int>, m: map<string, int>>")))
    declared = [Column.model_construct(name="e", required=False, type=(
        "struct<id: long, tags: array<long>, m: map<string, long>, more: struct<x: string>>"))]
    changes = {(c.kind, c.column): c.new_type for c in plan_evolution(table, declared, "t")}
    added = changes.pop(("add", "e.more"))  # its field ids: any (the catalog assigns fresh ones)
    assert isinstance(added, StructType) and [(f.name, f.field_type, f.required) for f in added.fields] == [
        ("x", StringType(), False)]
    assert changes == {("widen", "e.id"): LongType(), ("make-optional", "e.id"): None,
                       ("widen", "e.tags.element"): LongType(), ("widen", "e.m.value"): LongType()}
    assert plan_evolution(table, [Column.model_construct(name="e", required=False, type=(
        "struct<id: int not null, tags: array<int>, m: map<string, int>>"))], "t") == []


@pytest.mark.parametrize(("declared", "problem"), [
    ("struct<tags: array<int>, m: map<string, int>>", "required field 'e.id' of the table is missing from the spec"),
    ("struct<id: int not null, tags: array<int>, m: map<string, int>, n: int not null>",
     "new field 'e.n' is required: new fields must be optional"),
    ("struct<id: int not null, tags: array<string>, m: map<string, int>>",
     "column 'e.tags': list<int> cannot change to list<string>"),
    ("struct<id: int not null, tags: array<int>, m: map<long, int>>", "column 'e.m': map key string cannot change"),
    ("struct<id: string not null, tags: array<int>, m: map<string, int>>", "column 'e.id': int cannot change to string"),
    ("map<string, int>", "cannot change to map<string, int>"),
])
def test_unsafe_nested_changes_are_named(declared: str, problem: str) -> None:
    table = _table(Column.model_construct(name="e", required=False, type=(
        "struct<id: int not null, tags: array<int>, m: map<string, int>>")))
    with pytest.raises(IncompatibleSchemaError) as caught:
        plan_evolution(table, [Column.model_construct(name="e", type=declared, required=False)], "t")
    assert problem in str(caught.value)
