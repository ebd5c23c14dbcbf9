"""Spec columns as Iceberg, Arrow and Spark types, and the safe-evolution rules for a table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    PrimitiveType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from icebergsync.errors import IncompatibleSchemaError
from icebergsync.spec import Column
from icebergsync.types.grammar import ArrayOf, MapOf, Primitive, SpecType, parse_type
from icebergsync.types.grammar import Decimal as SpecDecimal

_ICEBERG_TYPES: dict[str, PrimitiveType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "string": StringType(),
    "binary": BinaryType(),
    "date": DateType(),
    "timestamp": TimestampType(),
    "timestamptz": TimestamptzType(),
}
_SPARK_TYPES = {
    "boolean": "boolean", "int": "int", "long": "bigint", "float": "float", "double": "double",
    "string": "string", "binary": "binary", "date": "date", "timestamp": "timestamp_ntz",
    "timestamptz": "timestamp",
}

def iceberg_type(type_name: str, first_id: int = 1) -> IcebergType:
    """Map a spec type name (``long``, ``decimal(10,2)``, ``array<string>``, ``struct<…>`` …) to an Iceberg type.

    The fields of nested types (struct fields, array elements, map keys and values) get ids from ``first_id`` on
    in Iceberg's order (a struct's fields, then what each holds); a catalog assigns fresh ids to a new table or
    column anyway. Struct fields are optional unless ``not null``, elements and map values optional, keys
    required."""
    return _IdAssigner(first_id).convert(parse_type(type_name))


class _IdAssigner:
    """Converts a parsed spec type to Iceberg's, numbering nested fields breadth-first per level, as
    ``pyiceberg.schema.assign_fresh_schema_ids`` does."""

    def __init__(self, next_id: int) -> None:
        self.next_id = next_id

    def take(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def convert(self, spec_type: SpecType) -> IcebergType:
        if isinstance(spec_type, Primitive):
            return _ICEBERG_TYPES[spec_type.name]
        if isinstance(spec_type, SpecDecimal):
            return DecimalType(spec_type.precision, spec_type.scale)
        if isinstance(spec_type, ArrayOf):
            element_id = self.take()
            return ListType(element_id=element_id, element_type=self.convert(spec_type.element), element_required=False)
        if isinstance(spec_type, MapOf):
            key_id, value_id = self.take(), self.take()
            return MapType(key_id=key_id, key_type=self.convert(spec_type.key), value_id=value_id,
                           value_type=self.convert(spec_type.value), value_required=False)
        ids = [self.take() for _ in spec_type.fields]
        return StructType(*[NestedField(field_id, field.name, self.convert(field.type), required=field.required)
                            for field_id, field in zip(ids, spec_type.fields, strict=True)])


def spark_type(type_name: str) -> str:
    """Map a spec type name to Spark SQL DDL."""
    return _spark(parse_type(type_name))


def _spark(spec_type: SpecType) -> str:
    if isinstance(spec_type, Primitive):
        return _SPARK_TYPES[spec_type.name]
    if isinstance(spec_type, SpecDecimal):
        return str(spec_type)
    if isinstance(spec_type, ArrayOf):
        return f"array<{_spark(spec_type.element)}>"
    if isinstance(spec_type, MapOf):
        return f"map<{_spark(spec_type.key)},{_spark(spec_type.value)}>"
    return "struct<" + ",".join(f"`{field.name}`:{_spark(field.type)}" + (" NOT NULL" if field.required else "")
                                for field in spec_type.fields) + ">"


def iceberg_schema(columns: list[Column]) -> Schema:
    """An Iceberg schema for new tables: columns 1..n, their nested fields' ids after them (the catalog may
    reassign them)."""
    fields = []
    ids = _IdAssigner(len(columns) + 1)
    for index, column in enumerate(columns, start=1):
        fields.append(NestedField(field_id=index, name=column.name, field_type=ids.convert(parse_type(column.type)),
                                  required=column.required))
    return Schema(*fields)


def spark_ddl(columns: list[Column]) -> str:
    """Spark DDL (``a bigint, b string``) for decoding records into the declared columns."""
    return ", ".join(f"`{column.name}` {spark_type(column.type)}" for column in columns)


@dataclass(frozen=True)
class SchemaChange:
    """One safe evolution step to apply before the first commit of a new version.

    ``default`` (an ``add`` on a format-version 3 table): the new column's initial-default and write-default, in
    pyiceberg's form for its type (an int, float, bool, str, bytes, a ``Decimal`` at the column's scale, epoch days
    for a date, µs for a timestamp); rows written before the column existed read it. None: no default."""

    kind: str  # "add" | "widen" | "make-optional"
    column: str  # a nested field's path: "<column>.<field>", an array's element "<column>.element", a map's value "<column>.value"
    new_type: IcebergType | None = None
    default: Any = None

    @property
    def path(self) -> tuple[str, ...]:
        """The column's path as pyiceberg's schema updates take it (``("event", "ts")`` for ``event.ts``)."""
        return tuple(self.column.split("."))

    def describe(self) -> str:
        return (f"{self.kind} {self.column}" + (f" -> {self.new_type}" if self.new_type else "")
                + (f" default {self.default!r}" if self.default is not None else ""))


def widening(column: str, new_type: IcebergType) -> SchemaChange:
    """The change that widens ``column`` to ``new_type`` (an array's: of its element, ``<column>.element``)."""
    if isinstance(new_type, ListType):
        return SchemaChange("widen", f"{column}.element", new_type.element_type)
    return SchemaChange("widen", column, new_type)


def widens(old: IcebergType, new: IcebergType) -> bool:
    """True when Iceberg can change a column of type ``old`` to ``new`` (equal, or int→long, float→double, a
    decimal's precision up at the same scale; an array's elements, a map's values and a struct's fields likewise,
    whatever their field ids; a struct keeps its fields and their order)."""
    if old == new:
        return True
    if isinstance(old, ListType) and isinstance(new, ListType):
        return old.element_required >= new.element_required and widens(old.element_type, new.element_type)
    if isinstance(old, MapType) and isinstance(new, MapType):
        return (old.key_type == new.key_type and old.value_required >= new.value_required
                and widens(old.value_type, new.value_type))
    if isinstance(old, StructType) and isinstance(new, StructType):
        return [f.name for f in old.fields] == [f.name for f in new.fields] and all(
            o.required >= n.required and widens(o.field_type, n.field_type)
            for o, n in zip(old.fields, new.fields, strict=True))
    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return True
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    return (
        isinstance(old, DecimalType)
        and isinstance(new, DecimalType)
        and new.scale == old.scale
        and new.precision >= old.precision
    )


def plan_evolution(table_schema: Schema, columns: list[Column], table_name: str,
                   followed: bool = False) -> list[SchemaChange]:
    """Return the changes that bring ``table_schema`` to the declared columns, nested fields included (a
    struct field's path is ``column.field``, an array's element ``column.element``, a map's value ``column.value``;
    existing fields keep their ids).

    Raises ``IncompatibleSchemaError`` naming every unsafe difference: a required column or field that the
    spec drops, a narrowed or changed type, an optional column made required, a new required column or field.
    With ``followed`` (the table follows the source's schema, ``spec.schemaEvolution: evolve``) a column
    the source widened, or made optional by dropping it, is what the spec declared: not a difference.
    """
    plan = _EvolutionPlan(followed)
    plan.fields("", table_schema.as_struct(), StructType(*iceberg_schema(columns).fields), top_level=True)
    if plan.problems:
        raise IncompatibleSchemaError(
            f"schema of {table_name} cannot evolve to the spec's schema: " + "; ".join(plan.problems)
        )
    return plan.changes


def type_changes(column: str, old: IcebergType, new: IcebergType, table_name: str) -> list[SchemaChange]:
    """The changes that take ``column`` of type ``old`` to ``new`` (a followed source's wider type: nested fields
    added, widened or made optional by path); ``IncompatibleSchemaError`` when Iceberg cannot."""
    plan = _EvolutionPlan(followed=True)
    plan.type(column, old, new)
    if plan.problems:
        raise IncompatibleSchemaError(f"{table_name} cannot follow the source's schema: " + "; ".join(plan.problems))
    return plan.changes


@dataclass
class _EvolutionPlan:
    """The changes and problems found comparing a table's type with the declared one, field by field."""

    followed: bool
    changes: list[SchemaChange] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def fields(self, prefix: str, existing: StructType, declared: StructType, top_level: bool = False) -> None:
        """Compare the fields of a struct (the table's columns at the top level)."""
        what = "column" if top_level else "field"
        old_fields = {f.name: f for f in existing.fields}
        for new in declared.fields:
            path = prefix + new.name
            old = old_fields.get(new.name)
            if old is None:
                if new.required:
                    self.problems.append(f"new {what} {path!r} is required: new {what}s must be optional")
                else:
                    self.changes.append(SchemaChange("add", path, new.field_type))
                continue
            self.type(path, old.field_type, new.field_type)
            if new.required and not old.required and not self.followed:
                self.problems.append(f"{what} {path!r} is optional in the table and cannot become required")
            elif old.required and not new.required:
                self.changes.append(SchemaChange("make-optional", path))
        declared_names = {f.name for f in declared.fields}
        for name, old in old_fields.items():
            if name not in declared_names and old.required:
                self.problems.append(f"required {what} {prefix + name!r} of the table is missing from the spec")

    def type(self, path: str, old: IcebergType, new: IcebergType) -> None:
        """Compare the types of one column or nested field."""
        if isinstance(old, StructType) and isinstance(new, StructType):
            self.fields(path + ".", old, new)
        elif _flat_mismatch(old, new):  # a list or map of primitives: named whole
            self.problems.append(f"column {path!r}: {old} cannot change to {new} (only widening)")
        elif isinstance(old, ListType) and isinstance(new, ListType):
            self.type(f"{path}.element", old.element_type, new.element_type)
            if old.element_required:  # another writer's list: the sync writes null elements
                self.changes.append(SchemaChange("make-optional", f"{path}.element"))
        elif isinstance(old, MapType) and isinstance(new, MapType):
            if old.key_type != new.key_type:
                self.problems.append(f"column {path!r}: map key {old.key_type} cannot change to {new.key_type}")
            self.type(f"{path}.value", old.value_type, new.value_type)
            if old.value_required:
                self.changes.append(SchemaChange("make-optional", f"{path}.value"))
        elif isinstance(old, PrimitiveType) and isinstance(new, PrimitiveType):
            if old == new or (self.followed and widens(new, old)):
                return
            if widens(old, new):
                self.changes.append(SchemaChange("widen", path, new))
            else:
                self.problems.append(f"column {path!r}: {old} cannot change to {new} (only widening)")
        else:
            self.problems.append(f"column {path!r}: {old} cannot change to {new} (only widening)")


def _flat_mismatch(old: IcebergType, new: IcebergType) -> bool:
    """Two lists, or two maps, of primitives whose elements (values) do not widen."""
    if isinstance(old, ListType) and isinstance(new, ListType):
        pairs = [(old.element_type, new.element_type)]
    elif isinstance(old, MapType) and isinstance(new, MapType):
        pairs = [(old.value_type, new.value_type)]
    else:
        return False
    return all(isinstance(o, PrimitiveType) and isinstance(n, PrimitiveType) for o, n in pairs) and not all(
        widens(o, n) or widens(n, o) for o, n in pairs)
