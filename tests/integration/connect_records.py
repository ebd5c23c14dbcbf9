"""Debezium change events with their Kafka Connect schema (``value.converter.schemas.enable=true``), built field
by field, for the schema-evolution tests: a source column added, widened, dropped or changed incompatibly."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

Field = dict[str, Any]


def field(name: str, kind: str, *, logical: str | None = None, optional: bool = True, **parameters: str) -> Field:
    """A Connect field schema: base type ``kind`` (int32, int64, string, bytes …), an optional logical ``name``."""
    spec: Field = {"field": name, "type": kind, "optional": optional}
    if logical is not None:
        spec["name"] = logical
    if parameters:
        spec["parameters"] = dict(parameters)
    return spec


def decimal(name: str, precision: int, scale: int) -> Field:
    """A Connect ``Decimal`` field (decimal.handling.mode=precise) of numeric(precision, scale)."""
    return field(name, "bytes", logical="org.apache.kafka.connect.data.Decimal", scale=str(scale),
                 **{"connect.decimal.precision": str(precision)})


def decimal_value(value: Decimal, scale: int) -> str:
    """A Connect ``Decimal`` value: base64 of the big-endian two's-complement unscaled integer."""
    unscaled = int(value.scaleb(scale))
    return base64.b64encode(unscaled.to_bytes((unscaled.bit_length() + 8) // 8 or 1, "big", signed=True)).decode()


def change_event(op: str, fields: list[Field], after: dict[str, Any] | None,
                 before: dict[str, Any] | None = None) -> str:
    """A Debezium change event (op c, u, d or r) in the ``{"schema", "payload"}`` form."""
    row: Field = {"type": "struct", "optional": True, "name": "server.public.t.Value", "fields": fields}
    schema = {"type": "struct", "name": "server.public.t.Envelope", "fields": [
        {**row, "field": "before"}, {**row, "field": "after"}, {"field": "op", "type": "string", "optional": False}]}
    return json.dumps({"schema": schema, "payload": {"op": op, "before": before, "after": after}})
