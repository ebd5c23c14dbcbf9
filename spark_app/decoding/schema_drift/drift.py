"""What a record's Kafka Connect schema asks of the table: columns to add, to widen, to make optional, or
changes Iceberg cannot express. Collected in the tasks while decoding, merged over a trigger."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from icebergsync.schema import iceberg_type, widens
from icebergsync.types.grammar import (
    NESTED_TYPES,
    ArrayOf,
    MapOf,
    SpecType,
    StructField,
    StructOf,
    parse_type,
)
from spark_app.decoding.schema_drift.connect_types import iceberg_type_name, sends_text

_INTEGRAL = frozenset({"int", "long"})
_NUMERIC = _INTEGRAL | {"float", "double"}
# Text a source sends (a Connect string) and the column types the decoder parses it into (spark_app/decoding/changes.py,
# docs/connectors.md "Values"), each value checked as it is decoded: plain text is also base64 bytes
# (binary.handling.mode=base64) and decimal text (decimal.handling.mode=string, into any decimal column);
# Debezium's ISO-8601 types (IsoDate, IsoTimestamp, ZonedTimestamp) are also their text, and an IsoTimestamp's Z
# is taken as UTC in a timestamptz column. Numbers in a string column, or text in a numeric one, are refused.
_TEXT_READERS: dict[str, frozenset[str]] = {
    "string": frozenset({"binary"}),
    "date": frozenset({"string"}),
    "timestamp": frozenset({"string", "timestamptz"}),
    "timestamptz": frozenset({"string"}),
}
# Sources of another type whose numbers the decoder reads into a column: exact numbers into decimals
# (decimal.handling.mode=double), integers into floating columns, epoch days into dates, a timestamp's
# instant (taken as UTC) into a timestamptz, dates and timestamps as their integer into long columns.
_NUMBER_READERS: dict[str, frozenset[str]] = {
    "decimal": _NUMERIC,
    "float": _INTEGRAL,
    "double": _INTEGRAL,
    "int": frozenset({"date"}),
    "long": frozenset({"date", "timestamp"}),
    "date": frozenset({"int"}),
    "timestamptz": frozenset({"timestamp"}),
}


class Fit(Enum):
    """How a source type relates to a table column's type."""

    FITS = "fits"  # the column takes the values as it is (same type, a narrower one, or a form the decoder reads)
    WIDEN = "widen"  # Iceberg can widen the column to the source's type
    INCOMPATIBLE = "incompatible"  # no Iceberg schema change makes the column take the source's values


def _decimal(type_name: str) -> bool:
    return type_name.startswith("decimal")


def _decimal_fits(column: str, source: str) -> bool:
    """Every value of decimal ``source`` is exactly a value of decimal ``column`` (no rounding, no overflow)."""
    (column_precision, column_scale), (source_precision, source_scale) = (
        (int(part) for part in name[len("decimal("):-1].split(",")) for name in (column, source))
    return source_scale <= column_scale and source_precision - source_scale <= column_precision - column_scale


def classify(column: str, source: str, text: bool = False) -> Fit:
    """How values of spec type ``source`` fit a column of spec type ``column`` (:func:`fitted`)."""
    return fitted(column, source, text)[0]


def fitted(column: str, source: str, text: bool = False) -> tuple[Fit, str]:
    """How values of spec type ``source`` fit a column of spec type ``column``, and the type the column takes them
    in: its own when they FIT, the wider one it must become when it must WIDEN.

    ``text``: the source sends its values as JSON text (a Connect ``string``, e.g. Debezium's ``IsoTimestamp``);
    a ``string`` source always does. FITS means the decoder reads every value of that form into the column
    (each value still checked: a dead letter names a value that does not fit), so drift detection agrees with
    decoding: ``tests/unit/test_schema_drift.py`` decodes a value of each form into each column type.
    Arrays and map values fit as their elements do (a map's keys must fit as they are); a struct fits field by
    field, a field the source adds or no longer sends widening it (the new field optional, the missing one made
    optional).
    """
    fit, wider = _fitted(parse_type(column), parse_type(source), text)
    return fit, str(wider) if fit is Fit.WIDEN else column


def _fitted(column: SpecType, source: SpecType, text: bool) -> tuple[Fit, SpecType]:
    if isinstance(column, ArrayOf) and isinstance(source, ArrayOf):
        fit, element = _fitted(column.element, source.element, text)
        return fit, ArrayOf(element)
    if isinstance(column, MapOf) and isinstance(source, MapOf):
        if _fitted(column.key, source.key, text)[0] is not Fit.FITS:
            return Fit.INCOMPATIBLE, column
        fit, value = _fitted(column.value, source.value, text)
        return fit, MapOf(column.key, value)
    if isinstance(column, StructOf) and isinstance(source, StructOf):
        return _struct_fitted(column, source)
    if isinstance(column, NESTED_TYPES) or isinstance(source, NESTED_TYPES):
        return Fit.INCOMPATIBLE, column
    fit = _primitive_fit(str(column), str(source), text)
    return fit, source if fit is Fit.WIDEN else column


