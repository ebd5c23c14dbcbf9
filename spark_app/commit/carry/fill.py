"""Completing carried rows with their keys' live values, or making them dead letters."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_app.decoding.changes import CARRY_COLUMN, UNAVAILABLE
from spark_app.decoding.deadletter import ERROR_COLUMN

_INDEX = "__isync_index"
_LIVE_INDEX = "__isync_live_index"


def no_live_row(columns: Sequence[str]) -> str:
    """The dead letter's reason for a row whose key the table does not hold."""
    return (f"Debezium did not send the value of {', '.join(columns)} ({UNAVAILABLE}: an unchanged TOASTed column) "
            "and the table has no live row of this key to keep it from (a primary-key update whose delete of the old "
            "key was not in the same trigger: set spec.changes.transactions, or REPLICA IDENTITY FULL on the source "
            "table: docs/connectors.md, \"Primary-key updates\")")


def fill(carried: pa.Table, live: pa.Table, key: Sequence[str]) -> pa.Table:
    """``carried`` (declared columns, ``_isync_carry``, control columns) with each column its ``_isync_carry``
    names taken from its key's row in ``live`` (the key and the carried columns); a row whose key ``live`` does
    not hold gets an ``_isync_error`` (as does one that had it already). Same rows, same order."""
    key = list(key)
    numbered = carried.select(key).append_column(_INDEX, pa.array(np.arange(carried.num_rows, dtype=np.int64)))
    found = live.select(key).append_column(_LIVE_INDEX, pa.array(np.arange(live.num_rows, dtype=np.int64)))
    matched = numbered.join(found, keys=key, join_type="left outer").sort_by(_INDEX)
    live_rows = live.take(matched.column(_LIVE_INDEX))
    carries = carried.column(CARRY_COLUMN).to_pylist()
    for name in {name for names in carries if names for name in names}:
        takes = pa.array([bool(names) and name in names for names in carries])
        position = carried.column_names.index(name)
        value = pc.if_else(takes, live_rows.column(name).cast(carried.schema.field(name).type), carried.column(name))
        carried = carried.set_column(position, carried.schema.field(name), value)
    missing = pc.is_null(matched.column(_LIVE_INDEX))
    reasons = pa.array([no_live_row(names or ()) for names in carries], pa.string())
    errors = pc.coalesce(carried.column(ERROR_COLUMN), pc.if_else(missing, reasons, pa.scalar(None, pa.string())))
    return carried.set_column(carried.column_names.index(ERROR_COLUMN), ERROR_COLUMN, errors)
