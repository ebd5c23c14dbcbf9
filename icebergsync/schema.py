"""Spec columns as Iceberg, Arrow and Spark types, and the safe-evolution rules for a table."""

from __future__ import annotations

import re
from dataclasses import dataclass
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
    NestedField,
    PrimitiveType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from icebergsync.errors import IncompatibleSchemaError
from icebergsync.spec import Column, element_type

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

def iceberg_type(type_name: str, element_id: int = 0) -> IcebergType:
    """Map a spec type name (``long``, ``decimal(10,2)``, ``array<string>`` …) to an Iceberg type; an array's
    element (optional) gets ``element_id`` (a catalog assigns fresh ids to a new table or column)."""
    element = element_type(type_name)
    if element is not None:
        return ListType(element_id=element_id, element_type=_primitive(element), element_required=False)
    return _primitive(type_name)


def _primitive(type_name: str) -> PrimitiveType:
    decimal = re.fullmatch(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)", type_name)
    if decimal:
        return DecimalType(int(decimal.group(1)), int(decimal.group(2)))
    return _ICEBERG_TYPES[type_name]


def spark_type(type_name: str) -> str:
    """Map a spec type name to Spark SQL DDL."""
    element = element_type(type_name)
    if element is not None:
        return f"array<{spark_type(element)}>"
    if type_name.startswith("decimal"):
        return type_name.replace(" ", "")
    return _SPARK_TYPES[type_name]


def iceberg_schema(columns: list[Column]) -> Schema:
    """An Iceberg schema for new tables (ids 1..n, array elements' ids after them; the catalog may reassign them)."""
    fields = []
    next_id = len(columns) + 1
    for index, column in enumerate(columns, start=1):
        field_type = iceberg_type(column.type, next_id)
        next_id += isinstance(field_type, ListType)
        fields.append(NestedField(field_id=index, name=column.name, field_type=field_type, required=column.required))
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
    column: str  # an array's element: "<column>.element"
    new_type: IcebergType | None = None
    default: Any = None

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
    decimal's precision up at the same scale; an array's elements likewise, whatever their field ids)."""
    if old == new:
        return True
    if isinstance(old, ListType) and isinstance(new, ListType):
        return old.element_required >= new.element_required and widens(old.element_type, new.element_type)
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
    """Return the changes that bring ``table_schema`` to the declared columns.

    Raises ``IncompatibleSchemaError`` naming every unsafe difference: a required column that the
    spec drops, a narrowed or changed type, an optional column made required, a new required column.
    With ``followed`` (the table follows the source's schema, ``spec.schemaEvolution: evolve``) a column
    the source widened, or made optional by dropping it, is what the spec declared: not a difference.
    """
    existing = {field.name: field for field in table_schema.fields}
    declared = {column.name for column in columns}
    changes: list[SchemaChange] = []
    problems: list[str] = []
    for column in columns:
        field = existing.get(column.name)
        element_id = field.field_type.element_id if field is not None and isinstance(field.field_type, ListType) else 0
        new_type: IcebergType = iceberg_type(column.type, element_id)
        if field is None:
            if column.required:
                problems.append(f"new column {column.name!r} is required: new columns must be optional")
            else:
                changes.append(SchemaChange("add", column.name, new_type))
            continue
        if followed and widens(new_type, field.field_type):
            new_type = field.field_type
        if not widens(field.field_type, new_type):
            problems.append(f"column {column.name!r}: {field.field_type} cannot change to {new_type} (only widening)")
        elif isinstance(field.field_type, ListType) and isinstance(new_type, ListType):
            if field.field_type.element_type != new_type.element_type:
                changes.append(widening(column.name, new_type))
            if field.field_type.element_required:  # another writer's list: the sync writes null elements
                changes.append(SchemaChange("make-optional", f"{column.name}.element"))
        elif field.field_type != new_type:
            changes.append(widening(column.name, new_type))
        if column.required and not field.required and not followed:
            problems.append(f"column {column.name!r} is optional in the table and cannot become required")
        elif field.required and not column.required:
            changes.append(SchemaChange("make-optional", column.name))
    for name, field in existing.items():
        if name not in declared and field.required:
            problems.append(f"required column {name!r} of the table is missing from the spec")
    if problems:
        raise IncompatibleSchemaError(
            f"schema of {table_name} cannot evolve to the spec's schema: " + "; ".join(problems)
        )
    return changes
