"""Spec columns as Iceberg, Arrow and Spark types, and the safe-evolution rules for a table."""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    LongType,
    NestedField,
    PrimitiveType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from icebergsync.errors import IncompatibleSchemaError
from icebergsync.spec import Column

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

def iceberg_type(type_name: str) -> PrimitiveType:
    """Map a spec type name (``long``, ``decimal(10,2)`` …) to an Iceberg type."""
    decimal = re.fullmatch(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)", type_name)
    if decimal:
        return DecimalType(int(decimal.group(1)), int(decimal.group(2)))
    return _ICEBERG_TYPES[type_name]


def spark_type(type_name: str) -> str:
    """Map a spec type name to Spark SQL DDL."""
    if type_name.startswith("decimal"):
        return type_name.replace(" ", "")
    return _SPARK_TYPES[type_name]


def iceberg_schema(columns: list[Column]) -> Schema:
    """An Iceberg schema for new tables (ids 1..n; the catalog may reassign them)."""
    return Schema(
        *[
            NestedField(field_id=index, name=column.name, field_type=iceberg_type(column.type), required=column.required)
            for index, column in enumerate(columns, start=1)
        ]
    )


def spark_ddl(columns: list[Column]) -> str:
    """Spark DDL (``a bigint, b string``) for decoding records into the declared columns."""
    return ", ".join(f"`{column.name}` {spark_type(column.type)}" for column in columns)


@dataclass(frozen=True)
class SchemaChange:
    """One safe evolution step to apply before the first commit of a new version."""

    kind: str  # "add" | "widen" | "make-optional"
    column: str
    new_type: IcebergType | None = None

    def describe(self) -> str:
        return f"{self.kind} {self.column}" + (f" -> {self.new_type}" if self.new_type else "")


def widens(old: IcebergType, new: IcebergType) -> bool:
    """True when Iceberg can change a column of type ``old`` to ``new`` (equal, or int→long, float→double, a
    decimal's precision up at the same scale)."""
    if old == new:
        return True
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
        new_type: IcebergType = iceberg_type(column.type)
        field = existing.get(column.name)
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
        elif field.field_type != new_type:
            changes.append(SchemaChange("widen", column.name, new_type))
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
