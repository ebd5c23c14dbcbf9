"""The table's columns as the decoder sees them, and a trigger's drift as schema changes to commit."""

from __future__ import annotations

from pyiceberg.schema import Schema
from pyiceberg.types import DecimalType, ListType, PrimitiveType

from icebergsync.errors import IncompatibleSchemaError
from icebergsync.schema import SchemaChange, iceberg_type, widening
from icebergsync.spec import KEY_TYPES_REFUSED, PRIMITIVE_TYPES, Column, element_type
from spark_app.schema_drift.drift import SchemaDrift


def _type_name(field_type: object) -> str | None:
    if isinstance(field_type, ListType):  # one whose elements are required (another writer's) is not written
        element = None if field_type.element_required else _type_name(field_type.element_type)
        return f"array<{element}>" if element is not None else None
    if isinstance(field_type, DecimalType):
        return f"decimal({field_type.precision},{field_type.scale})"
    return next((name for name in PRIMITIVE_TYPES if isinstance(field_type, PrimitiveType)
                 and iceberg_type(name) == field_type), None)


def table_columns(schema: Schema, table_name: str) -> list[Column]:
    """The columns of a table schema as spec columns (what a sync following the source decodes into).

    An optional column of a type IcebergSync does not write (nested, ``time``, ``uuid``: another engine's)
    is left out: the sync's rows hold null there, as they do in any column its records lack. A required
    one stops the sync: its rows could not be written.
    """
    columns, unwritable = [], []
    for field in schema.fields:
        type_name = _type_name(field.field_type)
        if type_name is not None:
            columns.append(Column(name=field.name, type=type_name, required=field.required))
        elif field.required:
            unwritable.append(f"{field.name} ({field.field_type})")
    if unwritable:
        raise IncompatibleSchemaError(f"{table_name} has required column(s) of types IcebergSync does not write: "
                                      f"{', '.join(unwritable)}")
    return columns


def new_table_columns(drift: SchemaDrift, table_name: str, key: list[str]) -> list[Column]:
    """The columns of a new table from the drift of its first records against no columns (the key required)."""
    problems = list(drift.problems.values())
    if not drift.adds:
        problems.append("its first records carry no Kafka Connect schema (declare spec.schema, or send the records "
                        "with their schema: value.converter.schemas.enable=true)")
    for name in key:
        if drift.adds and name not in drift.adds:
            problems.append(f"key column {name!r} (spec.table.key) is not in the records")
        elif drift.adds.get(name) in KEY_TYPES_REFUSED or element_type(drift.adds.get(name, "")):
            problems.append(f"key column {name!r} is {drift.adds[name]}; a key column cannot be float, double or "
                            "an array")
    if problems:
        raise IncompatibleSchemaError(f"spec.schema is empty and {table_name} cannot be created: " + "; ".join(problems))
    return [Column(name=name, type=kind, required=name in key) for name, kind in drift.adds.items()]


def schema_changes(drift: SchemaDrift, table_name: str) -> list[SchemaChange]:
    """The changes that let ``table_name`` take a trigger's records; ``IncompatibleSchemaError`` naming each
    column when some change is one Iceberg cannot express (nothing is committed then)."""
    if drift.problems:
        raise IncompatibleSchemaError(
            f"the source's schema changed in a way {table_name} cannot follow: "
            + "; ".join(drift.problems[name] for name in sorted(drift.problems))
            + ". Nothing of this trigger was committed; see docs/connectors.md, \"Schema changes from the source\""
        )
    return ([SchemaChange("add", name, iceberg_type(kind)) for name, kind in drift.adds.items()]
            + [widening(name, iceberg_type(kind)) for name, kind in sorted(drift.widens.items())]
            + [SchemaChange("make-optional", name) for name in sorted(drift.optional)])
