"""Safe schema evolution: add optional columns and widen types; refuse everything else, naming it."""

from __future__ import annotations

import re

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import DecimalType, DoubleType, IntegerType, ListType, LongType, NestedField, StringType

from icebergsync.errors import IncompatibleSchemaError
from icebergsync.schema import iceberg_schema, plan_evolution, spark_ddl, spark_type
from icebergsync.spec import Column

BASE = [
    Column(name="id", type="long", required=True),
    Column(name="n", type="int"),
    Column(name="x", type="float"),
    Column(name="amount", type="decimal(10,2)"),
    Column(name="note", type="string"),
]


def test_no_change() -> None:
    assert plan_evolution(iceberg_schema(BASE), BASE, "t") == []


def test_add_optional_and_widen() -> None:
    evolved = [
        Column(name="id", type="long", required=True),
        Column(name="n", type="long"),
        Column(name="x", type="double"),
        Column(name="amount", type="decimal(12,2)"),
        Column(name="note", type="string"),
        Column(name="extra", type="string"),
    ]
    changes = {(c.kind, c.column): c.new_type for c in plan_evolution(iceberg_schema(BASE), evolved, "t")}
    assert changes == {
        ("widen", "n"): LongType(),
        ("widen", "x"): DoubleType(),
        ("widen", "amount"): DecimalType(12, 2),
        ("add", "extra"): StringType(),
    }


def test_relaxing_required_is_allowed_and_dropping_optional_keeps_it() -> None:
    relaxed = [Column(name="id", type="long"), Column(name="n", type="int")]
    changes = plan_evolution(iceberg_schema(BASE), relaxed, "t")
    assert [(c.kind, c.column) for c in changes] == [("make-optional", "id")]


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ([Column(name="n", type="int")], "required column 'id' of the table is missing"),
        ([*BASE[:1], Column(name="n", type="string")], "column 'n': int cannot change to string"),
        ([Column(name="id", type="int", required=True)], "column 'id': long cannot change to int"),
        ([*BASE, Column(name="must", type="long", required=True)], "new column 'must' is required"),
        ([*BASE[:1], Column(name="n", type="int", required=True)], "'n' is optional in the table and cannot become required"),
        ([*BASE[:3], Column(name="amount", type="decimal(10,3)")], "decimal(10, 2) cannot change to decimal(10, 3)"),
    ],
)
def test_incompatible_changes_are_named(columns: list[Column], message: str) -> None:
    with pytest.raises(IncompatibleSchemaError, match=None) as caught:
        plan_evolution(iceberg_schema(BASE), columns, "demo.t")
    assert message in str(caught.value)
    assert "demo.t" in str(caught.value)


ARRAYS = [Column(name="id", type="long", required=True), Column(name="tags", type="array<string>"),
          Column(name="n", type="array<int>"), Column(name="prices", type="array< decimal(8, 2) >")]


def test_array_columns_are_lists_of_optional_elements_with_ids_after_the_top_level_ones() -> None:
    schema = iceberg_schema(ARRAYS)
    assert [(f.field_id, f.name) for f in schema.fields] == [(1, "id"), (2, "tags"), (3, "n"), (4, "prices")]
    lists = [schema.find_field(name).field_type for name in ("tags", "n", "prices")]
    assert lists == [ListType(5, StringType(), element_required=False), ListType(6, IntegerType(), False),
                     ListType(7, DecimalType(8, 2), False)]
    assert spark_ddl(ARRAYS) == "`id` bigint, `tags` array<string>, `n` array<int>, `prices` array<decimal(8,2)>"
    assert spark_type("array<timestamp>") == "array<timestamp_ntz>"
    assert plan_evolution(schema, ARRAYS, "t") == []


def test_array_columns_evolve_by_their_elements() -> None:
    """An array is added whole; its element widens (the change names ``<column>.element``, whatever its field id)."""
    table = iceberg_schema(ARRAYS[:3])
    evolved = [ARRAYS[0], ARRAYS[1], Column(name="n", type="array<long>"), ARRAYS[3]]
    changes = {(c.kind, c.column): c.new_type for c in plan_evolution(table, evolved, "t")}
    added = changes.pop(("add", "prices"))  # its element's id: any (the catalog assigns a fresh one)
    assert changes == {("widen", "n.element"): LongType()}
    assert isinstance(added, ListType) and added.element_type == DecimalType(8, 2) and not added.element_required
    followed = plan_evolution(iceberg_schema(evolved), ARRAYS, "t", followed=True)  # the table is wider already
    assert followed == []
    required_elements = Schema(NestedField(1, "id", LongType(), required=True),
                               NestedField(2, "n", ListType(9, IntegerType(), element_required=True)))
    assert {(c.kind, c.column): c.new_type for c in plan_evolution(required_elements, ARRAYS[:1] + ARRAYS[2:3], "t")} \
        == {("make-optional", "n.element"): None}
    for narrowed, message in [(Column(name="n", type="array<string>"), "list<int> cannot change to list<string>"),
                              (Column(name="n", type="int"), "list<int> cannot change to int"),
                              (Column(name="tags", type="string"), "list<string> cannot change to string")]:
        with pytest.raises(IncompatibleSchemaError, match=re.escape(message)):
            plan_evolution(table, [ARRAYS[0], narrowed], "t")