def _struct_fitted(column: StructOf, source: StructOf) -> tuple[Fit, SpecType]:
    sent = {member.name: member for member in source.fields}
    fit, fields = Fit.FITS, []
    for member in column.fields:
        if member.name not in sent:  # no longer sent: null from now on
            fields.append(replace(member, required=False))
            fit = Fit.WIDEN if member.required else fit
            continue
        nested_fit, nested_type = _fitted(member.type, sent[member.name].type, False)
        if nested_fit is Fit.INCOMPATIBLE:
            return Fit.INCOMPATIBLE, column
        optional = member.required and not sent[member.name].required
        fit = Fit.WIDEN if nested_fit is Fit.WIDEN or optional else fit
        fields.append(StructField(member.name, nested_type, member.required and not optional))
    known = {member.name for member in column.fields}
    added = [replace(member, required=False) for member in source.fields if member.name not in known]
    return (Fit.WIDEN if added else fit), StructOf((*fields, *added))


def _primitive_fit(column: str, source: str, text: bool) -> Fit:
    if column == source or widens(iceberg_type(source), iceberg_type(column)):
        return Fit.FITS
    if widens(iceberg_type(column), iceberg_type(source)):
        return Fit.WIDEN
    if _decimal(column) and _decimal(source):
        return Fit.FITS if _decimal_fits(column, source) else Fit.INCOMPATIBLE
    if text or source == "string":
        readable = column in _TEXT_READERS.get(source, frozenset()) or (source == "string" and _decimal(column))
    else:
        readable = source in _NUMBER_READERS.get("decimal" if _decimal(column) else column, frozenset())
    return Fit.FITS if readable else Fit.INCOMPATIBLE


@dataclass
class SchemaDrift:
    """Changes a trigger's records ask of the table (column name -> spec type name, or -> reason).

    ``defaults``: of the columns to add, the Connect field schema of those whose schema carries a ``default``
    (the source column's default, as Debezium sends it; spark_app/commit/schema_changes.py decides whether it becomes
    the new column's initial-default)."""

    adds: dict[str, str] = field(default_factory=dict)
    widens: dict[str, str] = field(default_factory=dict)
    optional: set[str] = field(default_factory=set)
    problems: dict[str, str] = field(default_factory=dict)
    defaults: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.adds or self.widens or self.optional or self.problems)

    def merge(self, other: SchemaDrift) -> None:
        for name, type_name in other.adds.items():
            self._widest(self.adds, name, type_name)
        for name, type_name in other.widens.items():
            self._widest(self.widens, name, type_name)
        self.optional |= other.optional
        for name, reason in other.problems.items():
            self.problems.setdefault(name, reason)
        for name, schema in other.defaults.items():
            self.defaults.setdefault(name, schema)

    def _widest(self, types: dict[str, str], name: str, type_name: str) -> None:
        seen = types.setdefault(name, type_name)
        fit, wider = fitted(seen, type_name)
        if fit is Fit.WIDEN:
            types[name] = wider
        elif fit is Fit.INCOMPATIBLE or classify(type_name, seen) is Fit.INCOMPATIBLE:
            self.problems.setdefault(name, f"column {name!r} is sent as both {seen} and {type_name}")

    def describe(self) -> str:
        parts = [f"add {name} {kind}" for name, kind in sorted(self.adds.items())]
        parts += [f"widen {name} to {kind}" for name, kind in sorted(self.widens.items())]
        parts += [f"make {name} optional" for name in sorted(self.optional)]
        return ", ".join(parts + sorted(self.problems.values()))


@dataclass(frozen=True)
class SentField:
    """A field of the records' schema as drift detection compares it: its name, its spec type (None: it has none,
    ``why``), whether its values are JSON text, and its schema when that carries a column default."""

    name: str
    type_name: str | None
    why: str = ""
    text: bool = False
    default_schema: Mapping[str, Any] | None = None


def observe(fields: Sequence[Mapping[str, Any]], columns: Mapping[str, str], required: frozenset[str],
            key: frozenset[str], whole_row: bool) -> SchemaDrift:
    """The drift of one Connect struct (its ``fields``) against the table's ``columns`` (name -> spec type)
    (:func:`observe_fields`)."""
    sent = []
    for spec in fields:
        name = spec.get("field")
        if isinstance(name, str):
            type_name, why = iceberg_type_name(spec)
            sent.append(SentField(name, type_name, why, sends_text(spec), dict(spec) if "default" in spec else None))
    return observe_fields(sent, columns, required, key, whole_row)


def observe_fields(fields: Sequence[SentField], columns: Mapping[str, str], required: frozenset[str],
                   key: frozenset[str], whole_row: bool) -> SchemaDrift:
    """The drift of the fields of one schema of the records (a Connect struct's, a registry schema's) against the
    table's ``columns`` (name -> spec type).

    ``whole_row`` (a row's after image, not a delete's before, which may hold the key alone): a column the
    schema lacks was dropped at the source; it stays, made optional if required, unless it is a key column.
    """
    drift = SchemaDrift()
    for sent in fields:
        name, type_name = sent.name, sent.type_name
        if name not in columns:
            if type_name is None:
                drift.problems[name] = f"new column {name!r} cannot be added: {sent.why}"
            else:
                drift.adds[name] = type_name
                if sent.default_schema is not None:
                    drift.defaults[name] = dict(sent.default_schema)
        elif type_name is not None:
            fit, wider = fitted(columns[name], type_name, sent.text)
            if fit is Fit.WIDEN:
                drift.widens[name] = wider
            elif fit is Fit.INCOMPATIBLE:
                drift.problems[name] = (f"column {name!r} is {columns[name]} in the table and the source now sends "
                                        f"{type_name}: Iceberg cannot change {columns[name]} to {type_name}")
    if whole_row:
        for name in columns.keys() - {sent.name for sent in fields}:
            if name in key:
                drift.problems[name] = f"key column {name!r} is no longer in the source's rows"
            elif name in required:
                drift.optional.add(name)
    return drift
