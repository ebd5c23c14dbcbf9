"""What makes two rows of a keyless table the same row: every column equal, nulls equal to nulls."""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

COUNT_COLUMN = "_isync_count"  # how many live copies of a row a trigger removes

Identity = tuple[Any, ...]


def _value_identity(value: Any) -> Any:
    """A value as compared: a float by its bits (NaN equal to NaN, -0.0 not 0.0: what is stored), an array (and a
    map's entries) by its elements, a struct by its fields in order; anything else as it is (None equal to None)."""
    if isinstance(value, float):
        return ("nan",) if math.isnan(value) else ("float", struct.pack("<d", value))
    if isinstance(value, list | tuple):
        return tuple(_value_identity(item) for item in value)
    if isinstance(value, dict):
        return ("struct", *((name, _value_identity(item)) for name, item in value.items()))
    return value


def row_identities(rows: pa.Table, columns: Sequence[str]) -> list[Identity]:
    """The identity of each row of ``rows`` over ``columns``: equal exactly when the rows are equal."""
    values = [rows.column(name).to_pylist() for name in columns]
    return [tuple(_value_identity(value) for value in row) for row in zip(*values, strict=True)]
