"""The table's columns as the decoder sees them, and a trigger's drift as schema changes to commit."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from decimal import Context, Decimal
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import DecimalType, ListType, MapType, PrimitiveType, StructType

from icebergsync.errors import IncompatibleSchemaError
from icebergsync.schema import SchemaChange, iceberg_type, type_changes, widening
from icebergsync.spec import KEY_TYPES_REFUSED, Column, element_type
from icebergsync.types.grammar import PRIMITIVE_TYPES, StructField, StructOf, is_primitive, parse_type
from spark_app.decoding.changes import Logical, decode_value
from spark_app.decoding.schema_drift.connect_types import MAX_DECIMAL_PRECISION
from spark_app.decoding.schema_drift.drift import SchemaDrift

log = logging.getLogger("icebergsync.job")

# What Debezium's PostgreSQL connector sends as a column's default when it cannot evaluate the expression (now(),
# current_date, nextval(), gen_random_uuid(), random(), md5(…)): the zero of the type (0, false, "", the epoch, the
# nil UUID). A default equal to one of these cannot be told from such a placeholder, so it is never used.
_NIL_UUID = "00000000-0000-0000-0000-000000000000"


def _type_name(field_type: object) -> str | None:
    """The spec type of an Iceberg type the sync writes, or None (``time``, ``uuid``, a list or map whose elements
    or values are required: another engine's)."""
    if isinstance(field_type, ListType):
        element = None if field_type.element_required else _type_name(field_type.element_type)
        return f"array<{element}>" if element is not None else None
    if isinstance(field_type, MapType):
        key, value = _type_name(field_type.key_type), _type_name(field_type.value_type)
        return f"map<{key}, {value}>" if key and value and not field_type.value_required else None
    if isinstance(field_type, StructType):
        fields = [(field, _type_name(field.field_type)) for field in field_type.fields]
        if any(name is None for _, name in fields):
            return None
        return str(StructOf(tuple(StructField(field.name, parse_type(name or ""), field.required)
                                  for field, name in fields)))
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
        elif drift.adds.get(name) in KEY_TYPES_REFUSED or (name in drift.adds and not is_primitive(drift.adds[name])):
            problems.append(f"key column {name!r} is {drift.adds[name]}; a key column cannot be float, double, an "
                            "array, a map or a struct")
    if problems:
        raise IncompatibleSchemaError(f"spec.schema is empty and {table_name} cannot be created: " + "; ".join(problems))
    return [Column(name=name, type=kind, required=name in key) for name, kind in drift.adds.items()]


def default_value(type_name: str, field: Mapping[str, Any]) -> Any:
    """The ``default`` of a Connect field schema as a value of a column of spec type ``type_name``, in pyiceberg's
    form; ``ValueError`` when it does not convert exactly.

    The default is decoded exactly as the field's values are (spark_app/decoding/changes.py: a Connect ``Decimal`` is
    base64 of the unscaled value at the schema's scale, a Debezium ``Date`` epoch days, a ``MicroTimestamp`` µs, a
    ``ZonedTimestamp`` ISO text), then given as pyiceberg takes it (a decimal at the column's scale)."""
    if not is_primitive(type_name):
        raise ValueError("array, map and struct columns take no default")
    name, parameters = field.get("name"), field.get("parameters")
    logical = Logical(name, parameters if isinstance(parameters, dict) else {}) if isinstance(name, str) else None
    column = Column.model_construct(name=str(field.get("field", "default")), type=type_name)  # any source name
    value = decode_value(column, field.get("default"), logical)
    if isinstance(value, Decimal):
        column_type = iceberg_type(type_name)
        assert isinstance(column_type, DecimalType)
        # exact: the decoder refused rounding, and 38 digits fit the context's precision
        value = value.quantize(Decimal(1).scaleb(-column_type.scale), context=Context(prec=MAX_DECIMAL_PRECISION + 2))
    return value


def connect_default(type_name: str, field: Mapping[str, Any]) -> tuple[Any, str]:
    """(the initial-default a new column of spec type ``type_name`` gets from its Connect field schema, ""), or
    (None, why it gets none).

    None: the schema has no default, it does not convert exactly (:func:`default_value`), the column is a decimal
    (Spark's Iceberg reader fails on it), or it is the zero of its type, which is also Debezium's placeholder for a
    default it cannot evaluate (docs/connectors.md, "Schema changes from the source")."""
    if field.get("default") is None:
        return None, "the source sends no default"
    try:
        value = default_value(type_name, field)
    except ValueError as exc:
        return None, f"it does not convert exactly: {exc}"
    if value in ("", b"", _NIL_UUID) or (not isinstance(value, str | bytes) and value == 0):
        return None, ("it is the zero of its type, which Debezium also sends for a default it cannot evaluate "
                      "(now(), current_date, nextval(), gen_random_uuid(), …)")
    if isinstance(value, Decimal):
        return None, ("Apache Iceberg's Spark runtime 1.10.1 fails to read a decimal column with a default with its "
                      "vectorized reader, apache/iceberg#16502")
    return value, ""


def _added(name: str, kind: str, drift: SchemaDrift, table_name: str, format_version: int) -> SchemaChange:
    """The change adding ``name``, with the source's default as its initial-default when the table can hold one."""
    field = drift.defaults.get(name)
    if field is None:
        return SchemaChange("add", name, iceberg_type(kind))
    shown = repr(field.get("default"))[:80]
    if format_version < 3:
        log.warning("%s: new column %r has a default at the source (%s); a format-version %d table cannot hold it "
                    "(initial-default needs format-version 3): rows written before the column was added read null "
                    "there", table_name, name, shown, format_version)
        return SchemaChange("add", name, iceberg_type(kind))
    default, why = connect_default(kind, field)
    if why:
        log.warning("%s: new column %r: the source's default %s is not used as its initial-default (%s); rows "
                    "written before the column was added read null there", table_name, name, shown, why)
    return SchemaChange("add", name, iceberg_type(kind), default)


def schema_changes(drift: SchemaDrift, table_name: str, format_version: int = 2,
                   current: Schema | None = None) -> list[SchemaChange]:
    """The changes that let ``table_name`` take a trigger's records; ``IncompatibleSchemaError`` naming each
    column when some change is one Iceberg cannot express (nothing is committed then).

    On a ``format_version`` 3 table a new column whose Connect schema carries a default that converts exactly
    gets it as its initial-default and write-default (:func:`connect_default`). A widened struct or map column
    changes field by field against its type in ``current`` (the table's schema)."""
    if drift.problems:
        raise IncompatibleSchemaError(
            f"the source's schema changed in a way {table_name} cannot follow: "
            + "; ".join(drift.problems[name] for name in sorted(drift.problems))
            + ". Nothing of this trigger was committed; see docs/connectors.md, \"Schema changes from the source\""
        )
    return ([_added(name, kind, drift, table_name, format_version) for name, kind in drift.adds.items()]
            + [change for name, kind in sorted(drift.widens.items()) for change in _widened(name, kind, current, table_name)]
            + [SchemaChange("make-optional", name) for name in sorted(drift.optional)])


def _widened(name: str, kind: str, current: Schema | None, table_name: str) -> list[SchemaChange]:
    """The changes widening column ``name`` to spec type ``kind``."""
    if is_primitive(kind) or (element_type(kind) is not None and is_primitive(element_type(kind) or "")):
        return [widening(name, iceberg_type(kind))]
    if current is None:
        raise ValueError(f"widening nested column {name!r} needs the table's schema")
    return type_changes(name, current.find_field(name).field_type, iceberg_type(kind), table_name)
