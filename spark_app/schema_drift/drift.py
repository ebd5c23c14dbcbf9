"""What a record's Kafka Connect schema asks of the table: columns to add, to widen, to make optional, or
changes Iceberg cannot express. Collected in the tasks while decoding, merged over a trigger."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from icebergsync.schema import iceberg_type, widens
from icebergsync.spec import element_type
from spark_app.schema_drift.connect_types import iceberg_type_name

_INTEGRAL = frozenset({"int", "long"})
_NUMERIC = _INTEGRAL | {"float", "double"}
_TEXT = frozenset({"string", "binary"})


class Fit(Enum):
    """How a source type relates to a table column's type."""

    FITS = "fits"  # the column takes the values as it is (same type, a narrower one, or a form the decoder reads)
    WIDEN = "widen"  # Iceberg can widen the column to the source's type
    INCOMPATIBLE = "incompatible"  # no Iceberg schema change makes the column take the source's values


def _decimal(type_name: str) -> bool:
    return type_name.startswith("decimal")


def classify(column: str, source: str) -> Fit:
    """How values of spec type ``source`` fit a column of spec type ``column`` (arrays: as their elements do)."""
    column_element, source_element = element_type(column), element_type(source)
    if column_element is not None and source_element is not None:
        return classify(column_element, source_element)
    if column_element is not None or source_element is not None:
        return Fit.INCOMPATIBLE
    if column == source or widens(iceberg_type(source), iceberg_type(column)):
        return Fit.FITS
    if widens(iceberg_type(column), iceberg_type(source)):
        return Fit.WIDEN
    exact = _NUMERIC | {"boolean"} | ({source} if _decimal(source) else set())
    incompatible = (
        (source in exact and column in _TEXT)
        or (source == "string" and column in _NUMERIC | {"boolean"})
        or ((source in ("float", "double") or _decimal(source)) and column in _INTEGRAL)
        or (_decimal(source) and (_decimal(column) or column in ("float", "double")))  # a scale change, or rounding
        or (("binary" in (source, column)) and source != column)
    )
    return Fit.INCOMPATIBLE if incompatible else Fit.FITS


@dataclass
class SchemaDrift:
    """Changes a trigger's records ask of the table (column name -> spec type name, or -> reason)."""

    adds: dict[str, str] = field(default_factory=dict)
    widens: dict[str, str] = field(default_factory=dict)
    optional: set[str] = field(default_factory=set)
    problems: dict[str, str] = field(default_factory=dict)

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

    def _widest(self, types: dict[str, str], name: str, type_name: str) -> None:
        seen = types.setdefault(name, type_name)
        if classify(seen, type_name) is Fit.WIDEN:
            types[name] = type_name
        elif classify(seen, type_name) is Fit.INCOMPATIBLE or classify(type_name, seen) is Fit.INCOMPATIBLE:
            self.problems.setdefault(name, f"column {name!r} is sent as both {seen} and {type_name}")

    def describe(self) -> str:
        parts = [f"add {name} {kind}" for name, kind in sorted(self.adds.items())]
        parts += [f"widen {name} to {kind}" for name, kind in sorted(self.widens.items())]
        parts += [f"make {name} optional" for name in sorted(self.optional)]
        return ", ".join(parts + sorted(self.problems.values()))


def observe(fields: Sequence[Mapping[str, Any]], columns: Mapping[str, str], required: frozenset[str],
            key: frozenset[str], whole_row: bool) -> SchemaDrift:
    """The drift of one Connect struct (its ``fields``) against the table's ``columns`` (name -> spec type).

    ``whole_row`` (a row's after image, not a delete's before, which may hold the key alone): a column the
    struct lacks was dropped at the source; it stays, made optional if required, unless it is a key column.
    """
    drift = SchemaDrift()
    sent = set()
    for spec in fields:
        name = spec.get("field")
        if not isinstance(name, str):
            continue
        sent.add(name)
        type_name, why = iceberg_type_name(spec)
        if name not in columns:
            if type_name is None:
                drift.problems[name] = f"new column {name!r} cannot be added: {why}"
            else:
                drift.adds[name] = type_name
        elif type_name is not None:
            fit = classify(columns[name], type_name)
            if fit is Fit.WIDEN:
                drift.widens[name] = type_name
            elif fit is Fit.INCOMPATIBLE:
                drift.problems[name] = (f"column {name!r} is {columns[name]} in the table and the source now sends "
                                        f"{type_name}: Iceberg cannot change {columns[name]} to {type_name}")
    if whole_row:
        for name in columns.keys() - sent:
            if name in key:
                drift.problems[name] = f"key column {name!r} is no longer in the source's rows"
            elif name in required:
                drift.optional.add(name)
    return drift
